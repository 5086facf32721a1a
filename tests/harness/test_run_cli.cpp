// `kvbench run` end to end through the binary, on real data (tests/data): the main job of the
// harness issue (math suite on stories260K with full, snapkv, rkv and trimkv with random gates),
// driven by a --config file with a command-line override; report renders the DB; a rerun
// resumes with nothing to do; and a run killed with SIGKILL mid-grid resumes to exactly the
// samples of an uninterrupted run (seeded sampling).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "tests/support/test_support.h"

namespace fs = std::filesystem;

namespace {

const std::string kModel = kvb::test::test_data("models/stories260K-hf");
const std::string kData = kvb::test::test_data("datasets");

/// The kvbench binary (KVB_REQUIRE: skip, or fail under KVB_REQUIRE_ALL=1) and the shipped
/// stories260K-hf and datasets (KVB_REQUIRE_TEST_DATA: fail when absent).
#define REQUIRE_INPUTS()                                            \
  KVB_REQUIRE_BINARY();                                             \
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors"); \
  KVB_REQUIRE_TEST_DATA("datasets/gsm8k")

fs::path tmp_dir(const std::string& name) { return kvb::test::temp_dir("run_cli_" + name); }

/// Runs `cmd` through the shell with stdout+stderr captured; returns the exit status.
int run_cmd(const std::string& cmd, std::string* out) {
  auto r = kvb::test::run_command(cmd);
  *out = std::move(r.out);
  return r.rc;
}

using Rows = std::vector<std::vector<std::string>>;

/// Rows of `sql` on the SQLite file `db` (read-only, waits out a writer's lock).
Rows query(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  Rows rows;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(h);
    ADD_FAILURE() << "cannot open " << db;
    return rows;
  }
  sqlite3_busy_timeout(h, 5000);
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << sql << ": " << sqlite3_errmsg(h);
    sqlite3_close(h);
    return rows;
  }
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    std::vector<std::string> r;
    for (int i = 0; i < sqlite3_column_count(st); ++i) {
      const unsigned char* t = sqlite3_column_text(st, i);
      r.push_back(t ? reinterpret_cast<const char*>(t) : "<null>");
    }
    rows.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) ADD_FAILURE() << sql << ": " << sqlite3_errmsg(h);
  sqlite3_finalize(st);
  sqlite3_close(h);
  return rows;
}

int64_t count(const std::string& db, const std::string& sql) {
  Rows r = query(db, sql);
  return r.empty() ? -1 : std::stoll(r[0][0]);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// item_key -> "finish|generated_tokens|text" for every generation of `db`.
std::map<std::string, std::string> samples_of(const std::string& db) {
  std::map<std::string, std::string> m;
  for (auto& r : query(db, "SELECT item_key, finish_reason, generated_tokens, text FROM generations"))
    m[r[0]] = r[1] + "|" + r[2] + "|" + r[3];
  return m;
}

}  // namespace

