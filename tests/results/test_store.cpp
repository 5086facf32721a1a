// The SQLite store: schema and pragmas, resume after SIGKILL, error messages, regrade, judge
// cache, views against the C++ metrics, and merge of shards.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "engine/util/error.h"
#include "results/cells.h"
#include "results/store.h"
#include "synth.h"
#include "tests/support/store_test_access.h"
#include "tests/support/test_support.h"

using namespace kvb::results;
using namespace kvb::results::testing;

static std::string one(Store& s, const std::string& sql) { return s.query(sql).at(0).at(0); }

TEST(Store, SchemaAndPragmas) {
  auto p = temp_db("schema");
  Store s(p);
  EXPECT_EQ(s.schema_version(), Store::kSchemaVersion);
  EXPECT_EQ(one(s, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(one(s, "PRAGMA foreign_keys"), "1");
  EXPECT_EQ(one(s, "PRAGMA application_id"), std::to_string(Store::kApplicationId));
  EXPECT_EQ(one(s, "SELECT COUNT(*) FROM t975"), "1000");
  for (const char* t :
       {"runs", "run_models", "run_datasets", "run_parts", "work_items", "generations", "grades", "judge_cache"})
    EXPECT_EQ(one(s, std::string("SELECT COUNT(*) FROM sqlite_master WHERE name='") + t + "'"), "1") << t;
  // Foreign keys are enforced: a generation for an unknown work item is refused.
  int64_t run = s.begin_run(run_info());
  GenerationRecord g;
  g.item_key = "nope";
  EXPECT_THROW(s.write_batch(run, {g}), kvb::Error);
  // Reopening is a no-op migration.
  Store again(p);
  EXPECT_EQ(again.schema_version(), Store::kSchemaVersion);
}

TEST(Store, ProvenanceAndResolveRun) {
  auto p = temp_db("prov");
  Store s(p);
  auto items = expand_grid(small_grid(2, 1));
  auto info = run_info("nightly-1");
  int64_t r1 = fill(s, items, info);
  auto info2 = run_info("nightly-2");
  int64_t r2 = fill(s, items, info2);
  EXPECT_NE(r1, r2);
  auto runs = s.runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].git_sha, "deadbeef");
  EXPECT_FALSE(runs[0].finished_at.empty());
  EXPECT_EQ(one(s, "SELECT weights_sha256 FROM run_models WHERE run_id=" + std::to_string(r1)), std::string(64, 'a'));
  EXPECT_EQ(one(s, "SELECT sha256 FROM run_datasets WHERE task='math' AND run_id=" + std::to_string(r1)),
            std::string(64, 'b'));
  EXPECT_EQ(s.resolve_run("latest"), r2);
  EXPECT_EQ(s.resolve_run("previous"), r1);
  {
    // A newer run that never finished (it failed after opening the DB) is not 'latest'.
    Store other(p);
    const int64_t r3 = other.begin_run(run_info("crashed"));
    EXPECT_GT(r3, r2);
    EXPECT_EQ(other.resolve_run("latest"), r2);
    EXPECT_EQ(other.resolve_run("previous"), r1);
    EXPECT_EQ(other.resolve_run("crashed"), r3);
    EXPECT_THROW(other.resolve_run("99999999999999999999999"), kvb::Error);
  }
  EXPECT_EQ(s.resolve_run("nightly-1"), r1);
  EXPECT_EQ(s.resolve_run(std::to_string(r2)), r2);
  EXPECT_EQ(s.resolve_run(info.run_key.substr(0, 10)), r1);
  EXPECT_THROW(s.resolve_run("nightly-3"), kvb::Error);
  // Same run key again = the same run (resume), with a second part.
  EXPECT_EQ(s.begin_run(info), r1);
  EXPECT_EQ(one(s, "SELECT COUNT(*) FROM run_parts WHERE run_id=" + std::to_string(r1)), "2");
}

