#include "engine/policies/scheduled.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "engine/policies/scoring.h"
#include "engine/policies/merging.h"
#include "engine/policies/rerotation.h"
#include "engine/policies/think.h"
#include "engine/policies/wrapped.h"
#include "engine/util/error.h"

namespace kvb {

std::vector<PolicyParamInfo> schedule_params(int64_t buffer, int64_t window, int64_t sinks, bool decode,
                                             bool global_kind, const char* threshold_key) {
  return {
      {"budget_kind", "tokens",
       global_kind ? "tokens: budget = tokens per (layer, kv_head); ratio: floor(ratio x tokens seen); "
                     "threshold: evict tokens scoring below `threshold` (no budget); "
                     "global: budget x layers x kv_heads tokens shared by all heads and layers"
                   : "tokens: budget = tokens per (layer, kv_head); ratio: floor(ratio x tokens seen); "
                     "threshold: evict tokens scoring below `threshold` (no budget)"},
      {"ratio", "0.5", "kept fraction of the context when budget_kind=ratio"},
      {threshold_key, "",
       "budget_kind=threshold (required there, refused otherwise): tokens outside the sinks and the `window` "
       "newest whose score is below it are evicted at the prompt end and, with decode=true, every `buffer` "
       "decode tokens (kvpress DMSPress)"},
      {"buffer", std::to_string(buffer),
       "tokens that may accumulate before the next compression (peak = budget + buffer); 1 = every step"},
      {"window", std::to_string(window),
       window < 0 ? "most recent tokens always kept (-1: half of the budget)" : "most recent tokens always kept"},
      {"sinks", std::to_string(sinks), "first tokens always kept"},
      {"decode", decode ? "true" : "false",
       "compress during decoding every `buffer` tokens (false: only once at the end of the prompt)"},
      compress_param(),
      {"press_chunk", "0",
       "kvpress ChunkPress: > 0 splits the prompt into chunks of this many positions and keeps the top "
       "max(1, floor(ratio x chunk length)) of each (needs budget_kind=ratio and decode=false; 0 = off)"},
      {"press_block", "0",
       "kvpress BlockPress: > 0 keeps the budget through blocks of this many tokens, each scored with the tokens "
       "kept so far (needs sinks=0, window=0 and a policy that scores subsets: knorm, keydiff; 0 = off)"},
      {"layer_ratios", "",
       "kvpress PerLayerCompressionPress: kept fraction of each layer, one per layer separated by '/' (needs "
       "budget_kind=ratio; replaces `ratio`; empty = `ratio` everywhere)"},
  };
}

PolicyParamInfo compress_param() {
  return {"compress", "prompt_end",
          "when to compress: prompt_end = the whole prompt is prefilled with the full cache and compressed once at "
          "its end, then every `buffer` decode tokens (the papers' and kvpress's protocol; results do not depend "
          "on --prefill-chunk); chunked = also after every prefill chunk that brings a head to budget + buffer "
          "(a bounded cache during prefill, LocRet-style)"};
}

bool parse_compress(PolicyParams& p) { return p.get_choice("compress", {"prompt_end", "chunked"}) == "chunked"; }

ScheduledPolicy::ScheduledPolicy(std::string name, PolicyParams p, bool global_kind)
    : ParamPolicy(std::move(name), std::move(p)) {
  budget_ = params_.budget();
  const std::string kind = global_kind ? params_.get_choice("budget_kind", {"tokens", "ratio", "threshold", "global"})
                                       : params_.get_choice("budget_kind", {"tokens", "ratio", "threshold"});
  ratio_kind_ = kind == "ratio";
  global_kind_ = kind == "global";
  threshold_kind_ = kind == "threshold";
  const std::string tkey = params_.declares("score_threshold") ? "score_threshold" : "threshold";
  int64_t window = 0, sinks = 0;
  params_.bind({{"ratio", &ratio_}, {"buffer", &buffer_}, {"window", &window}, {"sinks", &sinks}, {"decode", &decode_}});
  chunked_ = parse_compress(params_);
  if (ratio_ <= 0 || ratio_ > 1) params_.fail_param("ratio", "must be in (0, 1]");
  if (buffer_ < 1) params_.fail_param("buffer", "must be >= 1 (1 = compress on every step)");
  if (window < -1 || window > (1 << 30)) params_.fail_param("window", "must be >= 0 (or -1: half the budget)");
  if (sinks < 0 || sinks > (1 << 30)) params_.fail_param("sinks", "must be >= 0");
  window_ = static_cast<int32_t>(window);
  sinks_ = static_cast<int32_t>(sinks);
  if (threshold_kind_) {
    if (params_.declares("press_chunk") && params_.get_int("press_chunk") != 0)
      params_.fail_param("press_chunk", "needs budget_kind=ratio (kvpress ChunkPress keeps a fraction of each chunk)");
    if (params_.declares("press_block") && params_.get_int("press_block") != 0)
      params_.fail_param("press_block", "needs a token or ratio budget (kvpress BlockPress keeps a number of tokens)");
    if (params_.declares("layer_ratios") && !params_.get_string("layer_ratios").empty())
      params_.fail_param("layer_ratios", "needs budget_kind=ratio (kvpress PerLayerCompressionPress)");
    if (params_.get_string(tkey).empty())
      params_.fail_param(tkey, "required with budget_kind=threshold (tokens scoring below it are evicted)");
    evict_threshold_ = params_.get_double(tkey);
    if (!std::isfinite(evict_threshold_)) params_.fail_param(tkey, "must be a finite number");
    if (window < 0) params_.fail_param("window", "must be >= 0 with budget_kind=threshold (-1 halves a token budget)");
    return;
  }
  if (params_.given(tkey)) params_.fail_param(tkey, "is only used with budget_kind=threshold");
  read_wrappers();
  if (!ratio_kind_ && budget_ <= 0)
    fail(
        "policy '{}' compresses the cache to a budget but none was given: pass --budget N (tokens kept per "
        "layer and kv head), or budget_kind=ratio",
        name_);
  if (!ratio_kind_ && budget_ > 0 && budget_ <= sinks + std::max<int64_t>(window, 0))
    fail("policy '{}': budget {} must exceed sinks + window = {}", name_, budget_, sinks + window);
}

void ScheduledPolicy::read_wrappers() {
  if (params_.declares("press_chunk")) {
    press_chunk_ = params_.get_int("press_chunk");
    if (press_chunk_ < 0 || press_chunk_ > (1 << 30)) params_.fail_param("press_chunk", "must be >= 0 (0 = off)");
    if (press_chunk_ > 0 && !ratio_kind_)
      params_.fail_param("press_chunk", "needs budget_kind=ratio (kvpress ChunkPress keeps a fraction of each chunk)");
    if (press_chunk_ > 0 && (decode_ || chunked_))
      params_.fail_param("press_chunk",
                         "needs decode=false and compress=prompt_end (kvpress ChunkPress compresses the prompt once)");
  }
  if (params_.declares("press_block")) {
    press_block_ = params_.get_int("press_block");
    if (press_block_ < 0 || press_block_ > (1 << 30)) params_.fail_param("press_block", "must be >= 0 (0 = off)");
    if (press_block_ > 0 && (sinks_ != 0 || window_ != 0))
      params_.fail_param("press_block", "needs sinks=0 and window=0 (kvpress BlockPress protects no token)");
    if (press_block_ > 0 && press_chunk_ > 0) params_.fail_param("press_block", "cannot be combined with press_chunk");
  }
  if (params_.declares("layer_ratios")) {
    const std::string text = params_.get_string("layer_ratios");
    if (text.empty()) return;
    if (!ratio_kind_) params_.fail_param("layer_ratios", "needs budget_kind=ratio (kvpress PerLayerCompressionPress)");
    if (params_.given("ratio")) params_.fail_param("layer_ratios", "replaces `ratio`: give one of them");
    size_t start = 0;
    while (true) {
      const size_t slash = text.find('/', start);
      const std::string item = text.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
      double r = 0;
      try {
        size_t used = 0;
        r = std::stod(item, &used);
        if (used != item.size()) r = -1;
      } catch (const std::exception&) {
        r = -1;
      }
      if (!(r > 0 && r <= 1))
        params_.fail_param("layer_ratios", fmt::format("'{}' is not a kept fraction in (0, 1]", item));
      layer_ratios_.push_back(r);
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    ratio_ = *std::max_element(layer_ratios_.begin(), layer_ratios_.end());  // the footprint's bound
  }
}

double ScheduledPolicy::ratio_at(const LayerStep& step) const {
  if (layer_ratios_.empty()) return ratio_;
  if (static_cast<int>(layer_ratios_.size()) != step.num_layers)
    params_.fail_param("layer_ratios", fmt::format("has {} kept fractions for a model of {} layers",
                                                   layer_ratios_.size(), step.num_layers));
  return layer_ratios_[step.layer];
}

std::vector<int32_t> ScheduledPolicy::chunk_select(const LayerStep& step, int h, const std::vector<float>& scores,
                                                   int32_t L, int64_t B) const {
  const double ratio = ratio_at(step);
  const int32_t window = window_for(B);
  std::vector<int32_t> keep;
  for (int32_t a = 0; a < L;) {
    const int64_t chunk = step.cache->position(step.seq, step.layer, h, a) / press_chunk_;
    int32_t b = a + 1;
    while (b < L && step.cache->position(step.seq, step.layer, h, b) / press_chunk_ == chunk) ++b;
    const int32_t n = b - a;
    const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(ratio * static_cast<double>(n)));
    const int32_t sinks = std::clamp(sinks_ - a, 0, n), recent = std::clamp(b - (L - window), 0, n);
    for (int32_t i : scoring::select_keep(std::span<const float>(scores).subspan(a, n), n, k, sinks, recent))
      keep.push_back(a + i);
    a = b;
  }
  return keep;
}

std::vector<int32_t> ScheduledPolicy::block_select(LayerStep& step, int h, int32_t L, int64_t B) {
  const int32_t n = static_cast<int32_t>(std::min<int64_t>(B, L));
  std::vector<int32_t> kept(n), cand;
  for (int32_t i = 0; i < n; ++i) kept[i] = i;
  std::vector<float> s;
  for (int32_t a = n; a < L; a += static_cast<int32_t>(press_block_)) {
    const int32_t b = static_cast<int32_t>(std::min<int64_t>(L, a + press_block_));
    cand = kept;
    for (int32_t i = a; i < b; ++i) cand.push_back(i);
    if (!scores_of(step, h, cand, s))
      params_.fail_param("press_block", "needs a policy that scores a subset of its cache (knorm, keydiff)");
    std::vector<int32_t> top = scoring::top_k_indices(s, n);
    for (int32_t& t : top) t = cand[t];
    std::sort(top.begin(), top.end());
    kept = std::move(top);
  }
  return kept;
}

bool ScheduledPolicy::score_subset(LayerStep& step, int h, std::span<const int32_t> subset, std::vector<float>& out) {
  if (!token_local()) return false;
  const int32_t L = step.cache->length(step.seq, step.layer, h);
  std::vector<float> all(L, 0.f);
  score(step, h, L, all);
  out.resize(subset.size());
  for (size_t i = 0; i < subset.size(); ++i) out[i] = all[subset[i]];
  return true;
}

int64_t ScheduledPolicy::budget_now(const LayerStep& step) const {
  if (!ratio_kind_) return budget_;
  const int64_t b = static_cast<int64_t>(std::floor(ratio_at(step) * static_cast<double>(step.seq_len)));
  return std::max<int64_t>(b, sinks_ + std::max(window_, 0) + 1);
}

KvFootprint ScheduledPolicy::kv_footprint(const FootprintQuery& q) const {
  const int64_t full = q.context + q.gen;
  int64_t B = budget_;
  if (ratio_kind_) B = std::max<int64_t>(static_cast<int64_t>(std::ceil(ratio_ * static_cast<double>(full))), 1);
  if (B <= 0) return full_cache_footprint(q, "budget 0 (never compresses): the full cache, context + gen");
  const int64_t b = buffer_;
  int64_t peak = 0, steady = 0;
  std::string rule;
  if (!decode_) {
    steady = std::min(q.context, B) + q.gen;
    peak = std::max(q.context, steady);
    rule = "decode=false: peak max(context, min(context, B) + gen), steady min(context, B) + gen";
  } else if (chunked_) {
    // A head that never reaches B + buffer is never compressed: it ends at min(context, B) + gen.
    steady = std::min({full, B + b, std::min(q.context, B) + q.gen});  // the prompt's end compresses to B
    peak = std::min(full, std::max(std::min(q.context, B + b - 1 + q.prefill_chunk), steady));
    rule =
        "compress=chunked: peak max(min(context, B + buffer - 1 + prefill chunk), steady), steady min(B + buffer, "
        "min(context, B) + gen)";
  } else {
    steady = std::min({full, B + b, std::min(q.context, B) + q.gen});
    peak = std::max(q.context, steady);
    rule =
        "compress=prompt_end: peak max(context, steady) (whole prompt held before compression), steady "
        "min(B + buffer, min(context, B) + gen)";
  }
  rule = fmt::format("{} (B {}, buffer {}, capped at context + gen)", rule, B, b);
  KvFootprint f = per_head_footprint(q, peak, steady, rule);
  if (global_kind_) {
    // Ragged heads: their total stays within heads · the per-head bound, plus a partial page each.
    const int64_t heads = static_cast<int64_t>(q.num_layers) * q.num_kv_heads;
    auto pages = [&](int64_t tokens) { return q.page_counts().pages_for_tokens(heads * tokens) + heads; };
    f.peak_pages = pages(peak);
    f.steady_pages = pages(steady);
    f.rule += ", budget_kind=global: total over heads + one partial page per head";
  }
  return f;
}

void ScheduledPolicy::refuse_threshold(const std::string& why) const {
  if (threshold_kind_) params_.fail_param("budget_kind", "threshold is not supported by this policy (" + why + ")");
}

bool ScheduledPolicy::threshold_due(const LayerStep& step) const {
  if (!compress_point(step.prefill, step.prefill_last, chunked_)) return false;
  if (step.prefill) return true;  // the prompt end, or any chunk with compress=chunked
  return decode_ && step.seq_len % buffer_ == 0;
}

std::vector<int32_t> ScheduledPolicy::threshold_keep(const std::vector<float>& scores, int32_t L) const {
  std::vector<int32_t> keep;
  keep.reserve(L);
  const int32_t recent = L - window_;  // tokens at index >= recent are in the protected window
  for (int32_t i = 0; i < L; ++i)
    if (i < sinks_ || i >= recent || static_cast<double>(scores[i]) >= evict_threshold_) keep.push_back(i);
  return keep;
}

bool compress_point(bool prefill, bool prefill_last, bool chunked) { return !prefill || prefill_last || chunked; }

bool ScheduledPolicy::due(const LayerStep& step, int32_t L, int64_t B) const {
  if (B <= 0 || L <= B) return false;
  if (!compress_point(step.prefill, step.prefill_last, chunked_)) return false;  // a prompt chunk, not its end
  if (step.prefill_last) return true;
  if (step.prefill) return L >= B + buffer_;  // compress=chunked: a chunk brought the head to B + buffer
  if (!decode_) return false;
  return L >= B + buffer_;
}

bool ScheduledPolicy::shared_layer_due(const LayerStep& step, int64_t B, std::vector<int32_t>& len) const {
  const int H = step.num_kv_heads;
  len.assign(H, 0);
  int64_t total = 0;
  for (int h = 0; h < H; ++h) total += (len[h] = step.cache->length(step.seq, step.layer, h));
  if (B <= 0 || total <= B * H || !compress_point(step.prefill, step.prefill_last, chunked_)) return false;
  if (step.prefill_last) return true;
  return (step.prefill || decode_) && total >= (B + buffer_) * H;
}

void ScheduledPolicy::on_layer_step(LayerStep& step) {
  observe(step);
  if (global_kind_) return;
  if (threshold_kind_) {
    if (!threshold_due(step)) return;
    std::vector<float> scores;
    for (int h = 0; h < step.num_kv_heads; ++h) {
      const int32_t L = step.cache->length(step.seq, step.layer, h);
      if (L <= sinks_ + window_) continue;  // nothing outside the protected tokens
      scores.assign(L, 0.f);
      score(step, h, L, scores);
      std::vector<int32_t> keep = threshold_keep(scores, L);
      kept(step, h, keep, scores);  // per-token state of the survivors (G-KV's decayed score), evicting or not
      if (static_cast<int32_t>(keep.size()) < L) step.keep(h, std::move(keep));
    }
    return;
  }
  const int64_t B0 = budget_now(step);
  if (B0 <= 0) return;
  const int64_t B = layer_budget(step, B0, step.cache->length(step.seq, step.layer, 0));
  std::vector<float> scores;
  for (int h = 0; h < step.num_kv_heads; ++h) {
    const int32_t L = step.cache->length(step.seq, step.layer, h);
    if (!due(step, L, B)) continue;
    scores.assign(L, 0.f);
    score(step, h, L, scores);
    std::vector<int32_t> keep = press_block_ > 0   ? block_select(step, h, L, B)
                                : press_chunk_ > 0 ? chunk_select(step, h, scores, L, B)
                                                   : select(scores, L, B);
    kept(step, h, keep, scores);
    step.keep(h, std::move(keep));
  }
}

std::vector<int32_t> ScheduledPolicy::select(const std::vector<float>& scores, int32_t L, int64_t B) {
  return scoring::select_keep(scores, L, B, sinks_, window_for(B));
}

}  // namespace kvb

