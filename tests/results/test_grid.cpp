// Grid expansion, content keys and sharding (results/grid.h, engine/util/hash.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "engine/util/error.h"
#include "engine/util/hash.h"
#include "results/grid.h"

using namespace kvb::results;
using kvb::sha256_hex;

TEST(Sha256, FipsVectors) {
  // FIPS 180-4 / NIST example vectors.
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Grid, KeyMatchesPythonReference) {
  // Expected values from Python: hashlib.sha256 over json.dumps(sort_keys=True,
  // separators=(',', ':')) of the documented key object; the seed from the documented
  // derivation (see results/grid.h).
  GridSpec g;
  g.models = {{"m", "r1"}};
  g.policies = {{"snapkv", {{"window", 8}}, true}};
  g.budgets = {64};
  g.examples = {{"math", "ex0", "What is 0+1?"}};
  g.samples = 2;
  g.sampling.temperature = 0.7;
  g.seed = 42;
  auto items = expand_grid(g);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[1].seed, 2402022535118562773ULL);
  EXPECT_EQ(items[1].key, "7c6d38fec4a95a9b46b8446f5e03653ec976e7f2d7366a05a95e663fb1650fe3");
  EXPECT_EQ(items[1].policy_label, "snapkv{\"window\":8}");
}

static GridSpec grid(int models, int examples, int samples) {
  GridSpec g;
  for (int m = 0; m < models; ++m) g.models.push_back({"model" + std::to_string(m), "rev"});
  g.policies = {{"full", nlohmann::json::object(), false},
                {"snapkv", nlohmann::json::object(), true},
                {"rkv", {{"lambda", 0.1}}, true}};
  g.budgets = {64, 128, 512};
  for (int e = 0; e < examples; ++e)
    g.examples.push_back({e % 2 ? "gsm8k" : "math", "e" + std::to_string(e), "p" + std::to_string(e)});
  g.samples = samples;
  return g;
}

TEST(Grid, ExpansionCounts) {
  for (auto [m, e, s] : {std::tuple{1, 1, 1}, {2, 5, 4}, {3, 7, 2}}) {
    auto items = expand_grid(grid(m, e, s));
    // models * (budgeted policies * budgets + budget-free policies) * examples * samples
    EXPECT_EQ(items.size(), static_cast<size_t>(m * (2 * 3 + 1) * e * s));
    std::set<std::string> keys;
    for (const auto& it : items) keys.insert(it.key);
    EXPECT_EQ(keys.size(), items.size()) << "content keys must be unique";
    size_t full = std::count_if(items.begin(), items.end(), [](const WorkItem& w) { return w.policy == "full"; });
    EXPECT_EQ(full, static_cast<size_t>(m * e * s));
    for (const auto& it : items)
      if (it.policy == "full") {
        EXPECT_EQ(it.budget, kNoBudget);
      }
  }
}

TEST(Grid, SeedsPairAcrossPoliciesAndKeysCoverEveryField) {
  auto items = expand_grid(grid(2, 3, 2));
  std::map<std::tuple<std::string, std::string, int>, std::set<uint64_t>> seeds;
  for (const auto& it : items) seeds[{it.task, it.example_id, it.sample_index}].insert(it.seed);
  for (const auto& [k, s] : seeds) EXPECT_EQ(s.size(), 1u) << "one seed per (example, sample)";
  EXPECT_NE(items[0].seed, items[1].seed);

  WorkItem base = items[0];
  auto changed = [&](auto mutate) {
    WorkItem w = base;
    mutate(w);
    return work_item_key(w) != base.key;
  };
  EXPECT_EQ(work_item_key(base), base.key);
  EXPECT_TRUE(changed([](WorkItem& w) { w.model_revision = "other"; }));
  EXPECT_TRUE(changed([](WorkItem& w) { w.policy_params = {{"window", 4}}; }));
  EXPECT_TRUE(changed([](WorkItem& w) { w.budget = 99; }));
  EXPECT_TRUE(changed([](WorkItem& w) { w.sampling["temperature"] = 1.0; }));
  EXPECT_TRUE(changed([](WorkItem& w) { w.prompt_sha256 = sha256_hex("x"); }));
  EXPECT_TRUE(changed([](WorkItem& w) { w.sample_index = 7; }));
  EXPECT_TRUE(changed([](WorkItem& w) { w.seed = 7; }));
}

