#include "engine/backend/cpu/forward.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "engine/backend/policy_driver.h"
#include "engine/model/architecture.h"
#include "engine/util/error.h"
#include "engine/util/memory.h"

namespace kvb {

// Loops with less work than this (multiply-adds) run on one thread: waking an OpenMP team costs
// more than it saves, and spinning teams hurt badly on a loaded machine.
constexpr int64_t kParallelWork = 1 << 16;

void rms_norm(const float* x, const float* weight, float* y, int64_t T, int64_t n, float eps) {
  for (int64_t t = 0; t < T; ++t) {
    const float* r = x + t * n;
    float* o = y + t * n;
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss += r[i] * r[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    for (int64_t i = 0; i < n; ++i) o[i] = weight[i] * (r[i] * inv);
  }
}

void apply_rope(float* vec, int nheads, int D, int64_t pos, const float* inv_freq, float mscale) {
  const int half = D / 2;
  float cs[512], sn[512];
  float* c = cs;
  float* s = sn;
  std::vector<float> big;
  if (half > 512) {
    big.resize(2 * half);
    c = big.data();
    s = big.data() + half;
  }
  const float p = static_cast<float>(pos);
  for (int i = 0; i < half; ++i) {
    const float ang = p * inv_freq[i];  // float32 product, as transformers computes it
    c[i] = static_cast<float>(std::cos(static_cast<double>(ang))) * mscale;
    s[i] = static_cast<float>(std::sin(static_cast<double>(ang))) * mscale;
  }
  for (int h = 0; h < nheads; ++h) {
    float* v = vec + static_cast<size_t>(h) * D;
    for (int i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * c[i] - b * s[i];
      v[i + half] = b * c[i] + a * s[i];
    }
  }
}

CpuBackend::CpuBackend(const Model& model, KVCache& cache, bool bf16_points)
    : m_(model),
      cache_(cache),
      bf16_points_(bf16_points),
      activation_(architecture(model.config().model_type).activation) {}

namespace {

/// Rounds x[n] to the nearest bf16 in place (the CUDA backend's storage points; see bf16_points).
void round_bf16(float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) x[i] = bf16_bits_to_f32(f32_to_bf16_bits(x[i]));
}

/// Resizes work buffer `v` to n floats, first releasing it when it holds over 4× that (and over
/// 256 KiB): a prefill chunk's buffers are T times a decode step's (12 MB for a 512-token chunk of
/// SmolLM2-135M), and kept through decode they would sit in the peak RSS next to the full KV cache.
/// Returns true when it released the old storage.
bool fit_buffer(std::vector<float>& v, int64_t n) {
  const size_t want = static_cast<size_t>(n);
  const bool release = v.capacity() > 4 * want && v.capacity() > (size_t(1) << 16);
  if (release) std::vector<float>().swap(v);
  v.resize(want);
  return release;
}

/// c·tanh(x / c) (transformers' soft-capping: divide, tanh, multiply, in f32); x when c is 0.
inline float soft_cap(float x, float c) { return c > 0 ? std::tanh(x / c) * c : x; }

/// The MLP activation of `a` applied to gate[i] times up[i], in place over n elements.
void gated_activation(Activation a, float* gate, const float* up, int64_t n) {
  if (a == Activation::kSilu) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) {
      const float g = gate[i];
      gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  } else {                                                            // kGeluTanh: torch's gelu(approximate="tanh")
    constexpr float kBeta = 0.7978845608028654f, kKappa = 0.044715f;  // √(2/π)
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) {
      const float g = gate[i];
      gate[i] = 0.5f * g * (1.0f + std::tanh(kBeta * (g + kKappa * g * g * g))) * up[i];
    }
  }
}

inline float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

int64_t mlp_pieces(int64_t T) { return T <= kMlpPieceRows ? 1 : (T + kMlpPieceRows - 1) / kMlpPieceRows; }

int32_t attention_floor(int32_t qpos, int32_t window) {
  return window > 0 ? qpos - window + 1 : std::numeric_limits<int32_t>::min();
}