TEST(Store, ResumeSkipsFinishedItems) {
  auto p = temp_db("resume");
  auto items = expand_grid(small_grid(4, 2));  // (2*2+1)*4*2 = 40
  auto info = run_info();
  {
    Store s(p);
    int64_t run = s.begin_run(info);
    s.add_work_items(items);
    std::vector<GenerationRecord> gens;
    for (size_t i = 0; i < 15; ++i) gens.push_back(fake_generation(items[i]));
    s.write_batch(run, gens);
  }
  Store s(p);
  int64_t run = s.begin_run(info);
  auto todo = s.pending(run, items);
  ASSERT_EQ(todo.size(), items.size() - 15);
  EXPECT_EQ(todo.front().key, items[15].key);
  // The 15 generations have no grades yet: grading picks exactly them.
  EXPECT_EQ(s.to_grade(run, false).size(), 15u);
}

// Dumps the content of a store that must not depend on how it was written (no timestamps, run
// ids replaced by run keys).
static std::vector<std::vector<std::string>> content(Store& s) {
  auto rows = s.query(
      "SELECT r.run_key, g.item_key, g.text, g.prompt_tokens, g.generated_tokens, g.finish_reason,"
      " g.prefill_s, g.decode_s, g.ttft_s, g.evictions, g.kv_bytes_peak, g.kv_bytes_final,"
      " g.device_peak_bytes, g.extra_json, gr.score, gr.extracted, gr.pred_norm, gr.gold_norm,"
      " gr.reason, gr.grader, gr.ungraded FROM generations g JOIN runs r USING (run_id)"
      " LEFT JOIN grades gr USING (run_id, item_key) ORDER BY r.run_key, g.item_key");
  auto items = s.query("SELECT * FROM work_items ORDER BY item_key");
  rows.insert(rows.end(), items.begin(), items.end());
  auto runs = s.query(
      "SELECT run_key, name, kvbench_version, git_sha, backend, device, config_json,"
      " finished_at IS NOT NULL FROM runs ORDER BY run_key");
  rows.insert(rows.end(), runs.begin(), runs.end());
  auto models = s.query(
      "SELECT r.run_key, m.model_id, m.revision, m.weights_sha256 FROM run_models m"
      " JOIN runs r USING (run_id) ORDER BY 1, 2");
  rows.insert(rows.end(), models.begin(), models.end());
  return rows;
}

TEST(Store, KilledWriterLeavesWholeBatchesAndResumes) {
  auto items = expand_grid(small_grid(4, 2));  // 40 items
  auto info = run_info();
  const size_t batch = 8;
  auto p = temp_db("killed");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: writes batch 1 and 2, then is killed in the middle of batch 3 (after 3 rows).
    close(fds[0]);
    try {
      Store s(p);
      int64_t run = s.begin_run(info);
      s.add_work_items(items);
      size_t batch_no = 0;
      StoreTestAccess::set_after_row_hook(s, [&](size_t row) {
        if (batch_no == 2 && row == 3) {
          char c = 'k';
          (void)!write(fds[1], &c, 1);
          for (;;) pause();
        }
      });
      for (size_t i = 0; i < items.size(); i += batch, ++batch_no) {
        std::vector<GenerationRecord> gens;
        std::vector<GradeRecord> grades;
        for (size_t j = i; j < std::min(items.size(), i + batch); ++j) {
          gens.push_back(fake_generation(items[j]));
          grades.push_back(fake_grade(items[j]));
        }
        s.write_batch(run, gens, grades);
      }
    } catch (...) {
    }
    _exit(3);
  }
  close(fds[1]);
  char c = 0;
  ASSERT_EQ(read(fds[0], &c, 1), 1) << "the child never reached batch 3";
  close(fds[0]);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));

  {
    Store s(p);  // reopens (WAL recovery), no partial rows
    EXPECT_EQ(one(s, "PRAGMA integrity_check"), "ok");
    EXPECT_EQ(one(s, "SELECT COUNT(*) FROM generations"), std::to_string(2 * batch));
    EXPECT_EQ(one(s, "SELECT COUNT(*) FROM grades"), std::to_string(2 * batch));
    // Resume: the rerun writes only the pending items.
    int64_t run = s.begin_run(info);
    auto todo = s.pending(run, items);
    EXPECT_EQ(todo.size(), items.size() - 2 * batch);
    fill(s, items, info, {}, batch);
  }
  auto q = temp_db("uninterrupted");
  Store whole(q);
  fill(whole, items, info, {}, batch);
  Store resumed(p);
  EXPECT_EQ(content(resumed), content(whole));
}

