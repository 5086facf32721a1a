// `cam`: CaM (Cache Merging) — decode-time eviction whose evicted tokens first merge their values
// into the kept tokens that follow them, each with a probability set by the attention it received.
// Sources: Zhang et al., "CaM: Cache Merging for Memory-efficient LLMs Inference" (ICML 2024,
// openreview LCTmppB165); kvpress 0.5.5 CAMPress (PyPI kvpress==0.5.5,
// kvpress/presses/cam_press.py: CAMPress.forward_hook, CAMPress.compress); docs/policies.md,
// `cam`. What kvpress computes, in our words, per (sequence, layer):
//   * prefill: nothing is evicted; the attention sums A[h, t] restart at 0;
//   * every decode step adds to A[h, t] the attention the new token's queries pay token t, averaged
//     over the GQA group of kv head h, and counts the step;
//   * once `interval` steps were counted and the layer holds L > B tokens (B = --budget, kvpress
//     target_size): the `scorer` policy scores every token of every kv head (higher = keep), the
//     scores are averaged over the kv heads, the B best tokens are kept (one set for the layer)
//     and the L − B others evicted; of the evicted, the k = min(steps counted, L − B) best-scored
//     (equal scores: the later position first) merge. Merge token m (j-th by position) has the
//     window W_m = the next `merge_budget` kept tokens after it (fewer at the end, n_m of them);
//     per kv head, p = clamp(A[h, m] / mean_{t ∈ W_m} A[h, t], 0, 1) (0/0 → 0, x/0 → 1), and with
//     probability p every t ∈ W_m gets v_t += v_m / n_m. The count restarts at 0.
// Randomness: kvpress draws the merge decisions with torch.bernoulli from torch's global
// generator (unseeded, so a run is not reproducible). kvbench merges iff u < p with u =
// scoring::hash_uniform({seed, the sequence's sample seed, layer, kv head, j, L}); the golden
// injects the same u into kvpress in place of torch.bernoulli (tools/gen_kvpress_smollm2_goldens.py).
// Needs: the scorer's signals, attention_colsum, host K/V, writes_kv, one scalar (A). The scorer
// must score a head's tokens alone (a token-local scored policy: knorm, qfilter, ...); another is
// refused naming `scorer`. Throws kvb::Error for a budget of 0, `interval` or `merge_budget` < 1,
// and when a layer's kv heads hold different lengths.
// Choices: sums and the merged values in double, rounded to f32; equal mean scores at the keep
// cut go to the lower index (kvpress's topk leaves them open).
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>

#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

class CamPolicy : public ParamPolicy {
 public:
  explicit CamPolicy(PolicyParams p) : ParamPolicy("cam", std::move(p)) {
    budget_ = params_.budget();
    std::string scorer;
    params_.bind({{"interval", &interval_, within(1, 1 << 30)},
                  {"merge_budget", &merge_budget_, within(1, 1 << 30)},
                  {"seed", &seed_},
                  {"scorer", &scorer}});
    if (parse_compress(params_))
      params_.fail_param("compress", "must be prompt_end: CaM compresses while decoding only");
    if (budget_ <= 0) params_.fail_param("budget", "must be > 0 (kvpress target_size: tokens kept per layer)");
    PolicySpec s;
    s.name = scorer;
    s.params = {{"budget_kind", "ratio"}, {"ratio", "0.5"}, {"decode", "false"}};
    std::unique_ptr<Policy> built;
    try {
      built = make_policy(s);
    } catch (const Error& e) {
      params_.fail_param("scorer", std::string("must name a scored policy: ") + e.what());
    }
    scorer_.reset(dynamic_cast<ScheduledPolicy*>(built.get()));
    if (!scorer_) params_.fail_param("scorer", "must name a scored policy (" + scorer + " is not)");
    built.release();
    slot_ = scorer_->needs().num_scalars;
  }
  PolicyNeeds needs() const override {
    PolicyNeeds n = scorer_->needs();
    n.attention_colsum = n.host_kv = n.writes_kv = n.layer_hook = true;
    n.num_scalars = slot_ + 1;
    return n;
  }
  void on_sequence_begin(SeqId seq, uint64_t sample_seed) override {
    std::lock_guard<std::mutex> lock(mu_);
    seqs_[seq] = {sample_seed, {}};
  }
  void on_sequence_end(SeqId seq) override {
    std::lock_guard<std::mutex> lock(mu_);
    seqs_.erase(seq);
  }

