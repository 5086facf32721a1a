// `restorekv` and its engine pieces (the restore pass: input-embedding rows and LoRA deltas;
// engine/policies/lora.h, PolicyNeeds::restore_pass): lora_add against a hand-computed case, PEFT
// adapter_config.json / adapter_model.safetensors parsing and its refusals, a forward over given
// embedding rows equal to the forward over the tokens whose rows they are, a zero LoRA equal to
// none, and the policy on stories260K (restore rows kept at the prompt's end, later tokens after
// them, the cut budget-matched). The kvpress golden is tests/kvpress
// (KvpressSmolLM2.RestorekvMatchesKvpressRestoreKVPress).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/plan.h"
#include "engine/policies/gate_weights.h"
#include "engine/policies/lora.h"
#include "engine/policies/policies.h"
#include "engine/util/io.h"
#include "tests/policies/harness.h"
#include "tests/support/stories.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

using nlohmann::json;

TEST(Lora, AddMatchesAHandComputedCase) {
  LoraMatrix m;
  m.rank = 1;
  m.in = 2;
  m.out = 2;
  m.scale = 0.5f;
  m.a = {1, 2};                     // A [1, 2]
  m.b = {3, 4};                     // B [2, 1]
  const float x[] = {1, 1, 2, -1};  // two rows: A x = 3, then 0
  float y[] = {1, 1, 10, 20};
  lora_add(m, x, 2, y);
  // row 0: y += 0.5 · B · 3 = [4.5, 6]; row 1: A x = 0, y unchanged.
  EXPECT_EQ(y[0], 5.5f);
  EXPECT_EQ(y[1], 7.0f);
  EXPECT_EQ(y[2], 10.0f);
  EXPECT_EQ(y[3], 20.0f);
}

/// A PEFT adapter_config.json for rank r on `targets` (with PEFT's other fields at their defaults).
json peft_config(int r, double alpha, std::vector<std::string> targets) {
  return json{{"peft_type", "LORA"},
              {"r", r},
              {"lora_alpha", alpha},
              {"target_modules", targets},
              {"bias", "none"},
              {"use_dora", false},
              {"use_rslora", false},
              {"modules_to_save", nullptr},
              {"rank_pattern", json::object()},
              {"alpha_pattern", json::object()},
              {"layers_to_transform", nullptr},
              {"fan_in_fan_out", false},
              {"loftq_config", json::object()},
              {"lora_dropout", 0.0}};
}

/// Tensors of a rank-r adapter on q_proj and down_proj of `layers` layers (hidden 4, q out 6,
/// down in 8), filled with 0.25.
GateWeights peft_tensors(int layers, int r) {
  GateWeights w;
  w.path = "adapter_model.safetensors";
  for (int l = 0; l < layers; ++l) {
    const std::string p = "base_model.model.model.layers." + std::to_string(l);
    w.add(p + ".self_attn.q_proj.lora_A.weight", {r, 4}, std::vector<float>(static_cast<size_t>(r) * 4, 0.25f));
    w.add(p + ".self_attn.q_proj.lora_B.weight", {6, r}, std::vector<float>(static_cast<size_t>(r) * 6, 0.25f));
    w.add(p + ".mlp.down_proj.lora_A.weight", {r, 8}, std::vector<float>(static_cast<size_t>(r) * 8, 0.25f));
    w.add(p + ".mlp.down_proj.lora_B.weight", {4, r}, std::vector<float>(static_cast<size_t>(r) * 4, 0.25f));
  }
  return w;
}

TEST(Lora, ReadsAPeftAdapter) {
  const LoraAdapter a = lora_adapter_from(peft_config(2, 8, {"q_proj", "down_proj"}), "c.json", peft_tensors(3, 2));
  ASSERT_EQ(a.layers.size(), 3u);
  ASSERT_NE(a.at(2, LoraTarget::kQ), nullptr);
  EXPECT_EQ(a.at(2, LoraTarget::kQ)->scale, 4.0f);  // lora_alpha / r
  EXPECT_EQ(a.at(1, LoraTarget::kDown)->in, 8);
  EXPECT_EQ(a.at(1, LoraTarget::kDown)->out, 4);
  EXPECT_EQ(a.at(0, LoraTarget::kV), nullptr);
  json rs = peft_config(4, 8, {"q_proj", "down_proj"});
  rs["use_rslora"] = true;
  EXPECT_EQ(lora_adapter_from(rs, "c.json", peft_tensors(1, 4)).at(0, LoraTarget::kQ)->scale, 4.0f);  // 8 / √4
}

