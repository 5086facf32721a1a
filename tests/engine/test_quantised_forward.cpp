// The CPU forward on weights as stored (WeightFormat::kStored: block-quantised matrices
// multiplied in place, activations quantised per row to 8 bits) against the same model's f32
// forward on the dequantised weights (WeightFormat::kF32, the path the fidelity tests hold to
// transformers; dequantisation is bit-identical to gguf-py: tests/gguf). One small llama-shaped
// model per weight type with random blocks, Q/K through a row index as a GGUF llama file has
// them. Prompts of 20 and 40 tokens (the single-row and the register-blocked tile kernels, on the
// same Q8 activations) then decode steps. Then the invariance the harness rests on (issue 38):
// per weight type, on random Qwen3- and Llama-shaped models and on stories260K, the logits of
// every prefill chunk (1, 7, 37, 63, 64, 65, 100, 4096) are bit-identical, and greedy texts do
// not depend on the batch (1, 3, 8).
//
// Tolerance (max |Δlogit| / max |logit| over all scored positions): f32, f16, bf16 weights 5e-6
// (f32 activations, only the summation order differs; measured ≤ 6.3e-7). Quantised weights
// multiply 8-bit activations (d = max|x|/127 per block), whose rounding a random-weight network
// amplifies more than a trained one; measured (2 layers, this seed): Q4_0 3.9e-3, Q4_1 3.8e-3,
// Q5_0 1.1e-2, Q5_1 1.5e-2, Q8_0 1.5e-2, Q4_K 2.6e-2, Q5_K 1.6e-2, Q6_K 7.0e-2 (its random
// int8 sub-block scales make the widest weights); the bound is 2.5× that. The trained default
// model's bound is tighter (test_gguf_forward.cpp: StoredQ4_1MatchesTransformers). A wrong
// kernel is off by O(1) (tests/kernels checks each kernel exactly).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "engine/engine.h"
#include "tests/support/model_sizes.h"
#include "tests/support/stories.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

/// Random bytes of `rows` rows of `cols` elements of `t` with scales chosen so that the weights
/// have a standard deviation of roughly 0.02 (as trained small models have).
std::shared_ptr<std::vector<uint8_t>> random_matrix(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const size_t rb = dtype_row_bytes(t, cols);
  auto buf = std::make_shared<std::vector<uint8_t>>(rb * rows);
  auto& b = *buf;
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  // f16 with exponent field e (value 2^(e-15)·(1 + mantissa)), sign from `neg`.
  auto f16 = [&](int e, bool neg) { return static_cast<uint16_t>((neg ? 0x8000 : 0) | (e << 10) | (rng() & 0x3ff)); };
  auto put = [&](size_t off, uint16_t v) { std::memcpy(&b[off], &v, 2); };
  std::normal_distribution<float> nd(0.0f, 0.02f);
  const DTypeTraits tr = dtype_traits(t);
  const int64_t nblocks = rows * cols / tr.block;
  for (int64_t k = 0; k < nblocks; ++k) {
    const size_t o = static_cast<size_t>(k * tr.bytes);
    switch (t) {
      case DType::F32: {
        const float v = nd(rng);
        std::memcpy(&b[o], &v, 4);
        break;
      }
      case DType::F16:
        put(o, static_cast<uint16_t>(f16(std::uniform_int_distribution<int>(5, 9)(rng), rng() & 1)));
        break;
      case DType::BF16: put(o, f32_to_bf16_bits(nd(rng))); break;
      case DType::Q4_0: put(o, f16(7, false)); break;
      case DType::Q5_0: put(o, f16(6, false)); break;
      case DType::Q8_0: put(o, f16(3, false)); break;
      case DType::Q4_1:
      case DType::Q5_1:  // scale d, then a negative minimum m
      case DType::Q4_K:
      case DType::Q5_K: {  // super-block scales d, dmin
        const bool k_quant = t == DType::Q4_K || t == DType::Q5_K;
        const int d_exp = t == DType::Q4_1 ? 7 : t == DType::Q5_1 ? 6 : t == DType::Q4_K ? 2 : 1;
        put(o, f16(d_exp, false));
        put(o + 2, f16(k_quant ? 5 : 10, !k_quant));
        break;
      }
      case DType::Q6_K: put(o + 208, f16(1, false)); break;
    }
  }
  return buf;
}

