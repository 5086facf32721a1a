#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>

#include "engine/util/error.h"

namespace kvb {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

uint64_t derive_seed(uint64_t run_seed, const std::string& example_id, uint64_t sample_index) {
  // FNV-1a over the example id, mixed with the run seed and sample index through splitmix64.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : example_id) h = (h ^ ch) * 1099511628211ull;
  uint64_t x = run_seed ^ rotl(h, 21) ^ rotl(sample_index * 0x9e3779b97f4a7c15ull, 43);
  return splitmix64(x);
}

int32_t argmax(const float* x, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

int32_t sample_token(const float* logits, int V, const SamplingParams& p, Rng& rng,
                     std::vector<std::pair<float, int32_t>>& scratch) {
  if (p.top_k < 0) fail("sampling: top_k must be ≥ 0, got {}", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail("sampling: top_p must be in (0, 1], got {}", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) fail("sampling: min_p must be in [0, 1], got {}", p.min_p);
  if (p.greedy()) return argmax(logits, V);
  scratch.resize(V);
  for (int i = 0; i < V; ++i) scratch[i] = {logits[i] / p.temperature, i};
  // Sort descending by logit (ties: lower id first) — only the prefix we may keep.
  auto cmp = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  int n = V;
  if (p.top_k > 0 && p.top_k < V) {
    std::partial_sort(scratch.begin(), scratch.begin() + p.top_k, scratch.end(), cmp);
    n = p.top_k;
  } else {
    std::sort(scratch.begin(), scratch.end(), cmp);
  }
  // Softmax over the kept prefix.
  const float mx = scratch[0].first;
  std::vector<double> prob(n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += (prob[i] = std::exp(static_cast<double>(scratch[i].first - mx)));
  for (auto& x : prob) x /= sum;
  if (p.top_p < 1.0f) {
    double cum = 0;
    int keep = n;
    for (int i = 0; i < n; ++i) {
      cum += prob[i];
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  if (p.min_p > 0.0f) {
    const double thr = p.min_p * prob[0];
    int keep = 1;
    while (keep < n && prob[keep] >= thr) ++keep;
    n = keep;
  }
  double total = 0;
  for (int i = 0; i < n; ++i) total += prob[i];
  double r = rng.uniform() * total;
  for (int i = 0; i < n; ++i) {
    r -= prob[i];
    if (r < 0) return scratch[i].second;
  }
  return scratch[n - 1].second;
}

}  // namespace kvb
