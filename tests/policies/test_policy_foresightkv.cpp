// ForesightKV plumbing on a hand-built cache (seed-foresightkv.md §5.5 "scorer plumbing parity"):
// a scorer whose only non-zero weight reads feature block 2 (the sum over the last-L window
// queries) of query head 0 with W2 = −1 makes priority = −GELU(window attention sum); with
// sample=false the policy must evict exactly the older tokens with the lowest window attention of
// query head 0, recomputed here from the queries and keys (softmax, causal).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include <gtest/gtest.h>

#include "engine/policies/gate_weights.h"
#include "engine/policies/policy.h"
#include "harness.h"

namespace kvb {
namespace {

TEST(PolicyForesightKV, DeterministicEvictionFollowsTheScorer) {
  const int Hq = 4, Hkv = 2, G = 2, D = 4, Lw = 4, B = 10, T = 14;  // T = B + L
  uint64_t s = 5;
  auto rnd = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int>((s >> 33) % 2001) - 1000) / 500.f;
  };
  const int in = 2 * D + 8 * G, H = 1;
  GateWeights gw;
  const std::string p = "model.layers.0.self_attn.judge_model.";
  std::vector<float> w1(Hkv * in * H, 0.f);
  for (int h = 0; h < Hkv; ++h) w1[(h * in + 2 * D + 2 * G + 0) * H] = 1.f;  // block 2 (sum over L), q-head 0
  gw.add(p + "fc1.weight", {Hkv, in, H}, w1);
  gw.add(p + "fc1.bias", {Hkv, H}, std::vector<float>(Hkv * H, 0.f));
  gw.add(p + "fc2.weight", {Hkv, H, 1}, std::vector<float>(Hkv * H, -1.f));
  gw.add(p + "fc2.bias", {Hkv}, std::vector<float>(Hkv, 0.f));
  const std::string path = (std::filesystem::temp_directory_path() / "kvb_fkv_scorer.safetensors").string();
  save_gate_weights(gw, path);
  auto pol = make_policy(PolicySpec::parse("foresightkv:window=4,buffer=4,sample=false,scorer=" + path, B));

  test::HandCache hc(1, Hq, Hkv, D, pol->needs().num_scalars);
  std::vector<float> keys(T * Hkv * D);
  for (auto& v : keys) v = rnd();
  for (int t = 0; t < T; ++t) hc.append(0, &keys[t * Hkv * D], t);
  hc.queries.resize(Hq * Lw * D);
  for (auto& v : hc.queries) v = rnd();
  hc.qw = Lw;
  LayerStep st = hc.step(0, 1, T, false, false);
  pol->on_layer_step(st);
  ASSERT_EQ(st.keeps.size(), static_cast<size_t>(Hkv));
  for (auto& [h, keep] : st.keeps) {
    std::vector<double> sum(T, 0.0);
    const int qh = h * G;  // query head 0 of the group
    for (int r = 0; r < Lw; ++r) {
      const int qpos = T - Lw + r;
      std::vector<double> lg(T, -INFINITY);
      for (int i = 0; i <= qpos; ++i) {
        double d = 0;
        for (int e = 0; e < D; ++e) d += double(hc.queries[(qh * Lw + r) * D + e]) * keys[(i * Hkv + h) * D + e];
        lg[i] = d / std::sqrt(double(D));
      }
      const double m = *std::max_element(lg.begin(), lg.end());
      double z = 0;
      for (double v : lg) z += std::exp(v - m);
      for (int i = 0; i < T; ++i) sum[i] += std::exp(lg[i] - m) / z;
    }
    std::vector<int32_t> older(T - Lw);
    std::iota(older.begin(), older.end(), 0);
    std::stable_sort(older.begin(), older.end(), [&](int a, int b) { return sum[a] > sum[b]; });
    std::vector<int32_t> want(older.begin(), older.begin() + (B - Lw));
    for (int i = T - Lw; i < T; ++i) want.push_back(i);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(keep, want) << "kv head " << h;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kvb
