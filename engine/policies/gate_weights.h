// kvb::GateWeights — small learned-policy weights (TRIM-KV retention gates, WG-KV write gates)
// read from ONE .safetensors file fully into f32 memory. Self-contained (policies do not depend
// on the model component); F32, F16 and BF16 tensors are accepted.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvb {

/// One tensor converted to f32, shape outermost first.
struct GateTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/// All tensors of a gate-weight safetensors file.
class GateWeights {
 public:
  /// Reads `path`. `policy` names the policy in error messages. Throws kvb::Error naming the file
  /// (and the tensor/field) when it is missing, truncated, or has a malformed header, an
  /// unsupported dtype or offsets outside the data section.
  static GateWeights load(const std::string& path, const std::string& policy);

  /// The tensor `name` or nullptr.
  const GateTensor* find(const std::string& name) const;
  /// The tensor `name`, which must have exactly `shape` (a shape with trailing 1-sized dims
  /// removed also matches, e.g. Conv1d weights [O, I, 1] for [O, I]); throws kvb::Error
  /// "<path>: tensor <name>: ..." otherwise.
  const GateTensor& require(const std::string& name, const std::vector<int64_t>& shape) const;
  /// Adds an owned tensor (random test gates).
  void add(const std::string& name, std::vector<int64_t> shape, std::vector<float> data);

  std::string path;  ///< file the tensors came from ("random" for generated gates)
  std::map<std::string, GateTensor> tensors;
};

/// Writes `w` as an F32 safetensors file (tests, tools). Throws kvb::Error on I/O failure.
void save_gate_weights(const GateWeights& w, const std::string& path);

}  // namespace kvb