TEST(Lora, RefusesWhatItDoesNotApply) {
  auto refused = [](const json& cfg, const GateWeights& w) {
    return test::error_of([&] { lora_adapter_from(cfg, "adapter_config.json", w); });
  };
  const json base = peft_config(2, 8, {"q_proj", "down_proj"});
  const GateWeights w = peft_tensors(2, 2);
  auto with = [&](const std::string& k, const json& v) {
    json c = base;
    c[k] = v;
    return c;
  };
  EXPECT_TRUE(test::contains_all(refused(with("use_dora", true), w), {"adapter_config.json: use_dora", "not supported"}));
  EXPECT_TRUE(test::contains_all(refused(with("bias", "all"), w), {"adapter_config.json: bias", "\"all\""}));
  EXPECT_TRUE(test::contains_all(refused(with("modules_to_save", json::array({"lm_head"})), w),
                                 {"adapter_config.json: modules_to_save"}));
  EXPECT_TRUE(test::contains_all(refused(with("rank_pattern", json{{"q_proj", 8}}), w), {"rank_pattern"}));
  EXPECT_TRUE(test::contains_all(refused(with("peft_type", "IA3"), w), {"peft_type", "'IA3'"}));
  EXPECT_TRUE(test::contains_all(refused(with("target_modules", "q_proj|v_proj"), w), {"target_modules"}));
  EXPECT_TRUE(test::contains_all(refused(with("target_modules", json::array({"q_proj", "embed_tokens"})), w),
                                 {"target_modules", "\"embed_tokens\": not a decoder-layer projection"}));
  EXPECT_TRUE(test::contains_all(refused(with("r", 0), w), {"adapter_config.json: r"}));
  // Tensors: a DoRA magnitude, a missing lora_B, a rank other than r, a target not configured.
  GateWeights dora = w;
  dora.add("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", {6}, std::vector<float>(6));
  EXPECT_TRUE(test::contains_all(refused(base, dora), {"lora_magnitude_vector", "not a LoRA weight"}));
  GateWeights no_b = w;
  no_b.tensors.erase("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
  EXPECT_TRUE(test::contains_all(refused(base, no_b), {"layers.1.mlp.down_proj.lora_B.weight", "missing"}));
  EXPECT_TRUE(test::contains_all(refused(with("r", 3), w), {"lora_A.weight", "not r = 3"}));
  EXPECT_TRUE(test::contains_all(refused(with("target_modules", json::array({"q_proj"})), w),
                                 {"down_proj is not in target_modules"}));
}

/// Logits of one prefill of `n` rows on a fresh cache of `m` (tokens, or given embedding rows),
/// through `lora` (may be null).
std::vector<float> prefill_logits(const Model& m, const std::vector<int32_t>& toks, const float* emb,
                                  const LoraAdapter* lora) {
  KVCache cache(kv_cache_config(m.config()));
  auto be = make_backend("cpu", m, cache);
  std::vector<ForwardItem> it(1);
  it[0].seq = cache.add_sequence();
  it[0].tokens = emb ? nullptr : toks.data();
  it[0].embeddings = emb;
  it[0].lora = lora;
  it[0].n = static_cast<int>(toks.size());
  it[0].prefill = it[0].prefill_last = true;
  std::vector<float> logits;
  be->forward(it, nullptr, logits);
  return logits;
}

TEST(RestorePass, EmbeddingRowsEqualTheirTokens) {
  KVB_REQUIRE_STORIES();
  auto m = test::stories_model();
  const int64_t H = m->config().hidden_size;
  const std::vector<int32_t> toks = {1, 17, 300, 42, 5, 99};
  std::vector<float> rows(toks.size() * static_cast<size_t>(H));
  for (size_t i = 0; i < toks.size(); ++i) m->embed_row(toks[i], &rows[i * H]);
  EXPECT_EQ(prefill_logits(*m, toks, rows.data(), nullptr), prefill_logits(*m, toks, nullptr, nullptr));
}

TEST(RestorePass, AZeroLoraChangesNothingAndAnotherDoes) {
  KVB_REQUIRE_STORIES();
  auto m = test::stories_model();
  const ModelConfig& c = m->config();
  const std::vector<int32_t> toks = {1, 17, 300, 42, 5, 99};
  const auto plain = prefill_logits(*m, toks, nullptr, nullptr);
  LoraAdapter a =
      random_lora_adapter(static_cast<int>(c.num_layers), c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, 2, 7);
  const auto drawn = prefill_logits(*m, toks, nullptr, &a);
  EXPECT_NE(drawn, plain);
  for (auto& layer : a.layers)
    for (auto& mat : layer) std::fill(mat.b.begin(), mat.b.end(), 0.0f);
  EXPECT_EQ(prefill_logits(*m, toks, nullptr, &a), plain);
  // Made for another model: refused naming the projection.
  LoraAdapter wide = random_lora_adapter(static_cast<int>(c.num_layers), c.hidden_size + 1, c.num_heads, c.num_kv_heads,
                                         c.head_dim, 2, 7);
  EXPECT_TRUE(test::contains_all(test::error_of([&] { prefill_logits(*m, toks, nullptr, &wide); }),
                                 {"LoRA adapter random_adapter=7", "layer 0 q_proj", "the model's is"}));
}

TEST(RestorePass, TheCudaBackendRefusesIt) {
  EXPECT_TRUE(test::contains_all(test::error_of([] { cuda::check_policy_support("restorekv", true); }),
                                 {"--backend cuda: policy 'restorekv': a restore pass", "use --backend cpu"}));
  EXPECT_NO_THROW(cuda::check_policy_support("kvzip", false));
  EXPECT_TRUE(make_policy(PolicySpec::parse("restorekv:ratio=0.5,random_adapter=1"))->needs().restore_pass);
}

// adapter=DIR through the registry's learned-weights loader: the fixture folder builds; a copy whose
// adapter_config.json asks for DoRA, or a file instead of a folder, is refused naming it.
TEST(RestoreKV, AdapterFoldersAreReadOrRefused) {
  namespace fs = std::filesystem;
  const fs::path src = test::fixture("policies/restorekv_smollm2_random");
  EXPECT_NO_THROW(make_policy(PolicySpec::parse("restorekv:ratio=0.5,adapter=" + src.string())));
  const fs::path dir = test::temp_dir("restorekv_dora");
  for (const char* f : {"adapter_model.safetensors", "restore_embeddings.safetensors"})
    fs::copy_file(src / f, dir / f, fs::copy_options::overwrite_existing);
  json cfg = parse_json_file((src / "adapter_config.json").string());
  cfg["use_dora"] = true;
  std::ofstream((dir / "adapter_config.json").string()) << cfg.dump();
  EXPECT_TRUE(test::contains_all(
      test::error_of([&] { make_policy(PolicySpec::parse("restorekv:ratio=0.5,adapter=" + dir.string())); }),
      {"adapter_config.json: use_dora: set: not supported"}));
  const std::string file = (src / "adapter_model.safetensors").string();
  EXPECT_TRUE(
      test::contains_all(test::error_of([&] { make_policy(PolicySpec::parse("restorekv:ratio=0.5,adapter=" + file)); }),
                         {"adapter_model.safetensors: adapter", "name a directory"}));
  EXPECT_TRUE(test::contains_all(test::error_of([&] { make_policy(PolicySpec::parse("restorekv:ratio=0.5")); }),
                                 {"adapter=", "random_adapter="}));
}

TEST(RestoreKV, KeepsTheRestoreRowsAndContinuesAfterThem) {
  KVB_REQUIRE_STORIES();
  auto m = test::stories_model();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 96; ++i) prompt.push_back(1 + (i * 37) % 400);
  const auto P = static_cast<int32_t>(prompt.size());
  const auto steps = test::held_per_step(m, "restorekv:ratio=0.5,random_adapter=3", 0, 128, prompt, {7, 8});
  ASSERT_EQ(steps.size(), 3u);
  const int layers = static_cast<int>(steps[0].size()), heads = static_cast<int>(steps[0][0].size());
  int64_t kept_ctx = 0;
  for (const auto& l : steps[0])
    for (const auto& h : l) {
      for (int32_t i = 0; i < 8; ++i) EXPECT_TRUE(std::count(h.begin(), h.end(), P + i)) << "restore row " << i;
      kept_ctx += std::count_if(h.begin(), h.end(), [P](int32_t p) { return p < P; });
    }
  // Budget-matched: ⌊N · min(1, 0.5 + 8 / P)⌋ of the N prompt entries evicted.
  const int64_t N = static_cast<int64_t>(layers) * heads * P;
  EXPECT_EQ(kept_ctx, N - static_cast<int64_t>(static_cast<double>(N) * (0.5 + 8.0 / P)));
  // The forced tokens follow the restore rows.
  EXPECT_EQ(steps[1][0][0].back(), P + 8);
  EXPECT_EQ(steps[2][0][0].back(), P + 9);
}

}  // namespace
}  // namespace kvb
