// kvb::Backend — the interface the Engine drives a forward pass through (`--backend cpu|cuda`).
// Both backends run the same host-side policy code: after every layer they fill the LayerStep
// signals the policy declared, call Policy::on_layer_step / on_step_end, and apply the returned
// keep-sets to the KVCache (whose host-side page tables, positions and scalars are the source of
// truth for which tokens are kept). The CPU backend holds K/V in the KVCache's host payload; the
// CUDA backend holds K/V as bf16 in a device pool addressed by the same page ids, and the cache
// then keeps no host copy unless the policy reads keys on the host (kv_payload_for).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/cpu/forward.h"
#include "engine/kv/page_geometry.h"
#include "engine/sampling/sampler.h"
#include "engine/scheduler/step.h"

namespace kvb {

/// One forward-pass implementation bound to a model and a KV cache. Not thread-safe.
class Backend {
 public:
  virtual ~Backend() = default;
  /// Its registry name: "cpu", "cpu-bf16" or "cuda" (BackendInfo::name).
  virtual std::string name() const = 0;
  /// Runs one step for `items` (see CpuBackend::forward for the contract): writes logits [k, V]
  /// f32 for the k items with want_logits, in item order. `policy` may be null (full cache).
  /// Throws kvb::Error on invalid token ids, an exhausted page pool or a device failure.
  virtual void forward(std::span<ForwardItem> items, Policy* policy, std::vector<float>& logits,
                       ForwardStats* stats = nullptr) = 0;
  /// True when one forward() may carry prompt chunks and decode tokens together with every row
  /// getting the bits it gets in a step of its own kind (the CPU backend: every kernel has one
  /// reduction order per row). False: the engine runs prefill steps and decode steps apart.
  virtual bool mixed_steps() const { return true; }
  /// Applies keep-sets outside a forward step (Policy::on_scoring_passes_end, after a scoring
  /// pass): head (k.layer, k.head) of `seq` keeps exactly k.indices (strictly increasing indices
  /// into the head's cache) in the host page tables and in the backend's own K/V store (CUDA: the
  /// device pool's compaction copies, finished before it returns). Returns the tokens evicted.
  /// The caller validates layer and head; throws kvb::Error for bad indices (KVCache::compact) or
  /// a device failure.
  virtual int64_t compact_heads(SeqId seq, std::span<const StepEnd::Keep> keeps) = 0;
  /// Human-readable device measurements since construction (device name, memory peak, achieved
  /// decode bandwidth, ...), one "key: value" per line; empty for the CPU backend.
  virtual std::string report() const { return {}; }

