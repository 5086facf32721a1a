// SeerAttention-R (engine/policies/seerattn_r.cpp; docs/policies.md#seerattn_r) end to end on the
// tiny random-weight models: the goldens of tools/gen_seerattn_goldens.py restate the AttnGate
// (pooled gate query, max/min/avg-pooled block keys, RMSNorm, RoPE at the block's first token for
// prompt blocks and at the completing token for decode blocks), the token-budget block top-k with
// the newest block always read, and the block-sparse attention, in float64 (prompt 90 tokens, 45
// teacher-forced decode steps, block 16, budget 48: 3 blocks + the newest). kvbench must read
// exactly those blocks at every decode step, layer and kv head, and give the same logits, whatever
// --prefill-chunk, batch composition and checkpoint layout (.pth in a released-style directory,
// .safetensors file).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/policies/gate_weights.h"
#include "engine/policies/policy.h"
#include "tests/policies/harness.h"
#include "tests/support/model_goldens.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const json& golden(const std::string& model) { return test::model_golden("policies/seerattn_goldens.json", model); }

/// [decode step][layer][kv head] → blocks read.
using Reads = std::vector<std::vector<std::vector<std::vector<int32_t>>>>;

/// Forwards everything to the policy under test and records, per decode step, the blocks each
/// (layer, kv head) reads (every block when the policy leaves the spans empty). Checks that the
/// G query heads of a kv head read the same spans (one selection per kv head).
class Recorder : public Policy {
 public:
  Recorder(std::unique_ptr<Policy> p, int block, Reads* out) : p_(std::move(p)), block_(block), out_(out) {}
  std::string name() const override { return p_->name(); }
  nlohmann::json resolved_params() const override { return p_->resolved_params(); }
  PolicyNeeds needs() const override { return p_->needs(); }
  void on_layer_step(LayerStep& s) override { p_->on_layer_step(s); }
  void on_step_end(StepEnd& s) override { p_->on_step_end(s); }
  void on_sequence_begin(SeqId s, uint64_t seed) override { p_->on_sequence_begin(s, seed); }
  void on_sequence_end(SeqId s) override { p_->on_sequence_end(s); }
  void select_reads(ReadStep& st) override {
    p_->select_reads(st);
    if (st.layer == 0) out_->emplace_back(st.num_layers, std::vector<std::vector<int32_t>>(st.num_kv_heads));
    const int G = st.num_q_heads / st.num_kv_heads;
    for (int h = 0; h < st.num_kv_heads; ++h) {
      const int32_t L = st.cache->length(st.seq, st.layer, h);
      std::vector<int32_t>& blocks = out_->back()[st.layer][h];
      if (st.spans.empty()) {
        for (int32_t b = 0; b * block_ < L; ++b) blocks.push_back(b);
        continue;
      }
      for (int g = 1; g < G; ++g) EXPECT_EQ(st.spans[h * G + g], st.spans[h * G]) << "kv head " << h;
      for (auto [b, e] : st.spans[h * G]) {
        EXPECT_EQ(b % block_, 0);
        EXPECT_TRUE(e % block_ == 0 || e == L) << "span end " << e << " of " << L;
        for (int32_t x = b / block_; x * block_ < e; ++x) blocks.push_back(x);
      }
    }
  }

 private:
  std::unique_ptr<Policy> p_;
  int block_;
  Reads* out_;
};

std::vector<float> run(std::shared_ptr<const Model> m, const std::string& spec, const json& g, int chunk, Reads* reads,
                       GenerationResult* r = nullptr) {
  EngineOptions eo;
  eo.prefill_chunk = chunk;
  auto p = std::make_unique<Recorder>(make_policy(PolicySpec::parse(spec, g["budget"].get<int64_t>())),
                                      g["block"].get<int>(), reads);
  Engine e(m, eo, std::move(p));
  return e.score(g["prompt"].get<std::vector<int32_t>>(), g["forced"].get<std::vector<int32_t>>(), r);
}

class SeerAttnGoldens : public ::testing::TestWithParam<std::string> {};

