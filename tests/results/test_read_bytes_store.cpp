// KV bytes read per decode step in the results store (schema v3, issue 20): a database written by
// the schema-v2 kvbench migrates keeping its rows (their measurement NULL), new rows store it,
// v_cells and compute_cells agree on the cell mean over the rows that measured it, the report
// shows the column and the accuracy-vs-bytes-read chart, and `compare` pairs a v2 run with a v3 run.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/util/error.h"
#include "results/compare.h"
#include "results/report.h"
#include "results/schema.h"
#include "results/store.h"
#include "synth.h"

using namespace kvb::results;
using namespace kvb::results::testing;

namespace {

std::string q(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("''") : std::string(1, c);
  return o + "'";
}

// Writes a database exactly as the schema-v2 kvbench did: migrations 0 and 1, user_version 2,
// one finished run "old" with every item of `items` generated (the v2 generations columns) and
// graded.
void write_v2_db(const std::string& path, const std::vector<WorkItem>& items) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  auto exec = [&](const std::string& sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    ASSERT_EQ(rc, SQLITE_OK) << (err ? err : "") << "\n" << sql;
    sqlite3_free(err);
  };
  exec("BEGIN");
  exec(migrations().at(0));
  exec(migrations().at(1));
  exec("PRAGMA application_id = " + std::to_string(Store::kApplicationId));
  exec(
      "INSERT INTO runs (run_id, run_key, name, kvbench_version, git_sha, host, backend, device, config_json, "
      "started_at, finished_at) VALUES (1, 'old-key', 'old', '0.1.0', 'abc', 'h', 'cpu', 'cpu', '{}', "
      "'2026-01-01T00:00:00Z', '2026-01-01T01:00:00Z')");
  for (const auto& it : items) {
    exec("INSERT INTO work_items VALUES (" + q(it.key) + "," + q(it.model_id) + "," + q(it.model_revision) + "," +
         q(it.policy) + "," + q(it.policy_params.dump()) + "," + q(it.policy_label) + "," + std::to_string(it.budget) +
         "," + q(it.task) + "," + q(it.example_id) + "," + q(it.prompt_sha256) + "," + std::to_string(it.sample_index) +
         "," + std::to_string(it.seed) + "," + q(it.sampling.dump()) + ")");
    const GenerationRecord g = fake_generation(it);
    exec(
        "INSERT INTO generations (run_id, item_key, text, prompt_tokens, generated_tokens, finish_reason, "
        "prefill_s, decode_s, ttft_s, evictions, kv_bytes_peak, kv_bytes_final, device_peak_bytes, extra_json, "
        "created_at) VALUES (1," +
        q(it.key) + "," + q(g.text) + "," + std::to_string(g.prompt_tokens) + "," + std::to_string(g.generated_tokens) +
        ",'stop',0.01,0.1,0.012," + std::to_string(g.evictions) + "," + std::to_string(g.kv_bytes_peak) + "," +
        std::to_string(g.kv_bytes_final) + ",1,'{}','2026-01-01T00:30:00Z')");
    const GradeRecord r = fake_grade(it);
    exec("INSERT INTO grades (run_id, item_key, score, extracted, pred_norm, gold_norm, grader, graded_at) VALUES (1," +
         q(it.key) + "," + std::to_string(*r.score) + "," + q(r.extracted) + "," + q(r.pred_norm) + "," +
         q(r.gold_norm) + ",'fake/1','2026-01-01T00:40:00Z')");
  }
  exec("PRAGMA user_version = 2");
  exec("COMMIT");
  sqlite3_close(db);
}

// The bytes a fake v3 generation read per decode step: a function of the budget, left out
// (NULL) for one sample in three of the budgeted cells (a sequence without a decode step).
std::optional<double> fake_read(const WorkItem& it, size_t i) {
  if (it.budget != kNoBudget && i % 3 == 0) return std::nullopt;
  return it.budget == kNoBudget ? 1.0e6 : 1000.0 * static_cast<double>(it.budget) + static_cast<double>(i);
}

