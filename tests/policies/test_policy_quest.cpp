// Quest (engine/policies/quest.cpp; docs/policies.md#quest): the pages each query head reads and
// the attention over them, against a float64 restatement of the reference's formulas
// (mit-han-lab/Quest evaluation/quest_attention.py: the sign trick |q|·max_t(sign(q)·k_t) over
// pages padded with −inf, topk(min(max(3, min(L, budget) // page), pages)); the kernel path's
// "last page always read"); and inside the engine on stories260K: dense layers and prefill,
// independence from the prefill chunk, and the KV bytes read per decode step (ForwardStats /
// GenerationResult::kv_read_bytes) for every policy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "engine/backend/cpu/forward.h"
#include "engine/engine.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"
#include "harness.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

using test::stories;

/// One sequence of `layers` layers, Hkv heads of dim D, with L random keys/values per head
/// (KV pages of 4 tokens, unlike Quest's pages: the selection must not depend on them).
struct Cache {
  Cache(int layers, int hkv, int d, int L, uint32_t seed) : hkv(hkv), d(d) {
    KVCacheConfig c;
    c.num_layers = layers;
    c.num_kv_heads = hkv;
    c.head_dim = d;
    c.page_size = 4;
    kv = std::make_unique<KVCache>(c);
    seq = kv->add_sequence();
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::vector<float> k(d), v(d);
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < hkv; ++h)
        for (int t = 0; t < L; ++t) {
          for (auto& x : k) x = n(rng);
          for (auto& x : v) x = n(rng);
          kv->append(seq, l, h, k.data(), v.data(), t);
        }
  }
  int hkv, d;
  std::unique_ptr<KVCache> kv;
  SeqId seq = 0;
};

/// The reference's page scores for one query head over one kv head's L keys, in double:
/// chunk_max_key = amax over the page of k·sign(q) (padding −inf), weight = (q·sign(q))·chunk_max_key.
std::vector<double> ref_scores(const KVCache& kv, SeqId seq, int layer, int h, const float* q, int D, int L, int P) {
  const int n = (L + P - 1) / P;
  std::vector<double> w(n, 0.0);
  for (int p = 0; p < n; ++p)
    for (int c = 0; c < D; ++c) {
      const double sign = q[c] > 0 ? 1.0 : -1.0;
      double mx = -std::numeric_limits<double>::infinity();
      for (int t = p * P; t < std::min(L, (p + 1) * P); ++t) mx = std::max(mx, kv.key(seq, layer, h, t)[c] * sign);
      w[p] += q[c] * sign * mx;
    }
  return w;
}

/// Token indices of the top-k pages (score descending, lower page first on ties); with `last`
/// the newest page plus the k − 1 best of the others.
std::set<int32_t> ref_tokens(const std::vector<double>& w, int k, int L, int P, bool last) {
  const int n = static_cast<int>(w.size());
  std::vector<int> idx(last ? n - 1 : n);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int>(i);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return w[a] > w[b]; });
  idx.resize(last ? k - 1 : k);
  if (last) idx.push_back(n - 1);
  std::set<int32_t> out;
  for (int p : idx)
    for (int t = p * P; t < std::min(L, (p + 1) * P); ++t) out.insert(t);
  return out;
}

std::set<int32_t> tokens_of(const std::vector<std::pair<int32_t, int32_t>>& spans) {
  std::set<int32_t> out;
  for (auto [b, e] : spans)
    for (int32_t t = b; t < e; ++t) out.insert(t);
  return out;
}

ReadStep read_step(const Cache& c, int layer, int layers, int hq, const std::vector<float>& q, int L) {
  return {.cache = c.kv.get(),
          .seq = c.seq,
          .layer = layer,
          .num_layers = layers,
          .num_q_heads = hq,
          .num_kv_heads = c.hkv,
          .head_dim = c.d,
          .seq_len = L,
          .queries = q.data()};
}

