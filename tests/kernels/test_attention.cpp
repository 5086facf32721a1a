// paged_attention (engine/kernels/attention.h) against an independent f64 two-pass softmax over
// the visible keys, on every ISA build the running CPU has: GQA groups, prefill chunks (causal
// mask inside the chunk), heads compacted by eviction (position gaps, partial pages), token
// ranges (the Quest path) and attention column sums. Then the exactness claims: a query's bits do
// not depend on the other queries of its call (decode == the same row inside a prefill chunk) nor
// on the other tasks of the batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/kernels/attention.h"

namespace kvb {
namespace {

constexpr Isa kIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512Vnni};

struct Shape {
  int D, P, Hkv, G, L;
};

/// A cache whose sequences hold, per head, L tokens at positions 0..L-1 of random K/V (layer 0),
/// optionally compacted to a random subset that keeps the last 8 tokens (gaps, partial pages).
struct Fixture {
  KVCache cache;
  SeqId seq;
  Fixture(const Shape& s, std::mt19937& rng, bool evict) : cache(KVCacheConfig(1, s.Hkv, s.D, s.P)) {
    seq = add(s, rng, evict);
  }
  SeqId add(const Shape& s, std::mt19937& rng, bool evict) {
    const SeqId id = cache.add_sequence();
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> k(s.D), v(s.D);
    for (int h = 0; h < s.Hkv; ++h)
      for (int t = 0; t < s.L; ++t) {
        for (int d = 0; d < s.D; ++d) k[d] = 2.0f * nd(rng), v[d] = nd(rng);
        cache.append(id, 0, h, k.data(), v.data(), t);
      }
    if (evict)
      for (int h = 0; h < s.Hkv; ++h) {
        std::vector<int32_t> keep;
        for (int t = 0; t < s.L; ++t)
          if (t >= s.L - 8 || rng() % 3 != 0) keep.push_back(t);
        cache.compact(id, 0, h, keep);
      }
    return id;
  }
};

/// f64 reference for query row (token i, member g) of head h: softmax over the head's tokens in
/// `ranges` (all when empty) with position ≤ qpos. Adds probabilities to colsum when given.
std::vector<double> reference(const KVCache& c, SeqId seq, int h, const float* q, int64_t qpos, float scale,
                              const std::vector<TokenRange>& ranges, std::vector<double>* colsum) {
  const int D = c.config().head_dim;
  const int32_t L = c.length(seq, 0, h);
  std::vector<int32_t> idx;
  if (ranges.empty())
    for (int32_t t = 0; t < L; ++t) idx.push_back(t);
  for (const TokenRange& r : ranges)
    for (int32_t t = r.begin; t < r.end; ++t) idx.push_back(t);
  std::vector<double> s;
  std::vector<int32_t> vis;
  double mx = -INFINITY;
  for (int32_t t : idx) {
    if (c.position(seq, 0, h, t) > qpos) continue;
    double d = 0;
    for (int e = 0; e < D; ++e) d += double(q[e]) * c.key(seq, 0, h, t)[e];
    s.push_back(d * scale);
    vis.push_back(t);
    mx = std::max(mx, s.back());
  }
  std::vector<double> out(D, 0.0);
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - mx));
  for (size_t j = 0; j < vis.size(); ++j) {
    const double p = s[j] / sum;
    for (int e = 0; e < D; ++e) out[e] += p * c.value(seq, 0, h, vis[j])[e];
    if (colsum) (*colsum)[vis[j]] += p;
  }
  return out;
}

/// Runs one task per kv head for n queries at positions start..start+n-1 and checks every row
/// (and the column sums) against the reference.
void check(const Shape& s, bool evict, bool ranges_on, bool colsum_on, Isa isa, uint32_t seed) {
  std::mt19937 rng(seed);
  Fixture f(s, rng, evict);
  const int n = std::min(s.L, 37);
  const int64_t start = s.L - n;
  const int Hq = s.Hkv * s.G;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(n) * Hq * s.D), out(q.size(), -1.0f);
  for (float& x : q) x = nd(rng);
  const float scale = 1.0f / std::sqrt(float(s.D));
  std::vector<std::vector<TokenRange>> ranges(s.Hkv);
  std::vector<std::vector<float>> colsum(s.Hkv);
  std::vector<AttentionTask> tasks;
  for (int h = 0; h < s.Hkv; ++h) {
    const int32_t L = f.cache.length(f.seq, 0, h);
    if (ranges_on) {  // a head start, a middle run (maybe empty) and the tail, as Quest reads pages
      const int32_t b1 = std::min(3, L), a2 = std::max(b1, L / 3), b2 = std::max(a2, L / 2), a3 = std::max(b2, L - 5);
      ranges[h] = {{0, b1}, {a2, b2}, {a3, L}};
    }
    colsum[h].assign(L, 0.0f);
    tasks.push_back({.seq = f.seq,
                     .head = h,
                     .n = n,
                     .start_pos = start,
                     .q = &q[h * s.G * s.D],
                     .out = &out[h * s.G * s.D],
                     .stride = int64_t(Hq) * s.D,
                     .colsum = colsum_on ? colsum[h].data() : nullptr,
                     .ranges = ranges[h]});
  }
  paged_attention(f.cache, 0, s.G, scale, tasks, isa);
  for (int h = 0; h < s.Hkv; ++h) {
    std::vector<double> cs_ref(f.cache.length(f.seq, 0, h), 0.0);
    for (int i = 0; i < n; ++i)
      for (int g = 0; g < s.G; ++g) {
        const size_t off = (size_t(i) * Hq + h * s.G + g) * s.D;
        const std::vector<double> ref = reference(f.cache, f.seq, h, &q[off], start + i, scale, ranges[h], &cs_ref);
        double err = 0, den = 0;
        for (int e = 0; e < s.D; ++e) {
          err = std::max(err, std::abs(out[off + e] - ref[e]));
          den = std::max(den, std::abs(ref[e]));
        }
        // f32 against f64: a D-term dot product and an L-term weighted sum, each with relative error
        // about (D + L)·2⁻²⁴ ≈ 1.2e-5 at D = 128, L = 77 in the worst case (2.07e-6 seen under ASan's
        // -O1 code, 1e-6 under -O2); an indexing or masking error is off by O(1).
        ASSERT_LE(err, 2e-5 * std::max(den, 1.0)) << "head " << h << " token " << i << " member " << g;
      }
    if (colsum_on) {
      for (size_t t = 0; t < cs_ref.size(); ++t)
        ASSERT_NEAR(colsum[h][t], cs_ref[t], 2e-5 * std::max(1.0, cs_ref[t])) << "head " << h << " key " << t;
    }
  }
}

