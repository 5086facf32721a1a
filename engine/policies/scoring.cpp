#include "engine/policies/scoring.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/kernels/matmul.h"
#include "engine/kernels/quants.h"
#include "engine/util/error.h"

namespace kvb::scoring {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}

Gqa parse_gqa(const std::string& s, const std::string& what) {
  if (s == "max_logits") return Gqa::kMaxLogits;
  if (s == "max") return Gqa::kMax;
  if (s == "mean") return Gqa::kMean;
  fail("{}: expected max_logits, max or mean, got '{}'", what, s);
}

Pool parse_pool(const std::string& s, const std::string& what) {
  if (s == "none") return Pool::kNone;
  if (s == "max") return Pool::kMax;
  if (s == "avg") return Pool::kAvg;
  fail("{}: expected none, max or avg, got '{}'", what, s);
}

std::vector<double> lag_relative_info(const std::function<const float*(int32_t)>& row, int D, int32_t first, int32_t lag) {
  std::vector<float> lo(D, std::numeric_limits<float>::infinity()), hi(D, kNegInf);
  for (int32_t t = first + lag; t < first + 2 * lag; ++t) {
    const float* r = row(t);
    for (int d = 0; d < D; ++d) {
      lo[d] = std::min(lo[d], r[d]);
      hi[d] = std::max(hi[d], r[d]);
    }
  }
  std::vector<double> out(lag), x(D);
  for (int32_t t = 0; t < lag; ++t) {
    const float* r = row(first + t);
    double mean = 0;
    for (int d = 0; d < D; ++d) mean += (x[d] = (r[d] - lo[d]) / (hi[d] - lo[d]));
    mean /= D;
    double ss = 0;
    for (int d = 0; d < D; ++d) ss += (x[d] - mean) * (x[d] - mean);
    out[t] = std::sqrt(ss / (D - 1));
  }
  const double m = *std::max_element(out.begin(), out.end());
  double z = 0;
  for (double& v : out) z += (v = std::exp(v - m));
  for (double& v : out) v /= z;
  return out;
}

std::vector<double> row_sq_norms(const KVCache& cache, SeqId seq, int layer, int h, bool values) {
  const int32_t L = cache.length(seq, layer, h);
  const int D = cache.config().head_dim;
  std::vector<double> out(L);
  for (int32_t i = 0; i < L; ++i) {
    const float* r = values ? cache.value(seq, layer, h, i) : cache.key(seq, layer, h, i);
    double n2 = 0;
    for (int d = 0; d < D; ++d) n2 += static_cast<double>(r[d]) * r[d];
    out[i] = n2;
  }
  return out;
}

void rope_rotate(const float* x, int D, int64_t pos, const float* inv_freq, float mscale, float* out) {
  const int half = D / 2;
  for (int i = 0; i < half; ++i) {
    const double ang = static_cast<double>(static_cast<float>(pos) * inv_freq[i]);
    const float c = static_cast<float>(std::cos(ang) * mscale), s = static_cast<float>(std::sin(ang) * mscale);
    out[i] = x[i] * c - x[i + half] * s;
    out[i + half] = x[i + half] * c + x[i] * s;
  }
}

void MeanRope::apply(const double* x, double* y, int stride) const {
  const int half = static_cast<int>(c.size());
  for (int i = 0; i < half; ++i) {
    const double a = x[i * stride], b = x[(i + half) * stride];
    y[i * stride] = c[i] * a - s[i] * b;
    y[(i + half) * stride] = c[i] * b + s[i] * a;
  }
}

MeanRope mean_rope(const LayerStep& step, int64_t first, int64_t n, const char* policy) {
  if (!step.rope_inv_freq) fail("policy '{}': the backend did not pass the model's RoPE", policy);
  const int half = step.head_dim / 2;
  MeanRope r{std::vector<double>(half, 0.0), std::vector<double>(half, 0.0)};
  for (int64_t p = first; p < first + n; ++p)
    for (int i = 0; i < half; ++i) {
      const float ang = static_cast<float>(p) * step.rope_inv_freq[i];
      r.c[i] += static_cast<float>(std::cos(static_cast<double>(ang)) * step.rope_mscale);
      r.s[i] += static_cast<float>(std::sin(static_cast<double>(ang)) * step.rope_mscale);
    }
  for (int i = 0; i < half; ++i) {
    r.c[i] /= static_cast<double>(n);
    r.s[i] /= static_cast<double>(n);
  }
  return r;
}