TEST(Quest, PageSelectionMatchesFloat64Restatement) {
  const int layers = 3, hq = 4, hkv = 2, D = 8, G = hq / hkv, L = 101, P = 8;
  Cache c(layers, hkv, D, L, 7);
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(hq) * D);
  for (auto& x : q) x = n(rng);
  const int n_pages = (L + P - 1) / P;  // 13
  for (const char* gqa : {"query", "max"})
    for (const bool last : {false, true})
      for (const int64_t budget : {16, 40, 100}) {
        SCOPED_TRACE(std::string(gqa) + (last ? " last_page" : "") + " budget " + std::to_string(budget));
        auto pol = make_policy(PolicySpec::parse(
            std::string("quest:page_size=8,dense_layers=1,gqa=") + gqa + ",last_page=" + (last ? "true" : "false"),
            budget));
        ASSERT_TRUE(pol->needs().read_select);
        ReadStep dense = read_step(c, 0, layers, hq, q, L);
        pol->select_reads(dense);
        EXPECT_TRUE(dense.spans.empty()) << "layer 0 < dense_layers reads everything";
        // The reference's k: min(max(3, min(L, budget) // page_size), pages).
        const int k =
            static_cast<int>(std::min<int64_t>(std::max<int64_t>(3, std::min<int64_t>(L, budget) / P), n_pages));
        ASSERT_LT(k, n_pages);
        for (int layer = 1; layer < layers; ++layer) {
          ReadStep rs = read_step(c, layer, layers, hq, q, L);
          pol->select_reads(rs);
          ASSERT_EQ(rs.spans.size(), static_cast<size_t>(hq));
          std::set<std::set<int32_t>> distinct;
          for (int h = 0; h < hkv; ++h) {
            std::vector<double> best(n_pages, -std::numeric_limits<double>::infinity());
            std::vector<std::vector<double>> w(G);
            for (int g = 0; g < G; ++g) {
              w[g] = ref_scores(*c.kv, c.seq, layer, h, &q[(h * G + g) * D], D, L, P);
              for (int p = 0; p < n_pages; ++p) best[p] = std::max(best[p], w[g][p]);
            }
            for (int g = 0; g < G; ++g) {
              const auto want = ref_tokens(std::string(gqa) == "max" ? best : w[g], k, L, P, last);
              const auto got = tokens_of(rs.spans[h * G + g]);
              EXPECT_EQ(got, want) << "layer " << layer << " q head " << h * G + g;
              distinct.insert(got);
              if (last) EXPECT_TRUE(got.count(L - 1)) << "the newest page is always read";
            }
          }
          // Selection is query-dependent: the heads do not all read the same pages.
          EXPECT_GT(distinct.size(), 1u);
        }
      }
}

TEST(Quest, BudgetCoveringEveryPageIsDense) {
  const int hq = 2, hkv = 1, D = 4, L = 40;
  Cache c(3, hkv, D, L, 3);
  std::vector<float> q(hq * D, 0.5f);
  {
    // budget 4096 ≥ L: k = min(max(3, 40 // 16), 3 pages) = 3 = every page.
    auto pol = make_policy(PolicySpec::parse("quest", 4096));
    ReadStep rs = read_step(c, 2, 3, hq, q, L);
    pol->select_reads(rs);
    EXPECT_TRUE(rs.spans.empty());
  }
  // The reference's quirk kept on purpose: budget ≥ L does not mean every page when L / page < pages.
  Cache c2(3, hkv, D, 100, 3);  // 7 pages of 16, k = max(3, 100 // 16 = 6) = 6
  auto pol = make_policy(PolicySpec::parse("quest", 4096));
  ReadStep rs = read_step(c2, 2, 3, hq, q, 100);
  pol->select_reads(rs);
  ASSERT_EQ(rs.spans.size(), 2u);
  const size_t got = tokens_of(rs.spans[0]).size();  // 6 of 7 pages: 96 tokens, or 84 with the 4-token last page
  EXPECT_TRUE(got == 96 || got == 84) << got;
}