  // Device sampling (the CUDA backend): the engine's decode step asks device_sampling() for every
  // row; when all are supported it calls defer_logits(), forward() then leaves `logits` empty
  // (no [k, V] device→host copy) and sample_rows() draws the tokens where the logits are.
  /// True when sample_rows() can sample with `p` (CUDA: temperature and top-p; not top-k, min-p).
  virtual bool device_sampling(const SamplingParams& p) const { return false; }
  /// The next forward() keeps its logits on the device and writes none to the host (one-shot).
  virtual void defer_logits() {}
  /// One token per logit row of the last forward(), in its row order: greedy (lowest id on ties)
  /// when params[r].temperature ≤ 0, else temperature + top-p with the uniform draw u[r] ∈ [0, 1).
  /// Throws kvb::Error when unsupported or when the counts do not match the rows.
  virtual std::vector<int32_t> sample_rows(const std::vector<SamplingParams>& params, const std::vector<float>& u);
};

/// The backends kvbench knows (`--backend NAME`), whether compiled into this build or not.
enum class BackendKind {
  kCpu,      ///< "cpu": f32 activations over weights as stored, f32 K/V (engine/backend/cpu)
  kCpuBf16,  ///< "cpu-bf16": the CPU forward rounding to bf16 where the CUDA backend stores bf16
  kCuda,     ///< "cuda": bf16 weights and K/V on an NVIDIA GPU (engine/backend/cuda)
};

/// One row of the backend registry: every place that needs to know something about a backend
/// reads it here instead of comparing names.
struct BackendInfo {
  BackendKind kind;
  const char* name;         ///< the `--backend` value
  const char* description;  ///< one line for help texts and docs
  bool compiled;            ///< built into this binary (cuda: only with KVB_CUDA)
  bool on_device;           ///< runs on a GPU: K/V may be held on the device (kv_payload_for) and
                            ///< the run's device is the GPU, not the host CPU
  bool bf16_weights;        ///< holds weights as bf16 (random test weights are made as bf16)
  KvDtype kv_dtype;         ///< element type of the K/V rows its KV pool stores (prices a --memory page)
};

/// Every backend, "cpu" first, compiled or not.
const std::vector<BackendInfo>& backend_registry();

/// The registry row named `name`, or nullptr when kvbench has no such backend.
const BackendInfo* find_backend(const std::string& name);

/// The registry row named `name` when it is compiled into this build; throws kvb::Error
/// ("--backend NAME: not available in this build (available: ...)") otherwise.
const BackendInfo& backend_info(const std::string& name);

/// The KVCache shape of `model`: its layers, kv heads and head_dim, `page_size` tokens per page
/// (num_scalars, max_pages and payload at their defaults, for the caller to set).
KVCacheConfig kv_cache_config(const ModelConfig& model, int page_size = 16);

/// The page arithmetic of backend `name`'s KV pool (engine/kv/page_geometry.h), which prices the
/// pages of a `--memory` pool in every command: the model's layers, kv heads and head_dim,
/// `page_size` tokens per page, K/V rows in the backend's own element type (BackendInfo::kv_dtype:
/// f32 on "cpu" and "cpu-bf16", bf16 on "cuda"), i32 positions, and the policy's `needs.num_scalars`
/// per-token scalars where the pool holds them (a host pool; an on-device pool keeps them on the
/// host, outside it). A "cpu" page of stories260K (D 8, 16 tokens, no scalars) is 1,088 bytes, a
/// "cuda" one 576. Throws kvb::Error ("--backend NAME: no such backend") for an unknown name; a
/// known backend not compiled into this build is priced all the same (bench --plan-only).
KvPageGeometry kv_page_geometry(const std::string& name, const ModelConfig& model, int page_size,
                                const PolicyNeeds& needs = {});

/// Which payload store (engine/kv/kv_payload.h) the KVCache of backend `name` needs for a policy
/// with `needs` (default PolicyNeeds for the full cache): host rows for the CPU backends, which
/// attend over them, and for a policy that reads cached keys/values on the host
/// (PolicyNeeds::host_kv, mirrored there by the CUDA backend); device-held for an on-device
/// backend (BackendInfo::on_device) otherwise, so the host keeps no K/V bytes. Checks nothing
/// about the name (an unknown one gets host rows; make_backend refuses it).
KVPayloadKind kv_payload_for(const std::string& name, const PolicyNeeds& needs);

/// Builds the backend named `name`: "cpu", "cpu-bf16" (the CPU forward rounding to bf16 where the
/// CUDA backend stores bf16: a verification reference, see CpuBackend), or "cuda" in builds with
/// KVB_CUDA. Throws kvb::Error naming the backend when it is unknown, not compiled in, or has no
/// device ("no CUDA device"), and for a CPU backend given a cache whose K/V rows are device-held.
std::unique_ptr<Backend> make_backend(const std::string& name, const Model& model, KVCache& cache);

/// What `name`'s forward pass runs on, for the results' runs.device column: for "cuda" the GPU's
/// name, memory, driver and CUDA runtime version ("NVIDIA H100 80GB HBM3 (79.1 GiB, driver
/// 580.159.04, CUDA 13.0)"; cuda_backend.h cuda_device_description), for "cpu" / "cpu-bf16" the
/// CPU model, hardware threads and memory ("AMD EPYC 7763 64-Core Processor (16 threads, 125.8 GiB)",
/// from /proc/cpuinfo and /proc/meminfo; "cpu" when unreadable). Never throws: a missing device is
/// described ("cuda (no CUDA device: ...)"), and an unknown name is returned unchanged.
std::string device_description(const std::string& name);

/// Throws kvb::Error ("--backend NAME: not available in this build (available: ...)") unless
/// `name` is one of compiled_backends(). Checks the name only (no device is opened).
void check_backend_name(const std::string& name);

/// Names of the backends compiled into this build ("cpu" first), from backend_registry().
std::vector<std::string> compiled_backends();

}  // namespace kvb
