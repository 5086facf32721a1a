// Every policy inside the real engine on stories260K (tests/data/models/stories260K-hf), 200 decode
// steps each (issue 4, "Checks"): per (layer, kv_head) length ≤ budget + buffer after every step,
// the K+V byte peak within the bound from the shapes, budget ≥ sequence length ⇒ tokens identical
// to `full`, and the same seed ⇒ identical sampled output twice. The Registry* tests run every
// registered policy from its registry entry alone (PolicyInfo::tests), so a new policy is covered
// without editing this file; cases() adds parameter variants with policy-specific bounds.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "harness.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

const std::string& kDir = test::kStoriesDir;
using test::stories;

struct Case {
  std::string spec;
  int64_t budget;
  int64_t bound;  ///< max tokens per (layer, kv_head) after any step
};

// Budget 32, buffer 16 unless stated: 220 tokens => many compressions in 200 steps.
std::vector<Case> cases() {
  return {
      {"streamingllm:buffer=16", 32, 48},
      {"streamingllm", 32, 160},  // default buffer 128
      {"h2o:buffer=16", 32, 48},
      {"h2o:buffer=1", 32, 33},
      {"snapkv:buffer=16,gqa=max", 32, 48},
      {"snapkv:buffer=16,window=8,kernel=5,pool=avg,gqa=mean", 32, 48},
      {"snapkv:buffer=16", 32, 48},  // default gqa=max_logits: needs LayerStep::window_queries
      {"pyramidkv:buffer=16,window=8", 32, 2 * 32 + 16},
      {"rkv:buffer=16", 32, 48},
      {"keydiff:buffer=16", 32, 48},
      {"gkv:buffer=16", 32, 48},
      {"gkv:buffer=16,form=sum,redundancy=false", 32, 48},
      {"trimkv:buffer=16,random_gates=3", 32, 48},
      {"trimkv:buffer=1,random_gates=3", 32, 33},
      {"random:buffer=16,seed=9", 32, 48},
      {"streamingllm:budget_kind=ratio,ratio=0.25,buffer=8", 0, 220 / 4 + 8},
      {"wgkv:random_gates=2,window=16", 0, 221},
      {"foresightkv:random_scorer=1,window=16,buffer=16", 32, 48},
      {"foresightkv:random_scorer=1,window=16,buffer=16,sample=false", 32, 48},
      {"tova:buffer=16", 32, 48},
      {"tova", 32, 33},  // default buffer 1: the paper's per-step eviction
      {"knorm:buffer=16", 32, 48},
      {"expected_attention:buffer=16", 32, 48},
      // AdaKV shares 4 x 32 tokens per layer among 4 kv heads: one head may hold all of them.
      {"adakv:buffer=16,window=8", 32, 4 * 32 + 16},
      {"duoattention:random_pattern=1,sinks=4,recent=28", 0, 221},  // retrieval heads keep everything
      {"morphkv:buffer=16,window=8", 32, 48},
      {"morphkv:window=8", 32, 33},
      // CAKE shares 5 x (32 - 8) selected tokens among 5 layers: one layer may hold all of them.
      {"cake:buffer=16,window=8", 32, 5 * (32 - 8) + 8 + 16},
  };
}

GenerationRequest request(uint64_t seed, float temperature) {
  GenerationRequest r;
  r.prompt = {1, 403, 407, 261, 378, 287, 398, 268, 395, 264, 327, 279, 259, 407, 261, 391, 288, 300, 425, 46};
  r.max_new_tokens = 200;
  r.seed = seed;
  r.sampling.temperature = temperature;
  return r;
}

TEST(PolicyEngine, LengthsStayWithinBudgetPlusBufferEveryStep) {
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  const auto& cfg = stories()->config();
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.spec);
    Engine e(stories(), {}, make_policy(PolicySpec::parse(c.spec, c.budget)));
    int64_t steps = 0, max_len = 0;
    e.on_step = [&](const KVCache& kv, SeqId s) {
      ++steps;
      for (int l = 0; l < kv.config().num_layers; ++l)
        for (int h = 0; h < kv.config().num_kv_heads; ++h) {
          ASSERT_LE(kv.length(s, l, h), c.bound) << "layer " << l << " head " << h << " step " << steps;
          max_len = std::max<int64_t>(max_len, kv.length(s, l, h));
        }
    };
    // Every policy runs: a signal the engine does not provide (e.g. "window_queries is not set")
    // is an error of this test, never a skip.
    const std::vector<GenerationResult> res = e.generate({request(0, 0.0f)}, nullptr);
    ASSERT_EQ(res[0].tokens.size(), 200u);
    EXPECT_EQ(steps, 200);
    if (c.spec.rfind("wgkv", 0) != 0) {
      EXPECT_GT(res[0].evictions, 0);
      // K+V bytes never exceed the bound from the shapes: layers x kv_heads x (bound + the
      // in-step token) x 2 x head_dim x 4 bytes.
      const size_t bound_bytes =
          static_cast<size_t>(cfg.num_layers) * cfg.num_kv_heads * (c.bound + 1) * 2 * cfg.head_dim * sizeof(float);
      EXPECT_LE(res[0].kv_token_bytes_peak, bound_bytes);
    }
    EXPECT_GT(max_len, 0);
  }
}