TEST(PagedAttention, MatchesF64ReferenceOnEveryIsa) {
  const Shape shapes[] = {{64, 16, 3, 3, 200}, {128, 16, 2, 4, 77}, {32, 4, 1, 1, 9}, {64, 16, 2, 2, 1}};
  int checked = 0;
  for (Isa isa : kIsas) {
    if (!isa_supported(isa)) continue;
    ++checked;
    uint32_t seed = 1;
    for (const Shape& s : shapes)
      for (bool evict : {false, true})
        for (bool ranges : {false, true})
          for (bool colsum : {false, true}) {
            SCOPED_TRACE(testing::Message()
                         << isa_name(isa) << " D=" << s.D << " P=" << s.P << " G=" << s.G << " L=" << s.L
                         << " evict=" << evict << " ranges=" << ranges << " colsum=" << colsum);
            check(s, evict, ranges, colsum, isa, seed++);
            if (HasFatalFailure()) return;
          }
  }
  EXPECT_GE(checked, 1);
}

// The row kernel reads each K/V page once for a group of up to four rows (a GQA group in decode;
// consecutive rows of a block in prefill), where a row may see no key of a page (causal mask,
// sliding window) while others in its group do: a row's bits must still be those of the row alone.
TEST(PagedAttention, RowBitsIndependentOfChunkAndBatch) {
  const Shape shapes[] = {{64, 16, 3, 2, 150}, {64, 16, 2, 3, 150}, {128, 16, 2, 4, 150}, {64, 16, 1, 6, 150}};
  for (Isa isa : kIsas) {
    if (!isa_supported(isa)) continue;
    for (const Shape& s : shapes)
      for (int32_t window : {0, 20}) {
        SCOPED_TRACE(testing::Message() << isa_name(isa) << " Hkv=" << s.Hkv << " G=" << s.G << " D=" << s.D
                                        << " window=" << window);
        std::mt19937 rng(7);
        Fixture f(s, rng, true);
        const SeqId other = f.add(s, rng, false);
        const int Hq = s.Hkv * s.G, n = 70;
        const int64_t start = s.L - n;
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> q(size_t(n) * Hq * s.D), whole(q.size()), single(q.size()), oq(q.size()), oo(q.size());
        for (float& x : q) x = nd(rng);
        for (float& x : oq) x = nd(rng);
        const float scale = 0.125f;
        // The whole chunk in one call (row blocks split over threads), batched with another
        // sequence; then each token alone, as a decode step would run it.
        auto task = [&](SeqId seq, int h, int n_tok, int64_t pos, const float* qp, float* op) {
          return AttentionTask{.seq = seq,
                               .head = h,
                               .n = n_tok,
                               .start_pos = pos,
                               .q = qp,
                               .out = op,
                               .stride = int64_t(Hq) * s.D,
                               .window = window};
        };
        std::vector<AttentionTask> tasks;
        for (int h = 0; h < s.Hkv; ++h) {
          tasks.push_back(task(other, h, n, start, &oq[h * s.G * s.D], &oo[h * s.G * s.D]));
          tasks.push_back(task(f.seq, h, n, start, &q[h * s.G * s.D], &whole[h * s.G * s.D]));
        }
        paged_attention(f.cache, 0, s.G, scale, tasks, isa);
        for (int i = 0; i < n; ++i)
          for (int h = 0; h < s.Hkv; ++h) {
            const size_t off = (size_t(i) * Hq + h * s.G) * s.D;
            const AttentionTask one = task(f.seq, h, 1, start + i, &q[off], &single[off]);
            paged_attention(f.cache, 0, s.G, scale, std::span(&one, 1), isa);
          }
        ASSERT_EQ(0, std::memcmp(whole.data(), single.data(), sizeof(float) * whole.size()));
      }
  }
}

}  // namespace
}  // namespace kvb
