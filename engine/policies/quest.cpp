// `quest`: Query-aware page selection at decode; the whole cache is kept, each step reads a part.
// Source: Tang et al., "Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference"
// (ICML 2024, arXiv 2406.10774, §3: the cache is split into pages; each page keeps the
// per-channel min and max of its keys; at each decode step the upper bound
// U_p = Σ_c max(q_c · min_{p,c}, q_c · max_{p,c}) ranks the pages and attention reads only the
// top-k, k = token_budget / page_size). Reference code mit-han-lab/Quest @ 24c9c6fc
// (evaluation/quest_attention.py, the path that produced the paper's accuracy numbers:
// `forward` attends densely when q_len > 1 (prefill) or layer_id < 2; keys are repeated per query
// head (repeat_kv), so every QUERY head picks its own pages; the bound is computed with the
// sign trick |q| · max_t(sign(q) · k_t); pages are aligned to token 0 and the last, partial page
// is padded with −inf; token_budget = min(kv_seq_len, budget); `local_heavy_hitter_mask` takes
// topk(k = min(max(3, token_budget // chunk_size), n_pages)); scripts/longbench.sh and
// passkey.sh run chunk_size 16 and budgets 512–4096). The repository's CUDA kernel path
// (quest/utils/controller.py) instead always reads the last page and picks k − 1 others:
// `last_page=true`.
// Choices (docs/policies.md#quest): the kvbench budget is the reference's token_budget
// (required). Page scores are accumulated in double; ties in the top-k go to the lower page
// index (torch.topk leaves them unspecified). `gqa=max` is the variant with one selection per kv
// head by the max over its query heads' bounds (WG-KV's Quest composition, its §5.4 / Fig. 9).
// The page metadata is kept by the policy, per (sequence, layer,
// kv head), and updated incrementally; nothing is evicted.
#include <algorithm>
#include <limits>
#include <map>
#include <numeric>

#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

class QuestPolicy : public ParamPolicy {
 public:
  explicit QuestPolicy(PolicyParams p) : ParamPolicy("quest", std::move(p)) {
    budget_ = params_.budget();
    if (budget_ <= 0)
      fail(
          "policy 'quest' reads a budget of tokens per head at each decode step but none was given: pass "
          "--budget N (the reference's token_budget, e.g. 512-4096)");
    params_.bind({{"page_size", &page_, within(1, 1 << 20)},
                  {"dense_layers", &dense_layers_, at_least(0)},
                  {"min_pages", &min_pages_, within(1, 1 << 20)},
                  {"gqa", &gqa_max_, one_of({"query", "max"}, "max")},
                  {"last_page", &last_page_}});
  }
  // host_kv: the page key min/max are folded from cached keys (KVCache::key; the CUDA backend
  // then mirrors each step's new K/V rows to the host).
  PolicyNeeds needs() const override { return {.host_kv = true, .read_select = true}; }
  void on_sequence_end(SeqId seq) override { seqs_.erase(seq); }

  /// A prompt chunk may overwrite tokens the metadata saw before (the next turn of a multi-turn
  /// request after KVCache::truncate_from): refresh from the page holding its first token.
  void on_layer_step(LayerStep& step) override {
    if (!step.prefill) return;
    auto it = seqs_.find(step.seq);
    if (it == seqs_.end()) return;
    for (int h = 0; h < step.num_kv_heads; ++h) {
      Meta& m = meta(it->second, step.layer, h, step.num_kv_heads);
      const int32_t first = step.cache->length(step.seq, step.layer, h) - step.n_new;
      m.done = std::min<int32_t>(m.done, static_cast<int32_t>(std::max(first, 0) / page_ * page_));
    }
  }

  void select_reads(ReadStep& st) override {
    if (st.layer < dense_layers_) return;
    const int Hq = st.num_q_heads, Hkv = st.num_kv_heads, D = st.head_dim, G = Hq / Hkv;
    Seq& s = seqs_[st.seq];
    std::vector<std::vector<std::pair<int32_t, int32_t>>> spans(Hq);
    std::vector<double> score, best;
    std::vector<int32_t> order;
    bool sparse = false;
    for (int h = 0; h < Hkv; ++h) {
      Meta& m = meta(s, st.layer, h, Hkv);
      const int32_t L = st.cache->length(st.seq, st.layer, h);
      update(m, *st.cache, st.seq, st.layer, h, L, D);
      const int32_t n_pages = static_cast<int32_t>((L + page_ - 1) / page_);
      const int64_t token_budget = std::min<int64_t>(L, budget_);
      const int32_t k = static_cast<int32_t>(std::min<int64_t>(std::max(min_pages_, token_budget / page_), n_pages));
      if (k >= n_pages) {  // every page is read
        for (int g = 0; g < G; ++g) spans[h * G + g] = {{0, L}};
        continue;
      }
      sparse = true;
      if (gqa_max_) best.assign(n_pages, -std::numeric_limits<double>::infinity());
      for (int g = 0; g < G; ++g) {
        const float* q = st.queries + static_cast<size_t>(h * G + g) * D;
        page_scores(m, q, n_pages, D, score);
        if (gqa_max_) {
          for (int32_t p = 0; p < n_pages; ++p) best[p] = std::max(best[p], score[p]);
          continue;
        }
        spans[h * G + g] = pick(score, k, L, order);
      }
      if (gqa_max_) {
        const auto sp = pick(best, k, L, order);
        for (int g = 0; g < G; ++g) spans[h * G + g] = sp;
      }
    }
    if (sparse) st.spans = std::move(spans);  // else dense: the same reads, the plain path
  }

