// `entropy_chunkkv`: ChunkKV's chunks, gated by how evenly a chunk's score is spread over its
// tokens: an important chunk whose score sits on a few tokens keeps only its best few, and the
// tokens it frees go to further chunks.
// Sources: Liu et al., "ChunkKV" (arXiv 2502.00299, §3.1: fixed-size chunks ranked by the
// observation-window attention their tokens receive); kvpress 0.5.5 EntropyGatedChunkKVPress
// (NVIDIA/kvpress, PyPI kvpress==0.5.5, kvpress/presses/entropy_gated_chunkkv_press.py), which
// extends ChunkKVPress with the entropy gate, wrapping SnapKVPress (window 64, kernel 5) as
// kvbench's `chunkkv` does.
// What it keeps (kvpress's rule, in our words): the layer's token score s (chunkkv's: SnapKV
// summed over the kv heads, window tokens at the largest score + 1) is cut into chunks of
// `chunk` = 10 tokens (the last one holds the L mod 10 newest). Each chunk gets its mean score and
// the normalised entropy of its scores (rebased by their minimum when negative, divided by their
// sum + 1e-8, H = −Σ p·ln(p + 1e-8), over ln(chunk length), clamped to [0, 1]; a 1-token chunk
// has entropy 0). A chunk is "spiky" when its mean is at least the lower median of the means and
// its entropy is below the lower median of the entropies. Chunks are visited by decreasing mean;
// each takes min(its length, what is left of the budget) tokens, a spiky one at most
// `low_entropy_chunk` = 4; a chunk taking fewer than all its tokens takes its best ones. Budget
// left when the chunks run out goes to the best remaining tokens. So exactly the budget is kept.
// Choices: budget_kind=ratio keeps max(1, ⌊L · ratio⌋) (kvpress's budget with ratio = 1 −
// compression_ratio), a token budget B keeps B. Entropies are computed in double (kvpress: f32).
// Ties: equal chunk means are visited earlier chunk first, equal token scores go to the earlier
// token (kvpress's argsort/topk leave both open; the golden marks such tokens as near-ties).
// Decode: the kvbench schedule (buffer 128; `decode=false` is kvpress's prefill-only press).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/policies/chunkkv.h"
#include "engine/policies/registration.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

/// Normalised entropy of the n ≥ 1 scores x[0, n) (kvpress EntropyGatedChunkKVPress.compress,
/// step 1): 0 for n = 1, else H(p) / ln n clamped to [0, 1] with p = x' / (Σx' + 1e-8),
/// x' = x − min(min x, 0), H = −Σ p ln(p + 1e-8); double.
double chunk_entropy(const float* x, int32_t n) {
  if (n <= 1) return 0.0;
  constexpr double kEps = 1e-8;
  const double lo = std::min(0.0, static_cast<double>(*std::min_element(x, x + n)));
  double sum = 0.0;
  for (int32_t i = 0; i < n; ++i) sum += x[i] - lo;
  double h = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    const double p = (x[i] - lo) / (sum + kEps);
    h -= p * std::log(p + kEps);
  }
  return std::clamp(h / std::log(static_cast<double>(n)), 0.0, 1.0);
}

/// torch.median's value: the lower median, sorted(v)[(n − 1) / 2] (v not empty).
template <class T>
T lower_median(std::vector<T> v) {
  auto mid = v.begin() + static_cast<std::ptrdiff_t>((v.size() - 1) / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

class EntropyChunkKVPolicy : public ChunkKVPolicy {
 public:
  explicit EntropyChunkKVPolicy(PolicyParams p) : ChunkKVPolicy("entropy_chunkkv", std::move(p), /*min_chunk=*/2) {
    params_.bind({{"low_entropy_chunk", &low_, within(1, 1 << 20)}});
    if (low_ >= chunk_) fail("policy 'entropy_chunkkv': low_entropy_chunk ({}) must be below chunk ({})", low_, chunk_);
  }

 protected:
  /// Exactly the budget's tokens (ascending): whole chunks by decreasing mean, spiky ones cut to
  /// their best low_entropy_chunk tokens, the rest of the budget on the best remaining tokens.
  std::vector<int32_t> select(const std::vector<float>& scores, int32_t L, int64_t B) override {
    int64_t budget = ratio_kind_ ? static_cast<int64_t>(static_cast<double>(L) * ratio_) : B;
    budget = std::clamp<int64_t>(budget, 1, L);
    const std::vector<float> mean = chunk_means(scores, L);
    const auto n = static_cast<int32_t>(mean.size());
    std::vector<double> ent(n);
    for (int32_t c = 0; c < n; ++c)
      ent[c] = chunk_entropy(scores.data() + static_cast<size_t>(c) * chunk_, std::min(chunk_, L - c * chunk_));
    const float mean_med = lower_median(mean);
    const double ent_med = lower_median(ent);
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return mean[a] > mean[b]; });
    std::vector<char> keep(L, 0);
    for (int32_t c : order) {
      if (budget <= 0) break;
      const int32_t lo = c * chunk_, len = std::min(chunk_, L - lo);
      int64_t take = std::min<int64_t>(len, budget);
      if (mean[c] >= mean_med && ent[c] < ent_med) take = std::min<int64_t>(take, low_);
      if (take == len) {
        std::fill_n(keep.begin() + lo, len, 1);
      } else {
        for (int32_t i : scoring::top_k_indices(std::span<const float>(scores.data() + lo, len), take))
          keep[lo + i] = 1;
      }
      budget -= take;
    }
    if (budget > 0) {
      const std::vector<int32_t> rest = scoring::mask_indices(keep, false);
      std::vector<float> s(rest.size());
      for (size_t j = 0; j < rest.size(); ++j) s[j] = scores[rest[j]];
      for (int32_t j : scoring::top_k_indices(s, budget)) keep[rest[j]] = 1;
    }
    return scoring::mask_indices(keep);
  }

 private:
  int32_t low_ = 4;
};

}  // namespace

KVB_POLICY(entropy_chunkkv) {
  return policy_entry<EntropyChunkKVPolicy>("entropy_chunkkv").with_tests({.min_budget = 65});
}

}  // namespace kvb