namespace kvb {
namespace {

/// kvpress ComposedPress([first, then]) (make_composed): `first`'s keep-sets, each re-compressed
/// to its top fraction by `then`'s scores of the kept tokens alone.
class ComposedPolicy : public CompositePolicy {
 public:
  ComposedPolicy(std::unique_ptr<ScheduledPolicy> first, std::unique_ptr<ScheduledPolicy> then, std::string then_name,
                 double then_ratio)
      : first_(std::move(first)), then_(std::move(then)), then_name_(std::move(then_name)), ratio_(then_ratio) {
    forward_sequences_to({first_.get(), then_.get()});
  }
  std::string name() const override { return first_->name(); }
  nlohmann::json resolved_params() const override {
    nlohmann::json j = first_->resolved_params();
    j["then"] = then_name_;
    j["then_ratio"] = ratio_;
    return j;
  }
  PolicyNeeds needs() const override { return merge(first_->needs(), then_->needs()); }
  void on_layer_step(LayerStep& step) override {
    first_->on_layer_step(step);
    std::vector<float> s;
    for (auto& [h, keep] : step.keeps) {
      if (!then_->scores_of(step, h, keep, s))
        fail("policy '{}': then={} does not score a subset of the cache (knorm, keydiff do)", first_->name(), then_name_);
      const int64_t n =
          std::max<int64_t>(1, static_cast<int64_t>(ratio_ * static_cast<double>(keep.size())));  // compute_n_kept
      std::vector<int32_t> top = scoring::top_k_indices(s, n);
      for (int32_t& t : top) t = keep[t];
      std::sort(top.begin(), top.end());
      keep = std::move(top);
    }
  }
  void on_step_end(StepEnd& step) override { first_->on_step_end(step); }
  KvFootprint kv_footprint(const FootprintQuery& q) const override { return first_->kv_footprint(q); }
  bool uses_budget() const override { return first_->uses_budget(); }

