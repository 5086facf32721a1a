#include "engine/backend/cpu/forward.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "engine/backend/policy_driver.h"
#include "engine/util/error.h"

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
    : m_(model), cache_(cache), bf16_points_(bf16_points) {}

namespace {

/// Rounds x[n] to the nearest bf16 in place (the CUDA backend's storage points; see bf16_points).
void round_bf16(float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) x[i] = bf16_bits_to_f32(f32_to_bf16_bits(x[i]));
}

inline float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Softmax attention of one query over one kv head's cached tokens with pos ≤ qpos.
// scores: scratch [L]; out: [D]. Returns nothing; if colsum is given, adds the probabilities.
void attend_one(const KVCache& cache, SeqId seq, int layer, int h, const float* q, int32_t qpos, int D,
                float scale, std::vector<float>& scores, float* out, float* colsum) {
  const auto& pages = cache.pages(seq, layer, h);
  const int32_t L = cache.length(seq, layer, h);
  const int P = cache.config().page_size;
  scores.resize(std::max<int32_t>(L, 1));
  float mx = -std::numeric_limits<float>::infinity();
  for (int32_t t0 = 0, pi = 0; t0 < L; t0 += P, ++pi) {
    const float* kp = cache.page_keys(pages[pi]);
    const int32_t* pp = cache.page_positions(pages[pi]);
    const int n = std::min<int32_t>(P, L - t0);
    for (int j = 0; j < n; ++j) {
      float sc = pp[j] <= qpos ? dot(q, kp + j * D, D) * scale : -std::numeric_limits<float>::infinity();
      scores[t0 + j] = sc;
      mx = std::max(mx, sc);
    }
  }
  std::fill(out, out + D, 0.0f);
  if (L == 0 || mx == -std::numeric_limits<float>::infinity()) return;
  float sum = 0.0f;
  for (int32_t t = 0; t < L; ++t) {
    const float e = std::exp(scores[t] - mx);
    scores[t] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (int32_t t0 = 0, pi = 0; t0 < L; t0 += P, ++pi) {
    const float* vp = cache.page_values(pages[pi]);
    const int n = std::min<int32_t>(P, L - t0);
    for (int j = 0; j < n; ++j) {
      const float pr = scores[t0 + j] * inv;
      if (pr == 0.0f) continue;
      const float* vr = vp + j * D;
#pragma omp simd
      for (int d = 0; d < D; ++d) out[d] += pr * vr[d];
    }
  }
  if (colsum)
    for (int32_t t = 0; t < L; ++t) colsum[t] += scores[t] * inv;
}

}  // namespace

void attend_spans(const KVCache& cache, SeqId seq, int layer, int h, const float* q, int32_t qpos, int D,
                  float scale, std::span<const std::pair<int32_t, int32_t>> spans, std::vector<float>& scores,
                  float* out) {
  const auto& pages = cache.pages(seq, layer, h);
  const int P = cache.config().page_size;
  int64_t n = 0;
  for (const auto& [b, e] : spans) n += e - b;
  scores.resize(std::max<int64_t>(n, 1));
  float mx = -std::numeric_limits<float>::infinity();
  int64_t r = 0;
  for (const auto& [b, e] : spans)
    for (int32_t t = b; t < e; ++t, ++r) {
      const int32_t pg = pages[t / P], j = t % P;
      const float sc = cache.page_positions(pg)[j] <= qpos
                           ? dot(q, cache.page_keys(pg) + static_cast<size_t>(j) * D, D) * scale
                           : -std::numeric_limits<float>::infinity();
      scores[r] = sc;
      mx = std::max(mx, sc);
    }
  std::fill(out, out + D, 0.0f);
  if (n == 0 || mx == -std::numeric_limits<float>::infinity()) return;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += (scores[i] = std::exp(scores[i] - mx));
  const float inv = 1.0f / sum;
  r = 0;
  for (const auto& [b, e] : spans)
    for (int32_t t = b; t < e; ++t, ++r) {
      const float pr = scores[r] * inv;
      if (pr == 0.0f) continue;
      const float* vr = cache.page_values(pages[t / P]) + static_cast<size_t>(t % P) * D;
#pragma omp simd
      for (int d = 0; d < D; ++d) out[d] += pr * vr[d];
    }
}

