#include "engine/backend/backend.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/util/error.h"
#ifdef KVB_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace kvb {

std::vector<int32_t> Backend::sample_rows(const std::vector<SamplingParams>&, const std::vector<float>&) {
  fail("--backend {}: no device sampling", name());
}

namespace {
/// The CPU forward pass (CpuBackend) behind the Backend interface, behaviour unchanged.
class CpuAdapter final : public Backend {
 public:
  CpuAdapter(const Model& m, KVCache& c, const BackendInfo& info)
      : cpu_(m, c, info.kind == BackendKind::kCpuBf16), cache_(c), info_(info) {
    if (!c.host_kv())
      fail(
          "--backend {}: the KV cache holds no host K/V rows (device-held payload); the CPU forward "
          "attends over them",
          name());
  }
  std::string name() const override { return info_.name; }
  void forward(std::span<ForwardItem> items, Policy* policy, std::vector<float>& logits, ForwardStats* stats) override {
    cpu_.forward(items, policy, logits, stats);
  }
  int64_t compact_heads(SeqId seq, std::span<const StepEnd::Keep> keeps) override {
    int64_t evicted = 0;
    for (const StepEnd::Keep& k : keeps) evicted += cache_.compact(seq, k.layer, k.head, k.indices);
    return evicted;
  }

 private:
  CpuBackend cpu_;
  KVCache& cache_;
  const BackendInfo& info_;
};

#ifdef KVB_HAVE_CUDA
constexpr bool kCudaCompiled = true;
#else
constexpr bool kCudaCompiled = false;
#endif
}  // namespace

const std::vector<BackendInfo>& backend_registry() {
  static const std::vector<BackendInfo> reg = {
      {BackendKind::kCpu, "cpu", "f32 activations over weights as stored, f32 K/V, OpenMP", true, false, false,
       KvDtype::kF32},
      {BackendKind::kCpuBf16, "cpu-bf16", "the CPU forward rounding to bf16 where the CUDA backend stores bf16", true,
       false, false, KvDtype::kF32},
      {BackendKind::kCuda, "cuda", "bf16 weights and K/V on an NVIDIA GPU", kCudaCompiled, true, true, KvDtype::kBF16},
  };
  return reg;
}

const BackendInfo* find_backend(const std::string& name) {
  for (const auto& b : backend_registry())
    if (name == b.name) return &b;
  return nullptr;
}

std::vector<std::string> compiled_backends() {
  std::vector<std::string> out;
  for (const auto& b : backend_registry())
    if (b.compiled) out.push_back(b.name);
  return out;
}

const BackendInfo& backend_info(const std::string& name) {
  const BackendInfo* b = find_backend(name);
  if (!b || !b->compiled)
    fail("--backend {}: not available in this build (available: {})", name, fmt::join(compiled_backends(), ", "));
  return *b;
}

void check_backend_name(const std::string& name) { (void)backend_info(name); }

KVCacheConfig kv_cache_config(const ModelConfig& model, int page_size) {
  return KVCacheConfig(static_cast<int>(model.num_layers), static_cast<int>(model.num_kv_heads),
                       static_cast<int>(model.head_dim), page_size);
}

KvPageGeometry kv_page_geometry(const std::string& name, const ModelConfig& model, int page_size,
                                const PolicyNeeds& needs) {
  const BackendInfo* b = find_backend(name);
  if (!b) fail("--backend {}: no such backend", name);
  KvPageGeometry g = kv_cache_config(model, page_size).geometry();
  g.dtype = b->kv_dtype;
  g.num_scalars = b->on_device ? 0 : needs.num_scalars;
  return g;
}

KVPayloadKind kv_payload_for(const std::string& name, const PolicyNeeds& needs) {
  const BackendInfo* b = find_backend(name);
  return b && b->on_device && !needs.host_kv ? KVPayloadKind::kDeviceHeld : KVPayloadKind::kHost;
}

std::unique_ptr<Backend> make_backend(const std::string& name, const Model& model, KVCache& cache) {
  const BackendInfo& b = backend_info(name);
  switch (b.kind) {
    case BackendKind::kCpu:
    case BackendKind::kCpuBf16: return std::make_unique<CpuAdapter>(model, cache, b);
    case BackendKind::kCuda:
#ifdef KVB_HAVE_CUDA
      return make_cuda_backend(model, cache);
#else
      break;  // not compiled: backend_info refused it above
#endif
  }
  fail("--backend {}: not available in this build", name);
}

std::string device_description(const std::string& name) {
#ifdef KVB_HAVE_CUDA
  if (name == "cuda") return cuda_device_description();
#endif
  if (name != "cpu" && name != "cpu-bf16") return name;
  std::string model = "cpu";
  if (std::ifstream f("/proc/cpuinfo"); f) {
    for (std::string line; std::getline(f, line);)
      if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
        model = line.substr(line.find(':') + 1);
        model.erase(0, model.find_first_not_of(" \t"));
        break;
      }
  }
  double gib = 0;
  if (std::ifstream f("/proc/meminfo"); f) {
    std::string key;
    int64_t kib = 0;
    while (f >> key >> kib) {
      if (key == "MemTotal:") {
        gib = static_cast<double>(kib) / 1048576.0;
        break;
      }
      f.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
  }
  std::string out = model + fmt::format(" ({} threads", std::thread::hardware_concurrency());
  if (gib > 0) out += fmt::format(", {:.1f} GiB", gib);
  return out + ")";
}

}  // namespace kvb