 private:
  std::unique_ptr<ScheduledPolicy> first_, then_;
  std::string then_name_;
  double ratio_;
};

/// kvpress ComposedPress([first, ThinKPress]) (make_composed with then=think): `first`'s layer
/// step, then at the end of each prompt ThinK's key-channel pruning (think::prune_keys) of every
/// head's tokens that `first` keeps (all of them when it requests no keep-set for the head),
/// scored over those tokens alone, as ThinKPress sees the keys its predecessor left.
class ThenThinkPolicy : public WrappedPolicy {
 public:
  static constexpr int kWindow = 32;  ///< kvpress ThinKPress window_size
  ThenThinkPolicy(std::unique_ptr<Policy> first, double kept) : WrappedPolicy(std::move(first)), kept_(kept) {}
  nlohmann::json resolved_params() const override {
    nlohmann::json j = inner_->resolved_params();
    j["then"] = "think";
    j["then_ratio"] = kept_;
    return j;
  }
  PolicyNeeds needs() const override {
    PolicyNeeds a = writing_needs();
    a.window_queries = std::max(a.window_queries, kWindow);
    return a;
  }
  void on_layer_step(LayerStep& step) override {
    inner_->on_layer_step(step);
    if (!step.prefill_last) return;
    const int n_pruned = think::pruned_channels(step.head_dim, kept_);
    for (int h = 0; h < step.num_kv_heads; ++h) {
      const std::vector<int32_t>* keep = nullptr;
      for (const auto& k : step.keeps)
        if (k.first == h) keep = &k.second;  // a later keep-set of the head replaces an earlier one
      std::vector<int32_t> all;
      if (!keep) {
        all.resize(step.cache->length(step.seq, step.layer, h));
        std::iota(all.begin(), all.end(), 0);
      }
      think::prune_keys(step, h, keep ? std::span<const int32_t>(*keep) : std::span<const int32_t>(all), kWindow,
                        n_pruned);
    }
  }