TEST(Store, CorruptFileNamesTheFile) {
  auto p = temp_db("corrupt");
  {
    std::ofstream f(p, std::ios::binary);
    for (int i = 0; i < 8192; ++i) f.put(static_cast<char>((i * 7919) & 0xff));
  }
  const std::string m = kvb::test::error_of([&] { Store s(p); });
  EXPECT_NE(m.find(p), std::string::npos) << m;
  EXPECT_NE(m.find("corrupt"), std::string::npos) << m;
  // A valid SQLite file that is not a kvbench store.
  auto q = temp_db("foreign");
  {
    sqlite3* h = nullptr;
    ASSERT_EQ(sqlite3_open(q.c_str(), &h), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(h, "CREATE TABLE x(a);", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(h);
  }
  const std::string mq = kvb::test::error_of([&] { Store s(q); });
  EXPECT_NE(mq.find(q), std::string::npos) << mq;
  EXPECT_NE(mq.find("not a kvbench results database"), std::string::npos) << mq;
}

TEST(Store, ReadOnlyAndFullDiskErrors) {
  auto p = temp_db("ro");
  auto items = expand_grid(small_grid(2, 1));
  auto info = run_info();
  {
    Store s(p);
    fill(s, items, info);
  }
  {
    Store ro(p, Store::Mode::kReadOnly);
    EXPECT_EQ(ro.runs().size(), 1u);
    try {
      ro.begin_run(run_info("other"));
      FAIL() << "expected an error";
    } catch (const kvb::Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(p), std::string::npos) << m;
      EXPECT_NE(m.find("read-only"), std::string::npos) << m;
    }
  }
  Store s(p);
  int64_t run = s.begin_run(run_info("big"));
  StoreTestAccess::set_max_page_count(s, std::stoll(one(s, "PRAGMA page_count")) + 2);
  GenerationRecord g = fake_generation(items[0]);
  g.text.assign(200000, 'x');
  try {
    s.write_batch(run, {g});
    FAIL() << "expected an error";
  } catch (const kvb::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(p), std::string::npos) << m;
    EXPECT_NE(m.find("disk full"), std::string::npos) << m;
    EXPECT_EQ(e.exit_code(), 1);
  }
  // Nothing of the failed batch is stored; earlier data is intact.
  EXPECT_EQ(one(s, "SELECT COUNT(*) FROM generations WHERE run_id=" + std::to_string(run)), "0");
  EXPECT_EQ(one(s, "SELECT COUNT(*) FROM generations"), std::to_string(items.size()));
}

