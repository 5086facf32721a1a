// Reports: Pareto frontier, CSV, HTML/Markdown content, the `kvbench report`/`merge` CLI and
// the headless-Chromium PNG script.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/util/error.h"
#include "results/report.h"
#include "synth.h"
#include "tests/support/test_support.h"

using namespace kvb::results;
using namespace kvb::results::testing;

static std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Pareto, HandCases) {
  // (budget, accuracy): lower budget and higher accuracy are better.
  std::vector<std::pair<double, double>> pts = {{64, 0.2}, {128, 0.5}, {256, 0.45}, {512, 0.7}, {128, 0.3}};
  auto f = pareto_front(pts, true);
  EXPECT_EQ(f, (std::vector<size_t>{0, 1, 3}));
  // Higher x better (tok/s): (10,0.9) (20,0.8) (15,0.7) (20,0.8 duplicate) -> 0, 1 and 3.
  std::vector<std::pair<double, double>> s = {{10, 0.9}, {20, 0.8}, {15, 0.7}, {20, 0.8}};
  auto g = pareto_front(s, false);
  EXPECT_EQ(g.size(), 3u);
  EXPECT_TRUE(pareto_front({}, true).empty());
}

static std::string out_dir(const std::string& name) {
  auto d = ::testing::TempDir() + "kvb_report_" + name + "_" + std::to_string(getpid());
  std::filesystem::remove_all(d);
  return d;
}

TEST(Report, WritesSelfContainedHtmlMarkdownAndCsv) {
  auto p = temp_db("report");
  Store s(p);
  auto items = expand_grid(small_grid(6, 2));
  fill(s, items, run_info());
  ReportOptions opt;
  opt.out_dir = out_dir("basic");
  opt.cells.resamples = 500;
  auto files = write_report(s, opt);
  std::string html = slurp(files.html), md = slurp(files.markdown), csv = slurp(files.csv);
  // Self-contained: inline SVG, no scripts, no external references.
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  EXPECT_EQ(html.find("http://", html.find("<svg") + 50) == std::string::npos ||
                html.find("http://www.w3.org/2000/svg") != std::string::npos,
            true);
  EXPECT_NE(html.find("pass@1 vs budget"), std::string::npos);
  EXPECT_NE(html.find("pass@1 vs realised KV bytes"), std::string::npos);
  EXPECT_NE(html.find("pass@1 vs decode speed"), std::string::npos);
  EXPECT_NE(html.find("Pareto frontier"), std::string::npos);
  EXPECT_NE(html.find("full cache"), std::string::npos);
  EXPECT_NE(html.find("500 resamples"), std::string::npos);
  EXPECT_NE(md.find("| snapkv{\"window\":8} | 64 |"), std::string::npos) << md;
  // CSV: header + 5 cells, the CSV quoting of the JSON label.
  int lines = 0;
  for (char c : csv) lines += c == '\n';
  EXPECT_EQ(lines, 6);
  EXPECT_NE(csv.find("\"snapkv{\"\"window\"\":8}\""), std::string::npos) << csv;
  // Empty selection is a clear error.
  opt.run_ids = {999};
  EXPECT_THROW(write_report(s, opt), kvb::Error);
}