TEST(Quest, RejectsBadParameters) {
  EXPECT_THROW(make_policy(PolicySpec::parse("quest:page_size=0", 64)), Error);
  EXPECT_THROW(make_policy(PolicySpec::parse("quest:gqa=mean", 64)), Error);
  EXPECT_THROW(make_policy(PolicySpec::parse("quest:min_pages=0", 64)), Error);
  EXPECT_THROW(make_policy(PolicySpec::parse("quest:dense_layers=-1", 64)), Error);
  EXPECT_THROW(make_policy(PolicySpec::parse("quest:window=3", 64)), Error);
}

TEST(Quest, AttentionOverSpansMatchesFloat64Softmax) {
  const int D = 8, L = 57;
  Cache c(1, 1, D, L, 5);
  std::mt19937 rng(2);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> q(D);
  for (auto& x : q) x = 2 * n(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::vector<std::pair<int32_t, int32_t>> spans = {{0, 5}, {16, 32}, {48, 57}};
  for (int32_t qpos : {56, 30}) {  // 30: the causal mask drops selected tokens after the query
    std::vector<float> out(D);
    attend_spans(*c.kv, c.seq, 0, 0, q.data(), qpos, D, scale, spans, out.data());
    std::vector<double> want(D, 0.0), logit;
    std::vector<int32_t> ts;
    for (auto [b, e] : spans)
      for (int32_t t = b; t < e && t <= qpos; ++t) {
        double s = 0;
        for (int i = 0; i < D; ++i) s += static_cast<double>(q[i]) * c.kv->key(c.seq, 0, 0, t)[i];
        logit.push_back(s / std::sqrt(static_cast<double>(D)));
        ts.push_back(t);
      }
    const double mx = *std::max_element(logit.begin(), logit.end());
    double z = 0;
    for (double& l : logit) z += (l = std::exp(l - mx));
    for (size_t j = 0; j < ts.size(); ++j)
      for (int i = 0; i < D; ++i) want[i] += logit[j] / z * c.kv->value(c.seq, 0, 0, ts[j])[i];
    for (int i = 0; i < D; ++i) EXPECT_NEAR(out[i], want[i], 1e-5) << "qpos " << qpos << " dim " << i;
  }
}

// ---- inside the engine (stories260K: 5 layers, 8 query heads, 4 kv heads, head_dim 8) ----

std::vector<int32_t> prompt_tokens(int n) {
  std::vector<int32_t> p{1};
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> d(3, 500);
  while (static_cast<int>(p.size()) < n) p.push_back(d(rng));
  return p;
}

/// n decode tokens to force (a prompt_tokens(n + 1) without its BOS).
std::vector<int32_t> forced_tokens(int n) {
  auto t = prompt_tokens(n + 1);
  return {t.begin() + 1, t.end()};
}

std::vector<float> run_score(const std::string& spec, int64_t budget, int prefill_chunk, const std::vector<int32_t>& p,
                             const std::vector<int32_t>& forced, GenerationResult* r) {
  EngineOptions o;
  o.prefill_chunk = prefill_chunk;
  Engine e(stories(), o, spec.empty() ? nullptr : make_policy(PolicySpec::parse(spec, budget)));
  return e.score(p, forced, r);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

TEST(QuestEngine, SelectsAtDecodeIndependentOfPrefillChunk) {
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  const auto p = prompt_tokens(150);
  const std::vector<int32_t> forced = forced_tokens(60);
  GenerationResult rf, r1, r2, rd;
  const auto full = run_score("", 0, 512, p, forced, &rf);
  // Every layer dense: exactly the full cache (prefill is always dense).
  const auto dense = run_score("quest:dense_layers=5", 32, 512, p, forced, &rd);
  EXPECT_EQ(dense, full);
  EXPECT_EQ(rd.kv_read_bytes, rf.kv_read_bytes);
  // Selection on: differs from full, reads less, and the prompt chunk (7 vs 512, the prompt is
  // longer than the chunk) changes neither the selection (bytes read) nor the logits.
  const auto a = run_score("quest", 32, 7, p, forced, &r1);
  const auto b = run_score("quest", 32, 512, p, forced, &r2);
  ASSERT_EQ(a.size(), full.size());
  EXPECT_GT(max_abs_diff(a, full), 1e-3);
  // Upper bound: layers 0–1 read all L; layers 2–4 at most the union of 2 query heads' 3 pages.
  const auto& cfg = stories()->config();
  int64_t bound = 0;
  for (int64_t s = 0; s < static_cast<int64_t>(forced.size()); ++s) {
    const int64_t L = static_cast<int64_t>(p.size()) + s + 1;
    bound += cfg.num_kv_heads * (2 * L + (cfg.num_layers - 2) * std::min<int64_t>(L, 2 * 3 * 16)) * 2 * cfg.head_dim * 4;
  }
  EXPECT_LE(r1.kv_read_bytes, bound);
  EXPECT_LT(r1.kv_read_bytes, rf.kv_read_bytes);
  EXPECT_EQ(r1.kv_read_bytes, r2.kv_read_bytes);
  EXPECT_LT(max_abs_diff(a, b), 1e-4);
  EXPECT_EQ(r1.evictions, 0);  // the whole cache is kept
  EXPECT_EQ(r1.kv_bytes_peak, rf.kv_bytes_peak);
}

TEST(QuestEngine, BytesReadPerDecodeStep) {
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  const auto& cfg = stories()->config();
  const int64_t layers = cfg.num_layers, hkv = cfg.num_kv_heads, row = 2 * cfg.head_dim * sizeof(float);
  const auto p = prompt_tokens(40);
  const std::vector<int32_t> forced = forced_tokens(90);
  const int64_t steps = static_cast<int64_t>(forced.size());
  // full: every decode step reads the whole cache, which holds prompt + the steps so far.
  {
    GenerationResult r;
    run_score("", 0, 16, p, forced, &r);
    int64_t want = 0;
    for (int64_t s = 0; s < steps; ++s) want += layers * hkv * (static_cast<int64_t>(p.size()) + s + 1) * row;
    EXPECT_EQ(r.decode_steps, steps);
    EXPECT_EQ(r.kv_read_bytes, want);
  }
  // An evicting policy reads what it holds when the step's attention runs: the lengths left by
  // the previous step plus the new token.
  {
    EngineOptions o;
    o.prefill_chunk = 16;
    Engine e(stories(), o, make_policy(PolicySpec::parse("streamingllm:buffer=8", 24)));
    std::vector<int64_t> held;  // Σ lengths after each step
    e.on_step = [&](const KVCache& kv, SeqId s) {
      int64_t sum = 0;
      for (int l = 0; l < layers; ++l)
        for (int h = 0; h < hkv; ++h) sum += kv.length(s, l, h);
      held.push_back(sum);
    };
    GenerationResult r;
    e.score(p, forced, &r);
    const size_t prefill_steps = held.size() - forced.size();
    int64_t want = 0;
    for (size_t i = prefill_steps; i < held.size(); ++i) want += (held[i - 1] + layers * hkv) * row;
    EXPECT_EQ(r.kv_read_bytes, want);
    EXPECT_GT(r.evictions, 0);
  }
  // Quest, one selection per kv head with the newest page always read: a sparse layer reads
  // k − 1 full pages plus the newest page (L − (n − 1)·16 tokens); the first two layers, and
  // steps where k covers every page, read all L.
  {
    GenerationResult r;
    run_score("quest:gqa=max,last_page=true", 48, 16, p, forced, &r);
    int64_t want = 0;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t L = static_cast<int64_t>(p.size()) + s + 1, n = (L + 15) / 16, k = std::min<int64_t>(3, n);
      const int64_t sparse = k >= n ? L : (k - 1) * 16 + (L - (n - 1) * 16);
      want += hkv * (2 * L + (layers - 2) * sparse) * row;
    }
    EXPECT_EQ(r.kv_read_bytes, want);
  }
}

}  // namespace
}  // namespace kvb