void QueryMoments::add(const LayerStep& step, int64_t first_pos, bool second, const char* policy) {
  if (!step.queries_pre_rope)
    fail(
        "policy '{}' needs the pre-RoPE queries (LayerStep::queries_pre_rope), which this backend does not "
        "provide; use the CPU backend",
        policy);
  const int Hq = step.num_q_heads, D = step.head_dim;
  if (sum.empty()) sum.assign(static_cast<size_t>(Hq) * D, 0.0);
  if (second && sq.empty()) sq.assign(static_cast<size_t>(Hq) * D * D, 0.0);
  const int64_t pos0 = step.seq_len - step.n_new;
  for (int i = 0; i < step.n_new; ++i) {
    if (pos0 + i < first_pos) continue;
    ++n;
    for (int hq = 0; hq < Hq; ++hq) {
      const float* q = step.queries_pre_rope + (static_cast<size_t>(i) * Hq + hq) * D;
      double* s = &sum[static_cast<size_t>(hq) * D];
      for (int a = 0; a < D; ++a) s[a] += q[a];
      if (!second) continue;
      double* m = &sq[static_cast<size_t>(hq) * D * D];
      for (int a = 0; a < D; ++a) {
        const double qa = q[a];
        for (int b = 0; b <= a; ++b) m[a * D + b] += qa * q[b];  // lower triangle
      }
    }
  }
}

std::vector<float> value_out_l1(const LayerStep& step, int h, const char* policy) {
  if (!step.out_proj_head) fail("policy '{}': LayerStep::out_proj_head is not set (PolicyNeeds::out_proj)", policy);
  const int D = step.head_dim, G = step.num_q_heads / step.num_kv_heads, H = step.hidden_size;
  const int32_t L = head_length(step, h);
  std::vector<float> w(static_cast<size_t>(G) * H * D);  // [G·H, D]: the group's columns of W_o, one row per output
  for (int g = 0; g < G; ++g) step.out_proj_head(h * G + g, &w[static_cast<size_t>(g) * H * D]);
  const Mat wm = Mat::of_f32(w.data(), static_cast<int64_t>(G) * H, D);
  std::vector<float> out(L);
  const KVCache& cache = *step.cache;
  // Chunks of kRows tokens: their values gathered into [rows, D], projected by the engine's f32
  // GEMM (each output one fixed-order sum whatever the chunk, matmul_nt), then the L1 sums.
  constexpr int32_t kRows = 256;
  std::vector<float> v(static_cast<size_t>(kRows) * D), y(static_cast<size_t>(kRows) * G * H);
  for (int32_t i0 = 0; i0 < L; i0 += kRows) {
    const int32_t n = std::min(kRows, L - i0);
    for (int32_t i = 0; i < n; ++i) {
      const float* vi = cache.value(step.seq, step.layer, h, i0 + i);
      std::copy(vi, vi + D, &v[static_cast<size_t>(i) * D]);
    }
    matmul_nt(v.data(), wm, nullptr, y.data(), n, D, static_cast<int64_t>(G) * H);
    for (int32_t i = 0; i < n; ++i) {
      const float* yi = &y[static_cast<size_t>(i) * G * H];
      double sum = 0;
      for (int g = 0; g < G; ++g) {
        double l1 = 0;
        for (int r = 0; r < H; ++r) l1 += std::fabs(yi[g * H + r]);
        sum += l1;
      }
      out[i0 + i] = static_cast<float>(sum / G);
    }
  }
  return out;
}

int32_t head_length(const LayerStep& step, int h) { return step.cache->length(step.seq, step.layer, h); }