// A run made with --memory: its cells carry the pool, the mean decode batch and preemptions
// read back from each generation's extra JSON, and get a chart of pass@1 against aggregate
// throughput whose frontier is over the cells of that pool only.
TEST(Report, MemoryRunsGetAThroughputChartAtEqualMemory) {
  auto p = temp_db("report_memory");
  Store s(p);
  auto items = expand_grid(small_grid(6, 1));
  for (double mem : {0.25, 0.5}) {
    auto info = run_info(mem == 0.25 ? "small-pool" : "large-pool");
    info.config["memory_gib"] = mem;
    info.run_key = default_run_key(info);
    write_edited_run(s, info, items, [&](GenerationRecord& g, size_t i) {
      const bool compressed = items[i].budget > 0;
      g.decode_share_s = compressed ? 0.02 : 0.1;  // compressed cells decode 5x faster
      g.extra["decode_batch_mean"] = compressed ? 5.0 : 1.0;
      g.extra["preemptions"] = compressed ? 0 : 2;
    });
  }
  // A row whose extra JSON was damaged outside kvbench reads as "not recorded", not as an error.
  s.exec("UPDATE generations SET extra_json = '{not json' WHERE rowid = (SELECT MIN(rowid) FROM generations)");
  ReportOptions opt;
  opt.out_dir = out_dir("memory");
  opt.cells.resamples = 200;
  auto files = write_report(s, opt);
  const std::string html = slurp(files.html), csv = slurp(files.csv);
  EXPECT_NE(html.find("pass@1 vs throughput at --memory 0.25 GiB"), std::string::npos);
  EXPECT_NE(html.find("pass@1 vs throughput at --memory 0.5 GiB"), std::string::npos);
  EXPECT_NE(html.find("mean decode batch 5.00"), std::string::npos);
  EXPECT_NE(csv.find("memory_gib,decode_batch_mean,preemptions"), std::string::npos) << csv;
  const auto rows = s.samples();
  int damaged = 0;
  for (const auto& r : rows) {
    if (!r.decode_batch_mean) {
      ++damaged;
      continue;
    }
    EXPECT_EQ(*r.decode_batch_mean, r.budget > 0 ? 5.0 : 1.0);
    EXPECT_EQ(r.preemptions, r.budget > 0 ? 0 : 2);
  }
  EXPECT_EQ(damaged, 1);
  CellOptions co;
  co.run_memory_gib = run_memory_gib(s.runs());
  ASSERT_EQ(co.run_memory_gib.size(), 2u);
  for (const auto& c : compute_cells(rows, co)) {
    ASSERT_TRUE(c.memory_gib);
    EXPECT_EQ(*c.memory_gib, co.run_memory_gib.at(c.key.run_id));
    if (c.key.budget > 0 && c.decode_batch_mean) {
      EXPECT_EQ(*c.decode_batch_mean, 5.0);
    }
  }
}

TEST(ReportModels, DisplayNamesAreIdsOrFileNamesNotPaths) {
  auto n = display_model_names({"smollm2-135m-instruct", "Qwen/Qwen3-4B", "/data/mirror/models/stories260K-hf/",
                                "../weights/models/tiny.gguf", "models/x.gguf", "./ckpt"});
  EXPECT_EQ(n.at("smollm2-135m-instruct"), "smollm2-135m-instruct");  // built-in name
  EXPECT_EQ(n.at("Qwen/Qwen3-4B"), "Qwen/Qwen3-4B");                  // Hub repo id
  EXPECT_EQ(n.at("/data/mirror/models/stories260K-hf/"), "stories260K-hf");
  EXPECT_EQ(n.at("../weights/models/tiny.gguf"), "tiny.gguf");
  EXPECT_EQ(n.at("models/x.gguf"), "x.gguf");
  EXPECT_EQ(n.at("./ckpt"), "ckpt");
  // Paths with the same last component keep as many parent folders as tell them apart; a path
  // whose name equals another id's keeps its parent too.
  auto m = display_model_names({"/a/run1/model", "/a/run2/model", "/b/c/smollm2-135m-instruct", "smollm2-135m-instruct"});
  EXPECT_EQ(m.at("/a/run1/model"), "run1/model");
  EXPECT_EQ(m.at("/a/run2/model"), "run2/model");
  EXPECT_EQ(m.at("/b/c/smollm2-135m-instruct"), "c/smollm2-135m-instruct");
  EXPECT_EQ(m.at("smollm2-135m-instruct"), "smollm2-135m-instruct");
  auto same = display_model_names({"/x/m", "x/m/"});  // every component equal: the ids themselves
  EXPECT_EQ(same.at("/x/m"), "/x/m");
  EXPECT_EQ(same.at("x/m/"), "x/m/");
}

