// kvb::Backend — the interface the Engine drives a forward pass through (`--backend cpu|cuda`).
// Both backends run the same host-side policy code: after every layer they fill the LayerStep
// signals the policy declared, call Policy::on_layer_step / on_step_end, and apply the returned
// keep-sets to the KVCache (whose host-side page tables, positions and scalars are the source of
// truth for which tokens are kept). The CPU backend holds K/V in the KVCache pages; the CUDA
// backend holds K/V as bf16 in a device pool addressed by the same page ids.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/cpu/forward.h"

namespace kvb {

/// One forward-pass implementation bound to a model and a KV cache. Not thread-safe.
class Backend {
 public:
  virtual ~Backend() = default;
  /// "cpu" or "cuda".
  virtual std::string name() const = 0;
  /// Runs one step for `items` (see CpuBackend::forward for the contract): writes logits [k, V]
  /// f32 for the k items with want_logits, in item order. `policy` may be null (full cache).
  /// Throws kvb::Error on invalid token ids, an exhausted page pool or a device failure.
  virtual void forward(std::span<ForwardItem> items, Policy* policy, std::vector<float>& logits,
                       ForwardStats* stats = nullptr) = 0;
  /// Human-readable device measurements since construction (device name, memory peak, achieved
  /// decode bandwidth, ...), one "key: value" per line; empty for the CPU backend.
  virtual std::string report() const { return {}; }
};

/// Builds the backend named `name` ("cpu", or "cuda" in builds with KVB_CUDA). Throws kvb::Error
/// naming the backend when it is unknown, not compiled in, or has no device ("no CUDA device").
std::unique_ptr<Backend> make_backend(const std::string& name, const Model& model, KVCache& cache);

/// Names of the backends compiled into this build ("cpu" first).
std::vector<std::string> compiled_backends();

}  // namespace kvb
