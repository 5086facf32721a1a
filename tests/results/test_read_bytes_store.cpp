// KV bytes read per decode step in the results store (schema v3, issue 20): a database written by
// the schema-v2 kvbench migrates keeping its rows (their measurement NULL), new rows store it,
// v_cells and compute_cells agree on the cell mean over the rows that measured it, the report
// shows the column and the accuracy-vs-bytes-read chart, and `compare` pairs a v2 run with a v3 run.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fstream>
#include <sstream>

#include "engine/util/error.h"
#include "results/compare.h"
#include "results/report.h"
#include "results/schema.h"
#include "results/store.h"
#include "legacy_db.h"
#include "synth.h"

using namespace kvb::results;
using namespace kvb::results::testing;

namespace {

// The bytes a fake v3 generation read per decode step: a function of the budget, left out
// (NULL) for one sample in three of the budgeted cells (a sequence without a decode step).
std::optional<double> fake_read(const WorkItem& it, size_t i) {
  if (it.budget != kNoBudget && i % 3 == 0) return std::nullopt;
  return it.budget == kNoBudget ? 1.0e6 : 1000.0 * static_cast<double>(it.budget) + static_cast<double>(i);
}

}  // namespace

TEST(ReadBytesStore, V2DatabaseMigratesAndStoresBytesRead) {
  ASSERT_GE(migrations().size(), 3u);
  const auto items = expand_grid(small_grid(4, 2));
  Store s(legacy_db_to_migrate("read_bytes_v2", items, 2));
  EXPECT_EQ(s.schema_version(), Store::kSchemaVersion);
  const auto old_rows = s.samples({1});
  ASSERT_EQ(old_rows.size(), items.size());
  for (const auto& r : old_rows) EXPECT_FALSE(r.kv_bytes_read_step) << "rows from v2 have no measurement";

  // A v3 run on the same work items, with the measurement.
  const int64_t run = write_edited_run(
      s, run_info("new"), items, [&](GenerationRecord& g, size_t i) { g.kv_bytes_read_step = fake_read(items[i], i); });

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
    const auto v = s.query("SELECT kv_bytes_read_step_mean FROM v_cells WHERE run_id = " + std::to_string(run) +
                           " AND policy_label = " + sql_quote(c.key.policy_label) +
                           " AND budget = " + std::to_string(c.key.budget));
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
  const auto [html, md, csv] = report_text(s, "read_bytes");
  EXPECT_NE(html.find("pass@1 vs KV bytes read"), std::string::npos);
  EXPECT_NE(html.find("<th>KV read/step</th>"), std::string::npos);
  EXPECT_NE(md.find("| KV read/step |"), std::string::npos);
  EXPECT_NE(csv.find(",kv_bytes_read_step_mean,"), std::string::npos);

  // A report over the v2 run alone has nothing to plot against bytes read.
  EXPECT_EQ(report_text(s, "read_bytes", {1}).html.find("pass@1 vs KV bytes read"), std::string::npos);
}