TEST(Grid, RejectsBadSpecs) {
  auto g = grid(1, 2, 1);
  g.budgets = {64, 64};
  EXPECT_THROW(expand_grid(g), kvb::Error);
  g = grid(1, 2, 1);
  g.samples = 0;
  EXPECT_THROW(expand_grid(g), kvb::Error);
  g = grid(1, 2, 1);
  g.budgets = {0};
  EXPECT_THROW(expand_grid(g), kvb::Error);
  g = grid(1, 2, 1);
  g.examples.push_back(g.examples[0]);
  EXPECT_THROW(expand_grid(g), kvb::Error);
  g = grid(1, 2, 1);
  g.policies.push_back(g.policies[1]);
  EXPECT_THROW(expand_grid(g), kvb::Error);
}

TEST(Shard, ParseAndResolve) {
  auto s = parse_shard("2/5");
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 5);
  EXPECT_THROW(parse_shard("5/5"), kvb::Error);
  EXPECT_THROW(parse_shard("1/0"), kvb::Error);
  EXPECT_THROW(parse_shard("a/3"), kvb::Error);
  EXPECT_THROW(parse_shard("3"), kvb::Error);
  EXPECT_THROW(parse_shard("-1/3"), kvb::Error);

  std::map<std::string, std::string> env;
  EnvLookup look = [&](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  EXPECT_EQ(resolve_shard(std::nullopt, look).count, 1);
  env = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}};
  EXPECT_EQ(resolve_shard(std::nullopt, look).index, 1);
  EXPECT_EQ(resolve_shard(std::nullopt, look).count, 4);
  env["SLURM_PROCID"] = "3";
  env["SLURM_NTASKS"] = "8";  // Slurm wins over Open MPI
  EXPECT_EQ(resolve_shard(std::nullopt, look).index, 3);
  EXPECT_EQ(resolve_shard(std::nullopt, look).count, 8);
  EXPECT_EQ(resolve_shard(std::string("0/2"), look).count, 2);  // --shard wins over both
  env["SLURM_PROCID"] = "9";
  try {
    resolve_shard(std::nullopt, look);
    FAIL() << "expected an error";
  } catch (const kvb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_PROCID"), std::string::npos) << e.what();
  }
}

TEST(Shard, DeterministicBalancedPartition) {
  auto items = expand_grid(grid(2, 5, 3));  // 210 items
  const int n = 4;
  std::vector<std::vector<WorkItem>> parts;
  for (int i = 0; i < n; ++i) parts.push_back(select_shard(items, {i, n}));
  std::set<std::string> all;
  size_t total = 0, mn = SIZE_MAX, mx = 0;
  for (const auto& p : parts) {
    for (const auto& it : p) all.insert(it.key);
    total += p.size();
    mn = std::min(mn, p.size());
    mx = std::max(mx, p.size());
  }
  EXPECT_EQ(total, items.size()) << "shards are disjoint";
  EXPECT_EQ(all.size(), items.size()) << "shards cover the grid";
  EXPECT_LE(mx - mn, 1u) << "balanced to within one item";
  // Independent of the input order.
  auto shuffled = items;
  std::mt19937 rng(1);
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  for (int i = 0; i < n; ++i) {
    auto a = parts[i], b = select_shard(shuffled, {i, n});
    std::set<std::string> ka, kb;
    for (auto& x : a) ka.insert(x.key);
    for (auto& x : b) kb.insert(x.key);
    EXPECT_EQ(ka, kb);
  }
}
