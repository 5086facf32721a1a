// kvb::CudaBackend (see cuda_backend.h): construction (device, stream, cuBLAS loaded with dlopen,
// weights), the public Backend methods (forward dispatch, device sampling, the bandwidth roofline,
// the report) and the GEMM dispatch. The state is CudaBackend::Impl (cuda_impl.h, which lists the
// files that define its parts: weights, KV pool and page tables, forward, decode graphs, policy
// primitives).
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "engine/backend/cuda/cuda_impl.h"
#include "engine/model/architecture.h"
#include "engine/util/error.h"

namespace kvb {

namespace cuda {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA {}: {}", what, cudaGetErrorString(e));
}
void check_launch(const char* what) { check(cudaGetLastError(), what); }
void raise_error(const char* msg) { fail("{}", msg); }

void check_blas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("cuBLAS {}: status {}", what, static_cast<int>(s));
}

#define KVB_SYM_NAME2(x) #x
#define KVB_SYM_NAME(x) KVB_SYM_NAME2(x)  // after cublas_v2.h's renames (cublasCreate -> cublasCreate_v2)

const CublasApi& cublas() {
  static const CublasApi api = [] {
    const std::string so = fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR);
    void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef KVB_CUDA_LIBDIR
    if (!h) h = dlopen((std::string(KVB_CUDA_LIBDIR) + "/" + so).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
    if (!h) fail("--backend cuda: cannot load {}: {}", so, dlerror());
    auto sym = [h, &so](auto& fn, const char* name) {
      void* p = dlsym(h, name);
      if (!p) fail("--backend cuda: {} has no symbol {}", so, name);
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    CublasApi a{};
    sym(a.create, KVB_SYM_NAME(cublasCreate));
    sym(a.destroy, KVB_SYM_NAME(cublasDestroy));
    sym(a.set_stream, KVB_SYM_NAME(cublasSetStream));
    sym(a.set_workspace, KVB_SYM_NAME(cublasSetWorkspace));
    sym(a.gemm_ex, KVB_SYM_NAME(cublasGemmEx));
    sym(a.sgemm, KVB_SYM_NAME(cublasSgemm));
    sym(a.sgemm_strided_batched, KVB_SYM_NAME(cublasSgemmStridedBatched));
    return a;
  }();
  return api;
}
}  // namespace cuda

using cuda::check;
using cuda::check_blas;
using cuda::cublas;
using cuda::DevBuf;

bool cuda_device_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = fmt::format("no CUDA device: {}", e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
    cudaGetLastError();  // clear the sticky-free error state of the runtime
    return false;
  }
  return true;
}

std::string cuda_device_description() {
  std::string why;
  if (!cuda_device_available(&why)) return "cuda (" + why + ")";
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
    cudaGetLastError();
    return "cuda (device properties unavailable)";
  }
  std::string driver;
  if (std::FILE* f = std::fopen("/proc/driver/nvidia/version", "r")) {  // "NVRM version: ... Kernel Module  580.159.04  ..."
    char line[512];
    if (std::fgets(line, sizeof line, f)) {
      const std::string l = line;
      const size_t at = l.find("Kernel Module");
      if (at != std::string::npos) {
        size_t b = l.find_first_not_of(' ', at + 13);
        size_t e = b == std::string::npos ? b : l.find(' ', b);
        if (b != std::string::npos) driver = l.substr(b, e == std::string::npos ? std::string::npos : e - b);
      }
    }
    std::fclose(f);
  }
  int drv = 0, rt = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  if (driver.empty()) driver = fmt::format("CUDA {}.{}", drv / 1000, drv % 1000 / 10);
  return fmt::format("{} ({:.1f} GiB, driver {}, CUDA {}.{})", p.name, p.totalGlobalMem / 1073741824.0, driver,
                     rt / 1000, rt % 1000 / 10);
}

