// kvb::CudaBackend — the GPU forward pass: bf16 weights and a bf16 paged KV pool on one CUDA
// device, f32 activations and accumulation, cuBLAS GEMMs (bf16 × bf16 → f32, fused QKV and
// gate|up projections), and the kernels of kernels.h. Host-side KVCache metadata (page tables,
// positions, scalars) stays the source of truth: the device pool uses the KVCache's page ids, so a
// page id addresses the same tokens on both sides, and compactions the policy requests are applied
// to the host cache and mirrored on the device (plan.h compaction_pairs + compact_pairs kernel).
//
// Policies run on the host unchanged. Signals are copied device→host only when the policy declared
// them (layer_input unless read through head_mlp, keys_pre_rope, attention_colsum, window
// queries) or asked for them. The policies' heavy math runs on the device through the LayerStep
// primitives (policy.h): window_attention per head, window_scores (GQA reduction, window mean and
// pooling; only L − w floats come back) and head_mlp (learned gates and scorers: cuBLAS SGEMM +
// mlp_out). Policies that read cached keys/values through the KVCache (PolicyNeeds::host_kv:
// keydiff, rkv, gkv, wgkv, foresightkv) see a host mirror: each step's new K/V rows (rounded to
// bf16, i.e. exactly the device values) are copied to the host payload as they are appended; for
// every other policy the cache's payload store is device-held (kv_payload.h, Engine picks it with
// kv_payload_for) and the host holds no K/V bytes at all. Decode steps can sample on the device
// (Backend::device_sampling / defer_logits / sample_rows), skipping the [B, V] logits copy.
// Page tables are device-resident (a step copies only new page ids), and decode steps that need
// no host work between layers (the full cache) replay one captured CUDA graph per batch shape
// (KVB_CUDA_GRAPHS=0 switches graphs off).
//
// Requires a CUDA device at construction (kvb::Error "no CUDA device: ..." otherwise); links only
// the CUDA runtime and cuBLAS (no libcuda), so a binary with this backend starts without a driver.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/sampling/sampler.h"
#include "engine/scheduler/step.h"

namespace kvb {

/// The CUDA backend (see the file comment). Not thread-safe; one per Engine.
class CudaBackend final : public Backend {
 public:
  /// Uploads the model's weights as bf16 (f32 weights are rounded to nearest even). Throws
  /// kvb::Error when no device is usable, on unsupported shapes (head_dim must be a multiple of 8,
  /// ≤ 256) or when device memory is short.
  CudaBackend(const Model& model, KVCache& cache);
  ~CudaBackend() override;
  std::string name() const override { return "cuda"; }
  void forward(std::span<ForwardItem> items, Policy* policy, std::vector<float>& logits,
               ForwardStats* stats = nullptr) override;
  std::string report() const override;
  bool device_sampling(const SamplingParams& p) const override;
  /// False until the device checks show that a decode token gets the same bits in a mixed step
  /// (which runs the prefill attention path for every item) as in a decode step (issue 38's device
  /// part): the engine then runs prompt chunks and decode tokens in separate steps.
  bool mixed_steps() const override { return false; }
  /// Backend::compact_heads: the host cache's compaction and the device pool's copies.
  int64_t compact_heads(SeqId seq, std::span<const StepEnd::Keep> keeps) override;
  void defer_logits() override;
  std::vector<int32_t> sample_rows(const std::vector<SamplingParams>& params, const std::vector<float>& u) override {
    return sample_last(params, u);
  }

  /// Samples one token per row of the logits of the last forward() (still on the device), rows in
  /// the same order as its logits: greedy when params[r].temperature ≤ 0, else temperature + top-p
  /// with the uniform draw u[r] ∈ [0, 1) (kernels.h `sample`; top_k/min_p are not applied).
  std::vector<int32_t> sample_last(const std::vector<SamplingParams>& params, const std::vector<float>& u);

  /// Measured device-to-device copy bandwidth (read + write bytes per second / 1e9) over a
  /// `bytes` buffer: median of `reps` timed copies after a warm-up. The decode roofline.
  double copy_bandwidth_gbps(size_t bytes = size_t(1) << 30, int reps = 20);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// make_backend("cuda", ...) — a CudaBackend.
std::unique_ptr<Backend> make_cuda_backend(const Model& model, KVCache& cache);

/// True when a CUDA device is usable; otherwise false with the reason in *why (e.g. "no CUDA
/// device: CUDA driver version is insufficient for CUDA runtime version").
bool cuda_device_available(std::string* why = nullptr);

/// Device 0 as the results' runs.device column records it: "<name> (<memory> GiB, driver
/// <version>, CUDA <runtime major.minor>)", e.g. "NVIDIA H100 80GB HBM3 (79.1 GiB, driver
/// 580.159.04, CUDA 13.0)". The driver version is the kernel module's (/proc/driver/nvidia/version),
/// else the CUDA version the driver supports ("driver CUDA 13.0"). Never throws: without a usable
/// device, "cuda (no CUDA device: <reason>)".
std::string cuda_device_description();

}  // namespace kvb
