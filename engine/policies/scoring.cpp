#include "engine/policies/scoring.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

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

int32_t head_length(const LayerStep& step, int h) { return step.cache->length(step.seq, step.layer, h); }

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
  for (size_t row = 0; L > 0 && row < p.size() / L; ++row)
    softmax_inplace(std::span<float>(p.data() + row * L, L));
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
    if (!m.shared_hidden || head >= 0) fail("head_mlp: x = null (layer inputs) needs a shared-hidden MLP over all heads");
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
  const int I = m.hidden, C = m.in;
  std::vector<float> hid(I);
  auto hidden_of = [&](const float* xr, int h1) {
    for (int k = 0; k < I; ++k) {
      const float* w = m.w1 + (static_cast<size_t>(h1) * I + k) * C;
      float acc = m.b1[static_cast<size_t>(h1) * I + k];
      for (int c = 0; c < C; ++c) acc += w[c] * xr[c];
      hid[k] = mlp_act(m.act, acc);
    }
  };
  auto out_of = [&](int h) {
    const float* w = m.w2 + static_cast<size_t>(h) * I;
    float acc = m.b2[h];
    for (int k = 0; k < I; ++k) acc += w[k] * hid[k];
    return acc;
  };
  for (int r = 0; r < rows; ++r) {
    if (head >= 0) {
      hidden_of(x + static_cast<size_t>(r) * C, head);
      out[r] = out_of(head);
    } else if (m.shared_hidden) {
      hidden_of(x + static_cast<size_t>(r) * C, 0);
      for (int h = 0; h < m.heads; ++h) out[static_cast<size_t>(r) * m.heads + h] = out_of(h);
    } else {
      for (int h = 0; h < m.heads; ++h) {
        hidden_of(x + (static_cast<size_t>(r) * m.heads + h) * C, h);
        out[static_cast<size_t>(r) * m.heads + h] = out_of(h);
      }
    }
  }
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

std::vector<float> key_redundancy_mean(const KVCache& cache, SeqId seq, int layer, int h,
                                       float threshold, bool zero_first_when_no_match) {
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
  std::vector<double> col(L, 0.0);
  std::vector<float> row(L);
  for (int32_t i = 0; i < L; ++i) {
    const float* a = &kn[static_cast<size_t>(i) * D];
    for (int32_t k = 0; k < L; ++k) {
      const float* b = &kn[static_cast<size_t>(k) * D];
      float dot = 0.f;
      for (int d = 0; d < D; ++d) dot += a[d] * b[d];
      row[k] = dot;
    }
    row[i] = 0.f;
    int32_t last = -1;
    for (int32_t k = L - 1; k >= 0; --k)
      if (row[k] > threshold) {
        last = k;
        break;
      }
    if (last >= 0) row[last] = 0.f;
    else if (zero_first_when_no_match && L > 0) row[0] = 0.f;
    for (int32_t k = 0; k < L; ++k) col[k] += row[k];
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

std::vector<int32_t> select_keep(std::span<const float> scores, int32_t L, int64_t budget,
                                 int32_t sinks, int32_t window) {
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