 private:
  double kept_;
};

std::unique_ptr<ScheduledPolicy> as_scheduled(std::unique_ptr<Policy> p, const std::string& spec, const char* role) {
  auto* s = dynamic_cast<ScheduledPolicy*>(p.get());
  if (!s)
    fail("policy spec '{}': {} '{}' is not a scored policy (kvpress ComposedPress chains scorer presses)", spec, role,
         p->name());
  p.release();
  return std::unique_ptr<ScheduledPolicy>(s);
}

}  // namespace

namespace {

/// The value of spec parameter `key` as a double in [lo, hi] (`def` when absent); throws kvb::Error
/// naming the parameter and `what` otherwise.
double spec_double(const PolicySpec& spec, const std::string& key, double def, double lo, double hi, bool lo_open,
                   const char* what) {
  const auto it = spec.params.find(key);
  if (it == spec.params.end()) return def;
  double v = std::nan("");
  try {
    size_t used = 0;
    v = std::stod(it->second, &used);
    if (used != it->second.size()) v = std::nan("");
  } catch (const std::exception&) {
  }
  if (!(lo_open ? v > lo : v >= lo) || !(v <= hi))
    fail("policy spec '{}': parameter '{}' must be {} ({})", spec.to_string(), key, what, "kvpress MergingPress");
  return v;
}

}  // namespace

std::unique_ptr<Policy> make_composed(const PolicySpec& spec,
                                      const std::function<std::unique_ptr<Policy>(const PolicySpec&)>& make_single) {
  const auto rerotate = spec.params.find("rerotate");
  if (rerotate != spec.params.end()) {  // kvpress KeyRerotationPress(P): P's kept keys re-rotated to their ranks
    if (rerotate->second != "true" && rerotate->second != "false")
      fail("policy spec '{}': parameter 'rerotate' must be true or false (kvpress KeyRerotationPress)", spec.to_string());
    const auto then = spec.params.find("then");
    if (rerotate->second == "true" && then != spec.params.end() && then->second == "think")
      fail("policy spec '{}': rerotate=true and then=think both rewrite the kept keys; use one", spec.to_string());
    PolicySpec inner = spec;
    inner.params.erase("rerotate");
    std::unique_ptr<Policy> p = make_composed(inner, make_single);
    return rerotate->second == "true" ? rerotation::make_rerotating(std::move(p)) : std::move(p);
  }
  const auto merge = spec.params.find("merge");
  if (merge != spec.params.end() || spec.params.count("merge_threshold") || spec.params.count("merge_fraction")) {
    // kvpress MergingPress(P): P's keep-sets, each evicted token's value merged into a survivor.
    if (merge == spec.params.end() || (merge->second != "true" && merge->second != "false"))
      fail("policy spec '{}': merge_threshold and merge_fraction need merge=true (kvpress MergingPress)",
           spec.to_string());
    const double t = spec_double(spec, "merge_threshold", 0.0, 0.0, 1.0, false, "a cosine in [0, 1]");
    const double f = spec_double(spec, "merge_fraction", 1.0, 0.0, 1.0, true, "a fraction in (0, 1]");
    if (merge->second == "false" && (spec.params.count("merge_threshold") || spec.params.count("merge_fraction")))
      fail("policy spec '{}': merge_threshold and merge_fraction need merge=true (kvpress MergingPress)",
           spec.to_string());
    PolicySpec inner = spec;
    inner.params.erase("merge");
    inner.params.erase("merge_threshold");
    inner.params.erase("merge_fraction");
    std::unique_ptr<Policy> p = make_composed(inner, make_single);
    return merge->second == "true" ? merging::make_merging(std::move(p), t, f) : std::move(p);
  }
  const auto then = spec.params.find("then");
  const auto ratio = spec.params.find("then_ratio");
  if (then == spec.params.end()) {
    if (ratio != spec.params.end())
      fail("policy spec '{}': parameter 'then_ratio' needs 'then' (kvpress ComposedPress)", spec.to_string());
    return make_single(spec);
  }
  PolicySpec first = spec;
  first.params.erase("then");
  first.params.erase("then_ratio");
  double f = 0.5;
  if (ratio != spec.params.end()) {
    try {
      size_t used = 0;
      f = std::stod(ratio->second, &used);
      if (used != ratio->second.size()) f = -1;
    } catch (const std::exception&) {
      f = -1;
    }
  }
  if (!(f > 0 && f <= 1))
    fail("policy spec '{}': parameter 'then_ratio' must be a kept fraction in (0, 1]", spec.to_string());
  if (then->second == "think")  // kvpress ComposedPress([P, ThinKPress]): key channels, not tokens
    return std::make_unique<ThenThinkPolicy>(as_scheduled(make_single(first), spec.to_string(), "the policy"), f);
  PolicySpec second;
  second.name = then->second;
  second.params = {
      {"budget_kind", "ratio"}, {"ratio", ratio == spec.params.end() ? "0.5" : ratio->second}, {"decode", "false"}};
  const std::string text = spec.to_string();
  std::unique_ptr<Policy> p1 = make_single(first), p2;
  try {
    p2 = make_single(second);
  } catch (const Error& e) {
    fail("policy spec '{}': then={} (a scored policy, built with budget_kind=ratio,decode=false): {}", text,
         then->second, e.what());
  }
  return std::make_unique<ComposedPolicy>(as_scheduled(std::move(p1), text, "the policy"),
                                          as_scheduled(std::move(p2), text, "then"), then->second, f);
}

}  // namespace kvb