void CpuBackend::forward(std::span<ForwardItem> items, Policy* policy, std::vector<float>& logits,
                         ForwardStats* stats) {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  double policy_s = 0;
  int64_t evicted = 0;
  const ModelConfig& c = m_.config();
  const int H = static_cast<int>(c.hidden_size), D = static_cast<int>(c.head_dim),
            Hq = static_cast<int>(c.num_heads), Hkv = static_cast<int>(c.num_kv_heads),
            I = static_cast<int>(c.intermediate_size), V = static_cast<int>(c.vocab_size);
  const int G = Hq / Hkv;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const PolicyNeeds needs = policy ? policy->needs() : PolicyNeeds{};

  // Row offsets of each item in the flattened token batch.
  std::vector<int64_t> row0(items.size() + 1, 0);
  for (size_t b = 0; b < items.size(); ++b) {
    if (items[b].n <= 0) fail("forward: sequence {} has no tokens in this step", items[b].seq);
    row0[b + 1] = row0[b] + items[b].n;
  }
  const int64_t T = row0.back();
  x_.resize(T * H);
  xn_.resize(T * H);
  q_.resize(T * Hq * D);
  k_.resize(T * Hkv * D);
  v_.resize(T * Hkv * D);
  att_.resize(T * Hq * D);
  gate_.resize(T * I);
  up_.resize(T * I);
  if (needs.keys_pre_rope) kpre_.resize(T * Hkv * D);
  if (needs.queries_pre_rope) qpre_.resize(T * Hq * D);

  for (size_t b = 0; b < items.size(); ++b) {
    for (int i = 0; i < items[b].n; ++i) {
      const int32_t tok = items[b].tokens[i];
      if (tok < 0 || tok >= V) fail("forward: token id {} out of range [0, {})", tok, V);
      m_.embed_row(tok, &x_[(row0[b] + i) * H]);
    }
  }

  const policy_driver::Dims dims{static_cast<int>(c.num_layers), Hq, Hkv, D, H, scale, m_.inv_freq().data(),
                                 m_.rope_attention_scaling()};
  const policy_driver::Compact compact = [this](SeqId s, int layer, int h, const std::vector<int32_t>& keep) {
    return static_cast<int64_t>(cache_.compact(s, layer, h, keep));
  };
  std::vector<std::vector<float>> colsum;  // [item * Hkv + h][L]
  // Read selection (PolicyNeeds::read_select): spans[item][q_head] for this layer (empty: dense).
  std::vector<std::vector<std::vector<std::pair<int32_t, int32_t>>>> spans(items.size());
  std::vector<int64_t> kv_read(items.size(), 0);
  for (int l = 0; l < static_cast<int>(c.num_layers); ++l) {
    const LayerWeights& w = m_.layers()[l];
    rms_norm(x_.data(), w.attn_norm, xn_.data(), T, H, eps);
    if (bf16_points_) round_bf16(xn_.data(), T * H);
    matmul_nt(xn_.data(), w.wq, w.bq, q_.data(), T, H, static_cast<int64_t>(Hq) * D);
    matmul_nt(xn_.data(), w.wk, w.bk, k_.data(), T, H, static_cast<int64_t>(Hkv) * D);
    matmul_nt(xn_.data(), w.wv, w.bv, v_.data(), T, H, static_cast<int64_t>(Hkv) * D);
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
        QueryHistory& qh = policy_driver::history_of(items[b], *policy, needs, static_cast<int>(c.num_layers), Hq, D);
        const int first = policy_driver::first_recorded(qh, items[b].n);
        policy_driver::record_queries(qh, l, items[b], &q_[(row0[b] + first) * Hq * D], Hq, D);
      }
    }
    // Attention: one task per (item, kv head); G query heads × n queries each.
    if (needs.attention_colsum) {
      colsum.assign(items.size() * Hkv, {});
      for (size_t b = 0; b < items.size(); ++b)
        for (int h = 0; h < Hkv; ++h) colsum[b * Hkv + h].assign(cache_.length(items[b].seq, l, h), 0.0f);
    }
    for (size_t b = 0; b < items.size(); ++b) {
      if (!policy_driver::is_decode(items[b])) continue;
      if (needs.read_select) {
        const auto tp = clock::now();
        kv_read[b] += policy_driver::select_reads(*policy, cache_, items[b], l, dims, &q_[row0[b] * Hq * D], spans[b]);
        policy_s += std::chrono::duration<double>(clock::now() - tp).count();
      } else {
        for (int h = 0; h < Hkv; ++h) kv_read[b] += cache_.length(items[b].seq, l, h);
      }
    }
    const int64_t tasks = static_cast<int64_t>(items.size()) * Hkv;
    int64_t attn_work = 0;
    for (size_t b = 0; b < items.size(); ++b)
      attn_work += static_cast<int64_t>(items[b].n) * cache_.max_length(items[b].seq, l) * Hq * D;
