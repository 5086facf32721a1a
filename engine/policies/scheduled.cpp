#include "engine/policies/scheduled.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/policies/scoring.h"
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
  ratio_ = params_.get_double("ratio");
  buffer_ = params_.get_int("buffer");
  const int64_t window = params_.get_int("window");
  const int64_t sinks = params_.get_int("sinks");
  decode_ = params_.get_bool("decode");
  chunked_ = parse_compress(params_);
  if (ratio_ <= 0 || ratio_ > 1) params_.fail_param("ratio", "must be in (0, 1]");
  if (buffer_ < 1) params_.fail_param("buffer", "must be >= 1 (1 = compress on every step)");
  if (window < -1 || window > (1 << 30)) params_.fail_param("window", "must be >= 0 (or -1: half the budget)");
  if (sinks < 0 || sinks > (1 << 30)) params_.fail_param("sinks", "must be >= 0");
  window_ = static_cast<int32_t>(window);
  sinks_ = static_cast<int32_t>(sinks);
  if (threshold_kind_) {
    if (params_.get_string(tkey).empty())
      params_.fail_param(tkey, "required with budget_kind=threshold (tokens scoring below it are evicted)");
    evict_threshold_ = params_.get_double(tkey);
    if (!std::isfinite(evict_threshold_)) params_.fail_param(tkey, "must be a finite number");
    if (window < 0) params_.fail_param("window", "must be >= 0 with budget_kind=threshold (-1 halves a token budget)");
    return;
  }
  if (params_.given(tkey)) params_.fail_param(tkey, "is only used with budget_kind=threshold");
  if (!ratio_kind_ && budget_ <= 0)
    fail(
        "policy '{}' compresses the cache to a budget but none was given: pass --budget N (tokens kept per "
        "layer and kv head), or budget_kind=ratio",
        name_);
  if (!ratio_kind_ && budget_ > 0 && budget_ <= sinks + std::max<int64_t>(window, 0))
    fail("policy '{}': budget {} must exceed sinks + window = {}", name_, budget_, sinks + window);
}

int64_t ScheduledPolicy::budget_now(const LayerStep& step) const {
  if (!ratio_kind_) return budget_;
  const int64_t b = static_cast<int64_t>(std::floor(ratio_ * static_cast<double>(step.seq_len)));
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
    std::vector<int32_t> keep = select(scores, L, B);
    kept(step, h, keep, scores);
    step.keep(h, std::move(keep));
  }
}

std::vector<int32_t> ScheduledPolicy::select(const std::vector<float>& scores, int32_t L, int64_t B) {
  return scoring::select_keep(scores, L, B, sinks_, window_for(B));
}

}  // namespace kvb
