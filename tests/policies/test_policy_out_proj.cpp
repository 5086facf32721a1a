// The output-projection primitive (policy.h: LayerStep::out_proj_head, PolicyNeeds::out_proj;
// engine/backend/policy_driver.h out_proj_head) on the CPU backend, and CriticalKV's value weight
// built on it (scoring::value_out_l1): a policy that declares it reads each query head's columns of
// the layer's W_o exactly as the model holds them, one that does not gets none, and the weight
// equals a double-precision recomputation from the cached values. The CUDA side hands out the
// same host weights; `kvb_cuda_check decisions` runs criticalkv and criticaladakv on both paths.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "engine/engine.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"
#include "tests/support/model_sizes.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

class ProbePolicy : public Policy {
 public:
  using Fn = std::function<void(LayerStep&)>;
  ProbePolicy(Fn fn, bool declare) : fn_(std::move(fn)), declare_(declare) {}
  std::string name() const override { return "out-proj-test"; }
  nlohmann::json resolved_params() const override { return nlohmann::json::object(); }
  PolicyNeeds needs() const override { return {.host_kv = true, .out_proj = declare_}; }
  void on_layer_step(LayerStep& st) override { fn_(st); }

 private:
  Fn fn_;
  bool declare_;
};

std::shared_ptr<const Model> gqa_model() {
  return Model::random(
      test::resized(
          model_shape("qwen3-0.6b"),
          {.vocab = 256, .hidden = 64, .intermediate = 128, .layers = 2, .heads = 8, .kv_heads = 2, .head_dim = 16}),
      11);
}

void run(const std::shared_ptr<const Model>& m, ProbePolicy::Fn fn, bool declare) {
  EngineOptions eo;
  eo.prefill_chunk = 64;
  Engine e(m, eo, std::make_unique<ProbePolicy>(std::move(fn), declare));
  std::vector<int32_t> prompt(20);
  for (int i = 0; i < 20; ++i) prompt[i] = 3 + (i * 37) % 250;
  e.score(prompt, {5, 6});
}

TEST(PolicyOutProj, GivesEachQueryHeadsColumnsOfWo) {
  const auto m = gqa_model();
  const int H = static_cast<int>(m->config().hidden_size), D = static_cast<int>(m->config().head_dim),
            Hq = static_cast<int>(m->config().num_heads);
  int steps = 0;
  run(
      m,
      [&](LayerStep& st) {
        ASSERT_TRUE(st.out_proj_head);
        ++steps;
        const Mat& wo = m->layers()[st.layer].wo;
        ASSERT_TRUE(wo.f32);
        std::vector<float> out(static_cast<size_t>(H) * D);
        for (int hq = 0; hq < Hq; ++hq) {
          st.out_proj_head(hq, out.data());
          for (int i = 0; i < H; ++i)
            for (int d = 0; d < D; ++d)
              ASSERT_EQ(out[static_cast<size_t>(i) * D + d], wo.f32[static_cast<size_t>(i) * Hq * D + hq * D + d]);
        }
        EXPECT_THROW(st.out_proj_head(Hq, out.data()), Error);
      },
      true);
  EXPECT_GT(steps, 0);
}

TEST(PolicyOutProj, OnlyADeclaringPolicyGetsIt) {
  const auto m = gqa_model();
  run(
      m,
      [](LayerStep& st) {
        EXPECT_FALSE(st.out_proj_head);
        EXPECT_THROW(scoring::value_out_l1(st, 0, "probe"), Error);
      },
      false);
}

TEST(PolicyOutProj, ValueWeightIsTheGroupMeanOfL1NormsOfWoV) {
  const auto m = gqa_model();
  const int H = static_cast<int>(m->config().hidden_size), D = static_cast<int>(m->config().head_dim),
            Hq = static_cast<int>(m->config().num_heads), Hkv = static_cast<int>(m->config().num_kv_heads);
  const int G = Hq / Hkv;
  run(
      m,
      [&](LayerStep& st) {
        const Mat& wo = m->layers()[st.layer].wo;
        for (int h = 0; h < Hkv; ++h) {
          const std::vector<float> got = scoring::value_out_l1(st, h, "probe");
          const int32_t L = st.cache->length(st.seq, st.layer, h);
          ASSERT_EQ(static_cast<int32_t>(got.size()), L);
          for (int32_t t = 0; t < L; ++t) {
            const float* v = st.cache->value(st.seq, st.layer, h, t);
            double want = 0;
            for (int g = 0; g < G; ++g)
              for (int i = 0; i < H; ++i) {
                double y = 0;
                for (int d = 0; d < D; ++d) y += wo.f32[static_cast<size_t>(i) * Hq * D + (h * G + g) * D + d] * v[d];
                want += std::fabs(y);
              }
            want /= G;
            ASSERT_NEAR(got[t], want, 1e-5 * want + 1e-7) << "layer " << st.layer << " head " << h << " token " << t;
          }
        }
      },
      true);
}

}  // namespace
}  // namespace kvb