void accumulate_attention(LayerStep& step, const char* policy, int slot) {
  if (!step.attention_colsum) fail("policy '{}': LayerStep::attention_colsum is not set", policy);
  for (int h = 0; h < step.num_kv_heads; ++h) {
    const auto& col = (*step.attention_colsum)[h];
    const int32_t L = step.cache->length(step.seq, step.layer, h);
    if (static_cast<int32_t>(col.size()) != L)
      fail("policy '{}': attention_colsum of head {} has {} entries, cache holds {}", policy, h, col.size(), L);
    for (int32_t i = 0; i < L; ++i) step.cache->scalars(step.seq, step.layer, h, i)[slot] += col[i];
  }
}

std::vector<float> window_logits(const LayerStep& step, int h, int* w_out) {
  if (!step.window_queries)
    fail("policy: LayerStep::window_queries is not set (the policy declared window_queries > 0)");
  int w = 0;
  const float* q = step.window_queries(&w);
  const int G = step.num_q_heads / step.num_kv_heads;
  const int D = step.head_dim;
  const int32_t L = step.cache->length(step.seq, step.layer, h);
  const float scale = step.attn_scale > 0 ? step.attn_scale : 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> out(static_cast<size_t>(G) * w * L);
  for (int32_t i = 0; i < L; ++i) {
    const float* k = step.cache->key(step.seq, step.layer, h, i);
    const int64_t kpos = step.cache->position(step.seq, step.layer, h, i);
    for (int g = 0; g < G; ++g) {
      const int qh = h * G + g;
      for (int r = 0; r < w; ++r) {
        const int64_t qpos = step.seq_len - w + r;
        float v = kNegInf;
        if (kpos <= qpos) {
          const float* qv = q + (static_cast<size_t>(qh) * w + r) * D;
          float dot = 0.f;
          for (int d = 0; d < D; ++d) dot += qv[d] * k[d];
          v = dot * scale;
        }
        out[(static_cast<size_t>(g) * w + r) * L + i] = v;
      }
    }
  }
  *w_out = w;
  return out;
}

