// `kvcompose`: KVCompose — attention-guided token scores, and one number of kept tokens per layer
// chosen by ranking every layer's "composite" score curve against the others.
// Sources: Akulov et al., "KVCompose: Efficient Structured KV Cache Compression with Composite
// Tokens" (arXiv 2509.05165, §3: per-head token importance from the attention the prompt's
// queries pay, aggregated over the GQA group; composite tokens — the i-th best token of every
// head of a layer share one cache slot — scored by aggregating the heads' sorted scores; a
// global ranking of the composite tokens of all layers gives each layer its count, so the cache
// stays rectangular per layer); kvpress 0.5.5 KVComposePress (NVIDIA/kvpress, PyPI
// kvpress==0.5.5, kvpress/presses/kvcompose_press.py). What kvpress computes, in our words:
//   * the context's tokens are scored with the eager attention the question's queries pay them
//     (kvpress feeds the question after the context; kvbench: the `window` last prompt tokens),
//     per query head reduced over those queries by `agg_task` (max), then over the GQA group by
//     `agg_group` (mean);
//   * `vnorm` (kvpress add_v_norm, false) multiplies by ‖v‖; `mean_across_heads` (true) adds the
//     layer's mean over its kv heads to every head's scores;
//   * per layer, each head's scores sorted descending are combined position by position with
//     `agg_head` (mean); the first `lower_bound` (0) positions get +1e9; layer 0's curve is
//     replaced by the position-wise maximum over all layers;
//   * the n = max(1, ⌊layers · C · ratio⌋) best entries of all layers' curves (C context tokens;
//     ratio = 1 − compression_ratio) say how many tokens each layer keeps (at least max(1,
//     lower_bound)); every kv head keeps that many of its best context tokens (`structured`,
//     kvpress's default). structured=false ranks the heads' own sorted curves instead and lets each
//     (layer, kv head) keep its own count.
// Choices: kvpress drops the question's tokens from the cache (its pipeline feeds the question
// again to generate); kvbench keeps the `window` tokens. Scores are in double. Ties go to the
// lower index (the earlier layer, head or token; kvpress's topk/argsort leave them open). The
// decision needs every layer's scores: it is made after the prompt's last layer
// (Policy::on_step_end). Prompt only (kvpress's press is prefill only): nothing is evicted while
// decoding.
#include <algorithm>
#include <cmath>
#include <map>

#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

class KVComposePolicy : public ParamPolicy {
 public:
  explicit KVComposePolicy(PolicyParams p) : ParamPolicy("kvcompose", std::move(p)) {
    params_.bind({{"ratio", &ratio_, within(0, 1)},
                  {"window", &window_, within(1, 1 << 20)},
                  {"agg_task", &task_max_, one_of({"mean", "max"}, "max")},
                  {"agg_group", &group_max_, one_of({"mean", "max"}, "max")},
                  {"agg_head", &head_max_, one_of({"mean", "max"}, "max")},
                  {"mean_across_heads", &mean_across_},
                  {"vnorm", &vnorm_},
                  {"lower_bound", &lower_bound_, within(0, 1 << 30)},
                  {"structured", &structured_}});
    if (parse_compress(params_)) params_.fail_param("compress", "must be prompt_end: KVCompose judges a whole prompt");
  }
  PolicyNeeds needs() const override { return {.window_queries = window_, .host_kv = vnorm_}; }
  void on_sequence_end(SeqId seq) override { pending_.erase(seq); }

  /// At the end of a prompt: the layer's per-head scores of its context tokens (all but the last
  /// `window`), kept until every layer has been seen.
  void on_layer_step(LayerStep& step) override {
    if (!step.prefill_last || ratio_ >= 1.0) return;
    const int32_t L = scoring::head_length(step, 0);
    for (int h = 1; h < step.num_kv_heads; ++h)
      if (scoring::head_length(step, h) != L)
        fail("policy 'kvcompose': kv heads of layer {} hold different lengths; KVCompose needs one prompt per layer",
             step.layer);
    Pending& p = pending_[step.seq];
    if (p.scores.empty()) p.scores.resize(step.num_layers);
    const int G = step.num_q_heads / step.num_kv_heads;
    std::vector<std::vector<double>>& layer = p.scores[step.layer];
    layer.assign(step.num_kv_heads, {});
    int w = 0;
    for (int h = 0; h < step.num_kv_heads; ++h) {
      const std::vector<float> probs = scoring::window_probs(step, h, &w);
      const int32_t C = L - w;  // the context: every token older than the window
      std::vector<double>& s = layer[h];
      s.assign(std::max(C, 0), group_max_ ? -INFINITY : 0.0);
      std::vector<double> task(std::max(C, 0));
      for (int g = 0; g < G; ++g) {
        std::fill(task.begin(), task.end(), task_max_ ? -INFINITY : 0.0);
        for (int q = 0; q < w; ++q) {
          const float* row = probs.data() + (static_cast<size_t>(g) * w + q) * L;
          for (int32_t j = 0; j < C; ++j) task[j] = task_max_ ? std::max(task[j], double{row[j]}) : task[j] + row[j];
        }
        for (int32_t j = 0; j < C; ++j) {
          const double t = task_max_ ? task[j] : task[j] / w;
          s[j] = group_max_ ? std::max(s[j], t) : s[j] + t / G;
        }
      }
      if (vnorm_) {
        const std::vector<double> n2 = scoring::row_sq_norms(*step.cache, step.seq, step.layer, h, /*values=*/true);
        for (int32_t j = 0; j < C; ++j) s[j] *= std::sqrt(n2[j]);
      }
    }
    if (mean_across_ && !layer.empty()) {
      std::vector<double> mean(layer[0].size(), 0.0);
      for (const auto& s : layer)
        for (size_t j = 0; j < s.size(); ++j) mean[j] += s[j] / static_cast<double>(layer.size());
      for (auto& s : layer)
        for (size_t j = 0; j < s.size(); ++j) s[j] += mean[j];
    }
    p.window = w;
    p.length = L;
  }