/// The state of one forward() call that its blocks share.
struct CpuBackend::Step {
  std::span<ForwardItem> items;
  std::vector<int64_t> row0;  ///< [items + 1] row offset of each item in the flattened batch
  int64_t T = 0;              ///< rows (tokens) in the batch
  Policy* policy = nullptr;
  PolicyNeeds needs;
  policy_driver::Dims dims;
  policy_driver::Compact compact;
  policy_driver::Write write;              ///< a policy's K/V row writes, into the host pages
  std::vector<std::vector<float>> colsum;  ///< [item * Hkv + h][L] when needs.attention_colsum
  double policy_s = 0;
  int64_t evicted = 0;
  /// Read selection (PolicyNeeds::read_select): spans[item][query head] of this layer, token
  /// index ranges of the kv head it reads (empty: the item reads densely).
  std::vector<std::vector<std::vector<std::pair<int32_t, int32_t>>>> spans;
  std::vector<std::vector<TokenRange>> ranges;  ///< storage of the span tasks' TokenRanges
  std::vector<int64_t> kv_read;                 ///< [item] K/V token rows read (ForwardStats::kv_read_tokens)
  const LoraAdapter* lora = nullptr;            ///< the items' LoRA adapter (ForwardItem::lora), or null
  /// y[T', out] += the LoRA delta of projection `t` of layer `l` on x[T', in] (nothing when the
  /// step has no adapter or the adapter does not target it).
  void add_lora(int l, LoraTarget t, const float* x, int64_t rows, float* y) const {
    if (const LoraMatrix* m = lora ? lora->at(l, t) : nullptr) lora_add(*m, x, rows, y);
  }
};

namespace {

/// Checks that LoRA adapter `a` fits `m`: one entry per decoder layer, and each targeted
/// projection's [out, in] equal to the weight's. Throws kvb::Error naming the adapter otherwise.
void check_lora_fits(const LoraAdapter& a, const Model& m) {
  const auto& layers = m.layers();
  if (a.layers.size() != layers.size())
    fail("forward: LoRA adapter {} covers {} decoder layers; this model has {} (made for another model?)", a.source,
         a.layers.size(), layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerWeights& w = layers[l];
    const Mat* of[kLoraTargets] = {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down};
    for (int t = 0; t < kLoraTargets; ++t) {
      const LoraMatrix* lm = a.at(static_cast<int>(l), static_cast<LoraTarget>(t));
      if (lm && (lm->in != of[t]->cols || lm->out != of[t]->rows))
        fail("forward: LoRA adapter {}: layer {} {} is [{}, {}] (out, in); the model's is [{}, {}]", a.source, l,
             lora_target_name(static_cast<LoraTarget>(t)), lm->out, lm->in, of[t]->rows, of[t]->cols);
    }
  }
}

}  // namespace

void attend_spans(const KVCache& cache, SeqId seq, int layer, int h, const float* q, int32_t qpos, int D, float scale,
                  std::span<const std::pair<int32_t, int32_t>> spans, float* out) {
  (void)D;  // the cache's head_dim
  std::vector<TokenRange> ranges;
  ranges.reserve(spans.size());
  for (const auto& [b, e] : spans) ranges.push_back({b, e});
  const AttentionTask t{.seq = seq,
                        .head = h,
                        .n = 1,
                        .start_pos = qpos,
                        .q = q,
                        .out = out,
                        .stride = static_cast<int64_t>(D),
                        .colsum = nullptr,
                        .ranges = ranges};
  if (ranges.empty()) {  // no token selected: zeros, as for a query that sees no key
    std::fill(out, out + D, 0.0f);
    return;
  }
  paged_attention(cache, layer, 1, scale, std::span<const AttentionTask>(&t, 1));
}