void softmax_inplace(std::span<float> x) {
  if (x.empty()) return;
  float m = kNegInf;
  for (float v : x) m = std::max(m, v);
  if (m == kNegInf) {
    std::fill(x.begin(), x.end(), 0.f);
    return;
  }
  double sum = 0;
  for (float& v : x) {
    v = std::exp(v - m);
    sum += v;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (float& v : x) v *= inv;
}

std::vector<float> window_probs(LayerStep& step, int h, int* w_out) {
  if (step.window_attention) {
    std::vector<float> p = step.window_attention(h, w_out);
    return p;
  }
  std::vector<float> p = window_logits(step, h, w_out);
  const int32_t L = step.cache->length(step.seq, step.layer, h);
  for (size_t row = 0; L > 0 && row < p.size() / L; ++row) softmax_inplace(std::span<float>(p.data() + row * L, L));
  return p;
}

std::vector<float> window_importance(LayerStep& step, int h, Gqa gqa, int* w_out) {
  const int32_t L = step.cache->length(step.seq, step.layer, h);
  const int G = step.num_q_heads / step.num_kv_heads;
  int w = 0;
  std::vector<float> out;
  if (gqa == Gqa::kMaxLogits) {
    std::vector<float> lg = window_logits(step, h, &w);
    *w_out = w;
    const int32_t n = L - w;
    if (n <= 0) return {};
    out.assign(n, 0.f);
    std::vector<float> row(n);
    for (int r = 0; r < w; ++r) {
      for (int32_t i = 0; i < n; ++i) {
        float m = kNegInf;
        for (int g = 0; g < G; ++g) m = std::max(m, lg[(static_cast<size_t>(g) * w + r) * L + i]);
        row[i] = m;
      }
      softmax_inplace(row);
      for (int32_t i = 0; i < n; ++i) out[i] += row[i];
    }
  } else {
    std::vector<float> p = window_probs(step, h, &w);
    *w_out = w;
    const int32_t n = L - w;
    if (n <= 0) return {};
    out.assign(n, 0.f);
    for (int r = 0; r < w; ++r)
      for (int32_t i = 0; i < n; ++i) {
        float acc = gqa == Gqa::kMax ? kNegInf : 0.f;
        for (int g = 0; g < G; ++g) {
          float v = p[(static_cast<size_t>(g) * w + r) * L + i];
          acc = gqa == Gqa::kMax ? std::max(acc, v) : acc + v;
        }
        out[i] += gqa == Gqa::kMax ? acc : acc / G;
      }
  }
  for (float& v : out) v /= static_cast<float>(w);
  return out;
}

std::vector<float> window_scores(LayerStep& step, int h, const WindowScoreSpec& spec, int* w_out) {
  if (step.window_scores) return step.window_scores(h, spec, w_out);
  std::vector<float> imp = window_importance(step, h, spec.gqa, w_out);
  return pool1d(imp, spec.kernel, spec.pool);
}

namespace {
float mlp_act(HeadMlp::Act a, float v) {
  if (a == HeadMlp::Act::kSilu) return v / (1.0f + std::exp(-v));
  return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
}
}  // namespace

void head_mlp(LayerStep& step, const HeadMlp& m, const float* x, int rows, int head, float* out) {
  if (m.heads < 1 || m.in < 1 || m.hidden < 1 || !m.w1 || !m.b1 || !m.w2 || !m.b2)
    fail("head_mlp: incomplete MLP (heads {}, in {}, hidden {})", m.heads, m.in, m.hidden);
  if (head >= m.heads) fail("head_mlp: head {} of {}", head, m.heads);
  if (head >= 0 && m.shared_hidden) fail("head_mlp: a single head of a shared-hidden MLP is not supported");
  if (!x) {
    if (!m.shared_hidden || head >= 0)
      fail("head_mlp: x = null (layer inputs) needs a shared-hidden MLP over all heads");
    if (m.in != step.hidden_size) fail("head_mlp: MLP input width {} != hidden size {}", m.in, step.hidden_size);
    if (rows != step.n_new) fail("head_mlp: {} rows for {} new tokens", rows, step.n_new);
  }
  if (step.head_mlp) {
    step.head_mlp(m, x, rows, head, out);
    return;
  }
  if (!x) {
    if (!step.layer_input) fail("head_mlp: LayerStep::layer_input is not set");
    x = step.layer_input;
  }
  // The layer as matrix products on the f32 tile kernel (engine/kernels quants.h F32TileFn):
  // hidden = act(X·W1ᵀ + b1) for all rows at once, tiles of 16 hidden units split over the
  // OpenMP threads, then out = hidden·w2ᵀ + b2. Each element is one tile-kernel sum, whose bits
  // depend neither on the number of rows nor on the thread split, so a token's score is the same
  // whatever prefill chunk or decode step computes it. (A scalar loop per row took 70 % of a
  // TRIM-KV prefill at 2K tokens on the 2-core machine, one thread working.)
  const int I = m.hidden, C = m.in;
  const F32TileFn tile = f32_tile_fn(best_isa());
  constexpr int kTile = 16;                 // weight rows per tile-kernel call (its maximum)
  thread_local std::vector<float> hid_buf;  // the caller's; the workers write through `hid`
  hid_buf.resize(static_cast<size_t>(rows) * I);
  float* const hid = hid_buf.data();
  // One MLP instance h1 over `rows` inputs xs[r·xstride …) → out[r·ostride + oh] for the heads
  // oh ∈ [h_lo, h_hi) (one head, or every head of a shared hidden layer).
  auto instance = [&](int h1, const float* xs, int64_t xstride, int h_lo, int h_hi, float* o, int64_t ostride) {
    const int tiles = (I + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(rows) * I * C >= (1 << 16))
    for (int t = 0; t < tiles; ++t) {
      const int k0 = t * kTile, nk = std::min(kTile, I - k0);
      const float* w[kTile];
      for (int k = 0; k < nk; ++k) w[k] = m.w1 + (static_cast<size_t>(h1) * I + k0 + k) * C;
      tile(C, w, nk, xs, rows, xstride, hid + k0, I);
      const float* b = m.b1 + static_cast<size_t>(h1) * I + k0;
      for (int r = 0; r < rows; ++r) {
        float* hr = hid + static_cast<size_t>(r) * I + k0;
        for (int k = 0; k < nk; ++k) hr[k] = mlp_act(m.act, hr[k] + b[k]);
      }
    }
    for (int h0 = h_lo; h0 < h_hi; h0 += kTile) {
      const int nh = std::min(kTile, h_hi - h0);
      const float* w[kTile];
      for (int h = 0; h < nh; ++h) w[h] = m.w2 + static_cast<size_t>(h0 + h) * I;
      tile(I, w, nh, hid, rows, I, o + (h0 - h_lo), ostride);
      for (int r = 0; r < rows; ++r)
        for (int h = 0; h < nh; ++h) o[static_cast<size_t>(r) * ostride + (h0 - h_lo) + h] += m.b2[h0 + h];
    }
  };
  if (head >= 0) instance(head, x, C, head, head + 1, out, 1);
  else if (m.shared_hidden) instance(0, x, C, 0, m.heads, out, m.heads);
  else
    for (int h = 0; h < m.heads; ++h)
      instance(h, x + static_cast<size_t>(h) * C, static_cast<int64_t>(m.heads) * C, h, h + 1, out + h, m.heads);
}

std::vector<float> pool1d(std::span<const float> x, int kernel, Pool type) {
  std::vector<float> out(x.begin(), x.end());
  if (type == Pool::kNone || kernel <= 1) return out;
  const int64_t n = static_cast<int64_t>(x.size());
  const int pad = kernel / 2;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t lo = i - pad, hi = i - pad + kernel;  // window [lo, hi)
    if (type == Pool::kMax) {
      float m = kNegInf;
      for (int64_t j = std::max<int64_t>(lo, 0); j < std::min(hi, n); ++j) m = std::max(m, x[j]);
      out[i] = m;
    } else {
      double s = 0;
      for (int64_t j = std::max<int64_t>(lo, 0); j < std::min(hi, n); ++j) s += x[j];
      out[i] = static_cast<float>(s / kernel);
    }
  }
  return out;
}

