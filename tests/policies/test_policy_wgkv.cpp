// WG-KV on a hand-built cache: the write gate g = σ(W2·GELU(W1·[RMSNorm(k_pre); RMSNorm(k_post)] +
// b1) + b2) is recomputed here in double precision from the tensors written to a safetensors file
// (seed-wgkv.md §1.2, §6 tensor layout), and after every decode step the cache must hold exactly
// the `window` − 1 newest tokens plus the older ones with g > tau (§1.5, §1.7): the next token is
// appended before it attends, so decode query t sees exactly {t−W+1 .. t} plus the admitted ones
// (issue 15: token t−W is promoted or dropped before query t attends).
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "engine/policies/gate_weights.h"
#include "engine/policies/policy.h"
#include "harness.h"

namespace kvb {
namespace {

TEST(PolicyWGKV, AdmitsExactlyWindowPlusGatedTokens) {
  const int Hkv = 2, D = 4, I = 3, W = 3, T = 14;
  const float tau = 0.5f;
  uint64_t s = 11;
  auto rnd = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int>((s >> 33) % 2001) - 1000) / 700.f;
  };
  GateWeights gw;
  const std::string p = "model.layers.0.self_attn.g_predictors.";
  std::vector<float> pre(D), post(D), w1(Hkv * I * 2 * D), b1(Hkv * I), w2(Hkv * I), b2(Hkv);
  for (auto* v : {&pre, &post, &w1, &b1, &w2, &b2})
    for (auto& x : *v) x = rnd();
  gw.add(p + "pre_key_norm.weight", {D}, pre);
  gw.add(p + "post_key_norm.weight", {D}, post);
  gw.add(p + "conv1.weight", {Hkv * I, 2 * D, 1}, w1);
  gw.add(p + "conv1.bias", {Hkv * I}, b1);
  gw.add(p + "conv2.weight", {Hkv, I, 1}, w2);
  gw.add(p + "conv2.bias", {Hkv}, b2);
  const std::string path = (std::filesystem::temp_directory_path() / "kvb_wgkv_gates.safetensors").string();
  save_gate_weights(gw, path);
  auto pol = make_policy(PolicySpec::parse("wgkv:window=3,tau=0.5,gates=" + path, 0));
  ASSERT_TRUE(pol->needs().keys_pre_rope);

  auto gate = [&](int h, const float* kpre, const float* kpost) {
    std::vector<double> x(2 * D);
    auto norm = [&](const float* v, const std::vector<float>& w, double* out) {
      double ss = 0;
      for (int d = 0; d < D; ++d) ss += double(v[d]) * v[d];
      const double inv = 1.0 / std::sqrt(ss / D + 1e-6);
      for (int d = 0; d < D; ++d) out[d] = v[d] * inv * w[d];
    };
    norm(kpre, pre, x.data());
    norm(kpost, post, x.data() + D);
    double out = b2[h];
    for (int r = 0; r < I; ++r) {
      double a = b1[h * I + r];
      for (int c = 0; c < 2 * D; ++c) a += double(w1[(h * I + r) * 2 * D + c]) * x[c];
      out += double(w2[h * I + r]) * 0.5 * a * (1 + std::erf(a / std::sqrt(2.0)));
    }
    return 1 / (1 + std::exp(-out));
  };

  test::HandCache hc(1, Hkv, Hkv, D, pol->needs().num_scalars);
  std::vector<std::vector<double>> g(Hkv);
  int admitted = 0, dropped = 0;
  for (int t = 0; t < T; ++t) {
    std::vector<float> kpost(Hkv * D), kpre(Hkv * D);
    for (auto& v : kpost) v = rnd();
    for (auto& v : kpre) v = rnd();
    hc.append(0, kpost.data(), t);
    for (int h = 0; h < Hkv; ++h) g[h].push_back(gate(h, &kpre[h * D], &kpost[h * D]));
    LayerStep st = hc.step(0, 1, t + 1, false, false);
    st.keys_pre_rope = kpre.data();
    pol->on_layer_step(st);
    hc.apply(st);
    for (int h = 0; h < Hkv; ++h) {
      std::vector<int32_t> want;
      for (int j = 0; j <= t; ++j)
        if (j > t + 1 - W || g[h][j] > tau) want.push_back(j);
      EXPECT_EQ(hc.positions(0, h), want) << "t=" << t << " h=" << h;
      for (int32_t i = 0; i < hc.cache->length(hc.seq, 0, h); ++i) {
        const int32_t pos = hc.cache->position(hc.seq, 0, h, i);
        EXPECT_NEAR(hc.cache->scalars(hc.seq, 0, h, i)[0], g[h][pos], 1e-5);
      }
    }
  }
  for (int h = 0; h < Hkv; ++h)
    for (int j = 0; j <= T - W; ++j) (g[h][j] > tau ? admitted : dropped)++;
  EXPECT_GT(admitted, 0);
  EXPECT_GT(dropped, 0);  // the case exercises both outcomes
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kvb
