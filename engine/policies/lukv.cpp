// `lukv`: LU-KV — each kv head of a layer gets its own share of the layer's budget from a budget
// curve computed offline, and keeps its best Expected Attention scores.
// Sources: "Predicting Future Utility: Global Combinatorial Optimization for Task-Agnostic KV
// Cache Eviction" (LU-KV, arXiv 2602.08585: the heads' budgets are allocated offline by a global
// optimisation of the future utility of their tokens, per compression level, and stored as a
// curve; github.com/baidu-baige/LU-KV, evaluation/curve_data); kvpress 0.5.5 LUKVPress
// (NVIDIA/kvpress, PyPI kvpress==0.5.5, kvpress/presses/lukv_press.py), whose default wraps
// ExpectedAttentionPress(epsilon=2e-2) with sink = 4 and window = 1. What kvpress does, in our
// words: the inner press scores the layer's tokens; the first `sink` and the last `window` tokens
// score above all others; the curve, a [99, layers, kv_heads] array of pruned fractions, is read
// at row round(100·r) − 1 for compression ratio r and the layer; each head keeps
// clamp(1 − p_h, 0, 1)·L tokens, rounded so that the layer keeps round(Σ) (the remainder to the
// largest fractional parts), at least 1; a head keeps its best-scoring tokens (a stable sort:
// ties to the earlier token).
// Curve: `curve=` a .npy file (little-endian f4/f8, C order) read by path; kvpress downloads one
// curve per (model, press) from LU-KV's repository (Llama-3.1-8B-Instruct with
// ExpectedAttentionPress). Without a curve every head prunes the ratio itself (plain Expected
// Attention with the sinks and the window protected).
// Choices: kvbench's ratio r is 1 − ratio (budget_kind=ratio) or 1 − B/L (a token budget B).
// Counts follow kvpress's f32 arithmetic. When a head's count is below sinks + window it keeps the
// protected tokens only (kvpress: the first of them). Decode: the kvbench schedule (buffer 128;
// `decode=false` is kvpress's prefill-only press), the counts recomputed at every compression.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/policies/expected_attention.h"
#include "engine/policies/registration.h"
#include "engine/util/error.h"
#include "engine/util/io.h"

namespace kvb {
namespace {

/// A float array read from a NumPy .npy file (format versions 1–3, little-endian f4 or f8, C
/// order): its shape and its values as f32.
struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/// Reads `path` (InputKind::kPolicyMetadata). Throws kvb::Error naming the file and what it
/// refuses: not an .npy file, another dtype than '<f4'/'<f8', Fortran order, a truncated body.
NpyArray load_npy(const std::string& path) {
  const std::string b = read_file(path, InputKind::kPolicyMetadata);
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0) fail_at(path, "", "not a NumPy .npy file");
  const int major = static_cast<unsigned char>(b[6]);
  const size_t hl_size = major == 1 ? 2 : 4, start = 8 + hl_size;
  if (b.size() < start) fail_at(path, "header", "truncated");
  size_t hl = 0;
  for (size_t i = 0; i < hl_size; ++i) hl |= static_cast<size_t>(static_cast<unsigned char>(b[8 + i])) << (8 * i);
  if (b.size() < start + hl) fail_at(path, "header", "truncated");
  const std::string h = b.substr(start, hl);
  const bool f8 = h.find("'descr': '<f8'") != std::string::npos;
  if (!f8 && h.find("'descr': '<f4'") == std::string::npos)
    fail_at(path, "descr", "expected little-endian float32 or float64 ('<f4', '<f8'): {}", h);
  if (h.find("'fortran_order': False") == std::string::npos) fail_at(path, "fortran_order", "must be False");
  const size_t lp = h.find("'shape': ("), rp = h.find(')', lp);
  if (lp == std::string::npos || rp == std::string::npos) fail_at(path, "shape", "missing");
  NpyArray a;
  size_t n = 1;
  for (size_t i = lp + 10; i < rp;) {
    while (i < rp && (h[i] == ' ' || h[i] == ',')) ++i;
    if (i >= rp) break;
    size_t used = 0;
    const int64_t d = std::stoll(h.substr(i, rp - i), &used);
    if (used == 0 || d < 0) fail_at(path, "shape", "malformed: {}", h);
    a.shape.push_back(d);
    n *= static_cast<size_t>(d);
    i += used;
  }
  const size_t width = f8 ? 8 : 4;
  if (b.size() < start + hl + n * width) fail_at(path, "data", "truncated: {} values expected", n);
  a.data.resize(n);
  const char* d = b.data() + start + hl;
  for (size_t i = 0; i < n; ++i) {
    if (f8) {
      double v;
      std::memcpy(&v, d + i * 8, 8);
      a.data[i] = static_cast<float>(v);
    } else {
      std::memcpy(&a.data[i], d + i * 4, 4);
    }
  }
  return a;
}

/// LU-KV around Expected Attention (see the file comment).
class LukvPolicy : public ExpectedAttentionPolicy {
 public:
  explicit LukvPolicy(PolicyParams p) : ExpectedAttentionPolicy("lukv", std::move(p)) {
    refuse_threshold("its budgets are per-head counts from a budget curve");
    // Its per-head counts replace the schedule's keep rule, which these wrapper options modify.
    if (press_chunk_ > 0) params_.fail_param("press_chunk", "is not offered: LU-KV sets per-head counts");
    if (press_block_ > 0) params_.fail_param("press_block", "is not offered: LU-KV sets per-head counts");
    if (!layer_ratios_.empty()) params_.fail_param("layer_ratios", "is not offered: LU-KV's curve sets the budgets");
    curve_path_ = params_.get_string("curve");
    if (!curve_path_.empty()) {
      curve_ = load_npy(curve_path_);
      if (curve_.shape.size() != 3 || curve_.shape[0] != 99)
        fail_at(curve_path_, "shape", "must be [99, layers, kv_heads] (one curve per compression percent)");
    }
  }