ModelConfig small_config() {
  ModelConfig base;
  base.model_type = "llama";
  ModelConfig c = test::resized(
      base, {.vocab = 300, .hidden = 256, .intermediate = 512, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 64});
  c.rope_theta = 10000;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = false;
  return c;
}

WeightStore random_store(const ModelConfig& c, DType t, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  WeightStore ws;
  ws.origin = std::string("random ") + dtype_name(t);
  auto add = [&](const std::string& name, int64_t rows, int64_t cols, int64_t perm_heads = 0) {
    auto buf = random_matrix(t, rows, cols, rng);
    std::shared_ptr<const std::vector<int32_t>> index;
    if (perm_heads) {  // a GGUF llama Q/K: rows in llama.cpp's rotary order
      std::vector<int32_t> ix(rows);
      const int64_t dim = rows / perm_heads / 2;
      for (int64_t h = 0; h < perm_heads; ++h)
        for (int64_t a = 0; a < 2; ++a)
          for (int64_t d = 0; d < dim; ++d)
            ix[h * 2 * dim + a * dim + d] = static_cast<int32_t>(h * 2 * dim + d * 2 + a);
      index = std::make_shared<const std::vector<int32_t>>(std::move(ix));
    }
    ws.add_view(name, {rows, cols}, t, buf->data(), buf, index, ws.origin);
  };
  const int64_t H = c.hidden_size, D = c.head_dim, Hq = c.num_heads, Hkv = c.num_kv_heads, I = c.intermediate_size,
                V = c.vocab_size;
  add("model.embed_tokens.weight", V, H);
  add("lm_head.weight", V, H);
  ws.add_owned("model.norm.weight", {H}, std::vector<float>(H, 1.0f), "random");
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ws.add_owned(p + "input_layernorm.weight", {H}, std::vector<float>(H, 1.0f), "random");
    ws.add_owned(p + "post_attention_layernorm.weight", {H}, std::vector<float>(H, 1.0f), "random");
    add(p + "self_attn.q_proj.weight", Hq * D, H, Hq);
    add(p + "self_attn.k_proj.weight", Hkv * D, H, Hkv);
    add(p + "self_attn.v_proj.weight", Hkv * D, H);
    add(p + "self_attn.o_proj.weight", H, Hq * D);
    add(p + "mlp.gate_proj.weight", I, H);
    add(p + "mlp.up_proj.weight", I, H);
    add(p + "mlp.down_proj.weight", H, I);
  }
  return ws;
}

TEST(QuantisedForward, StoredWeightsMatchDequantisedF32Forward) {
  const ModelConfig c = small_config();
  for (const DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                        DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const WeightStore ws = random_store(c, t, 17 + static_cast<uint64_t>(t));
    auto stored = Model::from_weights(c, ws, "stored", WeightFormat::kStored);
    auto f32 = Model::from_weights(c, ws, "f32", WeightFormat::kF32);
    // No second copy of the weights in the stored model: every matrix is the view itself.
    EXPECT_EQ(stored->layers()[0].w_down.data, ws.find("model.layers.0.mlp.down_proj.weight")->data) << dtype_name(t);
    EXPECT_EQ(stored->layers()[1].wq.data, ws.find("model.layers.1.self_attn.q_proj.weight")->data) << dtype_name(t);
    double tol = 5e-6;
    switch (t) {
      case DType::Q4_0:
      case DType::Q4_1: tol = 1e-2; break;
      case DType::Q5_0:
      case DType::Q5_1:
      case DType::Q8_0:
      case DType::Q5_K: tol = 4e-2; break;
      case DType::Q4_K: tol = 6.5e-2; break;
      case DType::Q6_K: tol = 1.75e-1; break;
      default: break;
    }
    std::mt19937 rng(5);
    for (const int n : {20, 40}) {
      std::vector<int32_t> prompt(n), forced(6);
      for (auto& x : prompt) x = static_cast<int32_t>(rng() % c.vocab_size);
      for (auto& x : forced) x = static_cast<int32_t>(rng() % c.vocab_size);
      Engine es(stored, {}, nullptr), ef(f32, {}, nullptr);
      const auto a = es.score(prompt, forced);
      const auto b = ef.score(prompt, forced);
      ASSERT_EQ(a.size(), b.size());
      ASSERT_FALSE(a.empty());
      const double e = test::rel_err(a, b);
      EXPECT_LE(e, tol) << dtype_name(t) << " prompt " << n;
      RecordProperty(std::string(dtype_name(t)) + "_" + std::to_string(n), std::to_string(e));
      std::printf("%-5s prompt %2d: max |Δlogit| / max |logit| = %.2e\n", dtype_name(t), n, e);
    }
  }
}