void CpuBackend::forward(std::span<ForwardItem> items, Policy* policy, std::vector<float>& logits, ForwardStats* stats) {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  const ModelConfig& c = m_.config();
  const int H = static_cast<int>(c.hidden_size), D = static_cast<int>(c.head_dim), Hq = static_cast<int>(c.num_heads),
            Hkv = static_cast<int>(c.num_kv_heads), I = static_cast<int>(c.intermediate_size),
            V = static_cast<int>(c.vocab_size);
  const float eps = static_cast<float>(c.rms_norm_eps);
  Step s;
  s.items = items;
  s.policy = policy;
  s.needs = policy ? policy->needs() : PolicyNeeds{};
  s.dims = policy_driver::Dims{static_cast<int>(c.num_layers),
                               Hq,
                               Hkv,
                               D,
                               H,
                               c.attention_scale(),
                               m_.inv_freq().data(),
                               m_.rope_attention_scaling(),
                               static_cast<float>(c.rms_norm_eps)};
  s.compact = [this](SeqId seq, int layer, int h, const std::vector<int32_t>& keep) {
    return static_cast<int64_t>(cache_.compact(seq, layer, h, keep));
  };
  s.write = [this](SeqId seq, int layer, const KvRowWrite& w) { policy_driver::write_host_rows(cache_, seq, layer, w); };

  // Row offsets of each item in the flattened token batch.
  s.spans.resize(items.size());
  s.kv_read.assign(items.size(), 0);
  s.row0.assign(items.size() + 1, 0);
  for (size_t b = 0; b < items.size(); ++b) {
    if (items[b].n <= 0) fail("forward: sequence {} has no tokens in this step", items[b].seq);
    if (items[b].lora != items[0].lora) fail("forward: the items of one step name different LoRA adapters");
    s.row0[b + 1] = s.row0[b] + items[b].n;
  }
  s.lora = items.empty() ? nullptr : items[0].lora;
  if (s.lora) check_lora_fits(*s.lora, m_);
  const int64_t T = s.T = s.row0.back();
  // Q and the attention output live only in a layer's attention block, the MLP's gate and up
  // (one piece of rows) only in its MLP block: each pair shares one buffer.
  const int64_t mlp_rows = (T + mlp_pieces(T) - 1) / mlp_pieces(T);
  bool released = fit_buffer(x_, T * H);
  released |= fit_buffer(xn_, T * H);
  released |= fit_buffer(q_, std::max(T * Hq * D, mlp_rows * I));
  released |= fit_buffer(k_, T * Hkv * D);
  released |= fit_buffer(v_, T * Hkv * D);
  released |= fit_buffer(att_, std::max(T * Hq * D, mlp_rows * I));
  if (s.needs.keys_pre_rope) released |= fit_buffer(kpre_, T * Hkv * D);
  if (s.needs.queries_pre_rope) released |= fit_buffer(qpre_, T * Hq * D);
  if (released) release_freed_heap();  // a prefill chunk's buffers (engine/util/memory.h)

  for (size_t b = 0; b < items.size(); ++b) {
    if (items[b].embeddings) {  // given input rows (a restore pass): the residual stream as they are
      if (m_.embed_scale() != 1.0f)
        fail("forward: input embeddings on a model that scales its embeddings (x{}): not supported", m_.embed_scale());
      std::memcpy(&x_[s.row0[b] * H], items[b].embeddings, sizeof(float) * static_cast<size_t>(items[b].n) * H);
      continue;
    }
    for (int i = 0; i < items[b].n; ++i) {
      const int32_t tok = items[b].tokens[i];
      if (tok < 0 || tok >= V) fail("forward: token id {} out of range [0, {})", tok, V);
      m_.embed_row(tok, &x_[(s.row0[b] + i) * H]);
    }
  }

  for (int l = 0; l < static_cast<int>(c.num_layers); ++l) {
    attention_block(s, l);
    mlp_block(s, l);
  }

  // Step-end hook (policies with budgets across layers, e.g. TRIM-KV's global budget).
  if (policy) {
    const auto tp = clock::now();
    s.evicted += policy_driver::run_step_end(*policy, cache_, items, s.dims, s.compact);
    s.policy_s += std::chrono::duration<double>(clock::now() - tp).count();
  }

  // Final norm + LM head for the last token of each item that wants logits.
  std::vector<int64_t> rows;
  for (size_t b = 0; b < items.size(); ++b)
    if (items[b].want_logits) rows.push_back(s.row0[b + 1] - 1);
  tmp_.resize(rows.size() * H);
  for (size_t r = 0; r < rows.size(); ++r) rms_norm(&x_[rows[r] * H], m_.final_norm(), &tmp_[r * H], 1, H, eps);
  if (bf16_points_) round_bf16(tmp_.data(), static_cast<int64_t>(rows.size()) * H);
  logits.resize(rows.size() * static_cast<size_t>(V));
  if (!rows.empty()) matmul_nt(tmp_.data(), m_.lm_head(), nullptr, logits.data(), rows.size(), H, V);
  if (c.final_logit_softcap > 0) {
    const float cap = static_cast<float>(c.final_logit_softcap);
    for (float& z : logits) z = soft_cap(z, cap);
  }
  if (stats) {
    stats->total_s = std::chrono::duration<double>(clock::now() - t_start).count();
    stats->policy_s = s.policy_s;
    stats->evicted = s.evicted;
    stats->kv_read_tokens = std::move(s.kv_read);
  }
}