  /// At a compression point every head of the layer keeps its own count (head_counts) of tokens:
  /// the sinks, the window and the best Expected Attention scores.
  void on_layer_step(LayerStep& step) override {
    observe(step);
    const int64_t B = budget_now(step);
    if (B <= 0) return;
    const int32_t L = step.cache->length(step.seq, step.layer, 0);
    if (!due(step, L, B)) return;
    for (int h = 1; h < step.num_kv_heads; ++h)
      if (step.cache->length(step.seq, step.layer, h) != L)
        fail("policy 'lukv': kv heads of layer {} hold different lengths; LU-KV splits one layer budget", step.layer);
    const double r = ratio_kind_ ? 1.0 - ratio_at(step) : 1.0 - static_cast<double>(B) / L;
    const std::vector<int64_t> k = head_counts(step, r, L);
    std::vector<float> scores;
    for (int h = 0; h < step.num_kv_heads; ++h) {
      scores.assign(L, 0.f);
      score(step, h, L, scores);
      std::vector<int32_t> keep = scoring::select_keep(scores, L, k[h], sinks_, window_);
      if (static_cast<int32_t>(keep.size()) < L) step.keep(h, std::move(keep));
    }
  }

 private:
  /// kvpress LUKVPress.compress's counts for compression ratio r over L tokens: the curve row
  /// t = clamp(round(100 r) − 1, 0, 98) gives each kv head of the layer a pruned fraction p_h (no
  /// curve: p_h = r); ideal_h = clamp(1 − p_h, 0, 1)·L (f32); the total round(Σ ideal) (at least
  /// one per head, at most L per head) is split as ⌊ideal_h⌋ plus one for the heads with the
  /// largest fractional parts (ties: the lower head), each count then clamped to [1, L].
  std::vector<int64_t> head_counts(const LayerStep& step, double r, int32_t L) const {
    const int H = step.num_kv_heads;
    std::vector<float> ideal(H), frac(H);
    std::vector<int64_t> k(H);
    if (!curve_.data.empty() && (curve_.shape[1] != step.num_layers || curve_.shape[2] != H))
      fail_at(curve_path_, "shape", "[99, {}, {}] is not this model's [99, {}, {}]", curve_.shape[1], curve_.shape[2],
              step.num_layers, H);
    const int t = std::clamp(static_cast<int>(std::nearbyint(r * 100.0)) - 1, 0, 98);
    float sum = 0.f;
    for (int h = 0; h < H; ++h) {
      const float p =
          curve_.data.empty()
              ? static_cast<float>(r)
              : curve_.data[(static_cast<size_t>(t) * step.num_layers + step.layer) * static_cast<size_t>(H) + h];
      ideal[h] = std::clamp(1.0f - p, 0.0f, 1.0f) * static_cast<float>(L);
      sum += ideal[h];
    }
    const auto total = std::clamp<int64_t>(static_cast<int64_t>(std::nearbyint(sum)), H, int64_t{H} * L);
    int64_t rem = total;
    for (int h = 0; h < H; ++h) {
      k[h] = static_cast<int64_t>(std::floor(ideal[h]));
      frac[h] = ideal[h] - static_cast<float>(k[h]);
      rem -= k[h];
    }
    if (rem > 0)
      for (int32_t h : scoring::top_k_indices(frac, std::min<int64_t>(rem, H))) ++k[h];
    for (auto& v : k) v = std::clamp<int64_t>(v, 1, L);
    return k;
  }

  std::string curve_path_;
  NpyArray curve_;
};

}  // namespace

KVB_POLICY(lukv) { return policy_entry<LukvPolicy>("lukv").with_tests({.min_budget = 6}); }

}  // namespace kvb