CudaBackend::Impl::Impl(const Model& model, KVCache& c) : m(model), cache(c) {
  cuda::check_model_support(m.config());  // before opening the device: the clearer error
  std::string why;
  if (!cuda_device_available(&why)) fail("--backend cuda: {}", why);
  const ModelConfig& cf = m.config();
  H = static_cast<int>(cf.hidden_size);
  D = static_cast<int>(cf.head_dim);
  Hq = static_cast<int>(cf.num_heads);
  Hkv = static_cast<int>(cf.num_kv_heads);
  I = static_cast<int>(cf.intermediate_size);
  V = static_cast<int>(cf.vocab_size);
  L = static_cast<int>(cf.num_layers);
  G = Hq / Hkv;
  P = cache.config().page_size;
  QKV = (Hq + 2 * Hkv) * D;
  eps = static_cast<float>(cf.rms_norm_eps);
  scale = cf.attention_scale();  // 1/√D, or query_pre_attn_scalar^(−1/2) (Gemma 2)
  embed_scale = m.embed_scale();
  attn_softcap = static_cast<float>(cf.attn_logit_softcap);
  final_softcap = static_cast<float>(cf.final_logit_softcap);
  gelu_tanh = architecture(cf.model_type).activation == Activation::kGeluTanh;
  if (D % 8 != 0 || D > 256) fail("--backend cuda: head_dim {} unsupported (needs a multiple of 8, at most 256)", D);
  check(cudaSetDevice(0), "set device");
  check(cudaGetDeviceProperties(&prop, 0), "device properties");
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  check_blas(cublas().create(&blas), "create");
  check_blas(cublas().set_stream(blas, stream), "set stream");
  // An explicit workspace, so that cuBLAS allocates nothing while a decode graph is captured.
  blas_ws.grow(size_t(32) << 20, "cuBLAS workspace");
  check_blas(cublas().set_workspace(blas, blas_ws.p, blas_ws.n), "set workspace");
  pt.store = std::make_unique<cuda::PageTableStore>(L, Hkv);
  pt.seen_shrinks = cache.page_list_shrinks();
  if (const char* g = std::getenv("KVB_CUDA_GRAPHS")) graph.on = std::string(g) != "0";
  if (const char* g = std::getenv("KVB_CUDA_GEMV")) gemv = std::string(g) != "0";
#ifdef KVB_HAVE_FLASHINFER
  {
    const char* a = std::getenv("KVB_CUDA_PREFILL_ATTN");
    const std::string mode = a ? a : "flashinfer";
    if (mode != "flashinfer" && mode != "native")
      fail("KVB_CUDA_PREFILL_ATTN: '{}' is not one of flashinfer, native", mode);
    if (mode == "flashinfer" && cuda::FiPrefill::supports_head_dim(D)) fi = std::make_unique<cuda::FiPrefill>();
  }
#endif
  upload_weights();
}

CudaBackend::Impl::~Impl() {
  if (graph.exec) cudaGraphExecDestroy(graph.exec);
  if (blas) cublas().destroy(blas);
  if (stream) cudaStreamDestroy(stream);
}

const char* CudaBackend::Impl::prefill_attention_name() const {
#ifdef KVB_HAVE_FLASHINFER
  if (fi) return "flashinfer";
#endif
  return "native";
}