TEST(ReportModels, HeadingsAndRunTableShowModelNameMachineAndBackend) {
  auto p = temp_db("report_models");
  Store s(p);
  auto g = small_grid(3, 1);
  g.models = {{"/home/ci/.cache/kvbench/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "rev-abc"}};
  auto info = run_info("nightly-1");
  info.host = "runner-7";
  info.device = "AMD EPYC 7763 64-Core Processor";
  info.models = {{g.models[0].id, "rev-abc", std::string(64, 'a')}};
  info.run_key = default_run_key(info);
  fill(s, expand_grid(g), info);
  ReportOptions opt;
  opt.out_dir = out_dir("models");
  opt.cells.resamples = 100;
  auto files = write_report(s, opt);
  std::string html = slurp(files.html), md = slurp(files.markdown);
  EXPECT_NE(md.find("## SmolLM2-135M-Instruct.Q4_1.gguf — math"), std::string::npos) << md;
  EXPECT_EQ(md.find("/home/ci"), std::string::npos) << md;
  EXPECT_NE(md.find("| machine (host: device) | backend |"), std::string::npos) << md;
  EXPECT_NE(md.find("| runner-7: AMD EPYC 7763 64-Core Processor | cpu |"), std::string::npos) << md;
  EXPECT_NE(html.find("<h2 title=\"/home/ci/.cache/kvbench/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf\">"
                      "SmolLM2-135M-Instruct.Q4_1.gguf &mdash; math</h2>"),
            std::string::npos);
  EXPECT_NE(html.find("<td class=l>runner-7: AMD EPYC 7763 64-Core Processor</td><td class=l>cpu</td>"),
            std::string::npos);
  // cells.csv keeps the id as stored (data, not a heading).
  EXPECT_NE(slurp(files.csv).find("/home/ci/.cache/kvbench/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
            std::string::npos);
}

TEST(ReportCli, ReportMergeAndErrors) {
  KVB_REQUIRE_BINARY();
  auto items = expand_grid(small_grid(4, 2));
  auto a = temp_db("cli_a"), b = temp_db("cli_b"), m = temp_db("cli_m");
  {
    Store sa(a), sb(b);
    fill(sa, select_shard(items, {0, 2}), run_info(), {0, 2});
    fill(sb, select_shard(items, {1, 2}), run_info(), {1, 2});
  }
  std::string out;
  ASSERT_EQ(kvb::test::run_cli("merge " + m + " " + a + " " + b, &out), 0) << out;
  EXPECT_NE(out.find(std::to_string(items.size()) + " generations"), std::string::npos) << out;
  auto dir = out_dir("cli");
  ASSERT_EQ(kvb::test::run_cli("report --db " + m + " --out " + dir, &out), 0) << out;
  EXPECT_TRUE(std::filesystem::exists(dir + "/index.html"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/cells.csv"));
  // A corrupt database is named in the error, exit code 2.
  auto bad = temp_db("cli_bad");
  {
    std::ofstream f(bad);
    for (int i = 0; i < 2000; ++i) f << "garbage!";
  }
  EXPECT_EQ(kvb::test::run_cli("report --db " + bad + " --out " + dir, &out), 2) << out;
  EXPECT_NE(out.find(bad), std::string::npos) << out;
}

TEST(ReportPng, HeadlessChromiumRendersIndexHtml) {
  // bootstrap.sh --tests installs chromium, so CI (KVB_REQUIRE_ALL=1) renders in a real browser.
  KVB_REQUIRE(std::system("command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1") == 0,
              "chromium is not installed (Debian package `chromium`; ./bootstrap.sh --tests installs it)");
  auto p = temp_db("png");
  Store s(p);
  fill(s, expand_grid(small_grid(4, 2)), run_info());
  ReportOptions opt;
  opt.out_dir = out_dir("png");
  opt.cells.resamples = 200;
  auto files = write_report(s, opt);
  std::string png = opt.out_dir + "/report.png";
  std::string out;
  int rc = kvb::test::run_command(std::string(KVB_SOURCE_DIR) + "/tools/render_report_png.sh " + files.html + " " + png,
                                  &out);
  ASSERT_EQ(rc, 0) << out;
  std::string data = slurp(png);
  ASSERT_GT(data.size(), 1000u) << out;
  EXPECT_EQ(data.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}
