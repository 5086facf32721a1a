// Schema v5 (issue 41): the realised KV tokens per head of each generation (kv_tokens_mean,
// kv_tokens_peak), what a budget_kind=threshold cell has instead of a budget. A database written
// by the schema-v4 kvbench migrates keeping its rows (both NULL); new rows store them; v_cells and
// compute_cells agree with the mean and peak computed here; the report places a threshold cell
// (stored without a budget) by its realised tokens and lists the columns in cells.csv.
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>

#include "engine/util/error.h"
#include "results/report.h"
#include "results/schema.h"
#include "results/store.h"
#include "legacy_db.h"
#include "synth.h"

using namespace kvb::results;
using namespace kvb::results::testing;

namespace {

// The grid of a threshold run: the full cache and snapkv:budget_kind=threshold (no budget).
GridSpec threshold_grid() {
  GridSpec g = small_grid(4, 2);
  g.policies = {{"full", nlohmann::json::object(), false, ""},
                {"snapkv", {{"budget_kind", "threshold"}, {"threshold", 0.02}, {"window", 8}}, false, ""}};
  return g;
}

}  // namespace

TEST(TokensStore, V4DatabaseMigratesAndThresholdCellsArePlacedByRealisedTokens) {
  ASSERT_GE(migrations().size(), 5u);
  auto p = temp_db("tokens_v4");
  write_legacy_db(p, expand_grid(small_grid(4, 2)), 4);
  Store s(p);
  EXPECT_EQ(s.schema_version(), static_cast<int>(migrations().size()));
  for (const auto& r : s.samples({1})) {
    EXPECT_FALSE(r.kv_tokens_mean) << "rows from v4 have no realised tokens";
    EXPECT_FALSE(r.kv_tokens_peak);
    ASSERT_TRUE(r.kv_bytes_steady);  // the v4 columns survive the migration
    EXPECT_EQ(*r.kv_bytes_steady, 2000);
  }

  const auto items = expand_grid(threshold_grid());
  for (const auto& it : items) EXPECT_EQ(it.budget, kNoBudget);  // neither policy takes a budget
  std::vector<GenerationRecord> gens;                            // as written
  const int64_t run = write_edited_run(s, run_info("threshold"), items, [&](GenerationRecord& g, size_t i) {
    g.kv_tokens_mean = 40.0 + 0.5 * static_cast<double>(i);
    g.kv_tokens_peak = 60 + static_cast<int64_t>(i % 7);
    gens.push_back(g);
  });
  const auto rows = s.samples({run});
  ASSERT_EQ(rows.size(), items.size());

  int checked = 0;
  for (const auto& c : compute_cells(s.samples({}))) {
    if (c.key.run_id == 1) {
      EXPECT_FALSE(c.kv_tokens_mean);
      EXPECT_FALSE(c.kv_tokens_peak);
      continue;
    }
    double sum = 0;
    int64_t peak = 0;
    int n = 0;
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i].policy_label == c.key.policy_label) {
        sum += *gens[i].kv_tokens_mean;
        peak = std::max(peak, *gens[i].kv_tokens_peak);
        ++n;
      }
    ASSERT_EQ(n, 8);
    ASSERT_TRUE(c.kv_tokens_mean && c.kv_tokens_peak);
    EXPECT_DOUBLE_EQ(*c.kv_tokens_mean, sum / n);
    EXPECT_EQ(*c.kv_tokens_peak, peak);
    const auto v = s.query("SELECT kv_tokens_mean, kv_tokens_peak FROM v_cells WHERE run_id = " + std::to_string(run) +
                           " AND policy_label = " + sql_quote(c.key.policy_label));
    ASSERT_EQ(v.size(), 1u);
    EXPECT_NEAR(std::stod(v[0][0]), sum / n, 1e-9);
    EXPECT_EQ(std::stoll(v[0][1]), peak);
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  EXPECT_EQ(s.query("SELECT COUNT(*) FROM v_cells WHERE run_id = 1 AND kv_tokens_mean IS NULL AND "
                    "kv_tokens_peak IS NULL")[0][0],
            "5");

  const auto [html, md, csv] = report_text(s, "tokens", {run});
  EXPECT_NE(csv.find(",kv_tokens_mean,kv_tokens_peak,"), std::string::npos);
  // The threshold cell is placed at its realised mean tokens per head, computed here from its
  // rows; the tables print it as "~N realised" and its chart points carry it in their tooltip.
  double snap_sum = 0;
  int snap_n = 0;
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].policy == "snapkv") {
      snap_sum += *gens[i].kv_tokens_mean;
      ++snap_n;
    }
  const std::string realised = fmt::format("~{:.0f} realised", snap_sum / snap_n);
  EXPECT_NE(md.find("| " + realised + " |"), std::string::npos) << md;
  EXPECT_NE(html.find("budget " + realised + ": pass@1"), std::string::npos);
  EXPECT_NE(md.find("| full |"), std::string::npos);  // the full cache stays "full"
}