void CudaBackend::Impl::gemm(const uint16_t* xb, const uint16_t* w, float* y, int T, int in, int out, float beta) {
  if (gemv && cuda::gemv_supported(T, in)) {  // decode steps of up to 8 rows: gemv.cu
    cuda::gemv_bf16(w, xb, y, T, in, out, beta, stream);
    return;
  }
  const float alpha = 1.0f;
  check_blas(cublas().gemm_ex(blas, CUBLAS_OP_T, CUBLAS_OP_N, out, T, in, &alpha, w, CUDA_R_16BF, in, xb, CUDA_R_16BF,
                              in, &beta, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
             "gemm");
}

CudaBackend::CudaBackend(const Model& model, KVCache& cache) : impl_(std::make_unique<Impl>(model, cache)) {
  copy_bandwidth_gbps(size_t(512) << 20, 10);  // the roofline report() compares decode against (~20 ms)
}
CudaBackend::~CudaBackend() = default;

void CudaBackend::forward(std::span<ForwardItem> items, Policy* policy, std::vector<float>& logits, ForwardStats* stats) {
  impl_->forward(items, policy, logits, stats);
}

bool CudaBackend::device_sampling(const SamplingParams& p) const {
  return p.top_k == 0 && p.min_p == 0.0f && p.top_p > 0.0f && p.top_p <= 1.0f;
}
void CudaBackend::defer_logits() { impl_->defer = true; }
int64_t CudaBackend::compact_heads(SeqId seq, std::span<const StepEnd::Keep> keeps) {
  std::vector<int64_t> src, dst;
  int64_t evicted = 0;
  for (const StepEnd::Keep& k : keeps) evicted += impl_->compact(seq, k.layer, k.head, k.indices, src, dst);
  impl_->flush_compaction(src, dst);
  return evicted;
}

std::vector<int32_t> CudaBackend::sample_last(const std::vector<SamplingParams>& params, const std::vector<float>& u) {
  Impl& d = *impl_;
  const int R = d.rows_last;
  if (static_cast<int>(params.size()) != R || static_cast<int>(u.size()) != R)
    fail("sample_last: {} parameter sets and {} draws for {} logit rows", params.size(), u.size(), R);
  std::vector<float> f(3 * static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    if (!(params[r].top_p > 0.0f && params[r].top_p <= 1.0f))
      fail("sample_last: top_p {} not in (0, 1]", params[r].top_p);
    f[r] = params[r].temperature;
    f[R + r] = params[r].top_p;
    f[2 * R + r] = u[r];
  }
  d.io.samp_f.upload(f, d.stream, "sampling parameters");
  d.io.sample_out.grow(std::max(R, 1), "sampling");
  cuda::sample(d.acts.logits.p, R, d.V, d.io.samp_f.p, d.io.samp_f.p + R, d.io.samp_f.p + 2 * R, d.io.sample_out.p,
               d.stream);
  std::vector<int32_t> out(R);
  if (R) check(cudaMemcpyAsync(out.data(), d.io.sample_out.p, R * 4, cudaMemcpyDeviceToHost, d.stream), "sampling");
  check(cudaStreamSynchronize(d.stream), "sampling");
  return out;
}

double CudaBackend::copy_bandwidth_gbps(size_t bytes, int reps) {
  Impl& d = *impl_;
  bytes = bytes / 16 * 16;
  DevBuf<uint8_t> a, b;
  a.grow(bytes, "bandwidth buffer");
  b.grow(bytes, "bandwidth buffer");
  check(cudaMemsetAsync(a.p, 0x5a, bytes, d.stream), "bandwidth buffer");
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  std::vector<float> ms;
  for (int i = 0; i < reps + 3; ++i) {
    check(cudaEventRecord(e0, d.stream), "event");
    cuda::copy16(i % 2 ? b.p : a.p, i % 2 ? a.p : b.p, bytes, d.stream);
    check(cudaEventRecord(e1, d.stream), "event");
    check(cudaEventSynchronize(e1), "event");
    float t = 0;
    check(cudaEventElapsedTime(&t, e0, e1), "event");
    if (i >= 3) ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  d.meas.roofline_gbps = 2.0 * bytes / (med * 1e-3) / 1e9;
  return d.meas.roofline_gbps;
}

std::string CudaBackend::report() const {
  const Impl& d = *impl_;
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  const double pool_page_bytes = static_cast<double>(d.pool_geometry().bytes_per_page());
  const double ms_step = d.meas.decode_steps ? 1000.0 * d.meas.decode_s / d.meas.decode_steps : 0.0;
  const double gbps = d.meas.decode_s > 0 ? d.meas.decode_bytes / d.meas.decode_s / 1e9 : 0.0;
  std::string s =
      fmt::format("device: {} ({} SMs, {:.1f} GiB)\n", d.prop.name, d.prop.multiProcessorCount, total_b / 1073741824.0);
  s += fmt::format("device_weights_GiB: {:.2f}\n", d.wts.bytes / 1073741824.0);
  s += fmt::format("device_kv_pool_GiB: {:.2f} reserved, {:.2f} peak in use (bf16 K+V + positions)\n",
                   d.pool.pages * pool_page_bytes / 1073741824.0,
                   d.meas.peak_pool_pages * pool_page_bytes / 1073741824.0);
  s += fmt::format("host_kv_payload_MiB: {:.2f} (f32 host mirror; 0 unless the policy reads keys on the host)\n",
                   d.cache.host_payload_bytes() / 1048576.0);
  s += fmt::format("device_used_GiB: {:.2f} (cudaMemGetInfo total − free, whole process)\n",
                   (total_b - free_b) / 1073741824.0);
  s += fmt::format("decode: {} steps, {:.3f} ms/step, {:.1f} GB/s achieved (weights + KV read per step)",
                   d.meas.decode_steps, ms_step, gbps);
  if (d.meas.roofline_gbps > 0)
    s += fmt::format(", roofline {:.1f} GB/s (copy kernel), {:.1f}%", d.meas.roofline_gbps,
                     100.0 * gbps / d.meas.roofline_gbps);
  s += "\n";
  s += fmt::format("prefill: {} tokens, {:.1f} tok/s, attention {} (KVB_CUDA_PREFILL_ATTN=native: attention.cu)\n",
                   d.meas.prefill_tokens, d.meas.prefill_s > 0 ? d.meas.prefill_tokens / d.meas.prefill_s : 0.0,
                   d.prefill_attention_name());
  s += fmt::format("decode_graphs: {} ({} captures, {} replays; KVB_CUDA_GRAPHS=0 switches them off)\n",
                   d.graph.on ? "on" : "off", d.graph.captures, d.graph.replays);
  s += fmt::format("decode_kernels: products of <= 8 rows on {}, attention on {}\n",
                   d.gemv ? "gemv.cu (KVB_CUDA_GEMV=0: cuBLAS)" : "cuBLAS",
                   std::getenv("KVB_CUDA_DECODE_ATTN") && std::string(std::getenv("KVB_CUDA_DECODE_ATTN")) == "tiled"
                       ? "attention.cu (tiled)"
                       : "attention_decode.cu (KVB_CUDA_DECODE_ATTN=tiled: attention.cu)");
  return s;
}

std::unique_ptr<Backend> make_cuda_backend(const Model& model, KVCache& cache) {
  return std::make_unique<CudaBackend>(model, cache);
}

}  // namespace kvb