#pragma omp parallel if (attn_work > kParallelWork)
    {
      std::vector<float> scores;
#pragma omp for schedule(dynamic)
      for (int64_t task = 0; task < tasks; ++task) {
        const size_t b = task / Hkv;
        const int h = static_cast<int>(task % Hkv);
        float* cs = needs.attention_colsum ? colsum[task].data() : nullptr;
        for (int i = 0; i < items[b].n; ++i) {
          const int64_t t = row0[b] + i;
          const int32_t qpos = static_cast<int32_t>(items[b].start_pos + i);
          for (int g = 0; g < G; ++g) {
            const int hq = h * G + g;
            if (!spans[b].empty())
              attend_spans(cache_, items[b].seq, l, h, &q_[(t * Hq + hq) * D], qpos, D, scale, spans[b][hq], scores,
                           &att_[(t * Hq + hq) * D]);
            else
              attend_one(cache_, items[b].seq, l, h, &q_[(t * Hq + hq) * D], qpos, D, scale, scores,
                         &att_[(t * Hq + hq) * D], cs);
          }
        }
      }
    }
    // Policy hook per sequence, then compaction.
    if (policy) {
      const auto tp = clock::now();
      for (size_t b = 0; b < items.size(); ++b) {
        const ForwardItem& it = items[b];
        std::vector<float> wq_buf;
        LayerStep st = policy_driver::layer_step(cache_, it, l, dims, wq_buf);
        if (needs.layer_input) st.layer_input = &xn_[row0[b] * H];
        if (needs.keys_pre_rope) st.keys_pre_rope = &kpre_[row0[b] * Hkv * D];
        if (needs.queries_pre_rope) st.queries_pre_rope = &qpre_[row0[b] * Hq * D];
        std::vector<std::vector<float>> cs_item;
        if (needs.attention_colsum) {
          cs_item.assign(colsum.begin() + b * Hkv, colsum.begin() + (b + 1) * Hkv);
          st.attention_colsum = &cs_item;
        }
        std::vector<std::vector<float>> wa_cache(Hkv);
        std::vector<int> wa_w(Hkv, -1);
        QueryHistory* qh = it.history;
        st.window_attention = [&, qh, l](int h, int* w_out) -> const std::vector<float>& {
          if (!qh || qh->q.empty()) fail("policy asked for window attention it did not declare");
          if (wa_w[h] < 0) {
            const int w = qh->count[l];
            const int32_t L = cache_.length(st.seq, l, h);
            std::vector<float>& out = wa_cache[h];
            out.assign(static_cast<size_t>(G) * w * L, 0.0f);
            std::vector<float> sc(L);
            for (int g = 0; g < G; ++g)
              for (int j = 0; j < w; ++j) {
                // j-th oldest of the last w queries
                const int slot = (qh->head[l] - w + j + qh->window) % qh->window;
                const float* qv = &qh->q[l][(static_cast<size_t>(slot) * Hq + h * G + g) * D];
                const int32_t qpos = qh->pos[l][slot];
                float mx = -std::numeric_limits<float>::infinity();
                for (int32_t t = 0; t < L; ++t) {
                  sc[t] = std::as_const(cache_).position(st.seq, l, h, t) <= qpos
                              ? dot(qv, std::as_const(cache_).key(st.seq, l, h, t), D) * scale
                              : -std::numeric_limits<float>::infinity();
                  mx = std::max(mx, sc[t]);
                }
                float sum = 0;
                for (int32_t t = 0; t < L; ++t) sum += (sc[t] = std::exp(sc[t] - mx));
                float* o = &out[(static_cast<size_t>(g) * w + j) * L];
                for (int32_t t = 0; t < L; ++t) o[t] = sc[t] / sum;
              }
            wa_w[h] = w;
          }
          if (w_out) *w_out = wa_w[h];
          return wa_cache[h];
        };
        evicted += policy_driver::run_layer(*policy, st, compact);
      }
      policy_s += std::chrono::duration<double>(clock::now() - tp).count();
    }
    // Output projection + residual.
    if (bf16_points_) round_bf16(att_.data(), T * Hq * D);
    matmul_nt(att_.data(), w.wo, nullptr, xn_.data(), T, static_cast<int64_t>(Hq) * D, H);
    for (int64_t i = 0; i < T * H; ++i) x_[i] += xn_[i];
    // MLP.
    rms_norm(x_.data(), w.mlp_norm, xn_.data(), T, H, eps);
    if (bf16_points_) round_bf16(xn_.data(), T * H);
    matmul_nt(xn_.data(), w.w_gate, nullptr, gate_.data(), T, H, I);
    matmul_nt(xn_.data(), w.w_up, nullptr, up_.data(), T, H, I);
