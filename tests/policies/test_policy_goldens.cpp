// Keep-sets of the policies on hand-built K, queries and gates vs the goldens of
// tools/gen_policy_goldens.py: kvpress 0.5.5 (StreamingLLM, KeyDiff, SnapKV, PyramidKV) and torch
// re-statements of the seed formulas (R-KV, G-KV, TRIM-KV) and of the MorphKV and CAKE papers,
// computed in float64.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/policies/gate_weights.h"
#include "engine/policies/policies.h"
#include "engine/policies/policy.h"
#include "harness.h"

namespace kvb {
namespace {

const nlohmann::json& goldens() {
  static nlohmann::json j = [] {
    std::ifstream in(std::string(KVB_SOURCE_DIR) + "/tests/fixtures/policies/policy_goldens.json");
    EXPECT_TRUE(in.good()) << "missing tests/fixtures/policies/policy_goldens.json";
    nlohmann::json r;
    in >> r;
    return r;
  }();
  return j;
}

std::vector<nlohmann::json> cases_with_prefix(const std::string& prefix) {
  std::vector<nlohmann::json> out;
  for (const auto& c : goldens()["cases"])
    if (c["name"].get<std::string>().rfind(prefix, 0) == 0) out.push_back(c);
  return out;
}

/// Runs the case's policy over its keys/queries as one prompt step and returns the keep-sets.
std::vector<std::vector<int32_t>> run_attention_case(const nlohmann::json& c, Policy& pol,
                                                     test::HandCache** out_hc = nullptr) {
  const int hq = c["num_q_heads"], hkv = c["num_kv_heads"], d = c["head_dim"], L = c["length"];
  const int layers = c["num_layers"], layer = c["layer"], w = c["window_queries"];
  static std::unique_ptr<test::HandCache> hc;
  hc = std::make_unique<test::HandCache>(layers, hq, hkv, d, pol.needs().num_scalars);
  const auto keys = c["keys"].get<std::vector<float>>();  // [Hkv, L, D]
  std::vector<float> tok(static_cast<size_t>(hkv) * d);
  for (int i = 0; i < L; ++i) {
    for (int h = 0; h < hkv; ++h)
      for (int e = 0; e < d; ++e) tok[h * d + e] = keys[(static_cast<size_t>(h) * L + i) * d + e];
    hc->append(layer, tok.data(), i);
  }
  hc->queries = c["queries"].get<std::vector<float>>();
  hc->qw = w;
  LayerStep st = hc->step(layer, L, L, true, true);
  pol.on_layer_step(st);
  std::vector<std::vector<int32_t>> keep(hkv);
  for (int h = 0; h < hkv; ++h) {
    keep[h].resize(L);
    for (int i = 0; i < L; ++i) keep[h][i] = i;
  }
  for (auto& [h, k] : st.keeps) keep[h] = k;
  if (out_hc) {
    hc->apply(st);
    *out_hc = hc.get();
  }
  return keep;
}

void expect_keeps(const nlohmann::json& c, const std::vector<std::vector<int32_t>>& got) {
  const auto want = c["keep"].get<std::vector<std::vector<int32_t>>>();
  ASSERT_EQ(want.size(), got.size()) << c["name"];
  for (size_t h = 0; h < want.size(); ++h) EXPECT_EQ(want[h], got[h]) << c["name"] << " kv head " << h;
}

/// Runs every golden case whose name starts with `prefix` (at least `min_cases`) through its
/// policy spec and budget, checks the keep-sets, and calls `also(case, keep-sets)` for more checks.
void check_prefix(const std::string& prefix, size_t min_cases,
                  const std::function<void(const nlohmann::json&, const std::vector<std::vector<int32_t>>&)>& also = {}) {
  auto cs = cases_with_prefix(prefix);
  ASSERT_GE(cs.size(), min_cases) << prefix;
  for (const auto& c : cs) {
    auto pol = make_policy(PolicySpec::parse(c["spec"], c["budget"]));
    const auto keep = run_attention_case(c, *pol);
    expect_keeps(c, keep);
    if (also) also(c, keep);
  }
}

TEST(PolicyGoldens, StreamingLLMMatchesKvpress) { check_prefix("streamingllm_kvpress", 2); }
TEST(PolicyGoldens, KeyDiffMatchesKvpress) { check_prefix("keydiff_kvpress", 2); }
TEST(PolicyGoldens, SnapKVMatchesKvpress) { check_prefix("snapkv_kvpress", 3); }
TEST(PolicyGoldens, PyramidKVMatchesKvpressLayerBudgetsAndKeepSets) {
  check_prefix("pyramidkv_kvpress", 4, [](const nlohmann::json& c, const std::vector<std::vector<int32_t>>& keep) {
    for (const auto& k : keep) EXPECT_EQ(static_cast<int>(k.size()), c["layer_total"].get<int>()) << c["name"];
  });
}
TEST(PolicyGoldens, RKVMatchesReferenceFormula) { check_prefix("rkv_reference", 3); }

TEST(PolicyGoldens, GKVFirstCompressionMatchesReferenceAndStoresGlobalScore) {
  auto cs = cases_with_prefix("gkv_reference");
  ASSERT_EQ(cs.size(), 2u);
  for (const auto& c : cs) {
    auto pol = make_policy(PolicySpec::parse(c["spec"], c["budget"]));
    test::HandCache* hc = nullptr;
    auto keep = run_attention_case(c, *pol, &hc);
    expect_keeps(c, keep);
    // The kept older tokens carry their global score F = Ŝ (no history at the first compression).
    const auto glob = c["global_score"].get<std::vector<std::vector<float>>>();
    const int w = c["window_queries"];
    const int budget = c["budget"];
    for (size_t h = 0; h < keep.size(); ++h)
      for (int j = 0; j < budget; ++j) {
        const float* sc = hc->cache->scalars(hc->seq, c["layer"], static_cast<int>(h), j);
        if (j < budget - w) {
          EXPECT_EQ(sc[1], 1.f);
          EXPECT_NEAR(sc[0], glob[h][keep[h][j]], 1e-5) << c["name"] << " head " << h << " slot " << j;
        } else {
          EXPECT_EQ(sc[1], 0.f) << "window tokens keep no history";
        }
      }
  }
}

TEST(PolicyGoldens, TrimKVGatesAndKeepSetsMatchReference) {
  auto cs = cases_with_prefix("trimkv_reference");
  ASSERT_EQ(cs.size(), 2u);
  for (const auto& c : cs) {
    const int hkv = c["num_kv_heads"], H = c["hidden_size"], L = c["length"];
    GateWeights gw;
    const std::string p = "model.layers.0.self_attn.retention_gate.";
    gw.add(p + "linear1.weight", c["w1_shape"].get<std::vector<int64_t>>(), c["w1"].get<std::vector<float>>());
    gw.add(p + "linear1.bias", {c["w1_shape"][0].get<int64_t>()}, c["b1"].get<std::vector<float>>());
    gw.add(p + "linear2.weight", c["w2_shape"].get<std::vector<int64_t>>(), c["w2"].get<std::vector<float>>());
    gw.add(p + "bias", {hkv}, c["b"].get<std::vector<float>>());
    const std::string path =
        (std::filesystem::temp_directory_path() / ("kvb_trimkv_gates_" + c["name"].get<std::string>() + ".safetensors"))
            .string();
    save_gate_weights(gw, path);
    auto pol = make_policy(PolicySpec::parse(c["spec"].get<std::string>() + ",gates=" + path, c["budget"]));
    test::HandCache hc(1, hkv, hkv, 4, pol->needs().num_scalars);
    std::vector<float> zeros(static_cast<size_t>(hkv) * 4, 0.f);
    for (int i = 0; i < L; ++i) hc.append(0, zeros.data(), i);
    const auto x = c["layer_input"].get<std::vector<float>>();
    LayerStep st = hc.step(0, L, L, true, true);
    st.layer_input = x.data();
    st.hidden_size = H;
    pol->on_layer_step(st);
    const auto lb = c["log_beta"].get<std::vector<std::vector<float>>>();
    for (int h = 0; h < hkv; ++h)
      for (int i = 0; i < L; ++i)
        EXPECT_NEAR(hc.cache->scalars(hc.seq, 0, h, i)[0], lb[h][i], 2e-5) << c["name"] << " h" << h << " i" << i;
    std::vector<std::vector<int32_t>> keep(hkv);
    for (auto& [h, k] : st.keeps) keep[h] = k;
    expect_keeps(c, keep);
    std::filesystem::remove(path);
  }
}

TEST(PolicyGoldens, CakeAdjustBudgetsMatchesReference) {
  const auto& cs = goldens()["cake_adjust_budgets"];
  ASSERT_GE(cs.size(), 5u);
  bool capped = false;
  for (const auto& c : cs) {
    const auto want = c["want"].get<std::vector<int64_t>>();
    const int64_t seq_len = c["seq_len"];
    EXPECT_EQ(cake_adjust_budgets(c["raw"].get<std::vector<double>>(), c["total"], seq_len), want) << c.dump();
    for (int64_t b : want) capped |= b >= seq_len;
  }
  EXPECT_TRUE(capped) << "the cases must exercise the cap at seq_len";
}

TEST(PolicyGoldens, MorphKVMatchesReferenceFormula) { check_prefix("morphkv_reference", 3); }

// CAKE: every layer's indicator and preference are computed in its layer step; the layer budgets
// are allocated once all layers are seen (the step-end hook), which then compresses every layer.
TEST(PolicyGoldens, CakeLayerBudgetsAndKeepSetsMatchReferenceFormula) {
  auto cs = cases_with_prefix("cake_reference");
  ASSERT_GE(cs.size(), 2u);
  for (const auto& c : cs) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const int hq = c["num_q_heads"], hkv = c["num_kv_heads"], d = c["head_dim"], L = c["length"];
    const int layers = c["num_layers"], w = c["window_queries"];
    auto pol = make_policy(PolicySpec::parse(c["spec"], c["budget"]));
    test::HandCache hc(layers, hq, hkv, d, 0);
    std::vector<float> tok(static_cast<size_t>(hkv) * d);
    for (int l = 0; l < layers; ++l) {
      const auto keys = c["layers"][l]["keys"].get<std::vector<float>>();  // [Hkv, L, D]
      for (int i = 0; i < L; ++i) {
        for (int h = 0; h < hkv; ++h)
          for (int e = 0; e < d; ++e) tok[h * d + e] = keys[(static_cast<size_t>(h) * L + i) * d + e];
        hc.append(l, tok.data(), i);
      }
    }
    hc.qw = w;
    for (int l = 0; l < layers; ++l) {
      hc.queries = c["layers"][l]["queries"].get<std::vector<float>>();
      LayerStep st = hc.step(l, L, L, true, true);
      pol->on_layer_step(st);
      EXPECT_TRUE(st.keeps.empty()) << "layer " << l << " compressed before the budgets were allocated";
    }
    StepEnd se{.cache = hc.cache.get(),
               .seq = hc.seq,
               .num_layers = layers,
               .num_kv_heads = hkv,
               .n_new = L,
               .seq_len = L,
               .prefill = true,
               .prefill_last = true};
    pol->on_step_end(se);
    const auto want = c["keep"].get<std::vector<std::vector<std::vector<int32_t>>>>();
    const auto sel = c["layer_selected"].get<std::vector<int64_t>>();
    std::vector<std::vector<std::vector<int32_t>>> got(layers, std::vector<std::vector<int32_t>>(hkv));
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < hkv; ++h)
        for (int i = 0; i < L; ++i) got[l][h].push_back(i);
    for (auto& k : se.keeps) got[k.layer][k.head] = k.indices;
    int64_t total = 0;
    for (int l = 0; l < layers; ++l) {
      total += sel[l];
      for (int h = 0; h < hkv; ++h) {
        EXPECT_EQ(static_cast<int64_t>(got[l][h].size()), sel[l] + w) << "layer " << l << " head " << h;
        EXPECT_EQ(got[l][h], want[l][h]) << "layer " << l << " head " << h;
      }
    }
    EXPECT_EQ(total, (c["budget"].get<int64_t>() - w) * layers) << "the layers share the uniform total";
    EXPECT_NE(*std::min_element(sel.begin(), sel.end()), *std::max_element(sel.begin(), sel.end()))
        << "the case must give the layers different budgets";
  }
}

}  // namespace
}  // namespace kvb