TEST_P(SeerAttnGoldens, BlocksReadAndLogitsMatchTheFloat64RestatementForEveryChunkingAndLayout) {
  const json& g = golden(GetParam());
  auto m = Model::load_dir(test::fixture(GetParam()));
  const Reads want = g["reads"].get<Reads>();
  const auto forced = g["forced"].get<std::vector<int32_t>>();
  ASSERT_EQ(want.size(), forced.size());
  const int P = static_cast<int>(g["prompt"].size());
  const int V = m->config().vocab_size;
  // The golden must exercise the selection: sparse steps in every layer, some with the newest
  // block outside the top-k (k + 1 blocks) and some with it inside (k blocks).
  int sparse = 0, with_extra = 0, without_extra = 0;
  const int B = g["block"].get<int>(), k = g["budget"].get<int>() / B;
  for (size_t s = 0; s < want.size(); ++s) {
    const size_t n_blocks = (P + s + 1 + B - 1) / B;
    for (const auto& ly : want[s])
      for (const auto& hd : ly)
        if (hd.size() < n_blocks) {
          ++sparse;
          (static_cast<int>(hd.size()) == k + 1 ? with_extra : without_extra)++;
        }
  }
  EXPECT_GT(sparse, 50);
  EXPECT_GT(with_extra, 0);
  EXPECT_GT(without_extra, 0);
  const std::string dir = test::fixture(g["gates"].get<std::string>());
  // Layouts: the released one (attn_gate_weights.pth + config.json), a directory holding a
  // .safetensors file and the config, and (for the released gate type, whose architecture the
  // shapes tell) the bare .safetensors file with the block size given.
  const fs::path st_dir = fs::temp_directory_path() / ("kvb_seerattn_st_" + std::to_string(m->config().head_dim));
  fs::remove_all(st_dir);
  fs::create_directories(st_dir);
  fs::copy_file(dir + "/gates.safetensors", st_dir / "gates.safetensors");
  fs::copy_file(dir + "/config.json", st_dir / "config.json");
  std::vector<std::string> specs = {"gates=" + dir, "gates=" + st_dir.string()};
  if (GetParam() == "models/tiny-qwen3") specs.push_back("block_size=16,gates=" + dir + "/gates.safetensors");
  for (const std::string& gates : specs) {
    for (int chunk : {7, 16, 64, P}) {
      SCOPED_TRACE(gates + ", prefill chunk " + std::to_string(chunk));
      Reads got;
      const auto logits = run(m, "seerattn_r:" + gates, g, chunk, &got);
      ASSERT_EQ(got.size(), want.size());
      for (size_t s = 0; s < want.size(); ++s)
        for (size_t l = 0; l < want[s].size(); ++l)
          for (size_t h = 0; h < want[s][l].size(); ++h)
            ASSERT_EQ(got[s][l][h], want[s][l][h]) << "step " << s << " layer " << l << " kv head " << h;
      const auto steps = g["logit_steps"].get<std::vector<int>>();
      for (size_t i = 0; i < steps.size(); ++i) {
        const auto ref = g["logits"][i].get<std::vector<double>>();
        double mx = 0, err = 0;
        for (int v = 0; v < V; ++v) {
          mx = std::max(mx, std::fabs(ref[v]));
          err = std::max(err, std::fabs(logits[static_cast<size_t>(steps[i]) * V + v] - ref[v]));
        }
        EXPECT_LT(err / mx, 2e-4) << "logits after forced token " << steps[i];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, SeerAttnGoldens, test::golden_models(), test::model_test_name);

TEST(SeerAttnR, KeepsTheWholeCacheAndReadsLess) {
  const json& g = golden("models/tiny-qwen3");
  auto m = Model::load_dir(test::fixture("models/tiny-qwen3"));
  Reads reads;
  GenerationResult full, seer, start;
  EngineOptions eo;
  eo.prefill_chunk = 32;
  {
    Engine e(m, eo, nullptr);
    e.score(g["prompt"].get<std::vector<int32_t>>(), g["forced"].get<std::vector<int32_t>>(), &full);
  }
  const std::string dir = test::fixture(g["gates"].get<std::string>());
  run(m, "seerattn_r:gates=" + dir, g, 32, &reads, &seer);
  EXPECT_EQ(seer.evictions, 0);
  EXPECT_EQ(seer.kv_bytes_peak, full.kv_bytes_peak);
  // Bytes read: per step, layer and kv head, the tokens of the blocks read (the last one partial).
  const auto& cfg = m->config();
  const int B = g["block"].get<int>(), P = static_cast<int>(g["prompt"].size());
  int64_t want = 0;
  for (size_t s = 0; s < reads.size(); ++s) {
    const int32_t L = P + static_cast<int32_t>(s) + 1;
    for (const auto& ly : reads[s])
      for (const auto& hd : ly)
        for (int32_t b : hd) want += std::min(L, (b + 1) * B) - b * B;
  }
  EXPECT_EQ(seer.kv_read_bytes, want * 2 * cfg.head_dim * static_cast<int64_t>(sizeof(float)));
  EXPECT_LT(seer.kv_read_bytes, full.kv_read_bytes);
  // start_layer = the layer count: every layer dense, the full cache's logits and bytes exactly.
  Reads none;
  const auto dense =
      run(m, "seerattn_r:start_layer=" + std::to_string(cfg.num_layers) + ",gates=" + dir, g, 32, &none, &start);
  EXPECT_EQ(start.kv_read_bytes, full.kv_read_bytes);
  Engine e(m, eo, nullptr);
  EXPECT_EQ(dense, e.score(g["prompt"].get<std::vector<int32_t>>(), g["forced"].get<std::vector<int32_t>>()));
}

TEST(SeerAttnR, BatchCompositionDoesNotChangeTheOutput) {
  // Random gates on tiny-llama3, greedy: each request alone, then all three in one batch
  // (different prompt lengths, so blocks complete at different steps in each sequence).
  auto m = Model::load_dir(test::fixture("models/tiny-llama3"));
  const json& g = golden("models/tiny-llama3");
  const auto base = g["prompt"].get<std::vector<int32_t>>();
  std::vector<GenerationRequest> reqs(3);
  for (int i = 0; i < 3; ++i) {
    reqs[i].prompt.assign(base.begin(), base.begin() + 40 + 23 * i);
    reqs[i].max_new_tokens = 70;
  }
  const std::string spec = "seerattn_r:random_gates=3,block_size=16";
  EngineOptions eo;
  eo.prefill_chunk = 32;
  std::vector<GenerationResult> alone;
  for (const auto& r : reqs) {
    Engine e(m, eo, make_policy(PolicySpec::parse(spec, 32)));
    alone.push_back(e.generate({r}, nullptr).at(0));
  }
  eo.max_batch = 3;
  Engine e(m, eo, make_policy(PolicySpec::parse(spec, 32)));
  const auto together = e.generate(reqs, nullptr);
  GenerationResult full;
  {
    Engine f(m, eo, nullptr);
    full = f.generate({reqs[2]}, nullptr).at(0);
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(together[i].kv_read_bytes, alone[i].kv_read_bytes) << "request " << i;
  }
  EXPECT_LT(alone[2].kv_read_bytes, full.kv_read_bytes);
}

// Without weights: PolicyRegistry.NeedsWeightsIsTrueExactlyWhenThePolicyRefusesToRunWithoutThem.
TEST(SeerAttnR, WithoutBudgetOrWithABadStartLayerIsOneClearError) {
  EXPECT_TRUE(test::contains_all(test::policy_error("seerattn_r:random_gates=1", 0), {"budget"}));
  EXPECT_TRUE(test::contains_all(test::policy_error("seerattn_r:random_gates=1,start_layer=-1", 64), {"start_layer"}));
}

/// A copy of the tiny-qwen3 gate directory with `edit` applied to its config.json.
std::string edited_copy(const std::string& tag, const std::function<void(json&)>& edit) {
  const json& g = golden("models/tiny-qwen3");
  const fs::path dir = fs::temp_directory_path() / ("kvb_seerattn_" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string src = test::fixture(g["gates"].get<std::string>());
  fs::copy_file(src + "/attn_gate_weights.pth", dir / "attn_gate_weights.pth");
  json cfg = parse_json_file(src + "/config.json");
  edit(cfg);
  std::ofstream(dir / "config.json") << cfg.dump();
  return dir.string();
}

TEST(SeerAttnR, CheckpointForAnotherModelOrGateTypeIsRefusedByItsConfig) {
  const json& g = golden("models/tiny-qwen3");
  auto m = Model::load_dir(test::fixture("models/tiny-qwen3"));
  Reads reads;
  const std::string other = edited_copy("other_model", [](json& c) { c["num_key_value_heads"] = 8; });
  std::string e = test::input_error_of([&] { run(m, "seerattn_r:gates=" + other, g, 64, &reads); });
  EXPECT_NE(e.find("num_key_value_heads"), std::string::npos) << e;
  const std::string type = edited_copy("bad_type", [](json& c) { c["seerattn_k_seq_pooling_type"] = "Kminmax"; });
  e = test::input_error_of([&] { run(m, "seerattn_r:gates=" + type, g, 64, &reads); });
  EXPECT_NE(e.find("seerattn_k_seq_pooling_type"), std::string::npos) << e;
  // The config says Qavgproj: the Qproj tensor of the checkpoint has the wrong shape.
  const std::string q = edited_copy("q_type", [](json& c) { c["seerattn_q_head_pooling_type"] = "Qavgproj"; });
  e = test::input_error_of([&] { run(m, "seerattn_r:gates=" + q, g, 64, &reads); });
  EXPECT_NE(e.find("attngate_linear_q.weight"), std::string::npos) << e;
  // A bare weights file with two pools per key: which two only the config says.
  const json& gl = golden("models/tiny-llama3");
  auto ml = Model::load_dir(test::fixture("models/tiny-llama3"));
  const std::string bare = test::fixture(gl["gates"].get<std::string>()) + "/gates.safetensors";
  e = test::input_error_of([&] { run(ml, "seerattn_r:block_size=16,gates=" + bare, gl, 64, &reads); });
  EXPECT_NE(e.find("seerattn_k_seq_pooling_type"), std::string::npos) << e;
  EXPECT_NE(e.find(bare), std::string::npos) << e;
}

}  // namespace
}  // namespace kvb
