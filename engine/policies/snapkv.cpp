// `snapkv`: observation-window attention, pooled, top-k + the window.
// Sources: Li et al., "SnapKV: LLM Knows What You are Looking for Before Generation" (arXiv
// 2404.14469, §4.2 Alg. 1: attention of the last `window` prompt queries over the prefix, summed
// over the window, 1-D pooling, top-k per head, plus the window); docs/policies.md,
// `snapkv` (the decode-time SnapKV of the R-KV repo, TRIM-KV's baseline: GQA max over LOGITS, softmax
// over the non-window keys, mean over w = 8 queries, max-pool kernel 7, keep top B − w + the w
// newest, recompressed every 128 decoded tokens); the G-KV repo variant
// (softmax per head then group max, pooling kernel 5); kvpress SnapKVPress.score (softmax per head
// over all keys with a causal mask inside the window, mean over the window, avg-pool kernel 5,
// mean over the GQA group, window forced to the top; defaults window 64).
// Choices: the defaults are the R-KV-repo decode-time variant that the seeds (TRIM-KV, R-KV,
// ForesightKV) compare against — window 8, kernel 7, pool max, gqa max_logits, buffer 128, and
// compression after the prompt plus every `buffer` decoded tokens (decode=false gives the original
// prefill-only SnapKV). kvpress's variant is `gqa=mean,pool=avg,kernel=5,window=64`; SCBench's
// is `window=32,kernel=5,pool=avg,gqa=mean`. The sum vs mean over window queries is a constant
// factor and does not change the ranking, so it is not a parameter.
#include "engine/policies/snapkv.h"

#include "engine/policies/registration.h"
#include "engine/util/error.h"

namespace kvb {

std::vector<PolicyParamInfo> snapkv_params(int64_t window, int64_t kernel, const std::string& pool,
                                           const std::string& gqa, int64_t buffer) {
  return extend_params(
      schedule_params(buffer, window, /*sinks=*/0),
      {{"window",
        "observation window: the most recent queries scored against the cache, and the recent tokens always kept"}},
      {{"kernel", std::to_string(kernel), "pooling kernel along tokens (1 = none)"},
       {"pool", pool, "pooling type: max, avg (zero-padded, as torch avg_pool1d) or none"},
       {"gqa", gqa,
        "GQA reduction: max_logits (max over the group before a softmax over older keys; R-KV repo), "
        "max or mean (of per-head softmax probabilities; G-KV / kvpress)"}});
}

SnapKVPolicy::SnapKVPolicy(std::string name, PolicyParams p) : ScheduledPolicy(std::move(name), std::move(p)) {
  params_.bind({{"kernel", &kernel_, at_least(1)}});
  pool_ = scoring::parse_pool(params_.get_choice("pool", {"max", "avg", "none"}), "pool");
  gqa_ = scoring::parse_gqa(params_.get_choice("gqa", {"max_logits", "max", "mean"}), "gqa");
  params_.check_min("window", window_, 1, "the observation window");
}

PolicyNeeds SnapKVPolicy::needs() const { return {.window_queries = window_}; }

void SnapKVPolicy::score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) {
  int w = 0;
  std::vector<float> imp = scoring::window_scores(step, h, {gqa_, pool_, kernel_}, &w);
  for (size_t i = 0; i < imp.size(); ++i) scores[i] = imp[i];
}

KVB_POLICY(snapkv) { return policy_entry<SnapKVPolicy>("snapkv").with_tests({.min_budget = 9}); }

}  // namespace kvb