TEST(Store, RegradeAndJudgeCache) {
  auto p = temp_db("regrade");
  Store s(p);
  auto items = expand_grid(small_grid(3, 2));
  int64_t run = fill(s, items, run_info());
  EXPECT_TRUE(s.to_grade(run, false).empty());
  EXPECT_EQ(s.to_grade(run, true).size(), items.size());
  s.exec("DELETE FROM grades WHERE rowid IN (SELECT rowid FROM grades LIMIT 4)");
  auto todo = s.to_grade(std::nullopt, false);
  ASSERT_EQ(todo.size(), 4u);
  EXPECT_FALSE(todo[0].text.empty());
  EXPECT_EQ(todo[0].item.task, "math");
  std::vector<GradeRecord> grades;
  for (const auto& t : todo) {
    GradeRecord g;
    g.item_key = t.item.key;
    g.ungraded = true;
    g.reason = "judge unavailable";
    grades.push_back(g);
  }
  s.write_grades(run, grades);
  EXPECT_EQ(one(s, "SELECT SUM(ungraded) FROM v_samples"), "4");
  EXPECT_EQ(one(s, "SELECT COUNT(score) FROM v_samples"), std::to_string(items.size() - 4));
  GradeRecord bad;
  bad.item_key = items[0].key;
  bad.score = 1.5;
  EXPECT_THROW(s.write_grades(run, {bad}), kvb::Error);

  EXPECT_FALSE(s.judge_get("k1"));
  s.judge_put({"k1", "judge-model", "{\"q\":1}", "YES", 1.0});
  auto e = s.judge_get("k1");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->response, "YES");
  EXPECT_EQ(*e->score, 1.0);
}

TEST(Store, ViewsAgreeWithCppMetrics) {
  auto p = temp_db("views");
  Store s(p);
  auto g = small_grid(6, 4);
  auto items = expand_grid(g);
  int64_t run = fill(s, items, run_info(), {}, 7, 9);
  auto cells = compute_cells(s.samples({run}));
  ASSERT_EQ(cells.size(), 5u);  // full + 2 policies x 2 budgets
  for (const auto& c : cells) {
    std::string where = fmt::format(" WHERE run_id={} AND policy_label='{}' AND budget={}", c.key.run_id,
                                    c.key.policy_label, c.key.budget);
    auto row = s.query(
        "SELECT n_samples, n_examples, pass1, pass1_lo, pass1_hi, decode_tok_s,"
        " kv_bytes_peak_mean, evicted_frac FROM v_cells" +
        where);
    ASSERT_EQ(row.size(), 1u);
    EXPECT_EQ(std::stoi(row[0][0]), c.n_samples);
    EXPECT_EQ(std::stoi(row[0][1]), c.n_examples);
    EXPECT_NEAR(std::stod(row[0][2]), c.pass1->mean, 1e-9);
    EXPECT_NEAR(std::stod(row[0][3]), c.pass1->lo, 1e-6);
    EXPECT_NEAR(std::stod(row[0][4]), c.pass1->hi, 1e-6);
    EXPECT_NEAR(std::stod(row[0][5]), c.decode_tok_s, 1e-6);
    EXPECT_NEAR(std::stod(row[0][6]), c.kv_bytes_peak_mean, 1e-6);
    EXPECT_NEAR(std::stod(row[0][7]), c.evicted_frac, 1e-9);
    auto pk = s.query("SELECT k, pass_at_k FROM v_pass_at_k" + where + " ORDER BY k");
    ASSERT_EQ(pk.size(), c.pass_at_k.size());
    for (const auto& r : pk) EXPECT_NEAR(std::stod(r[1]), c.pass_at_k.at(std::stoi(r[0])), 1e-9);
    auto mk = s.query("SELECT k, maj_at_k FROM v_maj_at_k" + where + " ORDER BY k");
    ASSERT_EQ(mk.size(), c.maj_at_k.size());
    for (const auto& r : mk) EXPECT_NEAR(std::stod(r[1]), c.maj_at_k.at(std::stoi(r[0])), 1e-9);
    // pass@1 from the estimator equals the mean score for binary scores.
    EXPECT_NEAR(c.pass_at_k.at(1), c.pass1->mean, 1e-9);
    EXPECT_EQ(c.is_reference, c.policy == "full");
    if (c.policy != "full") {
      ASSERT_TRUE(c.delta_vs_reference);
      EXPECT_EQ(c.paired_examples, 6);
    }
  }
}