 private:
  struct Meta {
    int32_t done = 0;               ///< tokens folded into kmin/kmax
    std::vector<float> kmin, kmax;  ///< [pages, D]
  };
  struct Seq {
    std::vector<Meta> heads;  ///< [layer * Hkv + h]
  };

  Meta& meta(Seq& s, int layer, int h, int Hkv) {
    const size_t i = static_cast<size_t>(layer) * Hkv + h;
    if (s.heads.size() <= i) s.heads.resize(i + 1);
    return s.heads[i];
  }

  /// Folds tokens m.done … L − 1 of the head into the per-page key min/max (the reference's
  /// chunk_max_key of k · sign(q), kept as min and max so any q can use it).
  void update(Meta& m, const KVCache& cache, SeqId seq, int layer, int h, int32_t L, int D) {
    if (m.done > L) m.done = static_cast<int32_t>(L / page_ * page_);
    const size_t pages = static_cast<size_t>((L + page_ - 1) / page_);
    m.kmin.resize(pages * D);
    m.kmax.resize(pages * D);
    for (int32_t t = m.done; t < L; ++t) {
      const float* k = cache.key(seq, layer, h, t);
      float* mn = &m.kmin[static_cast<size_t>(t / page_) * D];
      float* mx = &m.kmax[static_cast<size_t>(t / page_) * D];
      if (t % page_ == 0) {
        std::copy(k, k + D, mn);
        std::copy(k, k + D, mx);
        continue;
      }
      for (int c = 0; c < D; ++c) {
        mn[c] = std::min(mn[c], k[c]);
        mx[c] = std::max(mx[c], k[c]);
      }
    }
    m.done = L;
  }

  /// U_p = Σ_c max(q_c · min_{p,c}, q_c · max_{p,c}) for every page (Quest §3, eq. of the
  /// criticality upper bound), in double.
  static void page_scores(const Meta& m, const float* q, int32_t n_pages, int D, std::vector<double>& out) {
    out.assign(n_pages, 0.0);
    for (int32_t p = 0; p < n_pages; ++p) {
      const float* mn = &m.kmin[static_cast<size_t>(p) * D];
      const float* mx = &m.kmax[static_cast<size_t>(p) * D];
      double s = 0;
      for (int c = 0; c < D; ++c) {
        const double qc = q[c];
        s += std::max(qc * mn[c], qc * mx[c]);
      }
      out[p] = s;
    }
  }

  /// The token spans of the k best pages (score descending, lower page first on ties; with
  /// last_page the newest page plus the k − 1 best others), merged and sorted.
  std::vector<std::pair<int32_t, int32_t>> pick(const std::vector<double>& score, int32_t k, int32_t L,
                                                std::vector<int32_t>& order) const {
    const int32_t n = static_cast<int32_t>(score.size());
    const int32_t pool = last_page_ ? n - 1 : n;
    const int32_t take = last_page_ ? k - 1 : k;
    order.resize(pool);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + take, order.end(),
                      [&](int32_t a, int32_t b) { return score[a] != score[b] ? score[a] > score[b] : a < b; });
    order.resize(take);
    if (last_page_) order.push_back(n - 1);
    std::sort(order.begin(), order.end());
    std::vector<std::pair<int32_t, int32_t>> spans;
    for (int32_t p : order) {
      const auto b = static_cast<int32_t>(p * page_);
      const auto e = static_cast<int32_t>(std::min<int64_t>(L, (p + 1) * page_));
      if (!spans.empty() && spans.back().second == b) spans.back().second = e;
      else spans.emplace_back(b, e);
    }
    return spans;
  }

  int64_t budget_ = 0, page_ = 16, dense_layers_ = 2, min_pages_ = 3;
  bool gqa_max_ = false, last_page_ = false;
  std::map<SeqId, Seq> seqs_;
};

}  // namespace

KVB_POLICY(quest) { return policy_entry<QuestPolicy>("quest").with_tests({.min_budget = 1, .evicts = false}); }

}  // namespace kvb