std::vector<float> key_redundancy_mean(const KVCache& cache, SeqId seq, int layer, int h, float threshold,
                                       bool zero_first_when_no_match) {
  const int32_t L = cache.length(seq, layer, h);
  const int D = cache.config().head_dim;
  std::vector<float> kn(static_cast<size_t>(L) * D);
  for (int32_t i = 0; i < L; ++i) {
    const float* k = cache.key(seq, layer, h, i);
    double n2 = 0;
    for (int d = 0; d < D; ++d) n2 += static_cast<double>(k[d]) * k[d];
    const float inv = 1.0f / (static_cast<float>(std::sqrt(n2)) + 1e-8f);
    for (int d = 0; d < D; ++d) kn[static_cast<size_t>(i) * D + d] = k[d] * inv;
  }
  // S in blocks of kRows rows: each block's similarities by the f32 tile kernel (each S[i,k] one
  // fixed-order sum whatever the blocking or thread split), rows edited in parallel, then the
  // column sums accumulated in row order, the columns split over the threads. The result does
  // not depend on the thread count. (A scalar double loop was 67 % of an R-KV / G-KV prefill at
  // 2K tokens on the 2-core machine: O(L²·D) per head at the end of the prompt.)
  constexpr int32_t kRows = 64, kTile = 16;
  const F32TileFn tile = f32_tile_fn(best_isa());
  std::vector<double> col(L, 0.0);
  std::vector<float> blk(static_cast<size_t>(kRows) * std::max<int32_t>(L, 1));
  const float* knp = kn.data();
  float* const bp = blk.data();
  double* const cp = col.data();
  const bool par = static_cast<int64_t>(L) * L * D >= (1 << 18);
  for (int32_t i0 = 0; i0 < L; i0 += kRows) {
    const int32_t nr = std::min(kRows, L - i0);
    const int32_t tiles = (L + kTile - 1) / kTile;
#pragma omp parallel if (par)
    {
#pragma omp for schedule(static)
      for (int32_t t = 0; t < tiles; ++t) {
        const int32_t k0 = t * kTile, nk = std::min(kTile, L - k0);
        const float* w[kTile];
        for (int32_t k = 0; k < nk; ++k) w[k] = knp + static_cast<size_t>(k0 + k) * D;
        tile(D, w, nk, knp + static_cast<size_t>(i0) * D, nr, D, bp + k0, L);
      }
#pragma omp for schedule(static)
      for (int32_t r = 0; r < nr; ++r) {
        float* row = bp + static_cast<size_t>(r) * L;
        const int32_t i = i0 + r;
        row[i] = 0.f;
        int32_t last = -1;
        for (int32_t k = L - 1; k >= 0; --k)
          if (row[k] > threshold) {
            last = k;
            break;
          }
        if (last >= 0) row[last] = 0.f;
        else if (zero_first_when_no_match && L > 0) row[0] = 0.f;
      }
#pragma omp for schedule(static)
      for (int32_t k = 0; k < L; ++k)
        for (int32_t r = 0; r < nr; ++r) cp[k] += bp[static_cast<size_t>(r) * L + k];
    }
  }
  std::vector<float> out(L);
  for (int32_t k = 0; k < L; ++k) out[k] = static_cast<float>(col[k] / L);
  return out;
}