TEST(RunCli, MainJobOnRealDataFromAConfigFileThenReport) {
  REQUIRE_INPUTS();
  fs::path d = tmp_dir("main");
  const std::string db = (d / "main.db").string();
  const std::string cfg = (d / "nightly.yaml").string();
  std::ofstream(cfg) << "suite: math\n"
                     << "data_dir: " << kData << "\n"
                     << "db: " << db << "\n"
                     << "run:\n"
                     << "  models: [" << kModel << "]\n"
                     << "  policies: [full, snapkv, rkv, trimkv]\n"
                     << "  budgets: [64, 128]\n"
                     << "  samples: 2\n"
                     << "  limit: 20\n"
                     << "  temperature: 0.7\n"
                     << "  top_p: 0.95\n"
                     << "  max_new_tokens: 32\n"
                     << "  seed: 1234\n";
  const std::string cmd = std::string(KVB_BINARY) + " run --config " + cfg + " --limit 1 --quiet";
  std::string out;
  ASSERT_EQ(run_cmd(cmd, &out), 0) << out;

  // 4 tasks x 1 example x (full + 3 policies x 2 budgets) x 2 samples.
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM generations"), 4 * 1 * 7 * 2) << out;
  EXPECT_EQ(count(db, "SELECT COUNT(DISTINCT task) FROM work_items"), 4);
  EXPECT_EQ(count(db, "SELECT COUNT(DISTINCT policy_label || budget) FROM work_items"), 7);
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM generations WHERE generated_tokens > 32 OR finish_reason LIKE 'error%'"), 0);
  // Every generation graded by the math grader (the tiny model writes nonsense: scores are 0/1, never NULL).
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM grades WHERE score IS NOT NULL AND ungraded = 0"), 4 * 7 * 2);
  // The config's sampling reached the items; the CLI's --limit overrode the config's 20.
  EXPECT_EQ(count(db,
                  "SELECT COUNT(*) FROM work_items WHERE json_extract(sampling_json, '$.temperature') = 0.7 "
                  "AND json_extract(sampling_json, '$.max_new_tokens') = 32"),
            4 * 7 * 2);
  EXPECT_EQ(count(db, "SELECT COUNT(DISTINCT example_id || task) FROM work_items"), 4);
  // trimkv ran with random gates and says so: in every item's label and params, and in the run.
  EXPECT_EQ(count(db,
                  "SELECT COUNT(*) FROM work_items WHERE policy = 'trimkv' AND "
                  "json_extract(policy_params_json, '$.random_gates') IN (0, '0')"),
            4 * 2 * 2);
  EXPECT_NE(out.find("trimkv: no released gates known for this model and none given"), std::string::npos) << out;
  // Cell labels: the name plus the parameters that differ from the defaults; the budget is its
  // own column (not in the parameters).
  Rows labels = query(db, "SELECT DISTINCT policy_label FROM work_items ORDER BY policy_label");
  EXPECT_EQ(labels, (Rows{{"full"}, {"rkv"}, {"snapkv"}, {"trimkv:random_gates=0"}}));
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM work_items WHERE json_extract(policy_params_json, '$.budget') IS NOT NULL"),
            0);
  Rows runs = query(db, "SELECT config_json FROM runs");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_NE(runs[0][0].find("RANDOM gates"), std::string::npos) << runs[0][0];
  EXPECT_NE(runs[0][0].find(cfg), std::string::npos) << runs[0][0];
  // SnapKV at budget 64 ends with fewer KV bytes than the full cache on the same sample wherever
  // the prompt alone is far over the budget (and there are such prompts: not vacuous).
  const std::string pairs =
      " FROM generations g JOIN work_items w USING (item_key) JOIN work_items f ON f.task = w.task AND "
      "f.example_id = w.example_id AND f.sample_index = w.sample_index AND f.policy = 'full' "
      "JOIN generations gf ON gf.item_key = f.item_key WHERE w.policy = 'snapkv' AND w.budget = 64 AND g.prompt_tokens > 160";
  EXPECT_GT(count(db, "SELECT COUNT(*)" + pairs), 0);
  EXPECT_EQ(count(db, "SELECT COUNT(*)" + pairs + " AND g.kv_bytes_final >= gf.kv_bytes_final"), 0);

  // A rerun of the same command resumes: nothing left to generate, nothing duplicated.
  ASSERT_EQ(run_cmd(cmd, &out), 0) << out;
  EXPECT_NE(out.find(", 0 to generate"), std::string::npos) << out;
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM generations"), 4 * 7 * 2);
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM runs"), 1);

  // The report renders the DB.
  const fs::path rep = d / "report";
  ASSERT_EQ(run_cmd(std::string(KVB_BINARY) + " report --db " + db + " --out " + rep.string(), &out), 0) << out;
  const std::string html = slurp(rep / "index.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  for (const char* t : {"aime24", "aime25", "gsm8k", "math500", "trimkv", "snapkv", "rkv"})
    EXPECT_NE(html.find(t), std::string::npos) << t;
  const std::string csv = slurp(rep / "cells.csv");
  EXPECT_NE(csv.find("gsm8k"), std::string::npos) << csv;
  fs::remove_all(d);
}