TEST(Store, MergeOfShardsEqualsUnshardedRun) {
  auto items = expand_grid(small_grid(5, 2));
  auto info = run_info();
  auto whole_p = temp_db("whole"), a_p = temp_db("shard0"), b_p = temp_db("shard1"), m_p = temp_db("merged");
  {
    Store whole(whole_p);
    fill(whole, items, info);
  }
  {
    Store a(a_p);
    fill(a, select_shard(items, {0, 2}), info, {0, 2});
    Store b(b_p);
    fill(b, select_shard(items, {1, 2}), info, {1, 2});
  }
  Store::merge(m_p, {a_p, b_p});
  Store merged(m_p), whole(whole_p);
  EXPECT_EQ(content(merged), content(whole));
  EXPECT_EQ(one(merged, "SELECT COUNT(*) FROM run_parts"), "2");
  const Store::Totals mt = merged.totals(), wt = whole.totals();  // what `kvbench merge` prints
  EXPECT_EQ(mt.runs, 1);
  EXPECT_GT(mt.generations, 0);
  EXPECT_EQ(mt.generations, wt.generations);
  EXPECT_EQ(mt.grades, wt.grades);
  EXPECT_EQ(std::to_string(mt.grades), one(merged, "SELECT COUNT(*) FROM grades"));
  EXPECT_EQ(one(merged, "SELECT COUNT(*) FROM runs WHERE finished_at IS NOT NULL"), "1");
  // Merging again is idempotent.
  Store::merge(m_p, {a_p, b_p});
  EXPECT_EQ(content(merged), content(whole));
  // A bad input is named.
  auto bad = temp_db("badmerge");
  {
    std::ofstream f(bad);
    f << "not a database at all, definitely not, really not........................................................";
  }
  try {
    Store::merge(m_p, {bad});
    FAIL() << "expected an error";
  } catch (const kvb::Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
}

// The race behind "two shards started together on a new DB: one fails at once saying it waited
// 30 s", made deterministic: while another connection holds the write lock of a file still in
// rollback-journal mode, the WAL switch (a read lock upgraded to a write lock inside one
// statement) gets SQLITE_BUSY without a busy-handler call. The open must wait and succeed once
// the lock is released, not fail at once.
TEST(Store, OpenWaitsForAWriterWhileSwitchingToWal) {
  const auto p = temp_db("walswitch");
  { Store s(p); }
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(p.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "PRAGMA journal_mode = DELETE; BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(other);
  std::thread release([other] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr);
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::string error;
  try {
    Store s(p);
    EXPECT_EQ(one(s, "PRAGMA journal_mode"), "wal");
  } catch (const kvb::Error& e) {
    error = e.what();
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  release.join();
  sqlite3_close(other);
  EXPECT_EQ(error, "");
  EXPECT_GE(waited, 0.3);  // it did wait for the writer
}

namespace {

// Shards started together on a database that does not exist yet: every process must open it
// (the WAL switch and the first migration take exclusive locks; SQLite answers some of those
// conflicts with SQLITE_BUSY at once, without calling the busy handler) and begin its run.
TEST(Store, ConcurrentCreatorsOfANewFileAllSucceed) {
  for (int trial = 0; trial < 5; ++trial) {
    const auto p = temp_db("concurrent" + std::to_string(trial));
    std::remove(p.c_str());
    const int kProcs = 6;
    std::vector<pid_t> kids;
    for (int k = 0; k < kProcs; ++k) {
      const pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        int code = 0;
        try {
          kvb::results::Store s(p);
          auto info = run_info("shard");
          kvb::results::Shard sh;
          sh.index = k;
          sh.count = kProcs;
          s.begin_run(info, sh);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "child %d: %s\n", k, e.what());
          code = 3;
        }
        std::_Exit(code);
      }
      kids.push_back(pid);
    }
    int failed = 0;
    for (pid_t pid : kids) {
      int st = 0;
      waitpid(pid, &st, 0);
      failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    EXPECT_EQ(failed, 0) << "trial " << trial;
    kvb::results::Store s(p);
    EXPECT_EQ(s.runs().size(), 1u);
  }
}

}  // namespace