TEST(PolicyEngine, SameSeedSameSampledOutput) {
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.spec);
    std::vector<std::vector<int32_t>> outs;
    for (int rep = 0; rep < 2; ++rep) {
      Engine e(stories(), {}, make_policy(PolicySpec::parse(c.spec, c.budget)));
      outs.push_back(e.generate({request(42, 1.0f)}, nullptr)[0].tokens);
    }
    EXPECT_EQ(outs[0], outs[1]);
  }
}

// Every registered policy (except those needing fidelity's two-pass trace: test_policy_oracle)
// at a small budget: it runs 200 steps, evicts exactly when its entry says so, keeps the whole
// cache's token count bounded by layers × kv_heads × (budget + buffer + 1) when it takes a budget
// (the buffer of a policy that compresses every `interval` steps: interval − 1),
// and repeats its sampled output for the same seed.
TEST(PolicyEngine, RegistryEveryPolicyRunsEvictsAsDeclaredAndRepeatsItsSamples) {
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  int ran = 0;
  for (const auto& info : policy_registry()) {
    if (info.tests.needs_trace) continue;
    SCOPED_TRACE(info.name);
    const int64_t budget = info.test_budget(32);
    bool has_buffer = false;
    for (const auto& p : info.params) has_buffer |= p.key == "buffer";
    const bool set_buffer = has_buffer && info.tests.params.find("buffer=") == std::string::npos;
    const PolicySpec spec = info.test_spec(budget, set_buffer ? "buffer=16" : "");
    const nlohmann::json resolved = make_policy(spec)->resolved_params();
    int64_t buffer = set_buffer ? 16 : resolved.value("buffer", int64_t{0});
    // A policy that compresses once every `interval` decode steps (cam, as kvpress's
    // compression_interval) holds up to interval - 1 tokens above its budget in between.
    if (resolved.contains("interval")) buffer += resolved["interval"].get<int64_t>() - 1;
    Engine e(stories(), {}, make_policy(spec));
    int64_t max_total = 0;
    e.on_step = [&](const KVCache& kv, SeqId s) {
      int64_t total = 0;
      for (int l = 0; l < kv.config().num_layers; ++l)
        for (int h = 0; h < kv.config().num_kv_heads; ++h) total += kv.length(s, l, h);
      max_total = std::max(max_total, total);
    };
    const auto res = e.generate({request(0, 0.0f)}, nullptr);
    ASSERT_EQ(res[0].tokens.size(), 200u);
    if (!info.tests.evicts || !info.tests.decode_evicts) {
      EXPECT_EQ(res[0].evictions, 0);  // a 20-token prompt: locret's chunked prefill never compresses it
    } else if (budget > 0 && budget + buffer < 200) {
      EXPECT_GT(res[0].evictions, 0);
    }
    if (budget > 0 && info.tests.evicts && info.tests.decode_evicts) {
      const auto& c = stories()->config();
      EXPECT_LE(max_total, int64_t{c.num_layers} * c.num_kv_heads * (budget + buffer + 1));
    }
    Engine e1(stories(), {}, make_policy(spec)), e2(stories(), {}, make_policy(spec));
    EXPECT_EQ(e1.generate({request(42, 1.0f)}, nullptr)[0].tokens, e2.generate({request(42, 1.0f)}, nullptr)[0].tokens);
    ++ran;
  }
  EXPECT_GE(ran, 22);
}

// A budget above the sequence length changes nothing, for every registered evicting policy that
// takes one (quest keeps the whole cache and reads whole pages only: it departs by design,
// docs/fidelity.md) and every parameter variant of cases() (ratio and admission policies, budget
// 0 there, have no token budget).
TEST(PolicyEngine, BudgetAboveSequenceLengthGivesFullCacheTokens) {
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  Engine full(stories(), {}, nullptr);
  const auto ref = full.generate({request(0, 0.0f)}, nullptr)[0].tokens;
  std::vector<PolicySpec> specs;
  for (const auto& info : policy_registry())
    if (!info.tests.needs_trace && info.tests.min_budget != 0 && info.tests.evicts)
      specs.push_back(info.test_spec(1024));
  for (const auto& c : cases())
    if (c.budget != 0) specs.push_back(PolicySpec::parse(c.spec, 1024));
  for (const auto& spec : specs) {
    SCOPED_TRACE(spec.to_string());
    Engine e(stories(), {}, make_policy(spec));
    const auto res = e.generate({request(0, 0.0f)}, nullptr);
    EXPECT_EQ(res[0].tokens, ref);
    EXPECT_EQ(res[0].evictions, 0);
  }
}

}  // namespace
}  // namespace kvb