/// Runs a grid (gsm8k on stories260K, full and snapkv, 4 sampled samples of 6 examples) with
/// `sched` (the scheduler's options) to completion, then again killed with SIGKILL once some
/// batches are stored, then resumed: every sample must equal the uninterrupted run's. With
/// `preempting`, the uninterrupted run must have preempted (the check would be vacuous otherwise).
void killed_mid_grid_resumes(const std::string& name, const std::string& sched, bool preempting) {
  fs::path d = tmp_dir(name);
  const std::string args = " run --task gsm8k --model " + kModel + " --data-dir " + kData +
                           " --policies full,snapkv --budgets 32 --samples 4 --limit 6 --max-new-tokens 96"
                           " --temperature 0.8 --top-p 0.95 --seed 11 " +
                           sched + " --write-every 2 --quiet --db ";
  const int64_t total = 6 * 2 * 4;
  const std::string db_ref = (d / "ref.db").string(), db = (d / "killed.db").string();
  std::string out;
  ASSERT_EQ(run_cmd(std::string(KVB_BINARY) + args + db_ref, &out), 0) << out;
  ASSERT_EQ(count(db_ref, "SELECT COUNT(*) FROM generations"), total);
  const int64_t preemptions =
      count(db_ref, "SELECT COALESCE(SUM(json_extract(extra_json, '$.preemptions')), 0) FROM generations");
  if (preempting) EXPECT_GT(preemptions, 0) << "no preemption: the check would be vacuous";

  // The same grid, killed with SIGKILL once some batches are stored.
  const std::string cmd = std::string(KVB_BINARY) + args + db + " > " + (d / "killed.log").string() + " 2>&1";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int64_t at_kill = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
    if (fs::exists(db)) {
      sqlite3* h = nullptr;
      if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        sqlite3_stmt* st = nullptr;
        if (sqlite3_prepare_v2(h, "SELECT COUNT(*) FROM generations", -1, &st, nullptr) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
          at_kill = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
      }
      sqlite3_close(h);
      if (at_kill >= 4) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  kill(-pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFSIGNALED(st)) << "the run ended before it was killed (" << at_kill
                               << " stored): " << slurp(d / "killed.log");
  const int64_t stored = count(db, "SELECT COUNT(*) FROM generations");
  EXPECT_GE(stored, 4);
  EXPECT_LT(stored, total);
  EXPECT_EQ(stored % 2, 0) << "a batch is stored whole or not at all";
  EXPECT_EQ(count(db,
                  "SELECT COUNT(*) FROM generations g LEFT JOIN grades r USING (run_id, item_key) "
                  "WHERE r.item_key IS NULL"),
            0)
      << "every stored generation has its grade (same transaction)";

  // The rerun completes the grid; every sample equals the uninterrupted run's.
  ASSERT_EQ(run_cmd(std::string(KVB_BINARY) + args + db, &out), 0) << out;
  EXPECT_NE(out.find(std::to_string(stored) + " already stored"), std::string::npos) << out;
  auto ref = samples_of(db_ref), got = samples_of(db);
  ASSERT_EQ(got.size(), static_cast<size_t>(total));
  EXPECT_EQ(got, ref);
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM runs"), 1);
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM runs WHERE finished_at IS NOT NULL"), 1);
  fs::remove_all(d);
}

TEST(RunCli, KilledMidGridResumesToTheSameSamples) {
  REQUIRE_INPUTS();
  killed_mid_grid_resumes("kill", "--batch 2", false);
}

TEST(RunCli, KilledMidPreemptingGridResumesToTheSameSamples) {
  // A KV pool of about three full-cache sequences, vLLM's optimistic admission: sequences are
  // preempted and recomputed throughout (issue 37), and a kill in the middle still resumes to the
  // uninterrupted run's samples.
  REQUIRE_INPUTS();
  killed_mid_grid_resumes("killmem", "--memory 0.0011 --admission optimistic", true);
}

TEST(RunCli, BadConfigAndTruncateOptionsAreOneClearError) {
  REQUIRE_INPUTS();
  fs::path d = tmp_dir("bad");
  const std::string cfg = (d / "c.yaml").string();
  std::ofstream(cfg) << "run:\n  budgets: [64, zero]\n";
  std::string out;
  EXPECT_EQ(run_cmd(std::string(KVB_BINARY) + " run --config " + cfg, &out), 2) << out;
  EXPECT_NE(out.find(cfg + ": run.budgets[1]: expected an integer"), std::string::npos) << out;
  EXPECT_EQ(run_cmd(std::string(KVB_BINARY) + " run --truncate left --db " + (d / "x.db").string(), &out), 2) << out;
  EXPECT_NE(out.find("--truncate: expected middle or none, got 'left'"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(d / "x.db"));
  fs::remove_all(d);
}

TEST(RunCli, DefaultRunOnTheDefaultModelThenReport) {
  // `kvbench run` with no model, suite or policy arguments: the built-in smoke task on the
  // default model (SmolLM2-135M-Instruct, fetched by bootstrap.sh) into ./kvbench.db.
  KVB_REQUIRE_BINARY();
  KVB_REQUIRE_DEFAULT_MODEL();
  fs::path d = tmp_dir("default");
  std::string out;
  // --limit 1 keeps it short (one smoke problem; full and snapkv at the smoke budget of 32).
  ASSERT_EQ(run_cmd("cd " + d.string() + " && " + KVB_BINARY + " run --limit 1 --quiet", &out), 0) << out;
  const std::string db = (d / "kvbench.db").string();
  ASSERT_TRUE(fs::exists(db)) << out;
  EXPECT_EQ(
      count(db, "SELECT COUNT(*) FROM generations WHERE finish_reason NOT LIKE 'error%' AND generated_tokens > 0"), 2);
  EXPECT_EQ(query(db, "SELECT DISTINCT task FROM work_items"), (Rows{{"smoke"}}));
  EXPECT_EQ(query(db, "SELECT DISTINCT policy_label || '@' || budget FROM work_items ORDER BY 1"),
            (Rows{{"full@0"}, {"snapkv@32"}}));
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM grades WHERE score IS NOT NULL"), 2);
  EXPECT_NE(out.find("smoke"), std::string::npos) << out;  // the per-cell table
  ASSERT_EQ(run_cmd(std::string(KVB_BINARY) + " report --db " + db + " --out " + (d / "rep").string(), &out), 0) << out;
  EXPECT_NE(slurp(d / "rep" / "index.html").find("<svg"), std::string::npos);
  fs::remove_all(d);
}

TEST(RunCli, ScBenchMultiTurnSharesTheCompressedContextAndGradesEveryTurn) {
  // SCBench fixtures (2 turns per session): the follow-up turn runs on the same sequence (the
  // compressed cache of turn 1 plus the gold answer and the next question), is stored in
  // generations.extra_json "turns", graded with its own grader, and `grade --regrade` reads the
  // stored turns back to the same grades.
  REQUIRE_INPUTS();
  fs::path d = tmp_dir("scbench");
  const std::string db = (d / "mt.db").string();
  const std::string fixtures = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/datasets";
  std::string out;
  ASSERT_EQ(run_cmd(std::string(KVB_BINARY) + " run --task scbench_kv --task scbench_summary_with_needles --data-dir " +
                        fixtures + " --model " + kModel +
                        " --policies full,snapkv --budgets 32 --limit 1 --max-new-tokens 8 --quiet --db " + db,
                    &out),
            0)
      << out;
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM generations"), 4);
  EXPECT_EQ(count(db,
                  "SELECT COUNT(*) FROM generations WHERE json_array_length(extra_json, '$.turns') = 1 AND "
                  "json_extract(extra_json, '$.turns[0].prompt_tokens') > 0 AND "
                  "json_extract(extra_json, '$.turns[0].generated_tokens') BETWEEN 1 AND 8"),
            4);
  // Row counts cover both turns.
  EXPECT_EQ(count(db,
                  "SELECT COUNT(*) FROM generations WHERE generated_tokens = 8 + "
                  "json_extract(extra_json, '$.turns[0].generated_tokens') OR finish_reason <> 'length'"),
            4);
  // The follow-up of summary_with_needles is graded by the passkey scorer, its first turn by ROUGE.
  Rows reasons = query(db, "SELECT w.task, r.reason FROM grades r JOIN work_items w USING (item_key) ORDER BY w.task");
  ASSERT_EQ(reasons.size(), 4u);
  for (const auto& r : reasons) EXPECT_EQ(r[1].rfind("2 scored turns [", 0), 0u) << r[0] << ": " << r[1];
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM grades WHERE score IS NULL"), 0);
  // SnapKV held fewer bytes than the full cache over the session.
  EXPECT_LT(count(db,
                  "SELECT MAX(g.kv_bytes_peak) FROM generations g JOIN work_items w USING (item_key) "
                  "WHERE w.policy = 'snapkv' AND w.task = 'scbench_kv'"),
            count(db,
                  "SELECT MAX(g.kv_bytes_peak) FROM generations g JOIN work_items w USING (item_key) "
                  "WHERE w.policy = 'full' AND w.task = 'scbench_kv'"));
  const Rows before = query(db, "SELECT item_key, score, reason FROM grades ORDER BY item_key");
  ASSERT_EQ(run_cmd(std::string(KVB_BINARY) + " grade --regrade --db " + db, &out), 0) << out;
  EXPECT_EQ(query(db, "SELECT item_key, score, reason FROM grades ORDER BY item_key"), before);
  fs::remove_all(d);
}

TEST(RunCli, QueryAgnosticIsItsOwnWorkItem) {
  // --query-agnostic prefills and compresses a task's shared context before its query: a
  // different generation, so a different work item (resume never mixes the two protocols), and
  // the run records the protocol.
  REQUIRE_INPUTS();
  fs::path d = tmp_dir("qa");
  const std::string db = (d / "qa.db").string();
  const std::string base = std::string(KVB_BINARY) + " run --task longbench_hotpotqa --data-dir " + KVB_SOURCE_DIR +
                           "/tests/fixtures/datasets --model " + kModel +
                           " --policies snapkv --budgets 32 --limit 1 --max-new-tokens 4 --quiet --db " + db;
  std::string out;
  ASSERT_EQ(run_cmd(base, &out), 0) << out;
  ASSERT_EQ(run_cmd(base + " --query-agnostic", &out), 0) << out;
  EXPECT_NE(out.find("0 already stored, 1 to generate"), std::string::npos) << out;
  EXPECT_EQ(count(db, "SELECT COUNT(DISTINCT item_key) FROM generations"), 2);
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM runs WHERE json_extract(config_json, '$.query_agnostic') = 1"), 1);
  // Both prompts are far over the budget: snapkv evicted in both.
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM generations WHERE evictions > 0"), 2);
  fs::remove_all(d);
}

TEST(RunCli, WeightsOptionIsRecordedAndNamesTheCells) {
  // --weights stored (default) | f32 | bf16: recorded in the run's config; a non-default choice
  // names the cells' model "<model>@f32", so its items never mix with the stored-weight ones. The
  // summary names its throughput columns; every row stores its steady KV bytes and decode share.
  REQUIRE_INPUTS();
  fs::path d = tmp_dir("weights");
  const std::string db = (d / "w.db").string();
  const std::string base = std::string(KVB_BINARY) + " run --task gsm8k --data-dir " + kData + " --model " + kModel +
                           " --policies snapkv --budgets 32 --limit 1 --max-new-tokens 4 --quiet --db " + db;
  std::string out;
  ASSERT_EQ(run_cmd(base, &out), 0) << out;
  for (const char* col : {"dec tok/s/seq", "dec tok/s agg", "prefill tok/s", "TTFT s", "KV peak (B)", "KV steady (B)"})
    EXPECT_NE(out.find(col), std::string::npos) << col << "\n" << out;
  ASSERT_EQ(run_cmd(base + " --weights f32", &out), 0) << out;
  EXPECT_NE(out.find("0 already stored, 1 to generate"), std::string::npos) << out;
  EXPECT_EQ(query(db, "SELECT json_extract(config_json, '$.weights') FROM runs ORDER BY run_id"),
            (Rows{{"stored"}, {"f32"}}));
  EXPECT_EQ(query(db, "SELECT DISTINCT model_id FROM work_items ORDER BY 1"), (Rows{{kModel}, {kModel + "@f32"}}));
  EXPECT_EQ(count(db,
                  "SELECT COUNT(*) FROM generations WHERE kv_bytes_steady > 0 AND decode_share_s > 0 AND "
                  "kv_bytes_steady < kv_bytes_peak"),
            2);
  EXPECT_EQ(run_cmd(base + " --weights f16", &out), 2) << out;
  EXPECT_NE(out.find("kvbench: error: --weights: expected stored, f32 or bf16, got 'f16'"), std::string::npos) << out;
  fs::remove_all(d);
}

TEST(CheckAnswerCli, VerdictOnTheLastLineWithTheFormsAndReason) {
  KVB_REQUIRE_BINARY();
  auto last_line = [](std::string s) {
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s.substr(s.rfind('\n') == std::string::npos ? 0 : s.rfind('\n') + 1);
  };
  std::string out;
  ASSERT_EQ(run_cmd(std::string(KVB_BINARY) + " check-answer --grader math --gold '\\frac{1}{2}' --pred 'so \\boxed{0.5}'",
                    &out),
            0)
      << out;
  EXPECT_EQ(last_line(out), "1") << out;
  EXPECT_NE(out.find("0.5"), std::string::npos) << out;  // the extracted answer is shown
  ASSERT_EQ(
      run_cmd(std::string(KVB_BINARY) + " check-answer --grader math --gold '\\frac{1}{2}' --pred '\\boxed{0.6}'", &out),
      0)
      << out;
  EXPECT_EQ(last_line(out), "0") << out;
  EXPECT_EQ(run_cmd(std::string(KVB_BINARY) + " check-answer --grader no_such_grader --gold 1 --pred 1", &out), 2) << out;
  EXPECT_NE(out.find("unknown grader 'no_such_grader'"), std::string::npos) << out;
}

TEST(GenerateCli, JsonRecordsTheGreedyIdsAsTheArgmaxOfTheirTeacherForcedLogits) {
  // `generate --json` (used by tools/fidelity_vs_references.py against transformers and
  // llama.cpp): the logits it records come from a second, teacher-forced pass of the same policy
  // over the generated ids. Greedy decoding must pick the top-1 id of those logits at every
  // position, also while snapkv evicts (budget 16, a compression every 4 tokens), which holds only
  // if the two passes keep the same tokens and compute the same logits.
  REQUIRE_INPUTS();
  fs::path d = tmp_dir("generate_json");
  const std::string json = (d / "g.json").string();
  std::string out;
  ASSERT_EQ(run_cmd(std::string(KVB_BINARY) + " generate --model " + kModel +
                        " --prompt 'Once upon a time' --max-new-tokens 40 --temperature 0 --policy snapkv:buffer=4 "
                        "--budget 16 --json-top 3 --json " +
                        json,
                    &out),
            0)
      << out;
  std::ifstream f(json);
  const nlohmann::json j = nlohmann::json::parse(f);
  const auto ids = j.at("ids").get<std::vector<int>>();
  ASSERT_FALSE(ids.empty());
  ASSERT_EQ(j.at("top_logits").size(), ids.size());
  EXPECT_GE(j.at("prompt_ids").size(), 2u);
  EXPECT_EQ(j.at("policy"), "snapkv:buffer=4");
  for (size_t t = 0; t < ids.size(); ++t) {
    const auto& top = j["top_logits"][t];
    ASSERT_EQ(top.size(), 3u);
    EXPECT_EQ(top[0][0].get<int>(), ids[t]) << "position " << t;
    EXPECT_GE(top[0][1].get<double>(), top[1][1].get<double>());
    EXPECT_GE(top[1][1].get<double>(), top[2][1].get<double>());
  }
  // An output path that cannot be written fails before any generation.
  EXPECT_EQ(run_cmd(std::string(KVB_BINARY) + " generate --model " + kModel + " --prompt x --json " +
                        (d / "no" / "such" / "dir" / "g.json").string(),
                    &out),
            2)
      << out;
  fs::remove_all(d);
}

TEST(RunCli, ATemplateFileChangedBetweenRunsIsNotResumed) {
  // Issue 46, item 1: a file a task reads besides its data (gsm8k:template=file:T) is part of the
  // run's input identity: rewritten between two runs of the same command, the second run refuses
  // to add its items to the first's instead of mixing prompts of two templates.
  REQUIRE_INPUTS();
  fs::path d = tmp_dir("template_identity");
  const std::string t = (d / "t.txt").string();
  std::ofstream(t) << "Solve: {question}\n";
  const std::string cmd = std::string(KVB_BINARY) + " run --task gsm8k:template=file:" + t + " --data-dir " + kData +
                          " --model " + kModel + " --policies full --limit 1 --max-new-tokens 2 --quiet --db " +
                          (d / "r.db").string();
  std::string out;
  ASSERT_EQ(run_cmd(cmd, &out), 0) << out;
  EXPECT_EQ(query((d / "r.db").string(), "SELECT role FROM run_inputs WHERE path = '" + t + "'"), (Rows{{"template"}}));
  std::ofstream(t) << "Answer this: {question}\n";
  EXPECT_NE(run_cmd(cmd, &out), 0) << out;
  EXPECT_NE(out.find(t + ": content changed since run 1 (template"), std::string::npos) << out;
  fs::remove_all(d);
}

TEST(RunCli, ASuiteTaskRunsOnItsOwnModelsBudgetsAndPolicies) {
  // A suite task's models, budgets and policies replace the run's for that task only
  // (tasks/suite.h; ci/nightly-suite.yaml puts its GSM8K cells on a real model that way): the
  // run's --model here does not exist and is never loaded, since every task names its own.
  REQUIRE_INPUTS();
  fs::path d = tmp_dir("task_keys");
  const std::string db = (d / "t.db").string(), suite = (d / "s.yaml").string();
  std::ofstream(suite) << ("budgets: [32]\ntasks:\n  - {task: gsm8k, limit: 2, max_new_tokens: 4, models: ['" + kModel +
                           "']}\n  - {task: math500, limit: 1, max_new_tokens: 4, models: ['" + kModel +
                           "'], budgets: [16, 24], policies: ['snapkv:window=4']}\n");
  const std::string base = std::string(KVB_BINARY) + " run --suite " + suite + " --data-dir " + kData +
                           " --model /nonexistent-kvb-model --policies full,snapkv --quiet --db " + db;
  std::string out;
  ASSERT_EQ(run_cmd(base, &out), 0) << out;
  EXPECT_EQ(query(db, "SELECT task, policy_label, budget, COUNT(*) FROM work_items GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"),
            (Rows{{"gsm8k", "full", "0", "2"},
                  {"gsm8k", "snapkv", "32", "2"},
                  {"math500", "snapkv:window=4", "16", "1"},
                  {"math500", "snapkv:window=4", "24", "1"}}));
  EXPECT_EQ(query(db, "SELECT DISTINCT model_id FROM work_items"), (Rows{{kModel}}));
  // The run's configuration records the task's own keys (they are part of its run key).
  EXPECT_EQ(query(db, "SELECT json_extract(config_json, '$.tasks[1].budgets') FROM runs"), (Rows{{"[16,24]"}}));
  // A bad policy of a task is one error naming the file, the task and the key.
  std::ofstream(suite) << "tasks:\n  - {task: gsm8k, limit: 1, policies: [nosuch]}\n";
  EXPECT_EQ(run_cmd(base, &out), 2) << out;
  EXPECT_NE(out.find("kvbench: error: " + suite + ": tasks[0]: policies: unknown policy 'nosuch'"), std::string::npos)
      << out;
  fs::remove_all(d);
}
