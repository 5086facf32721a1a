// The released learned-policy checkpoints kvbench knows, and the base model each belongs to
// (docs/policies.md#released-checkpoints; `kvbench policies --checkpoints`). `kvbench run`
// uses it to pick a policy's weights for a model when none are given.
#pragma once

#include <string>
#include <vector>

namespace kvb {

/// One released checkpoint of a learned policy.
struct KnownCheckpoint {
  std::string policy;      ///< registry name ("trimkv", "wgkv")
  std::string weights;     ///< what `gates=` takes: a Hub id, "org/name[/path]"
  std::string base_model;  ///< the Hub id of the model it was trained on ("Qwen/Qwen3-4B")
  std::string note;        ///< training setting and source (M, λ, data), one line
};

/// Every known checkpoint, grouped by policy. Several may share a base model; the first one
/// listed for a (policy, base model) is the default.
const std::vector<KnownCheckpoint>& known_checkpoints();

/// The default checkpoint of `policy` for `model`, or nullptr. `model` is what the user passed to
/// --model: a Hub id ("Qwen/Qwen3-4B", matched case-insensitively, "@revision" ignored) or a local
/// snapshot directory of the Hugging Face cache (".../models--Qwen--Qwen3-4B/snapshots/<sha>").
const KnownCheckpoint* default_checkpoint(const std::string& policy, const std::string& model);

/// The Hub id `model` names (see default_checkpoint), or "" when it names none.
std::string model_hub_id(const std::string& model);

}  // namespace kvb