/// Logits of `prompt` then `forced` scored with prefill chunk `chunk` (Engine::score).
std::vector<float> scored(const std::shared_ptr<const Model>& m, int chunk, const std::vector<int32_t>& prompt,
                          const std::vector<int32_t>& forced) {
  EngineOptions eo;
  eo.prefill_chunk = chunk;
  Engine e(m, eo, nullptr);
  return e.score(prompt, forced);
}

/// Checks the invariance on `m`: identical logits bits at every prefill chunk, identical greedy
/// tokens at batches 1, 3 and 8 (eight requests of different lengths).
void check_invariance(const std::shared_ptr<const Model>& m, uint32_t seed) {
  const int V = static_cast<int>(m->config().vocab_size);
  std::mt19937 rng(seed);
  std::vector<int32_t> prompt(130), forced(5);
  for (auto& x : prompt) x = static_cast<int32_t>(rng() % V);
  for (auto& x : forced) x = static_cast<int32_t>(rng() % V);
  const std::vector<float> whole = scored(m, 4096, prompt, forced);
  ASSERT_FALSE(whole.empty());
  for (const int chunk : {1, 7, 37, 63, 64, 65, 100}) {
    SCOPED_TRACE("prefill chunk " + std::to_string(chunk));
    const std::vector<float> got = scored(m, chunk, prompt, forced);
    ASSERT_EQ(got.size(), whole.size());
    EXPECT_EQ(std::memcmp(got.data(), whole.data(), sizeof(float) * got.size()), 0);
  }
  std::vector<GenerationRequest> reqs(8);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].prompt.resize(20 + 17 * i);
    for (auto& x : reqs[i].prompt) x = static_cast<int32_t>(rng() % V);
    reqs[i].max_new_tokens = 12;
  }
  std::vector<std::vector<int32_t>> ref;
  for (const int batch : {1, 3, 8}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    EngineOptions eo;
    eo.max_batch = batch;
    eo.prefill_chunk = 37;
    Engine e(m, eo, nullptr);
    const auto out = e.generate(reqs, nullptr);
    std::vector<std::vector<int32_t>> toks;
    for (const auto& r : out) toks.push_back(r.tokens);
    if (ref.empty()) ref = toks;
    else EXPECT_EQ(toks, ref);
  }
}

TEST(Invariance, EveryWeightTypeGivesOneResultWhateverTheChunkAndBatch) {
  const ModelConfig c = small_config();
  for (const DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                        DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    const WeightStore ws = random_store(c, t, 40 + static_cast<uint64_t>(t));
    check_invariance(Model::from_weights(c, ws, "stored", WeightFormat::kStored), 9);
  }
}

TEST(Invariance, RandomQwen3AndLlamaShapesAndStories260K) {
  for (const char* shape : {"qwen3-0.6b", "llama-3.1-8b"}) {
    SCOPED_TRACE(shape);
    ModelConfig c = test::resized(
        model_shape(shape),
        {.vocab = 256, .hidden = 128, .intermediate = 256, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 32});
    check_invariance(Model::random(c, 3), 4);
  }
  KVB_REQUIRE_STORIES();
  check_invariance(test::stories_model(), 5);
}

}  // namespace
}  // namespace kvb