void CpuBackend::attention_block(Step& s, int l) {
  const ModelConfig& c = m_.config();
  const int H = static_cast<int>(c.hidden_size), D = static_cast<int>(c.head_dim), Hq = static_cast<int>(c.num_heads),
            Hkv = static_cast<int>(c.num_kv_heads);
  const int G = Hq / Hkv;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = s.dims.attn_scale;
  const int32_t window = c.window(l);
  const float softcap = static_cast<float>(c.attn_logit_softcap);
  const std::span<ForwardItem> items = s.items;
  const std::vector<int64_t>& row0 = s.row0;
  const int64_t T = s.T;
  const PolicyNeeds& needs = s.needs;
  const LayerWeights& w = m_.layers()[l];
  rms_norm(x_.data(), w.attn_norm, xn_.data(), T, H, eps);
  if (bf16_points_) round_bf16(xn_.data(), T * H);
  const MatmulOut qkv[] = {{&w.wq, w.bq, q_.data()}, {&w.wk, w.bk, k_.data()}, {&w.wv, w.bv, v_.data()}};
  matmul_nt_many(xn_.data(), T, H, qkv);
  s.add_lora(l, LoraTarget::kQ, xn_.data(), T, q_.data());
  s.add_lora(l, LoraTarget::kK, xn_.data(), T, k_.data());
  s.add_lora(l, LoraTarget::kV, xn_.data(), T, v_.data());
  // q/k norm (qwen3), then RoPE; per token.
#pragma omp parallel for schedule(static) if (T * (Hq + Hkv) * D > kParallelWork)
  for (int64_t t = 0; t < T; ++t) {
    size_t b = std::upper_bound(row0.begin(), row0.end(), t) - row0.begin() - 1;
    const int64_t pos = items[b].start_pos + (t - row0[b]);
    float* qt = &q_[t * Hq * D];
    float* kt = &k_[t * Hkv * D];
    if (w.q_norm) {
      rms_norm(qt, w.q_norm, qt, Hq, D, eps);
      rms_norm(kt, w.k_norm, kt, Hkv, D, eps);
    }
    if (needs.keys_pre_rope) std::memcpy(&kpre_[t * Hkv * D], kt, sizeof(float) * Hkv * D);
    if (needs.queries_pre_rope) std::memcpy(&qpre_[t * Hq * D], qt, sizeof(float) * Hq * D);
    apply_rope(qt, Hq, D, pos, m_.inv_freq().data(), m_.rope_attention_scaling());
    apply_rope(kt, Hkv, D, pos, m_.inv_freq().data(), m_.rope_attention_scaling());
  }
  if (bf16_points_) {
    round_bf16(k_.data(), T * Hkv * D);
    round_bf16(v_.data(), T * Hkv * D);
  }
  // Append the new keys/values to every kv head of each sequence.
  for (size_t b = 0; b < items.size(); ++b)
    for (int i = 0; i < items[b].n; ++i) {
      const int64_t t = row0[b] + i;
      for (int h = 0; h < Hkv; ++h)
        cache_.append(items[b].seq, l, h, &k_[(t * Hkv + h) * D], &v_[(t * Hkv + h) * D],
                      static_cast<int32_t>(items[b].start_pos + i));
    }
  // Query history for window-attention policies (the shared ring, policy_driver.h).
  if (needs.window_queries > 0) {
    for (size_t b = 0; b < items.size(); ++b) {
      QueryHistory& qh = policy_driver::history_of(items[b], *s.policy, needs, static_cast<int>(c.num_layers), Hq, D);
      const int first = policy_driver::first_recorded(qh, items[b].n);
      policy_driver::record_queries(qh, l, items[b], &q_[(row0[b] + first) * Hq * D], Hq, D);
    }
  }
  // Attention: one task per (item, kv head); G query heads × n queries each.
  if (needs.attention_colsum) {
    s.colsum.assign(items.size() * Hkv, {});
    for (size_t b = 0; b < items.size(); ++b)
      for (int h = 0; h < Hkv; ++h) s.colsum[b * Hkv + h].assign(cache_.length(items[b].seq, l, h), 0.0f);
  }
  // Read selection (Quest): a decode item's query heads may each read only some of the kv head's
  // tokens; K/V rows read are counted for every decode item (ForwardStats::kv_read_tokens).
  for (size_t b = 0; b < items.size(); ++b) {
    s.spans[b].clear();
    if (!policy_driver::is_decode(items[b])) continue;
    if (needs.read_select) {
      const auto tp = std::chrono::steady_clock::now();
      s.kv_read[b] +=
          policy_driver::select_reads(*s.policy, cache_, items[b], l, s.dims, &q_[row0[b] * Hq * D], s.spans[b]);
      s.policy_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - tp).count();
    } else {
      for (int h = 0; h < Hkv; ++h) s.kv_read[b] += cache_.length(items[b].seq, l, h);
    }
  }
  // The CUDA backend's attention kernels read the queries as bf16 (FlashInfer's tensor-core
  // prefill needs bf16 operands; the decode kernels round the same way): so does cpu-bf16. The
  // query history and read selection above keep f32 queries, as on the device.
  if (bf16_points_) round_bf16(q_.data(), T * Hq * D);
  // Dense items: one task per (item, kv head), its G query heads together against each page.
  attn_tasks_.clear();
  for (size_t b = 0; b < items.size(); ++b) {
    if (!s.spans[b].empty()) continue;
    for (int h = 0; h < Hkv; ++h) {
      const int64_t off = (row0[b] * Hq + static_cast<int64_t>(h) * G) * D;
      attn_tasks_.push_back({.seq = items[b].seq,
                             .head = h,
                             .n = items[b].n,
                             .start_pos = items[b].start_pos,
                             .q = &q_[off],
                             .out = &att_[off],
                             .stride = static_cast<int64_t>(Hq) * D,
                             .colsum = needs.attention_colsum ? s.colsum[b * Hkv + h].data() : nullptr,
                             .ranges = {},
                             .window = window,
                             .softcap = softcap});
    }
  }
  paged_attention(cache_, l, G, scale, attn_tasks_);
  // Read-selecting items: one task per query head over its own token ranges (G = 1 per task).
  attn_tasks_.clear();
  s.ranges.clear();
  for (size_t b = 0; b < items.size(); ++b)
    for (int hq = 0; hq < static_cast<int>(s.spans[b].size()); ++hq) {
      std::vector<TokenRange>& rg = s.ranges.emplace_back();
      for (const auto& [lo, hi] : s.spans[b][hq]) rg.push_back({lo, hi});
      const int64_t off = row0[b] * Hq * D + static_cast<int64_t>(hq) * D;
      if (rg.empty()) {  // nothing selected: zeros, as for a query that sees no key
        std::fill(&att_[off], &att_[off] + D, 0.0f);
        s.ranges.pop_back();
        continue;
      }
      attn_tasks_.push_back({.seq = items[b].seq,
                             .head = hq / G,
                             .n = 1,
                             .start_pos = items[b].start_pos,
                             .q = &q_[off],
                             .out = &att_[off],
                             .stride = static_cast<int64_t>(Hq) * D,
                             .colsum = nullptr,
                             .ranges = {},
                             .window = window,
                             .softcap = softcap});
    }
  for (size_t k = 0; k < attn_tasks_.size(); ++k) attn_tasks_[k].ranges = s.ranges[k];
  if (!attn_tasks_.empty()) paged_attention(cache_, l, 1, scale, attn_tasks_);
  if (s.policy) policy_block(s, l);
  // Output projection + residual.
  if (bf16_points_) round_bf16(att_.data(), T * Hq * D);
  matmul_nt(att_.data(), w.wo, nullptr, xn_.data(), T, static_cast<int64_t>(Hq) * D, H);
  s.add_lora(l, LoraTarget::kO, att_.data(), T, xn_.data());
  if (w.post_attn_norm) rms_norm(xn_.data(), w.post_attn_norm, xn_.data(), T, H, eps);
  for (int64_t i = 0; i < T * H; ++i) x_[i] += xn_[i];
}

