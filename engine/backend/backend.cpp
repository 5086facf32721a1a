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
  CpuAdapter(const Model& m, KVCache& c, bool bf16_points) : cpu_(m, c, bf16_points), bf16_(bf16_points) {
    if (!c.host_kv())
      fail("--backend {}: the KV cache holds no host K/V rows (device-held payload); the CPU forward "
           "attends over them", name());
  }
  std::string name() const override { return bf16_ ? "cpu-bf16" : "cpu"; }
  void forward(std::span<ForwardItem> items, Policy* policy, std::vector<float>& logits,
               ForwardStats* stats) override {
    cpu_.forward(items, policy, logits, stats);
  }

 private:
  CpuBackend cpu_;
  bool bf16_;
};
}  // namespace

std::vector<std::string> compiled_backends() {
#ifdef KVB_HAVE_CUDA
  return {"cpu", "cpu-bf16", "cuda"};
#else
  return {"cpu", "cpu-bf16"};
#endif
}

void check_backend_name(const std::string& name) {
  const auto names = compiled_backends();
  if (std::find(names.begin(), names.end(), name) == names.end())
    fail("--backend {}: not available in this build (available: {})", name, fmt::join(names, ", "));
}

KVCacheConfig kv_cache_config(const ModelConfig& model, int page_size) {
  return KVCacheConfig(static_cast<int>(model.num_layers), static_cast<int>(model.num_kv_heads),
                       static_cast<int>(model.head_dim), page_size);
}

KVPayloadKind kv_payload_for(const std::string& name, const PolicyNeeds& needs) {
  return name == "cuda" && !needs.host_kv ? KVPayloadKind::kDeviceHeld : KVPayloadKind::kHost;
}

std::unique_ptr<Backend> make_backend(const std::string& name, const Model& model, KVCache& cache) {
  if (name == "cpu" || name == "cpu-bf16") return std::make_unique<CpuAdapter>(model, cache, name == "cpu-bf16");
#ifdef KVB_HAVE_CUDA
  if (name == "cuda") return make_cuda_backend(model, cache);
#endif
  check_backend_name(name);
  fail("--backend {}: not available in this build", name);  // unreachable: compiled_backends() lists it
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
