// Databases as older kvbench versions wrote them, for the migration tests of the results store:
// the schema migrations up to a version, one finished run "old" with every work item generated
// and graded (the fake generations and grades of synth.h), and that version in user_version.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/util/error.h"
#include "results/report.h"
#include "results/schema.h"
#include "results/store.h"
#include "synth.h"

namespace kvb::results::testing {

/// `s` as an SQL string literal (single quotes doubled).
inline std::string sql_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("''") : std::string(1, c);
  return o + "'";
}

/// The whole content of the file at `p` ("" when it cannot be read).
inline std::string slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// A report's files, read back.
struct ReportText {
  std::string html, markdown, csv;
};

/// Writes the report of `store` over `run_ids` (empty: every run), 200 bootstrap resamples, into
/// a fresh temporary folder named after `name`; returns its html, Markdown and CSV text and
/// removes the folder. Errors: write_report's (kvb::Error).
inline ReportText report_text(Store& store, const std::string& name, std::vector<int64_t> run_ids = {}) {
  ReportOptions opt;
  opt.out_dir = ::testing::TempDir() + "kvb_" + name + "_report_" + std::to_string(getpid());
  opt.cells.resamples = 200;
  opt.run_ids = std::move(run_ids);
  const ReportFiles files = write_report(store, opt);
  ReportText text{slurp(files.html), slurp(files.markdown), slurp(files.csv)};
  std::filesystem::remove_all(opt.out_dir);
  return text;
}

/// Writes at `path` a database exactly as the kvbench of schema `version` (2, 3 or 4) wrote it:
/// migrations 0..version-1, user_version `version`, one finished run "old" (run_id 1) holding
/// every item of `items` generated and graded. Schema 3 rows store kv_bytes_read_step = 1000.0;
/// schema 4 rows also kv_bytes_steady = 2000 and decode_share_s = 0.05.
/// Fails the calling test (gtest ASSERT) on an SQLite error.
inline void write_legacy_db(const std::string& path, const std::vector<WorkItem>& items, int version) {
  ASSERT_TRUE(version >= 2 && version <= 4) << version;
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  auto exec = [&](const std::string& sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    ASSERT_EQ(rc, SQLITE_OK) << (err ? err : "") << "\n" << sql;
    sqlite3_free(err);
  };
  const auto q = sql_quote;
  exec("BEGIN");
  for (int v = 0; v < version; ++v) exec(migrations().at(v));
  exec("PRAGMA application_id = " + std::to_string(Store::kApplicationId));
  exec(
      "INSERT INTO runs (run_id, run_key, name, kvbench_version, git_sha, host, backend, device, config_json, "
      "started_at, finished_at) VALUES (1, 'old-key', 'old', '0.1.0', 'abc', 'h', 'cpu', 'cpu', '{}', "
      "'2026-01-01T00:00:00Z', '2026-01-01T01:00:00Z')");
  const bool read_bytes = version >= 3, steady = version >= 4;
  for (const auto& it : items) {
    exec("INSERT INTO work_items VALUES (" + q(it.key) + "," + q(it.model_id) + "," + q(it.model_revision) + "," +
         q(it.policy) + "," + q(it.policy_params.dump()) + "," + q(it.policy_label) + "," + std::to_string(it.budget) +
         "," + q(it.task) + "," + q(it.example_id) + "," + q(it.prompt_sha256) + "," + std::to_string(it.sample_index) +
         "," + std::to_string(it.seed) + "," + q(it.sampling.dump()) + ")");
    const GenerationRecord g = fake_generation(it);
    exec(std::string("INSERT INTO generations (run_id, item_key, text, prompt_tokens, generated_tokens, finish_reason, "
                     "prefill_s, decode_s, ttft_s, evictions, kv_bytes_peak, kv_bytes_final, device_peak_bytes, "
                     "extra_json, created_at") +
         (read_bytes ? ", kv_bytes_read_step" : "") + (steady ? ", kv_bytes_steady, decode_share_s" : "") +
         ") VALUES (1," + q(it.key) + "," + q(g.text) + "," + std::to_string(g.prompt_tokens) + "," +
         std::to_string(g.generated_tokens) + ",'stop',0.01,0.1,0.012," + std::to_string(g.evictions) + "," +
         std::to_string(g.kv_bytes_peak) + "," + std::to_string(g.kv_bytes_final) + ",1,'{}','2026-01-01T00:30:00Z'" +
         (read_bytes ? ",1000.0" : "") + (steady ? ",2000,0.05" : "") + ")");
    const GradeRecord r = fake_grade(it);
    exec("INSERT INTO grades (run_id, item_key, score, extracted, pred_norm, gold_norm, grader, graded_at) VALUES (1," +
         q(it.key) + "," + std::to_string(*r.score) + "," + q(r.extracted) + "," + q(r.pred_norm) + "," +
         q(r.gold_norm) + ",'fake/1','2026-01-01T00:40:00Z')");
  }
  exec("PRAGMA user_version = " + std::to_string(version));
  exec("COMMIT");
  sqlite3_close(db);
}

/// A fresh temporary database `temp_db(name)` written by write_legacy_db(items, version); checks
/// (gtest EXPECT) that a read-only open refuses it, as it needs the migration. Returns its path.
inline std::string legacy_db_to_migrate(const std::string& name, const std::vector<WorkItem>& items, int version) {
  const std::string p = temp_db(name);
  write_legacy_db(p, items, version);
  EXPECT_THROW({ Store ro(p, Store::Mode::kReadOnly); }, kvb::Error);  // needs the migration
  return p;
}

}  // namespace kvb::results::testing