std::vector<int32_t> mask_indices(std::span<const char> mask, bool set) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < mask.size(); ++i)
    if ((mask[i] != 0) == set) out.push_back(static_cast<int32_t>(i));
  return out;
}

std::vector<int32_t> top_k_indices(std::span<const float> scores, int64_t k) {
  const int32_t n = static_cast<int32_t>(scores.size());
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  if (k >= n) return idx;
  if (k <= 0) return {};
  auto key = [&](int32_t i) {
    float v = scores[i];
    return std::isnan(v) ? kNegInf : v;
  };
  auto better = [&](int32_t a, int32_t b) {
    float va = key(a), vb = key(b);
    if (va != vb) return va > vb;
    return a < b;
  };
  std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), better);
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<HeadToken> layer_top_k(const std::vector<std::vector<float>>& scores, int64_t take,
                                   const std::vector<std::vector<char>>* skip) {
  struct Cand {
    float score;
    HeadToken at;
  };
  std::vector<Cand> cands;
  for (int h = 0; h < static_cast<int>(scores.size()); ++h)
    for (int32_t i = 0; i < static_cast<int32_t>(scores[h].size()); ++i)
      if (!skip || !(*skip)[h][i]) cands.push_back({std::isnan(scores[h][i]) ? kNegInf : scores[h][i], {h, i}});
  const int64_t n = std::clamp<int64_t>(take, 0, static_cast<int64_t>(cands.size()));
  std::partial_sort(cands.begin(), cands.begin() + n, cands.end(), [](const Cand& a, const Cand& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.at.head != b.at.head ? a.at.head < b.at.head : a.at.idx < b.at.idx;
  });
  std::vector<HeadToken> out(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) out[c] = cands[c].at;
  return out;
}

std::vector<int32_t> select_keep(std::span<const float> scores, int32_t L, int64_t budget, int32_t sinks, int32_t window) {
  std::vector<int32_t> keep;
  if (budget >= L) {
    keep.resize(L);
    std::iota(keep.begin(), keep.end(), 0);
    return keep;
  }
  const int32_t s_end = std::clamp(sinks, 0, L);
  const int32_t w_start = std::max(s_end, L - std::max(window, 0));
  const int64_t n_sel = budget - s_end - (L - w_start);
  std::vector<int32_t> mid;
  if (n_sel > 0) {
    std::vector<float> cand(scores.begin() + s_end, scores.begin() + w_start);
    mid = top_k_indices(cand, n_sel);
    for (auto& i : mid) i += s_end;
  }
  keep.reserve(budget);
  for (int32_t i = 0; i < s_end; ++i) keep.push_back(i);
  keep.insert(keep.end(), mid.begin(), mid.end());
  for (int32_t i = w_start; i < L; ++i) keep.push_back(i);
  return keep;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double hash_uniform(std::initializer_list<uint64_t> words) {
  uint64_t h = 0x243F6A8885A308D3ull;
  for (uint64_t w : words) h = splitmix64(h ^ w);
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace kvb::scoring