std::string slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST(ReadBytesStore, V2DatabaseMigratesAndStoresBytesRead) {
  ASSERT_GE(migrations().size(), 3u);
  auto p = temp_db("read_bytes_v2");
  const auto items = expand_grid(small_grid(4, 2));
  write_v2_db(p, items);
  EXPECT_THROW({ Store ro(p, Store::Mode::kReadOnly); }, kvb::Error);  // needs the migration
  Store s(p);
  EXPECT_EQ(s.schema_version(), Store::kSchemaVersion);
  const auto old_rows = s.samples({1});
  ASSERT_EQ(old_rows.size(), items.size());
  for (const auto& r : old_rows) EXPECT_FALSE(r.kv_bytes_read_step) << "rows from v2 have no measurement";

  // A v3 run on the same work items, with the measurement.
  const int64_t run = s.begin_run(run_info("new"));
  std::vector<GenerationRecord> gens;
  std::vector<GradeRecord> grades;
  for (size_t i = 0; i < items.size(); ++i) {
    gens.push_back(fake_generation(items[i]));
    gens.back().kv_bytes_read_step = fake_read(items[i], i);
    grades.push_back(fake_grade(items[i]));
  }
  s.write_batch(run, gens, grades);
  s.end_run(run);

  // Stored as written, and the cell mean is over the rows that measured it.
  const auto rows = s.samples({run});
  std::map<std::string, std::optional<double>> by_key;
  for (size_t i = 0; i < items.size(); ++i) by_key[items[i].key] = fake_read(items[i], i);
  for (const auto& r : rows) EXPECT_EQ(r.kv_bytes_read_step, by_key.at(r.item_key));
  const auto cells = compute_cells(s.samples({}));
  int checked = 0;
  for (const auto& c : cells) {
    if (c.key.run_id == 1) {
      EXPECT_FALSE(c.kv_bytes_read_step_mean);
      continue;
    }
    double sum = 0;
    int n = 0;
    for (const auto& r : rows)
      if (r.policy_label == c.key.policy_label && r.budget == c.key.budget && r.kv_bytes_read_step) {
        sum += *r.kv_bytes_read_step;
        ++n;
      }
    ASSERT_GT(n, 0);
    ASSERT_TRUE(c.kv_bytes_read_step_mean);
    EXPECT_DOUBLE_EQ(*c.kv_bytes_read_step_mean, sum / n);
    const auto v =
        s.query("SELECT kv_bytes_read_step_mean FROM v_cells WHERE run_id = " + std::to_string(run) +
                " AND policy_label = " + q(c.key.policy_label) + " AND budget = " + std::to_string(c.key.budget));
    ASSERT_EQ(v.size(), 1u);
    EXPECT_NEAR(std::stod(v[0][0]), sum / n, 1e-6);
    ++checked;
  }
  EXPECT_EQ(checked, 5);
  EXPECT_EQ(s.query("SELECT COUNT(*) FROM v_cells WHERE run_id = 1 AND kv_bytes_read_step_mean IS NULL")[0][0], "5");

  // compare: the v2 run against the v3 run, paired by work item (same fake grades: no change).
  const CompareResult cr = compare_runs(s, 1, run);
  EXPECT_EQ(cr.rows.size(), 5u);
  EXPECT_FALSE(cr.any_regression);
  for (const auto& r : cr.rows) EXPECT_EQ(r.shared_samples, 8);

  // The report: the column (empty for v2 cells), the CSV field and the bytes-read chart.
  ReportOptions opt;
  opt.out_dir = ::testing::TempDir() + "kvb_read_bytes_report_" + std::to_string(getpid());
  opt.cells.resamples = 200;
  const auto files = write_report(s, opt);
  const std::string html = slurp(files.html), md = slurp(files.markdown), csv = slurp(files.csv);
  EXPECT_NE(html.find("pass@1 vs KV bytes read"), std::string::npos);
  EXPECT_NE(html.find("<th>KV read/step</th>"), std::string::npos);
  EXPECT_NE(md.find("| KV read/step |"), std::string::npos);
  EXPECT_NE(csv.find(",kv_bytes_read_step_mean,"), std::string::npos);
  std::filesystem::remove_all(opt.out_dir);

  // A report over the v2 run alone has nothing to plot against bytes read.
  opt.run_ids = {1};
  const auto f1 = write_report(s, opt);
  EXPECT_EQ(slurp(f1.html).find("pass@1 vs KV bytes read"), std::string::npos);
  std::filesystem::remove_all(opt.out_dir);
}