#pragma omp parallel for schedule(static) if (T * I > kParallelWork)
    for (int64_t i = 0; i < T * I; ++i) {
      const float g = gate_[i];
      gate_[i] = g / (1.0f + std::exp(-g)) * up_[i];
    }
    if (bf16_points_) round_bf16(gate_.data(), T * I);
    matmul_nt(gate_.data(), w.w_down, nullptr, xn_.data(), T, I, H);
    for (int64_t i = 0; i < T * H; ++i) x_[i] += xn_[i];
  }

  // Step-end hook (policies with budgets across layers, e.g. TRIM-KV's global budget).
  if (policy) {
    const auto tp = clock::now();
    evicted += policy_driver::run_step_end(*policy, cache_, items, dims, compact);
    policy_s += std::chrono::duration<double>(clock::now() - tp).count();
  }

  // Final norm + LM head for the last token of each item that wants logits.
  std::vector<int64_t> rows;
  for (size_t b = 0; b < items.size(); ++b)
    if (items[b].want_logits) rows.push_back(row0[b + 1] - 1);
  tmp_.resize(rows.size() * H);
  for (size_t r = 0; r < rows.size(); ++r)
    rms_norm(&x_[rows[r] * H], m_.final_norm(), &tmp_[r * H], 1, H, eps);
  if (bf16_points_) round_bf16(tmp_.data(), static_cast<int64_t>(rows.size()) * H);
  logits.resize(rows.size() * static_cast<size_t>(V));
  if (!rows.empty()) matmul_nt(tmp_.data(), m_.lm_head(), nullptr, logits.data(), rows.size(), H, V);
  if (stats) {
    stats->total_s = std::chrono::duration<double>(clock::now() - t_start).count();
    stats->policy_s = policy_s;
    stats->evicted = evicted;
    stats->kv_read_tokens = std::move(kv_read);
  }
}

}  // namespace kvb
