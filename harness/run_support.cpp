#include "harness/run_support.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include "datasets/records.h"
#include "engine/policies/checkpoints.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"
#include "engine/util/io.h"

namespace kvb::cli {

std::vector<int32_t> truncate_middle(const std::vector<int32_t>& ids, size_t limit) {
  if (limit < 2) fail("prompt truncation: the token limit must be >= 2, got {}", limit);
  if (ids.size() <= limit) return ids;
  const size_t half = limit / 2;
  std::vector<int32_t> out(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(half));
  out.insert(out.end(), ids.end() - static_cast<std::ptrdiff_t>(half), ids.end());
  return out;
}

std::string default_gates(PolicySpec& ps, const std::string& policy_text, const std::vector<std::string>& models,
                          std::string* note, std::string* picked) {
  note->clear();
  picked->clear();
  const PolicyInfo* info = nullptr;
  for (const PolicyInfo& p : policy_registry())
    if (p.name == ps.name) info = &p;
  if (!info || !info->learned) return policy_text;
  const LearnedWeightsInfo& l = *info->learned;
  if (ps.params.count(l.file_param) || ps.params.count(l.random_param)) return policy_text;
  const std::string sep = ps.params.empty() ? ":" : ",";
  std::vector<const KnownCheckpoint*> known;
  for (const auto& m : models) known.push_back(default_checkpoint(ps.name, m));
  const bool all_known = !known.empty() && std::all_of(known.begin(), known.end(), [&](const KnownCheckpoint* k) {
    return k && k->weights == known[0]->weights;
  });
  if (all_known) {
    *picked = ps.name + ": using the released " + l.paper + " " + l.what + " " + known[0]->weights + " for " +
              known[0]->base_model + " (" + known[0]->note + "; `kvbench policies --checkpoints`)";
    ps.params[l.file_param] = known[0]->weights;
    return policy_text + sep + l.file_param + "=" + known[0]->weights;
  }
  for (size_t i = 0; i < models.size(); ++i)
    if (known[i])
      fail(
          "--policies {}: released {} {} are known for --model {} ({}) but {}; run the models separately or name "
          "the weights ({}=...)",
          policy_text, l.paper, l.what, models[i], known[i]->weights,
          "the other models need different ones or have none", l.file_param);
  *note = ps.name + ": no released " + l.what + " known for this model and none given (" + l.file_param +
          "=...); using RANDOM " + l.what + " (" + l.random_param + "=0) — this measures the pipeline, not " + l.paper;
  ps.params[l.random_param] = "0";
  return policy_text + sep + l.random_param + "=0";
}

}  // namespace kvb::cli