  void on_layer_step(LayerStep& step) override {
    const int Hk = step.num_kv_heads;
    const int32_t L = scoring::head_length(step, 0);
    for (int h = 1; h < Hk; ++h)
      if (scoring::head_length(step, h) != L)
        fail("policy 'cam': kv heads of layer {} hold different lengths; CaM keeps one set per layer", step.layer);
    int64_t count = 0;
    uint64_t sample_seed = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Seq& s = seqs_[step.seq];
      if (s.counts.empty()) s.counts.assign(static_cast<size_t>(step.num_layers), 0);
      int64_t& c = s.counts.at(static_cast<size_t>(step.layer));
      if (step.prefill) {
        c = 0;
      } else {
        ++c;
      }
      count = c;
      sample_seed = s.sample_seed;
    }
    if (step.prefill) {  // the sums restart with the sequence's decoding (kvpress: reset at prefill)
      for (int h = 0; h < Hk; ++h)
        for (int32_t i = 0; i < L; ++i) step.cache->scalars(step.seq, step.layer, h, i)[slot_] = 0.0f;
      return;
    }
    if (!step.attention_colsum) fail("policy 'cam': LayerStep::attention_colsum is not set");
    const double G = static_cast<double>(step.num_q_heads) / Hk;
    for (int h = 0; h < Hk; ++h) {
      const std::vector<float>& a = (*step.attention_colsum)[h];
      for (int32_t i = 0; i < L; ++i)
        step.cache->scalars(step.seq, step.layer, h, i)[slot_] += static_cast<float>(a[i] / G);
    }
    if (count < interval_ || L <= budget_) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seqs_[step.seq].counts.at(static_cast<size_t>(step.layer)) = 0;
    }
    compress(step, L, count, sample_seed);
  }

 private:
  struct Seq {
    uint64_t sample_seed = 0;
    std::vector<int64_t> counts;  ///< decode steps since the layer's last compression
  };

  /// Keeps the layer's best `budget_` tokens after merging the chosen evicted values (file comment).
  void compress(LayerStep& step, int32_t L, int64_t count, uint64_t sample_seed) {
    const int Hk = step.num_kv_heads, D = step.head_dim;
    std::vector<int32_t> all(static_cast<size_t>(L));
    std::iota(all.begin(), all.end(), 0);
    std::vector<double> mean(static_cast<size_t>(L), 0.0);
    std::vector<float> s;
    for (int h = 0; h < Hk; ++h) {
      if (!scorer_->scores_of(step, h, all, s))
        fail("policy 'cam': scorer '{}' does not score a head's tokens alone (kvpress calls its score on the cache)",
             scorer_->name());
      for (int32_t i = 0; i < L; ++i) mean[i] += s[i] / static_cast<double>(Hk);
    }
    const std::vector<float> mean_f(mean.begin(), mean.end());
    const std::vector<int32_t> kept = scoring::top_k_indices(mean_f, budget_);
    std::vector<char> is_kept(static_cast<size_t>(L), 0);
    for (int32_t i : kept) is_kept[i] = 1;
    std::vector<int32_t> evicted;
    for (int32_t i = 0; i < L; ++i)
      if (!is_kept[i]) evicted.push_back(i);
    // The merge tokens: the best-scored evicted ones, the later position first on equal scores.
    std::vector<int32_t> order = evicted;
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return mean_f[a] > mean_f[b] || (mean_f[a] == mean_f[b] && a > b); });
    order.resize(static_cast<size_t>(std::min<int64_t>(count, static_cast<int64_t>(order.size()))));
    std::sort(order.begin(), order.end());
    const auto B = static_cast<int64_t>(kept.size());
    for (int h = 0; h < Hk; ++h) {
      auto attn = [&](int32_t i) { return static_cast<double>(step.cache->scalars(step.seq, step.layer, h, i)[slot_]); };
      std::map<int32_t, std::vector<double>> add;  // kept index → value increment [D]
      for (size_t j = 0; j < order.size(); ++j) {
        const int32_t m = order[j];
        const auto start = static_cast<int64_t>(std::upper_bound(kept.begin(), kept.end(), m) - kept.begin());
        const int64_t n = std::min<int64_t>(merge_budget_, B - start);
        if (n <= 0) continue;
        double wsum = 0.0;
        for (int64_t t = start; t < start + n; ++t) wsum += attn(kept[t]);
        const double w = wsum / static_cast<double>(n), a = attn(m);
        double p = a / w;
        if (std::isnan(p)) p = 0.0;
        if (std::isinf(p)) p = 1.0;
        p = std::clamp(p, 0.0, 1.0);
        const double u =
            scoring::hash_uniform({static_cast<uint64_t>(seed_), sample_seed, static_cast<uint64_t>(step.layer),
                                   static_cast<uint64_t>(h), static_cast<uint64_t>(j), static_cast<uint64_t>(L)});
        if (!(u < p)) continue;
        const float* vm = step.cache->value(step.seq, step.layer, h, m);
        for (int64_t t = start; t < start + n; ++t) {
          std::vector<double>& acc = add[kept[t]];
          if (acc.empty()) acc.assign(static_cast<size_t>(D), 0.0);
          for (int d = 0; d < D; ++d) acc[d] += vm[d] / static_cast<double>(n);
        }
      }
      if (!add.empty()) {
        std::vector<int32_t> idx;
        std::vector<float> rows;
        for (const auto& [t, acc] : add) {
          const float* v = step.cache->value(step.seq, step.layer, h, t);
          idx.push_back(t);
          for (int d = 0; d < D; ++d) rows.push_back(static_cast<float>(v[d] + acc[d]));
        }
        step.write_values(h, std::move(idx), std::move(rows));
      }
      step.keep(h, kept);
    }
  }

  std::unique_ptr<ScheduledPolicy> scorer_;
  int64_t budget_ = 0, interval_ = 512, merge_budget_ = 32, seed_ = 0;
  int slot_ = 0;
  std::map<SeqId, Seq> seqs_;
  std::mutex mu_;
};

}  // namespace

KVB_POLICY(cam) {
  return policy_entry<CamPolicy>("cam").with_tests({.min_budget = 1, .params = "interval=4,merge_budget=4"});
}

}  // namespace kvb