  /// After the prompt's last layer: the counts of every layer (or head) and their keep-sets.
  void on_step_end(StepEnd& se) override {
    auto it = pending_.find(se.seq);
    if (it == pending_.end()) return;
    Pending p = std::move(it->second);
    pending_.erase(it);
    const int nl = se.num_layers, nh = se.num_kv_heads;
    for (const auto& layer : p.scores)
      if (static_cast<int>(layer.size()) != nh) return;  // not every layer was scored
    const int32_t C = p.length - p.window;
    if (C <= 0) return;
    // The curves: one per layer (structured) or per (layer, head), each C values, non-increasing.
    const int ncurves = structured_ ? nl : nl * nh;
    std::vector<float> curves(static_cast<size_t>(ncurves) * C);
    std::vector<std::vector<double>> sorted(static_cast<size_t>(nl) * nh);
    for (int l = 0; l < nl; ++l)
      for (int h = 0; h < nh; ++h) {
        auto& s = sorted[static_cast<size_t>(l) * nh + h];
        s = p.scores[l][h];
        std::sort(s.begin(), s.end(), std::greater<>());
      }
    for (int c = 0; c < ncurves; ++c)
      for (int32_t i = 0; i < C; ++i) {
        double v;
        if (!structured_) {
          v = sorted[c][i];
        } else {
          v = head_max_ ? -INFINITY : 0.0;
          for (int h = 0; h < nh; ++h) {
            const double x = sorted[static_cast<size_t>(c) * nh + h][i];
            v = head_max_ ? std::max(v, x) : v + x / nh;
          }
        }
        if (i < lower_bound_) v += 1e9;
        curves[static_cast<size_t>(c) * C + i] = static_cast<float>(v);
      }
    if (structured_)  // layer 0's curve is the position-wise maximum over the layers
      for (int32_t i = 0; i < C; ++i)
        for (int l = 1; l < nl; ++l) curves[i] = std::max(curves[i], curves[static_cast<size_t>(l) * C + i]);
    const auto total = static_cast<int64_t>(curves.size());
    const int64_t n = std::clamp<int64_t>(static_cast<int64_t>(static_cast<double>(total) * ratio_), 1, total);
    std::vector<int64_t> count(ncurves, 0);
    for (int32_t k : scoring::top_k_indices(curves, n)) ++count[k / C];
    for (int l = 0; l < nl; ++l)
      for (int h = 0; h < nh; ++h) {
        int64_t k = structured_ ? std::max<int64_t>(count[l], std::max<int64_t>(1, lower_bound_))
                                : count[static_cast<size_t>(l) * nh + h];
        k = std::min<int64_t>(k, C);
        const std::vector<double>& s = p.scores[l][h];
        std::vector<float> sf(s.begin(), s.end());
        std::vector<int32_t> keep = scoring::top_k_indices(sf, k);
        for (int32_t i = C; i < p.length; ++i) keep.push_back(i);
        se.keep(l, h, std::move(keep));
      }
  }

 private:
  struct Pending {
    std::vector<std::vector<std::vector<double>>> scores;  ///< [layer][kv head][context token]
    int32_t window = 0, length = 0;
  };
  double ratio_ = 1.0;
  int32_t window_ = 64;
  int64_t lower_bound_ = 0;
  bool task_max_ = true, group_max_ = false, head_max_ = false, mean_across_ = true, vnorm_ = false, structured_ = true;
  std::map<SeqId, Pending> pending_;
};

}  // namespace

KVB_POLICY(kvcompose) {
  return policy_entry<KVComposePolicy>("kvcompose").with_tests({.min_budget = 0, .params = "ratio=0.5,window=8"});
}

}  // namespace kvb
