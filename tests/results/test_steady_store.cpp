// Schema v4 (issue 33): the steady KV footprint after compression and each sequence's share of the
// decode steps' wall time. A database written by the schema-v3 kvbench migrates keeping its rows
// (both NULL); new rows store them; v_cells and compute_cells agree on the aggregate decode rate
// (Σ generated / Σ share, computed here independently) and on the mean steady bytes; the report
// names the throughput columns and plots either KV measure.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fstream>
#include <sstream>

#include "engine/util/error.h"
#include "results/report.h"
#include "results/schema.h"
#include "results/store.h"
#include "legacy_db.h"
#include "synth.h"

using namespace kvb::results;
using namespace kvb::results::testing;

TEST(SteadyStore, V3DatabaseMigratesAndStoresSteadyBytesAndDecodeShare) {
  ASSERT_GE(migrations().size(), 4u);
  const auto items = expand_grid(small_grid(4, 2));
  Store s(legacy_db_to_migrate("steady_v3", items, 3));
  EXPECT_EQ(s.schema_version(), Store::kSchemaVersion);
  for (const auto& r : s.samples({1})) {
    EXPECT_FALSE(r.kv_bytes_steady) << "rows from v3 have no steady footprint";
    EXPECT_FALSE(r.decode_share_s);
    ASSERT_TRUE(r.kv_bytes_read_step);  // the v3 column survives the migration
    EXPECT_EQ(*r.kv_bytes_read_step, 1000.0);
  }

  std::map<std::string, std::pair<int64_t, double>> written;  // key -> (steady, share)
  const int64_t run = write_edited_run(s, run_info("new"), items, [&](GenerationRecord& g, size_t i) {
    g.kv_bytes_steady = g.kv_bytes_final + static_cast<int64_t>(i);
    g.decode_share_s = 0.025 + 0.001 * static_cast<double>(i);
    written[items[i].key] = {*g.kv_bytes_steady, *g.decode_share_s};
  });
  const auto rows = s.samples({run});
  ASSERT_EQ(rows.size(), items.size());
  for (const auto& r : rows) {
    ASSERT_TRUE(r.kv_bytes_steady && r.decode_share_s);
    EXPECT_EQ(*r.kv_bytes_steady, written.at(r.item_key).first);
    EXPECT_EQ(*r.decode_share_s, written.at(r.item_key).second);
  }

  int checked = 0;
  for (const auto& c : compute_cells(s.samples({}))) {
    if (c.key.run_id == 1) {
      EXPECT_FALSE(c.decode_tok_s_agg);
      EXPECT_FALSE(c.kv_bytes_steady_mean);
      continue;
    }
    double gen = 0, share = 0, steady = 0, dec = 0;
    int n = 0;
    for (const auto& r : rows)
      if (r.policy_label == c.key.policy_label && r.budget == c.key.budget) {
        gen += static_cast<double>(r.generated_tokens);
        share += *r.decode_share_s;
        dec += r.decode_s;
        steady += static_cast<double>(*r.kv_bytes_steady);
        ++n;
      }
    ASSERT_GT(n, 0);
    ASSERT_TRUE(c.decode_tok_s_agg && c.kv_bytes_steady_mean);
    EXPECT_DOUBLE_EQ(*c.decode_tok_s_agg, gen / share);
    EXPECT_DOUBLE_EQ(c.decode_tok_s, gen / dec);
    EXPECT_DOUBLE_EQ(*c.kv_bytes_steady_mean, steady / n);
    const auto v =
        s.query("SELECT decode_tok_s_agg, kv_bytes_steady_mean FROM v_cells WHERE run_id = " + std::to_string(run) +
                " AND policy_label = " + sql_quote(c.key.policy_label) + " AND budget = " + std::to_string(c.key.budget));
    ASSERT_EQ(v.size(), 1u);
    EXPECT_NEAR(std::stod(v[0][0]), gen / share, 1e-6 * gen / share);
    EXPECT_NEAR(std::stod(v[0][1]), steady / n, 1e-6);
    ++checked;
  }
  EXPECT_EQ(checked, 5);
  EXPECT_EQ(s.query("SELECT COUNT(*) FROM v_cells WHERE run_id = 1 AND decode_tok_s_agg IS NULL AND "
                    "kv_bytes_steady_mean IS NULL")[0][0],
            "5");

  const auto [html, md, csv] = report_text(s, "steady");
  EXPECT_NE(html.find("pass@1 vs steady KV bytes"), std::string::npos);
  EXPECT_NE(html.find("pass@1 vs realised KV bytes"), std::string::npos);
  for (const char* col : {"decode tok/s/seq", "decode tok/s agg", "prefill tok/s", "TTFT s", "KV steady"}) {
    EXPECT_NE(html.find(std::string("<th>") + col + "</th>"), std::string::npos) << col;
    EXPECT_NE(md.find(std::string("| ") + col + " |"), std::string::npos) << col;
  }
  EXPECT_NE(csv.find(",decode_tok_s_agg,kv_bytes_steady_mean,"), std::string::npos);

  // A report over the v3 run alone has no steady footprint to plot.
  EXPECT_EQ(report_text(s, "steady", {1}).html.find("pass@1 vs steady KV bytes"), std::string::npos);
}
