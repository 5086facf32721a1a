// Policy::kv_footprint's shared helpers (policy.h): pages of per-head token bounds.
#include <string>
#include <utility>

#include "engine/policies/policy.h"
#include "engine/util/error.h"

namespace kvb {

namespace {

void check_query(const FootprintQuery& q) {
  if (q.context <= 0) fail("KV footprint: context must be > 0 tokens, got {}", q.context);
  if (q.gen < 0) fail("KV footprint: gen must be >= 0 tokens, got {}", q.gen);
  if (q.prefill_chunk <= 0) fail("KV footprint: prefill chunk must be > 0 tokens, got {}", q.prefill_chunk);
  if (q.page_size <= 0) fail("KV footprint: page size must be > 0 tokens, got {}", q.page_size);
  if (q.num_layers <= 0 || q.num_kv_heads <= 0)
    fail("KV footprint: {} layers x {} kv heads is not a cache shape", q.num_layers, q.num_kv_heads);
}

}  // namespace

KvFootprint per_head_footprint(const FootprintQuery& q, int64_t peak_tokens, int64_t steady_tokens, std::string rule) {
  check_query(q);
  const KvPageGeometry g = q.page_counts();
  KvFootprint f;
  f.peak_tokens_per_head = peak_tokens;
  f.steady_tokens_per_head = steady_tokens;
  f.peak_pages = g.pages_for_sequence(peak_tokens);
  f.steady_pages = g.pages_for_sequence(steady_tokens);
  f.rule = std::move(rule);
  return f;
}

KvFootprint full_cache_footprint(const FootprintQuery& q, std::string rule) {
  return per_head_footprint(q, q.context + q.gen, q.context + q.gen, std::move(rule));
}

KvFootprint uneven_budget_footprint(const FootprintQuery& q, const std::string& name) {
  return full_cache_footprint(q, name +
                                     ": budget shared unevenly across heads or layers, sized as the full cache "
                                     "(context + gen)");
}

}  // namespace kvb