void CpuBackend::policy_block(Step& s, int l) {
  using clock = std::chrono::steady_clock;
  const ModelConfig& c = m_.config();
  const int H = static_cast<int>(c.hidden_size), D = static_cast<int>(c.head_dim), Hq = static_cast<int>(c.num_heads),
            Hkv = static_cast<int>(c.num_kv_heads);
  const int G = Hq / Hkv;
  const float scale = s.dims.attn_scale;
  const int32_t window = c.window(l);
  const float softcap = static_cast<float>(c.attn_logit_softcap);
  const PolicyNeeds& needs = s.needs;
  const auto tp = clock::now();
  for (size_t b = 0; b < s.items.size(); ++b) {
    const ForwardItem& it = s.items[b];
    std::vector<float> wq_buf;
    LayerStep st = policy_driver::layer_step(cache_, it, l, s.dims, wq_buf);
    if (needs.layer_input) st.layer_input = &xn_[s.row0[b] * H];
    if (needs.layer_residual) st.layer_residual = &x_[s.row0[b] * H];  // the residual add comes after
    if (needs.keys_pre_rope) st.keys_pre_rope = &kpre_[s.row0[b] * Hkv * D];
    if (needs.queries_pre_rope) st.queries_pre_rope = &qpre_[s.row0[b] * Hq * D];
    if (needs.out_proj) st.out_proj_head = policy_driver::out_proj_head(m_.layers()[l].wo, Hq, D);
    std::vector<std::vector<float>> cs_item;
    if (needs.attention_colsum) {
      cs_item.assign(s.colsum.begin() + b * Hkv, s.colsum.begin() + (b + 1) * Hkv);
      st.attention_colsum = &cs_item;
    }
    const QueryHistory* qh = it.history;
    st.window_attention = policy_driver::memo_window_attention(qh, Hkv, [&, qh, l](int h, std::vector<float>& out) {
      // The last w queries of the G query heads of kv head h ([G, w] rows, g-major, j-th oldest
      // first) against the head's L cached keys: raw scores by the f32 tile kernel a page at a
      // time (pages split over the threads; each score one fixed-order sum, so the result does
      // not depend on the thread count), then per row the causal / sliding-window mask, soft-cap
      // and softmax. (A per-key scalar loop through KVCache::key made MorphKV decode ~10x slower
      // than the full cache at 1K tokens on the 2-core machine.)
      const int w = qh->count[l];
      const int32_t L = cache_.length(st.seq, l, h);
      const int R = G * w, P = cache_.config().page_size;
      out.assign(static_cast<size_t>(R) * L, 0.0f);
      std::vector<float> qrows(static_cast<size_t>(R) * D);
      std::vector<int32_t> qpos(R), qlo(R);
      for (int g = 0; g < G; ++g)
        for (int j = 0; j < w; ++j) {
          const int slot = (qh->head[l] - w + j + qh->window) % qh->window, r = g * w + j;
          std::copy_n(&qh->q[l][(static_cast<size_t>(slot) * Hq + h * G + g) * D], D, &qrows[static_cast<size_t>(r) * D]);
          qpos[r] = qh->pos[l][slot];
          qlo[r] = attention_floor(qpos[r], window);
        }
      const std::vector<int32_t>& pages = std::as_const(cache_).pages(st.seq, l, h);
      const int32_t np = (L + P - 1) / P;
      const F32TileFn tile = f32_tile_fn(best_isa());
      float* const o = out.data();
      const float* const qr = qrows.data();
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(R) * L * D >= (1 << 16))
      for (int32_t pi = 0; pi < np; ++pi) {
        const float* kp = std::as_const(cache_).page_keys(pages[pi]);
        for (int32_t t0 = pi * P; t0 < std::min<int32_t>(L, (pi + 1) * P); t0 += 16) {
          const int nk = std::min<int32_t>({16, L - t0, (pi + 1) * P - t0});
          const float* kw[16];
          for (int k = 0; k < nk; ++k) kw[k] = kp + static_cast<size_t>(t0 - pi * P + k) * D;
          tile(D, kw, nk, qr, R, D, o + t0, L);
        }
      }
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(R) * L >= (1 << 14))
      for (int r = 0; r < R; ++r) {
        float* row = o + static_cast<size_t>(r) * L;
        float mx = -std::numeric_limits<float>::infinity();
        for (int32_t pi = 0; pi < np; ++pi) {
          const int32_t* pp = std::as_const(cache_).page_positions(pages[pi]);
          for (int32_t t = pi * P; t < std::min<int32_t>(L, (pi + 1) * P); ++t) {
            const int32_t kpos = pp[t - pi * P];
            row[t] = kpos <= qpos[r] && kpos >= qlo[r] ? soft_cap(row[t] * scale, softcap)
                                                       : -std::numeric_limits<float>::infinity();
            mx = std::max(mx, row[t]);
          }
        }
        float sum = 0;
        for (int32_t t = 0; t < L; ++t) sum += (row[t] = std::exp(row[t] - mx));
        for (int32_t t = 0; t < L; ++t) row[t] /= sum;
      }
      return w;
    });
    s.evicted += policy_driver::run_layer(*s.policy, st, s.compact, s.write);
  }
  s.policy_s += std::chrono::duration<double>(clock::now() - tp).count();
}

void CpuBackend::mlp_block(Step& s, int l) {
  const ModelConfig& c = m_.config();
  const int H = static_cast<int>(c.hidden_size), I = static_cast<int>(c.intermediate_size);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t T = s.T;
  const LayerWeights& w = m_.layers()[l];
  rms_norm(x_.data(), w.mlp_norm, xn_.data(), T, H, eps);
  if (bf16_points_) round_bf16(xn_.data(), T * H);
  // Row pieces (mlp_pieces): the gate/up buffers hold one piece, not the whole chunk. Each
  // piece's down projection overwrites its own rows of xn_, which no later piece reads.
  const int64_t pieces = mlp_pieces(T);
  for (int64_t i = 0; i < pieces; ++i) {
    const int64_t t0 = T * i / pieces, n = T * (i + 1) / pieces - t0;
    float* xp = xn_.data() + t0 * H;
    float* gate = q_.data();  // free until the next layer's Q (forward(): shared buffers)
    float* up = att_.data();
    const MatmulOut gate_up[] = {{&w.w_gate, nullptr, gate}, {&w.w_up, nullptr, up}};
    matmul_nt_many(xp, n, H, gate_up);
    s.add_lora(l, LoraTarget::kGate, xp, n, gate);
    s.add_lora(l, LoraTarget::kUp, xp, n, up);
    gated_activation(activation_, gate, up, n * I);
    if (bf16_points_) round_bf16(gate, n * I);
    matmul_nt(gate, w.w_down, nullptr, xp, n, I, H);
    s.add_lora(l, LoraTarget::kDown, gate, n, xp);
  }
  if (w.post_mlp_norm) rms_norm(xn_.data(), w.post_mlp_norm, xn_.data(), T, H, eps);
  for (int64_t i = 0; i < T * H; ++i) x_[i] += xn_[i];
}

}  // namespace kvb
