// Host orchestration of the CUDA forward pass (see cuda_backend.h). Per step and layer:
//   rmsnorm → fused QKV GEMM (+bias) → q/k norm + RoPE → host KVCache append (page ids, positions)
//   → device kv_append → [query history] → attention plan (plan.h) + paged attention → policy hook
//   (host; signals copied on demand; keep-sets compacted on host and device) → Wo GEMM accumulated
//   into the residual (β = 1) → rmsnorm → fused gate|up GEMM → SiLU·mul → down GEMM (β = 1).
// Then the final norm of the rows that want logits, the LM head and the policy's step-end hook.
// Page tables live on the device (plan.h PageTableStore): a step uploads only new page ids.
// Decode steps with no per-layer host work (full cache, or any policy that declares no per-layer
// hook, mirror, query history or signals) run as one CUDA graph per batch shape: all host work
// (appends, page tables, attention plans) is done first, its results go up in one metadata block,
// and the attention grids are capacities (plan.h attention_bound) with the real unit counts read
// on the device, so one capture is replayed until a buffer moves or the batch changes.
#include "engine/backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "engine/backend/cuda/kernels.h"
#ifdef KVB_HAVE_FLASHINFER
#include "engine/backend/cuda/attention_fi.h"
#endif
#include "engine/backend/cuda/plan.h"
#include "engine/backend/policy_driver.h"
#include "engine/model/architecture.h"
#include "engine/model/weights.h"
#include "engine/util/error.h"

namespace kvb {

namespace cuda {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA {}: {}", what, cudaGetErrorString(e));
}
void check_launch(const char* what) { check(cudaGetLastError(), what); }
void raise_error(const char* msg) { fail("{}", msg); }
}  // namespace cuda

using cuda::check;

namespace {

void check_blas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("cuBLAS {}: status {}", what, static_cast<int>(s));
}

#define KVB_SYM_NAME2(x) #x
#define KVB_SYM_NAME(x) KVB_SYM_NAME2(x)  // after cublas_v2.h's renames (cublasCreate -> cublasCreate_v2)

/// The cuBLAS entry points the backend calls, loaded with dlopen when the first CUDA backend is
/// built. kvbench does not link cuBLAS: a linked libcublas pulls in libcublasLt, whose load-time
/// relocations alone raise every process's peak RSS by about 210 MiB (measured: an empty program
/// linked with it peaks at 211 MiB, 1 MiB without; cudart costs 0.5 MiB), which CPU runs would pay.
struct CublasApi {
  decltype(&cublasCreate) create;
  decltype(&cublasDestroy) destroy;
  decltype(&cublasSetStream) set_stream;
  decltype(&cublasSetWorkspace) set_workspace;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&cublasSgemm) sgemm;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
};

/// Loads libcublas.so.<major of the headers built against> (the loader's search path, then the
/// toolkit's library folder of the build, KVB_CUDA_LIBDIR). Throws kvb::Error when it or a symbol
/// is missing.
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

/// A growable device buffer of T (contents are not preserved by grow()).
template <class T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : p(o.p), n(o.n) {
    o.p = nullptr;
    o.n = 0;
  }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  void grow(size_t want, const char* what) {
    if (want <= n) return;
    if (p) cudaFree(p);
    p = nullptr;
    n = 0;
    check(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(want, 1) * sizeof(T)), what);
    n = want;
  }
  void upload(const T* src, size_t count, cudaStream_t s, const char* what) {
    grow(count, what);
    if (count) check(cudaMemcpyAsync(p, src, count * sizeof(T), cudaMemcpyHostToDevice, s), what);
  }
  void upload(const std::vector<T>& v, cudaStream_t s, const char* what) { upload(v.data(), v.size(), s, what); }
};

/// Pinned host staging for a step's small uploads (plans, page tables, slots). A copy from
/// pageable memory makes cudaMemcpyAsync wait for all earlier work on the stream, which
/// serialises the host's per-layer bookkeeping with the device's kernels; a copy from pinned
/// memory is queued and returns at once. Bump allocation, reset at the start of each forward
/// (the previous forward ended with a stream synchronisation); when full, the stream is
/// synchronised and the arena starts over (grown to fit the request).
struct PinnedStaging {
  uint8_t* p = nullptr;
  size_t cap = 0, used = 0;
  PinnedStaging() = default;
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  ~PinnedStaging() {
    if (p) cudaFreeHost(p);
  }
  /// Copies `bytes` from `src` into the arena and returns the pinned copy (16-byte aligned).
  /// Throws kvb::Error when pinned memory cannot be allocated.
  const void* put(const void* src, size_t bytes, cudaStream_t s) {
    const size_t at = (used + 15) & ~size_t(15);
    if (at + bytes > cap) {
      check(cudaStreamSynchronize(s), "staging");
      used = 0;
      if (bytes > cap) {
        if (p) check(cudaFreeHost(p), "staging");
        p = nullptr;
        cap = 0;
        const size_t want = std::max<size_t>(bytes * 2, size_t(8) << 20);
        check(cudaMallocHost(reinterpret_cast<void**>(&p), want), "pinned staging");
        cap = want;
      }
      return put(src, bytes, s);
    }
    std::memcpy(p + at, src, bytes);
    used = at + bytes;
    return p + at;
  }
};

/// bf16 bits of a weight matrix (rows × cols), converting f32 or dequantising stored blocks
/// (WeightFormat::kStored) when needed.
std::vector<uint16_t> as_bf16(const Mat& m, int64_t rows, int64_t cols) {
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<uint16_t> out(n);
  if (m.bf16) {
    std::memcpy(out.data(), m.bf16, n * 2);
  } else if (m.f32) {
    for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16_bits(m.f32[i]);
  } else {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(m.type, m.row(r), cols, row.data());
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = f32_to_bf16_bits(row[c]);
    }
  }
  return out;
}

struct DevLayer {
  DevBuf<uint16_t> wqkv, wo, wgu, wd;
  DevBuf<float> bqkv, attn_norm, mlp_norm, q_norm, k_norm;
  DevBuf<float> post_attn_norm, post_mlp_norm;  ///< Gemma 2's norms of the block outputs (else empty)
  bool has_bias = false, has_qk_norm = false, has_post_norms = false;
  int32_t window = 0;  ///< sliding window of the layer (ModelConfig::window; 0 = full causal)
};

/// A policy MLP (policy.h HeadMlp) uploaded once, keyed by its host W1 pointer; `probe` holds the
/// first values of W1, b1, W2 and b2 so that a different MLP reusing a freed address re-uploads.
struct DevMlp {
  DevBuf<float> w1, b1, w2, b2;
  int heads = 0, in = 0, hidden = 0;
  bool shared = false;
  float probe[4] = {0, 0, 0, 0};
};

inline float bf16_round(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }

}  // namespace

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

struct CudaBackend::Impl {
  const Model& m;
  KVCache& cache;
  int H, D, Hq, Hkv, I, V, L, G, P, QKV;
  float eps, scale;
  // Architecture choices (engine/model/architecture.h) the kernels apply, as the CPU forward does:
  // the embedding scale (Gemma 2's √H, else 1), the MLP activation, the attention-logit and final
  // logit soft-caps (0 = none). Per-layer windows and post-block norms are in DevLayer.
  float embed_scale = 1.0f, attn_softcap = 0.0f, final_softcap = 0.0f;
  bool gelu_tanh = false;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cudaDeviceProp prop{};
  std::vector<DevLayer> layers;
  DevBuf<uint16_t> embed, lm_head_own;
  const uint16_t* lm_head = nullptr;
  DevBuf<float> final_norm, inv_freq;
  // Activations (grown to the step's T).
  DevBuf<float> x, qkv, gu, kpre, qpre, blk, lse, logits, part_o, part_ml, colsum, win_q, win_p;
  DevBuf<uint16_t> xn, att, act, scratch_kv;
  DevBuf<int32_t> tok, pos, pt_off, win_qpos, win_pages, scratch_pos, head_len, sample_out;
  DevBuf<int64_t> dst_slot, csrc, cdst, colsum_off;
  DevBuf<cuda::AttnItem> items_d;
  DevBuf<cuda::AttnUnit> units_d;
  DevBuf<cuda::AttnGroup> groups_d;
  DevBuf<float> samp_f;
  // Policy primitives (LayerStep::head_mlp / window_scores).
  std::map<const float*, DevMlp> mlps;
  DevBuf<float> mlp_x, mlp_hid, mlp_o, win_r, win_s, win_s2;
  // KV pool (slots = pages · P).
  uint16_t* k_pool = nullptr;
  uint16_t* v_pool = nullptr;
  int32_t* pos_pool = nullptr;
  int64_t pool_pages = 0;
  // Device-resident page tables (plan.h PageTableStore): the device copy of the store's image,
  // updated by the store's writes; seen_shrinks tracks KVCache::page_list_shrinks so that lists
  // shrunk outside this backend (truncate_from, remove_sequence) are re-verified.
  std::unique_ptr<cuda::PageTableStore> pt_store;
  DevBuf<int32_t> pt_table;
  DevBuf<int64_t> pt_writes_d;
  std::vector<int64_t> pt_writes;
  uint64_t seen_shrinks = 0;
  // Decode CUDA graphs: one capture of a whole decode step (every layer, final norm, LM head) per
  // batch shape and buffer set, replayed while graph_key (every pointer and size the captured
  // kernels take) is unchanged. Per-step data travel in one metadata upload (meta, from the pinned
  // meta_host). KVB_CUDA_GRAPHS=0 disables them.
  bool graphs = true;
  cudaGraphExec_t graph_exec = nullptr;
  std::vector<uintptr_t> graph_key;
  int64_t graph_captures = 0, graph_replays = 0;
  DevBuf<uint8_t> meta, blas_ws;
  uint8_t* meta_host = nullptr;
  size_t meta_host_n = 0;
  PinnedStaging staging;  // eager steps' uploads (stage_upload)
  bool gemv = true;       // products of ≤ 8 rows on gemv.cu (KVB_CUDA_GEMV=0: cuBLAS for all)
#ifdef KVB_HAVE_FLASHINFER
  // Tensor-core prefill attention (attention_fi.h); null when the head dim is not built or
  // KVB_CUDA_PREFILL_ATTN=native.
  std::unique_ptr<cuda::FiPrefill> fi;
#endif
  int rows_last = 0;   // logit rows of the last forward
  bool defer = false;  // the next forward keeps its logits on the device (Backend::defer_logits)
  // Measurements.
  double decode_s = 0, decode_bytes = 0, prefill_s = 0;
  int64_t decode_steps = 0, prefill_tokens = 0, peak_pool_pages = 0;
  size_t weight_bytes = 0;       // all weights on the device
  size_t step_weight_bytes = 0;  // weights one decode step reads (all but the embedding gather)
  double roofline_gbps = 0;

  Impl(const Model& model, KVCache& c) : m(model), cache(c) {
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
    pt_store = std::make_unique<cuda::PageTableStore>(L, Hkv);
    seen_shrinks = cache.page_list_shrinks();
    if (const char* g = std::getenv("KVB_CUDA_GRAPHS")) graphs = std::string(g) != "0";
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

  /// Uploads `v` to `d` (grown to fit) through the pinned staging arena: queued on the stream
  /// without waiting for earlier work.
  template <class T>
  void stage_upload(DevBuf<T>& d, const std::vector<T>& v, const char* what) {
    d.grow(v.size(), what);
    if (v.empty()) return;
    const void* src = staging.put(v.data(), v.size() * sizeof(T), stream);
    check(cudaMemcpyAsync(d.p, src, v.size() * sizeof(T), cudaMemcpyHostToDevice, stream), what);
  }

  /// Which prefill attention kernel eager steps use: "flashinfer" or "native" (attention.cu).
  const char* prefill_attention_name() const {
#ifdef KVB_HAVE_FLASHINFER
    if (fi) return "flashinfer";
#endif
    return "native";
  }

  ~Impl() {
    if (graph_exec) cudaGraphExecDestroy(graph_exec);
    if (meta_host) cudaFreeHost(meta_host);
    if (k_pool) cudaFree(k_pool);
    if (v_pool) cudaFree(v_pool);
    if (pos_pool) cudaFree(pos_pool);
    if (blas) cublas().destroy(blas);
    if (stream) cudaStreamDestroy(stream);
  }

  void up_vec(DevBuf<float>& b, const float* src, size_t n, const char* what) {
    b.upload(src, n, stream, what);
    weight_bytes += n * 4;
  }
  void up_mat(DevBuf<uint16_t>& b, const std::vector<uint16_t>& v, const char* what) {
    b.upload(v, stream, what);
    check(cudaStreamSynchronize(stream), what);  // v is freed by the caller
    weight_bytes += v.size() * 2;
  }

  void upload_weights() {
    const int64_t HqD = static_cast<int64_t>(Hq) * D, HkvD = static_cast<int64_t>(Hkv) * D;
    layers.resize(L);
    for (int l = 0; l < L; ++l) {
      const LayerWeights& w = m.layers()[l];
      DevLayer& d = layers[l];
      std::vector<uint16_t> qkv = as_bf16(w.wq, HqD, H);
      auto k = as_bf16(w.wk, HkvD, H), v = as_bf16(w.wv, HkvD, H);
      qkv.insert(qkv.end(), k.begin(), k.end());
      qkv.insert(qkv.end(), v.begin(), v.end());
      up_mat(d.wqkv, qkv, "upload wqkv");
      up_mat(d.wo, as_bf16(w.wo, H, HqD), "upload wo");
      std::vector<uint16_t> gu = as_bf16(w.w_gate, I, H), up = as_bf16(w.w_up, I, H);
      gu.insert(gu.end(), up.begin(), up.end());
      up_mat(d.wgu, gu, "upload w_gate|w_up");
      up_mat(d.wd, as_bf16(w.w_down, H, I), "upload w_down");
      if (w.bq || w.bk || w.bv) {
        std::vector<float> b(QKV, 0.0f);
        if (w.bq) std::copy_n(w.bq, HqD, b.begin());
        if (w.bk) std::copy_n(w.bk, HkvD, b.begin() + HqD);
        if (w.bv) std::copy_n(w.bv, HkvD, b.begin() + HqD + HkvD);
        up_vec(d.bqkv, b.data(), b.size(), "upload bias");
        check(cudaStreamSynchronize(stream), "upload bias");
        d.has_bias = true;
      }
      up_vec(d.attn_norm, w.attn_norm, H, "upload attn_norm");
      up_vec(d.mlp_norm, w.mlp_norm, H, "upload mlp_norm");
      if (w.post_attn_norm || w.post_mlp_norm) {
        if (!w.post_attn_norm || !w.post_mlp_norm)
          fail("--backend cuda: layer {} has only one of the post-block norms", l);
        up_vec(d.post_attn_norm, w.post_attn_norm, H, "upload post_attn_norm");
        up_vec(d.post_mlp_norm, w.post_mlp_norm, H, "upload post_mlp_norm");
        d.has_post_norms = true;
      }
      d.window = m.config().window(l);
      if (w.q_norm) {
        up_vec(d.q_norm, w.q_norm, D, "upload q_norm");
        up_vec(d.k_norm, w.k_norm, D, "upload k_norm");
        d.has_qk_norm = true;
      }
    }
    up_mat(embed, as_bf16(m.embed(), V, H), "upload embed");
    const bool tied = m.lm_head().data && m.lm_head().data == m.embed().data;
    if (tied) {
      lm_head = embed.p;
    } else {
      up_mat(lm_head_own, as_bf16(m.lm_head(), V, H), "upload lm_head");
      lm_head = lm_head_own.p;
    }
    up_vec(final_norm, m.final_norm(), H, "upload final norm");
    up_vec(inv_freq, m.inv_freq().data(), m.inv_freq().size(), "upload inv_freq");
    check(cudaStreamSynchronize(stream), "upload weights");
    // A decode step reads every weight once except the embedding table (a gather of B rows); a
    // tied LM head reads the table in full.
    const size_t table = static_cast<size_t>(V) * H * 2;
    step_weight_bytes = weight_bytes - table + (tied ? table : 0);
  }

  /// y[T, out] (f32) = x[T, in] (bf16) · W[out, in]ᵀ (bf16) + β·y.
  void gemm(const uint16_t* xb, const uint16_t* w, float* y, int T, int in, int out, float beta) {
    if (gemv && cuda::gemv_supported(T, in)) {  // decode steps of up to 8 rows: gemv.cu
      cuda::gemv_bf16(w, xb, y, T, in, out, beta, stream);
      return;
    }
    const float alpha = 1.0f;
    check_blas(cublas().gemm_ex(blas, CUBLAS_OP_T, CUBLAS_OP_N, out, T, in, &alpha, w, CUDA_R_16BF, in, xb, CUDA_R_16BF,
                                in, &beta, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "gemm");
  }

  /// Makes the device pool hold every page id the host cache has allocated.
  void ensure_pool() {
    const int64_t need = cache.pages_allocated();
    peak_pool_pages = std::max(peak_pool_pages, cache.pages_in_use());
    if (need <= pool_pages) return;
    int64_t cap = std::max<int64_t>(need, pool_pages + pool_pages / 2);
    cap = std::max<int64_t>(cap, 64);
    // A page limit (EngineOptions::max_kv_pages, `bench --memory`): reserve it whole at the first
    // allocation, so the pool never grows (a growth holds the old and the new pool at once).
    if (cache.config().max_pages > 0) cap = std::max<int64_t>(need, cache.config().max_pages);
    const size_t slot_bytes = static_cast<size_t>(D) * 2 * 2 + 4;
    size_t free_b = 0, total_b = 0;
    check(cudaMemGetInfo(&free_b, &total_b), "memory info");
    // Old and new pools coexist during the copy: cap the growth by what is free.
    const int64_t afford = static_cast<int64_t>(free_b * 0.9 / (slot_bytes * P));
    if (cap > afford) cap = std::max(need, afford);
    if (cap > afford)
      fail("--backend cuda: KV pool needs {} pages of {} tokens ({:.1f} GiB) but only {:.1f} GiB of device memory is free",
           need, P, need * slot_bytes * P / 1073741824.0, free_b / 1073741824.0);
    uint16_t *nk = nullptr, *nv = nullptr;
    int32_t* np = nullptr;
    const size_t slots = static_cast<size_t>(cap) * P, old = static_cast<size_t>(pool_pages) * P;
    check(cudaMalloc(reinterpret_cast<void**>(&nk), slots * D * 2), "KV pool (keys)");
    check(cudaMalloc(reinterpret_cast<void**>(&nv), slots * D * 2), "KV pool (values)");
    check(cudaMalloc(reinterpret_cast<void**>(&np), slots * 4), "KV pool (positions)");
    if (old) {
      check(cudaMemcpyAsync(nk, k_pool, old * D * 2, cudaMemcpyDeviceToDevice, stream), "grow pool");
      check(cudaMemcpyAsync(nv, v_pool, old * D * 2, cudaMemcpyDeviceToDevice, stream), "grow pool");
      check(cudaMemcpyAsync(np, pos_pool, old * 4, cudaMemcpyDeviceToDevice, stream), "grow pool");
      check(cudaStreamSynchronize(stream), "grow pool");
      cudaFree(k_pool);
      cudaFree(v_pool);
      cudaFree(pos_pool);
    }
    k_pool = nk;
    v_pool = nv;
    pos_pool = np;
    pool_pages = cap;
  }

  /// Applies a keep-set to head (seq, layer, h) on the host cache and queues the device copies.
  int32_t compact(SeqId seq, int layer, int h, const std::vector<int32_t>& keep, std::vector<int64_t>& src,
                  std::vector<int64_t>& dst) {
    const std::vector<int32_t>& pg = cache.pages(seq, layer, h);
    cuda::compaction_pairs(pg, cache.length(seq, layer, h), P, keep, src, dst);
    const uint64_t before = cache.page_list_shrinks();
    const int32_t evicted = cache.compact(seq, layer, h, keep);
    if (before == seen_shrinks) seen_shrinks = cache.page_list_shrinks();  // ours, reported below
    pt_store->shrunk(seq, layer, h, cache.pages(seq, layer, h).size());
    return evicted;
  }

  /// Applies the page-table writes collected by pt_store->sync (or uploads the whole image after
  /// the store re-laid it out) to the device table, in stream order.
  void flush_pages() {
    if (pt_store->take_grew()) {
      stage_upload(pt_table, pt_store->image(), "device page tables");
    } else if (!pt_writes.empty()) {
      stage_upload(pt_writes_d, pt_writes, "page table writes");
      cuda::set_entries(pt_writes_d.p, static_cast<int>(pt_writes.size() / 2), pt_table.p, stream);
    }
    pt_writes.clear();
  }

  /// rmsnorm → fused QKV GEMM (+ bias) → q/k norm + RoPE of layer l for the step's T rows; kpre_d
  /// and qpre_d (nullable) receive k and q before RoPE.
  void qkv_block(int l, int T, const int32_t* pos_d, float* kpre_d, float* qpre_d = nullptr) {
    const DevLayer& w = layers[l];
    cuda::rmsnorm_bf16(x.p, H, w.attn_norm.p, xn.p, T, H, eps, stream);
    gemm(xn.p, w.wqkv.p, qkv.p, T, H, QKV, 0.0f);
    if (w.has_bias) cuda::add_bias(qkv.p, w.bqkv.p, T, QKV, stream);
    cuda::qk_norm_rope(qkv.p, T, Hq, Hkv, D, pos_d, w.has_qk_norm ? w.q_norm.p : nullptr,
                       w.has_qk_norm ? w.k_norm.p : nullptr, eps, inv_freq.p, m.rope_attention_scaling(), kpre_d,
                       stream, qpre_d);
  }

  /// Wo GEMM accumulated into the residual (β = 1) → rmsnorm → gate|up GEMM → SiLU·mul (GeLU-tanh
  /// for Gemma 2) → down GEMM (β = 1) of layer l. With post-block norms (Gemma 2) the Wo and down
  /// GEMMs write `blk` instead, which is normed and added to the residual (kernels.h rmsnorm_add).
  void mlp_block(int l, int T) {
    const DevLayer& w = layers[l];
    if (w.has_post_norms) {
      blk.grow(static_cast<size_t>(T) * H, "activations");
      gemm(att.p, w.wo.p, blk.p, T, Hq * D, H, 0.0f);
      cuda::rmsnorm_add(blk.p, w.post_attn_norm.p, x.p, T, H, eps, stream);
    } else {
      gemm(att.p, w.wo.p, x.p, T, Hq * D, H, 1.0f);
    }
    cuda::rmsnorm_bf16(x.p, H, w.mlp_norm.p, xn.p, T, H, eps, stream);
    gemm(xn.p, w.wgu.p, gu.p, T, H, 2 * I, 0.0f);
    if (gelu_tanh) cuda::gelu_tanh_mul(gu.p, act.p, T, I, stream);
    else cuda::silu_mul(gu.p, act.p, T, I, stream);
    if (w.has_post_norms) {
      gemm(act.p, w.wd.p, blk.p, T, I, H, 0.0f);
      cuda::rmsnorm_add(blk.p, w.post_mlp_norm.p, x.p, T, H, eps, stream);
    } else {
      gemm(act.p, w.wd.p, x.p, T, I, H, 1.0f);
    }
  }

  /// Final norm of the given activation rows and the LM head into logits [rows, V] f32, soft-capped
  /// when the model has final_logit_softcapping (Gemma 2).
  void logits_block(const std::vector<int>& rows) {
    if (rows.empty()) return;
    for (size_t r = 0; r < rows.size(); ++r)
      cuda::rmsnorm_bf16(x.p + static_cast<size_t>(rows[r]) * H, H, final_norm.p, xn.p + r * H, 1, H, eps, stream);
    gemm(xn.p, lm_head, logits.p, static_cast<int>(rows.size()), H, V, 0.0f);
    if (final_softcap > 0) cuda::soft_cap(logits.p, static_cast<int64_t>(rows.size()) * V, final_softcap, stream);
  }

  /// Byte offsets of the per-step metadata of a graph decode step in `meta` (16-byte aligned):
  /// tokens [T] i32, positions [T] i32, attention items [B], per layer {units, groups, ·, ·} i32,
  /// append slots [L, T·Hkv] i64, page-table offsets [L, B·Hkv] i32, units [L, cap_units],
  /// groups [L, cap_groups].
  struct MetaLayout {
    size_t tok = 0, pos = 0, items = 0, counts = 0, dst = 0, ptoff = 0, units = 0, groups = 0, total = 0;
    int64_t cap_units = 0, cap_groups = 0;
  };
  MetaLayout meta_layout(int B, int T, const cuda::AttnBound& bound) const {
    MetaLayout ml;
    size_t o = 0;
    auto take = [&o](size_t bytes) {
      const size_t at = o;
      o = (o + bytes + 15) / 16 * 16;
      return at;
    };
    const size_t Ls = static_cast<size_t>(L);
    ml.tok = take(static_cast<size_t>(T) * 4);
    ml.pos = take(static_cast<size_t>(T) * 4);
    ml.items = take(static_cast<size_t>(B) * sizeof(cuda::AttnItem));
    ml.counts = take(Ls * 4 * 4);
    ml.dst = take(Ls * T * Hkv * 8);
    ml.ptoff = take(Ls * B * Hkv * 4);
    ml.units = take(Ls * bound.units * sizeof(cuda::AttnUnit));
    ml.groups = take(Ls * bound.groups * sizeof(cuda::AttnGroup));
    ml.total = o;
    ml.cap_units = bound.units;
    ml.cap_groups = bound.groups;
    return ml;
  }

  /// Every kernel of a decode step (one token per item, no per-layer host work) reading its
  /// per-step data from `meta`: what a decode graph captures, or what runs directly when graphs
  /// are off after a failed capture.
  void enqueue_decode(const MetaLayout& ml, int B, const std::vector<int>& rows) {
    const int T = B;
    const uint8_t* md = meta.p;
    const auto* tok_d = reinterpret_cast<const int32_t*>(md + ml.tok);
    const auto* pos_d = reinterpret_cast<const int32_t*>(md + ml.pos);
    const auto* counts_d = reinterpret_cast<const int32_t*>(md + ml.counts);
    const auto* dst_d = reinterpret_cast<const int64_t*>(md + ml.dst);
    const auto* ptoff_d = reinterpret_cast<const int32_t*>(md + ml.ptoff);
    const auto* units_d0 = reinterpret_cast<const cuda::AttnUnit*>(md + ml.units);
    const auto* groups_d0 = reinterpret_cast<const cuda::AttnGroup*>(md + ml.groups);
    cuda::embed(tok_d, embed.p, x.p, T, H, stream, embed_scale);
    for (int l = 0; l < L; ++l) {
      qkv_block(l, T, pos_d, nullptr);
      cuda::kv_append(qkv.p, T, Hq, Hkv, D, dst_d + static_cast<size_t>(l) * T * Hkv, pos_d, k_pool, v_pool, pos_pool,
                      stream);
      cuda::AttnArgs aa = attn_args(l);
      aa.items = reinterpret_cast<const cuda::AttnItem*>(md + ml.items);
      aa.units = units_d0 + static_cast<size_t>(l) * ml.cap_units;
      aa.num_units = static_cast<int>(ml.cap_units);
      aa.groups = groups_d0 + static_cast<size_t>(l) * ml.cap_groups;
      aa.num_groups = static_cast<int>(ml.cap_groups);
      aa.counts = counts_d + 4 * l;
      aa.pt_off = ptoff_d + static_cast<size_t>(l) * B * Hkv;
      aa.max_rows = std::min(G, cuda::kAttnRows);  // one token per item: a unit holds at most G rows
      cuda::attention(aa, stream);
      mlp_block(l, T);
    }
    logits_block(rows);
  }

  /// The fields of an attention launch of layer l that do not depend on the step's plan (the
  /// layer's sliding window and the model's attention soft-cap included).
  cuda::AttnArgs attn_args(int l) const {
    cuda::AttnArgs aa;
    aa.qkv = qkv.p;
    aa.q_stride = QKV;
    aa.Hq = Hq;
    aa.Hkv = Hkv;
    aa.D = D;
    aa.G = G;
    aa.P = P;
    aa.scale = scale;
    aa.window = layers[l].window;
    aa.softcap = attn_softcap;
    aa.pages = pt_table.p;
    aa.k_pool = k_pool;
    aa.v_pool = v_pool;
    aa.pos_pool = pos_pool;
    aa.out = att.p;
    aa.part_o = part_o.p;
    aa.part_ml = part_ml.p;
    return aa;
  }

  /// Captures enqueue_decode into graph_exec. On failure (a CUDA or cuBLAS call that capture does
  /// not support) graphs are switched off for this backend with one line on stderr, and false is
  /// returned: the caller then runs the same kernels directly.
  bool capture_decode(const MetaLayout& ml, int B, const std::vector<int>& rows) {
    if (graph_exec) {
      cudaGraphExecDestroy(graph_exec);
      graph_exec = nullptr;
    }
    graph_key.clear();
    cudaGraph_t g = nullptr;
    try {
      check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin decode graph capture");
      try {
        enqueue_decode(ml, B, rows);
      } catch (...) {
        cudaStreamEndCapture(stream, &g);
        if (g) cudaGraphDestroy(g);
        throw;
      }
      check(cudaStreamEndCapture(stream, &g), "end decode graph capture");
      const cudaError_t e = cudaGraphInstantiate(&graph_exec, g, 0);
      cudaGraphDestroy(g);
      check(e, "instantiate decode graph");
      ++graph_captures;
      return true;
    } catch (const Error& e) {
      cudaGetLastError();
      graph_exec = nullptr;
      graphs = false;
      std::fprintf(stderr, "kvbench: CUDA graphs switched off (%s); decode steps launch their kernels directly\n",
                   e.what());
      return false;
    }
  }

  void decode_graph(std::span<ForwardItem> items, const std::vector<int32_t>& toks, const std::vector<int32_t>& poss,
                    const std::vector<int>& rows, double& kv_read_bytes, std::vector<int64_t>& kv_read_items);
  void flush_compaction(std::vector<int64_t>& src, std::vector<int64_t>& dst) {
    if (src.empty()) return;
    const int n = static_cast<int>(src.size());
    csrc.upload(src, stream, "compaction");
    cdst.upload(dst, stream, "compaction");
    scratch_kv.grow(static_cast<size_t>(2) * n * D, "compaction scratch");
    scratch_pos.grow(n, "compaction scratch");
    cuda::compact_pairs(csrc.p, cdst.p, n, D, k_pool, v_pool, pos_pool, scratch_kv.p, scratch_pos.p, stream);
    check(cudaStreamSynchronize(stream), "compaction");  // src/dst host vectors are reused
    src.clear();
    dst.clear();
  }

  void forward(std::span<ForwardItem> items, Policy* policy, std::vector<float>& out_logits, ForwardStats* stats);

  /// Runs one layer's attention of an eager step on FlashInfer's tensor-core prefill kernel when
  /// it applies: built (KVB_HAVE_FLASHINFER) and enabled, some item has more than one new token
  /// (T > items), no log-sum-exp rows are wanted (H2O's column sums read attention.cu's), and the
  /// layer has no sliding window or logit soft-cap (attention.cu implements those).
  /// `aa` carries the step's pointers (pt_off uploaded); `n`, `len` as plan_attention. Returns
  /// false when the caller must run attention.cu instead.
  bool attention_prefill_fast(const cuda::AttnArgs& aa, const std::vector<int32_t>& n, const std::vector<int32_t>& len,
                              int T) {
#ifdef KVB_HAVE_FLASHINFER
    if (!fi || aa.lse || aa.window > 0 || aa.softcap > 0.0f || T <= static_cast<int>(n.size())) return false;
    const cuda::FiRequests rq = cuda::fi_requests(n, len, Hkv, P);
    fi->plan(rq.qo_indptr.data(), rq.kv_indptr.data(), rq.last_page_len.data(), rq.num_items, Hkv, G, P, D, rq.tokens,
             stream);
    fi->run(aa, stream);
    return true;
#else
    (void)aa;
    (void)n;
    (void)len;
    (void)T;
    return false;
#endif
  }

  /// Read selection of layer l (PolicyNeeds::read_select) for every decode item: copies the new
  /// token's post-RoPE queries [Hq, D] to the host, runs policy_driver::select_reads (validated
  /// spans; the policy reads the host K/V mirror) and fills spans[b] (empty: dense). Adds the
  /// token rows read to kv_read_items[b] and their K+V bytes (bf16) to kv_read_bytes, sets
  /// `ranged` when some item reads selected ranges, and adds the host time to policy_s.
  void read_selection(std::span<ForwardItem> items, int l, const std::vector<int32_t>& row0,
                      const policy_driver::Dims& dims, Policy& policy, std::vector<std::vector<cuda::TokenSpans>>& spans,
                      bool& ranged, std::vector<int64_t>& kv_read_items, double& kv_read_bytes, double& policy_s) {
    std::vector<float> q(static_cast<size_t>(Hq) * D);
    for (size_t b = 0; b < items.size(); ++b) {
      if (!policy_driver::is_decode(items[b])) continue;
      check(cudaMemcpyAsync(q.data(), qkv.p + static_cast<size_t>(row0[b]) * QKV, q.size() * 4, cudaMemcpyDeviceToHost,
                            stream),
            "queries for read selection");
      check(cudaStreamSynchronize(stream), "queries for read selection");
      const auto tp = std::chrono::steady_clock::now();
      const int64_t read = policy_driver::select_reads(policy, cache, items[b], l, dims, q.data(), spans[b]);
      policy_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - tp).count();
      kv_read_items[b] += read;
      kv_read_bytes += static_cast<double>(read) * D * 2 * 2;
      ranged = ranged || !spans[b].empty();
    }
  }

  /// True when the step can run as one decode graph: every item decodes one token and the policy
  /// (if any) needs nothing between layers (no per-layer hook, host K/V mirror, query history,
  /// pre-RoPE keys or column sums).
  static bool graph_eligible(const Policy* policy, const PolicyNeeds& needs, bool decode) {
    if (!decode) return false;
    if (!policy) return true;
    return !needs.layer_hook && !needs.host_kv && needs.window_queries == 0 && !needs.keys_pre_rope &&
           !needs.queries_pre_rope && !needs.attention_colsum && !needs.layer_input && !needs.read_select;
  }

  /// The device copy of `m` (uploaded on first use; see DevMlp).
  const DevMlp& device_mlp(const HeadMlp& m) {
    const int h1 = m.shared_hidden ? 1 : m.heads;
    const float probe[4] = {m.w1[0], m.b1[0], m.w2[0], m.b2[0]};
    auto it = mlps.find(m.w1);
    if (it != mlps.end()) {
      const DevMlp& d = it->second;
      if (d.heads == m.heads && d.in == m.in && d.hidden == m.hidden && d.shared == m.shared_hidden &&
          std::memcmp(d.probe, probe, sizeof probe) == 0)
        return d;
      mlps.erase(it);
    }
    DevMlp& d = mlps[m.w1];
    d.heads = m.heads;
    d.in = m.in;
    d.hidden = m.hidden;
    d.shared = m.shared_hidden;
    std::memcpy(d.probe, probe, sizeof probe);
    d.w1.upload(m.w1, static_cast<size_t>(h1) * m.hidden * m.in, stream, "policy MLP W1");
    d.b1.upload(m.b1, static_cast<size_t>(h1) * m.hidden, stream, "policy MLP b1");
    d.w2.upload(m.w2, static_cast<size_t>(m.heads) * m.hidden, stream, "policy MLP W2");
    d.b2.upload(m.b2, static_cast<size_t>(m.heads), stream, "policy MLP b2");
    check(cudaStreamSynchronize(stream), "policy MLP upload");  // the host arrays may change after
    return d;
  }

  /// LayerStep::head_mlp on the device (contract in policy.h). x == null reads rows [xrow0,
  /// xrow0 + rows) of the step's normed layer inputs (xn, bf16). First layer: one SGEMM (shared
  /// hidden or a single head) or a strided-batched SGEMM over heads, f32 in and out (cuBLAS
  /// default math: no TF32); second layer, bias and activation: kernels.h mlp_out.
  void head_mlp(const HeadMlp& m, const float* x, int rows, int head, float* out, int64_t xrow0) {
    if (rows <= 0) return;
    const DevMlp& d = device_mlp(m);
    const int hid_heads = (head >= 0 || m.shared_hidden) ? 1 : m.heads;  // input and hidden head count
    const size_t xn_count = static_cast<size_t>(rows) * hid_heads * m.in;
    mlp_x.grow(xn_count, "policy MLP input");
    if (x) {
      check(cudaMemcpyAsync(mlp_x.p, x, xn_count * 4, cudaMemcpyHostToDevice, stream), "policy MLP input");
    } else {
      if (m.in != H) fail("head_mlp: input width {} != hidden size {}", m.in, H);
      cuda::bf16_to_f32(xn.p + xrow0 * H, mlp_x.p, xn_count, stream);
    }
    mlp_hid.grow(static_cast<size_t>(rows) * hid_heads * m.hidden, "policy MLP hidden");
    const float one = 1.0f, zero = 0.0f;
    if (hid_heads == 1) {
      const float* w1 = d.w1.p + (head >= 0 ? static_cast<size_t>(head) * m.hidden * m.in : 0);
      check_blas(cublas().sgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, m.hidden, rows, m.in, &one, w1, m.in, mlp_x.p, m.in,
                                &zero, mlp_hid.p, m.hidden),
                 "policy MLP sgemm");
    } else {
      check_blas(cublas().sgemm_strided_batched(blas, CUBLAS_OP_T, CUBLAS_OP_N, m.hidden, rows, m.in, &one, d.w1.p,
                                                m.in, static_cast<long long>(m.hidden) * m.in, mlp_x.p, m.heads * m.in,
                                                m.in, &zero, mlp_hid.p, m.heads * m.hidden, m.hidden, m.heads),
                 "policy MLP sgemm (batched over heads)");
    }
    const int out_heads = head >= 0 ? 1 : m.heads;
    mlp_o.grow(static_cast<size_t>(rows) * out_heads, "policy MLP output");
    cuda::mlp_out(mlp_hid.p, rows, hid_heads, m.heads, m.hidden, d.b1.p, d.w2.p, d.b2.p, m.shared_hidden, head,
                  m.act == HeadMlp::Act::kSilu ? 0 : 1, mlp_o.p, stream);
    check(cudaMemcpyAsync(out, mlp_o.p, static_cast<size_t>(rows) * out_heads * 4, cudaMemcpyDeviceToHost, stream),
          "policy MLP output");
    check(cudaStreamSynchronize(stream), "policy MLP");
  }

  /// Uploads the G·w window queries of kv head h of (seq, layer l) from the host query ring,
  /// row r = g·w + j (oldest query first), and the head's page list; returns w.
  int stage_window(const QueryHistory& qh, SeqId seq, int l, int h) {
    const int wq = qh.count[l];
    std::vector<float> qs(static_cast<size_t>(G) * wq * D);
    std::vector<int32_t> qp(static_cast<size_t>(G) * wq);
    for (int g = 0; g < G; ++g)
      for (int j = 0; j < wq; ++j) {
        const int slot = (qh.head[l] - wq + j + qh.window) % qh.window;
        std::memcpy(&qs[(static_cast<size_t>(g) * wq + j) * D],
                    &qh.q[l][(static_cast<size_t>(slot) * Hq + h * G + g) * D], sizeof(float) * D);
        qp[static_cast<size_t>(g) * wq + j] = qh.pos[l][slot];
      }
    win_q.upload(qs, stream, "window queries");
    win_qpos.upload(qp, stream, "window queries");
    win_pages.upload(cache.pages(seq, l, h), stream, "window pages");
    check(cudaStreamSynchronize(stream), "window queries");  // qs/qp are freed on return
    return wq;
  }

  /// LayerStep::window_scores on the device: scoring::window_importance (GQA reduction as
  /// spec.gqa, mean over the w window queries) and scoring::pool1d, copying only the L − w scores.
  std::vector<float> window_scores(const QueryHistory& qh, SeqId seq, int l, int h, const WindowScoreSpec& sp,
                                   int* w_out) {
    const int wq = stage_window(qh, seq, l, h);
    const int32_t Lh = cache.length(seq, l, h);
    *w_out = wq;
    const int32_t n = Lh - wq;
    if (n <= 0 || wq <= 0) return {};
    const int R = G * wq;
    win_p.grow(static_cast<size_t>(R) * Lh, "window attention");
    win_s.grow(n, "window scores");
    if (sp.gqa == scoring::Gqa::kMaxLogits) {
      // No window or soft-cap here: the CPU backend computes R-KV's max-logits reduction with the
      // host scoring::window_logits, which applies neither (NOTES.md, "Issue 30").
      cuda::window_logits(win_q.p, win_qpos.p, R, win_pages.p, Lh, P, D, scale, 0, 0.0f, k_pool, pos_pool, win_p.p,
                          stream);
      win_r.grow(static_cast<size_t>(wq) * n, "window scores");
      cuda::gqa_max_rows(win_p.p, G, wq, Lh, n, win_r.p, stream);
      cuda::softmax_rows(win_r.p, wq, n, stream);
      cuda::window_col_reduce(win_r.p, n, 1, wq, n, 0, win_s.p, stream);
    } else {
      cuda::window_attention(win_q.p, win_qpos.p, R, win_pages.p, Lh, P, D, scale, layers[l].window, attn_softcap,
                             k_pool, pos_pool, win_p.p, stream);
      cuda::window_col_reduce(win_p.p, Lh, G, wq, n, sp.gqa == scoring::Gqa::kMax ? 0 : 1, win_s.p, stream);
    }
    const float* res = win_s.p;
    if (sp.pool != scoring::Pool::kNone && sp.kernel > 1) {
      win_s2.grow(n, "window scores");
      cuda::pool1d(win_s.p, n, sp.kernel, sp.pool == scoring::Pool::kMax ? 1 : 2, win_s2.p, stream);
      res = win_s2.p;
    }
    std::vector<float> out(n);
    check(cudaMemcpyAsync(out.data(), res, static_cast<size_t>(n) * 4, cudaMemcpyDeviceToHost, stream), "window scores");
    check(cudaStreamSynchronize(stream), "window scores");
    return out;
  }
};

void CudaBackend::Impl::forward(std::span<ForwardItem> items, Policy* policy, std::vector<float>& out_logits,
                                ForwardStats* stats) {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  double policy_s = 0;
  int64_t evicted = 0;
  const PolicyNeeds needs = policy ? policy->needs() : PolicyNeeds{};
  const bool mirror = policy && needs.host_kv;
  if (mirror && !cache.host_kv())
    fail(
        "--backend cuda: policy '{}' reads cached keys/values on the host, but the KV cache was built "
        "with a device-held payload (kv_payload_for)",
        policy->name());
  const bool keep_logits_on_device = defer;
  defer = false;
  const int B = static_cast<int>(items.size());

  std::vector<int32_t> row0(B + 1, 0);
  for (int b = 0; b < B; ++b) {
    if (items[b].n <= 0) fail("forward: sequence {} has no tokens in this step", items[b].seq);
    row0[b + 1] = row0[b] + items[b].n;
  }
  const int T = row0.back();
  bool decode = true;
  std::vector<int32_t> toks(T), poss(T);
  for (int b = 0; b < B; ++b) {
    decode = decode && items[b].n == 1;
    for (int i = 0; i < items[b].n; ++i) {
      const int32_t t = items[b].tokens[i];
      if (t < 0 || t >= V) fail("forward: token id {} out of range [0, {})", t, V);
      toks[row0[b] + i] = t;
      poss[row0[b] + i] = static_cast<int32_t>(items[b].start_pos + i);
    }
  }
  x.grow(static_cast<size_t>(T) * H, "activations");
  xn.grow(static_cast<size_t>(T) * H, "activations");
  qkv.grow(static_cast<size_t>(T) * QKV, "activations");
  att.grow(static_cast<size_t>(T) * Hq * D, "activations");
  gu.grow(static_cast<size_t>(T) * 2 * I, "activations");
  act.grow(static_cast<size_t>(T) * I, "activations");
  if (needs.keys_pre_rope) kpre.grow(static_cast<size_t>(T) * Hkv * D, "activations");
  if (needs.queries_pre_rope) qpre.grow(static_cast<size_t>(T) * Hq * D, "activations");
  if (layers.front().has_post_norms) blk.grow(static_cast<size_t>(T) * H, "activations");  // before any graph capture
  if (needs.attention_colsum) lse.grow(static_cast<size_t>(T) * Hq, "activations");
  std::vector<int> rows;  // activation rows whose logits are wanted
  for (int b = 0; b < B; ++b)
    if (items[b].want_logits) rows.push_back(row0[b + 1] - 1);
  if (!rows.empty()) logits.grow(rows.size() * static_cast<size_t>(V), "logits");

  // Device page tables: free the rows of finished sequences; re-verify every list after pages
  // were dropped outside this backend.
  pt_store->release_if([this](int32_t s) { return !cache.has_sequence(s); });
  if (cache.page_list_shrinks() != seen_shrinks) {
    pt_store->invalidate();
    seen_shrinks = cache.page_list_shrinks();
  }

  std::vector<int64_t> csrc_h, cdst_h;
  const policy_driver::Dims dims{L, Hq, Hkv, D, H, scale, m.inv_freq().data(), m.rope_attention_scaling()};
  const policy_driver::Compact compact_fn = [&](SeqId s, int layer, int h, const std::vector<int32_t>& keep) {
    return static_cast<int64_t>(compact(s, layer, h, keep, csrc_h, cdst_h));
  };
  double kv_read_bytes = 0;
  std::vector<int64_t> kv_read_items(B, 0);  // ForwardStats::kv_read_tokens
  const bool graph_step = graphs && graph_eligible(policy, needs, decode);
  if (graph_step) {
    decode_graph(items, toks, poss, rows, kv_read_bytes, kv_read_items);
  } else {
    staging.used = 0;  // the previous forward ended with a stream synchronisation
    stage_upload(tok, toks, "tokens");
    stage_upload(pos, poss, "positions");
    cuda::embed(tok.p, embed.p, x.p, T, H, stream, embed_scale);

    std::vector<cuda::AttnItem> hitems(B);
    for (int b = 0; b < B; ++b) hitems[b] = {row0[b], items[b].n, static_cast<int32_t>(items[b].start_pos), 0};
    stage_upload(items_d, hitems, "attention items");

    std::vector<float> kv_host, tmp;
    std::vector<int64_t> dst_h(static_cast<size_t>(T) * Hkv);
    std::vector<int32_t> len_h(static_cast<size_t>(B) * Hkv), off_h(static_cast<size_t>(B) * Hkv);

    // Host metadata append of layer l's new tokens (and the K/V mirror for policies that read
    // cached keys): the slots the device append writes.
    auto host_append = [&](int l) {
      for (int b = 0; b < B; ++b)
        for (int i = 0; i < items[b].n; ++i) {
          const int t = row0[b] + i;
          for (int h = 0; h < Hkv; ++h) {
            const float* kk = mirror ? &kv_host[(static_cast<size_t>(t) * 2 * Hkv + h) * D] : nullptr;
            const float* vv = mirror ? &kv_host[(static_cast<size_t>(t) * 2 * Hkv + Hkv + h) * D] : nullptr;
            const int32_t idx = cache.append(items[b].seq, l, h, kk, vv, poss[t]);
            dst_h[static_cast<size_t>(t) * Hkv + h] = cuda::key_slot(cache.pages(items[b].seq, l, h), idx, P);
          }
        }
      ensure_pool();
      stage_upload(dst_slot, dst_h, "append slots");
    };
    for (int l = 0; l < L; ++l) {
      // Without a mirror the host bookkeeping needs nothing from the device: it runs before this
      // layer's kernels are queued, while the device still works on the previous layer (a policy
      // hook that waits for the device then finds this host work already done).
      if (!mirror) host_append(l);
      qkv_block(l, T, pos.p, needs.keys_pre_rope ? kpre.p : nullptr, needs.queries_pre_rope ? qpre.p : nullptr);
      if (mirror) {
        kv_host.resize(static_cast<size_t>(T) * 2 * Hkv * D);
        check(cudaMemcpy2DAsync(kv_host.data(), 2 * Hkv * D * sizeof(float), qkv.p + static_cast<size_t>(Hq) * D,
                                QKV * sizeof(float), 2 * Hkv * D * sizeof(float), T, cudaMemcpyDeviceToHost, stream),
              "copy new K/V to host");
        check(cudaStreamSynchronize(stream), "copy new K/V to host");
        for (float& f : kv_host) f = bf16_round(f);
        host_append(l);
      }
      cuda::kv_append(qkv.p, T, Hq, Hkv, D, dst_slot.p, pos.p, k_pool, v_pool, pos_pool, stream);

      // Query history (host ring, as the CPU backend) for window-attention policies.
      if (needs.window_queries > 0) {
        for (int b = 0; b < B; ++b) {
          QueryHistory* qh = &policy_driver::history_of(items[b], *policy, needs, L, Hq, D);
          const int first = policy_driver::first_recorded(*qh, items[b].n);
          const int cnt = items[b].n - first;
          tmp.resize(static_cast<size_t>(cnt) * Hq * D);
          check(cudaMemcpy2DAsync(tmp.data(), Hq * D * sizeof(float), qkv.p + static_cast<size_t>(row0[b] + first) * QKV,
                                  QKV * sizeof(float), Hq * D * sizeof(float), cnt, cudaMemcpyDeviceToHost, stream),
                "copy queries to host");
          check(cudaStreamSynchronize(stream), "copy queries to host");
          policy_driver::record_queries(*qh, l, items[b], tmp.data(), Hq, D);
        }
      }

      // Read selection (Quest, SeerAttention-R): each decode item's query heads read the token
      // ranges the policy picks from the new token's post-RoPE queries (as the CPU backend);
      // reads are counted per item as the CPU counts them (policy_driver::select_reads).
      std::vector<std::vector<cuda::TokenSpans>> spans(B);
      bool ranged = false;
      if (needs.read_select)
        read_selection(items, l, row0, dims, *policy, spans, ranged, kv_read_items, kv_read_bytes, policy_s);
      // Attention over the paged pool (page tables: the device-resident store, new pages only).
      int max_len = 0;
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < Hkv; ++h) {
          const size_t bh = static_cast<size_t>(b) * Hkv + h;
          len_h[bh] = cache.length(items[b].seq, l, h);
          max_len = std::max(max_len, len_h[bh]);
          pt_store->sync(items[b].seq, l, h, cache.pages(items[b].seq, l, h), pt_writes);
          if (needs.read_select && policy_driver::is_decode(items[b])) continue;  // counted by read_selection
          kv_read_bytes += static_cast<double>(len_h[bh]) * D * 2 * 2;
          if (policy_driver::is_decode(items[b])) kv_read_items[b] += len_h[bh];
        }
      flush_pages();
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < Hkv; ++h) off_h[static_cast<size_t>(b) * Hkv + h] = pt_store->offset(items[b].seq, l, h);
      std::vector<int32_t> nvec(B);
      for (int b = 0; b < B; ++b) nvec[b] = items[b].n;
      stage_upload(pt_off, off_h, "page tables");
      cuda::AttnArgs aa = attn_args(l);
      aa.items = items_d.p;
      aa.pt_off = pt_off.p;
      aa.lse = needs.attention_colsum ? lse.p : nullptr;
      if (ranged || !attention_prefill_fast(aa, nvec, len_h, T)) {
        const cuda::AttnPlan plan =
            ranged ? cuda::plan_attention_ranged(nvec, len_h, Hkv, G, 4LL * prop.multiProcessorCount, spans)
                   : cuda::plan_attention(nvec, len_h, Hkv, G, 4LL * prop.multiProcessorCount);
        stage_upload(units_d, plan.units, "attention plan");
        stage_upload(groups_d, plan.groups, "attention plan");
        part_o.grow(static_cast<size_t>(std::max(plan.num_parts, 1)) * cuda::kAttnRows * D, "attention partials");
        part_ml.grow(static_cast<size_t>(std::max(plan.num_parts, 1)) * cuda::kAttnRows * 2, "attention partials");
        aa.part_o = part_o.p;  // after the growth (attn_args() read the old pointers)
        aa.part_ml = part_ml.p;
        aa.units = units_d.p;
        aa.num_units = static_cast<int>(plan.units.size());
        aa.groups = groups_d.p;
        aa.num_groups = static_cast<int>(plan.groups.size());
        for (const cuda::AttnUnit& u : plan.units) aa.max_rows = std::max(aa.max_rows, static_cast<int>(u.nrows));
        cuda::attention(aa, stream);
      }

      std::vector<std::vector<float>> colsum_h;
      if (needs.attention_colsum) {
        std::vector<int64_t> coff(static_cast<size_t>(B) * Hkv);
        int64_t total = 0;
        for (size_t bh = 0; bh < coff.size(); ++bh) {
          coff[bh] = total;
          total += len_h[bh];
        }
        colsum.grow(std::max<int64_t>(total, 1), "colsum");
        stage_upload(colsum_off, coff, "colsum");
        stage_upload(head_len, len_h, "colsum");
        cuda::attention_colsum(aa, B, head_len.p, colsum_off.p, max_len, colsum.p, stream);
        tmp.resize(total);
        check(cudaMemcpyAsync(tmp.data(), colsum.p, total * sizeof(float), cudaMemcpyDeviceToHost, stream), "colsum");
        check(cudaStreamSynchronize(stream), "colsum");
        colsum_h.resize(coff.size());
        for (size_t bh = 0; bh < coff.size(); ++bh)
          colsum_h[bh].assign(tmp.begin() + coff[bh], tmp.begin() + coff[bh] + len_h[bh]);
      }

      if (policy && needs.layer_hook) {
        check(cudaStreamSynchronize(stream), "layer");
        const auto tp = clock::now();
        for (int b = 0; b < B; ++b) {
          const ForwardItem& it = items[b];
          std::vector<float> wq_buf;
          LayerStep st = policy_driver::layer_step(cache, it, l, dims, wq_buf);
          std::vector<float> li, kp, qp;
          if (needs.layer_input && !needs.layer_input_via_mlp) {
            std::vector<uint16_t> bits(static_cast<size_t>(it.n) * H);
            check(cudaMemcpyAsync(bits.data(), xn.p + static_cast<size_t>(row0[b]) * H, bits.size() * 2,
                                  cudaMemcpyDeviceToHost, stream),
                  "layer input");
            check(cudaStreamSynchronize(stream), "layer input");
            li.resize(bits.size());
            for (size_t i = 0; i < bits.size(); ++i) li[i] = bf16_bits_to_f32(bits[i]);
            st.layer_input = li.data();
          }
          if (needs.keys_pre_rope) {
            kp.resize(static_cast<size_t>(it.n) * Hkv * D);
            check(cudaMemcpyAsync(kp.data(), kpre.p + static_cast<size_t>(row0[b]) * Hkv * D, kp.size() * 4,
                                  cudaMemcpyDeviceToHost, stream),
                  "keys before RoPE");
            check(cudaStreamSynchronize(stream), "keys before RoPE");
            st.keys_pre_rope = kp.data();
          }
          if (needs.queries_pre_rope) {  // LocRet's retaining heads, Expected Attention's query statistics
            qp.resize(static_cast<size_t>(it.n) * Hq * D);
            check(cudaMemcpyAsync(qp.data(), qpre.p + static_cast<size_t>(row0[b]) * Hq * D, qp.size() * 4,
                                  cudaMemcpyDeviceToHost, stream),
                  "queries before RoPE");
            check(cudaStreamSynchronize(stream), "queries before RoPE");
            st.queries_pre_rope = qp.data();
          }
          std::vector<std::vector<float>> cs_item;
          if (needs.attention_colsum) {
            cs_item.assign(colsum_h.begin() + static_cast<size_t>(b) * Hkv,
                           colsum_h.begin() + static_cast<size_t>(b + 1) * Hkv);
            st.attention_colsum = &cs_item;
          }
          QueryHistory* qh = it.history;
          st.window_attention = policy_driver::memo_window_attention(qh, Hkv, [&, qh, l](int h, std::vector<float>& o) {
            const int wq = stage_window(*qh, st.seq, l, h);
            const int32_t Lh = cache.length(st.seq, l, h);
            win_p.grow(std::max<size_t>(static_cast<size_t>(G) * wq * Lh, 1), "window attention");
            cuda::window_attention(win_q.p, win_qpos.p, G * wq, win_pages.p, Lh, P, D, scale, layers[l].window,
                                   attn_softcap, k_pool, pos_pool, win_p.p, stream);
            o.resize(static_cast<size_t>(G) * wq * Lh);
            if (!o.empty())
              check(cudaMemcpyAsync(o.data(), win_p.p, o.size() * 4, cudaMemcpyDeviceToHost, stream), "window attention");
            check(cudaStreamSynchronize(stream), "window attention");
            return wq;
          });
          st.window_scores = [&, qh, l](int h, const WindowScoreSpec& sp, int* w_out) -> std::vector<float> {
            if (!qh || qh->q.empty()) fail("policy asked for window scores without declaring window_queries");
            if (h < 0 || h >= Hkv) fail("window_scores: kv head {} of {}", h, Hkv);
            return window_scores(*qh, st.seq, l, h, sp, w_out);
          };
          const int64_t xrow0 = row0[b];
          st.head_mlp = [&, xrow0](const HeadMlp& mm, const float* xx, int rows, int head, float* o) {
            head_mlp(mm, xx, rows, head, o, xrow0);
          };
          evicted += policy_driver::run_layer(*policy, st, compact_fn);
          flush_compaction(csrc_h, cdst_h);
        }
        policy_s += std::chrono::duration<double>(clock::now() - tp).count();
      }
      // Output projection accumulated into the residual, then the MLP.
      mlp_block(l, T);
    }
    logits_block(rows);
  }  // eager step

  if (policy) {
    const auto tp = clock::now();
    evicted +=
        policy_driver::run_step_end(*policy, cache, items, dims, compact_fn, [&] { flush_compaction(csrc_h, cdst_h); });
    policy_s += std::chrono::duration<double>(clock::now() - tp).count();
  }

  rows_last = static_cast<int>(rows.size());
  out_logits.resize(keep_logits_on_device ? 0 : rows.size() * static_cast<size_t>(V));
  if (!rows.empty() && !keep_logits_on_device)
    check(cudaMemcpyAsync(out_logits.data(), logits.p, out_logits.size() * 4, cudaMemcpyDeviceToHost, stream), "logits");
  check(cudaStreamSynchronize(stream), "forward");
  const double total = std::chrono::duration<double>(clock::now() - t_start).count();
  if (decode) {
    decode_s += total;
    decode_bytes += static_cast<double>(step_weight_bytes) + kv_read_bytes;
    ++decode_steps;
  } else {
    prefill_s += total;
    prefill_tokens += T;
  }
  peak_pool_pages = std::max(peak_pool_pages, cache.pages_in_use());
  if (stats) {
    stats->total_s = total;
    stats->policy_s = policy_s;
    stats->evicted = evicted;
    stats->kv_read_tokens = std::move(kv_read_items);
  }
}

/// A decode step as one CUDA graph (graph_eligible steps). Host work first: every layer's KVCache
/// append (no per-layer hook runs, so appending all layers up front is what the layer loop would
/// do), the pool, the page-table writes, and each layer's attention plan; all per-step data go into
/// one pinned metadata block and one upload. Then the graph captured for this batch shape and
/// these buffers is replayed, or captured again when any pointer or size it took changed (pool or
/// page-table growth, another batch size or logit rows).
void CudaBackend::Impl::decode_graph(std::span<ForwardItem> items, const std::vector<int32_t>& toks,
                                     const std::vector<int32_t>& poss, const std::vector<int>& rows,
                                     double& kv_read_bytes, std::vector<int64_t>& kv_read_items) {
  const int B = static_cast<int>(items.size()), T = B;
  const std::vector<int32_t> nvec(B, 1);
  const int64_t target = 4LL * prop.multiProcessorCount;
  const cuda::AttnBound bound = cuda::attention_bound(nvec, Hkv, G, target);
  const MetaLayout ml = meta_layout(B, T, bound);
  if (meta_host_n < ml.total) {  // the previous step synchronised: nothing reads the old block
    if (meta_host) cudaFreeHost(meta_host);
    meta_host = nullptr;
    meta_host_n = 0;
    check(cudaMallocHost(reinterpret_cast<void**>(&meta_host), ml.total), "pinned decode metadata");
    meta_host_n = ml.total;
  }
  uint8_t* hm = meta_host;
  std::memcpy(hm + ml.tok, toks.data(), static_cast<size_t>(T) * 4);
  std::memcpy(hm + ml.pos, poss.data(), static_cast<size_t>(T) * 4);
  auto* it_h = reinterpret_cast<cuda::AttnItem*>(hm + ml.items);
  for (int b = 0; b < B; ++b) it_h[b] = {b, 1, poss[b], 0};

  auto* dst = reinterpret_cast<int64_t*>(hm + ml.dst);
  for (int l = 0; l < L; ++l)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < Hkv; ++h) {
        const int32_t idx = cache.append(items[b].seq, l, h, nullptr, nullptr, poss[b]);
        dst[(static_cast<size_t>(l) * T + b) * Hkv + h] = cuda::key_slot(cache.pages(items[b].seq, l, h), idx, P);
      }
  ensure_pool();
  for (int l = 0; l < L; ++l)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < Hkv; ++h) pt_store->sync(items[b].seq, l, h, cache.pages(items[b].seq, l, h), pt_writes);
  flush_pages();

  auto* counts = reinterpret_cast<int32_t*>(hm + ml.counts);
  auto* ptoff = reinterpret_cast<int32_t*>(hm + ml.ptoff);
  std::vector<int32_t> len_h(static_cast<size_t>(B) * Hkv), prev;
  cuda::AttnPlan plan;
  for (int l = 0; l < L; ++l) {
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < Hkv; ++h) {
        const size_t bh = static_cast<size_t>(b) * Hkv + h;
        len_h[bh] = cache.length(items[b].seq, l, h);
        ptoff[static_cast<size_t>(l) * B * Hkv + bh] = pt_store->offset(items[b].seq, l, h);
        kv_read_bytes += static_cast<double>(len_h[bh]) * D * 2 * 2;
        if (policy_driver::is_decode(items[b])) kv_read_items[b] += len_h[bh];
      }
    if (l == 0 || len_h != prev) {  // layers of a full cache share their lengths, hence their plan
      plan = cuda::plan_attention(nvec, len_h, Hkv, G, target);
      prev = len_h;
    }
    if (static_cast<int64_t>(plan.units.size()) > bound.units || static_cast<int64_t>(plan.groups.size()) > bound.groups)
      fail("CUDA decode graph: attention plan of {} units / {} groups exceeds its bound {} / {}", plan.units.size(),
           plan.groups.size(), bound.units, bound.groups);
    counts[4 * l] = static_cast<int32_t>(plan.units.size());
    counts[4 * l + 1] = static_cast<int32_t>(plan.groups.size());
    counts[4 * l + 2] = counts[4 * l + 3] = 0;
    std::memcpy(hm + ml.units + static_cast<size_t>(l) * bound.units * sizeof(cuda::AttnUnit), plan.units.data(),
                plan.units.size() * sizeof(cuda::AttnUnit));
    std::memcpy(hm + ml.groups + static_cast<size_t>(l) * bound.groups * sizeof(cuda::AttnGroup), plan.groups.data(),
                plan.groups.size() * sizeof(cuda::AttnGroup));
  }
  part_o.grow(static_cast<size_t>(bound.units) * cuda::kAttnRows * D, "attention partials");
  part_ml.grow(static_cast<size_t>(bound.units) * cuda::kAttnRows * 2, "attention partials");
  meta.grow(ml.total, "decode metadata");
  check(cudaMemcpyAsync(meta.p, hm, ml.total, cudaMemcpyHostToDevice, stream), "decode metadata");

  // Everything the captured kernels take by value or pointer.
  std::vector<uintptr_t> key = {static_cast<uintptr_t>(B), static_cast<uintptr_t>(bound.units),
                                static_cast<uintptr_t>(bound.groups)};
  for (const void* p :
       std::initializer_list<const void*>{meta.p, x.p, xn.p, qkv.p, att.p, gu.p, act.p, logits.p, part_o.p, part_ml.p,
                                          k_pool, v_pool, pos_pool, pt_table.p, blk.p})
    key.push_back(reinterpret_cast<uintptr_t>(p));
  for (int r : rows) key.push_back(static_cast<uintptr_t>(r));
  if (!graph_exec || key != graph_key) {
    if (capture_decode(ml, B, rows)) graph_key = key;
  }
  if (graph_exec && key == graph_key) {
    check(cudaGraphLaunch(graph_exec, stream), "decode graph launch");
    ++graph_replays;
  } else {
    enqueue_decode(ml, B, rows);  // graphs are off (capture failed): the same kernels, directly
  }
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
  d.samp_f.upload(f, d.stream, "sampling parameters");
  d.sample_out.grow(std::max(R, 1), "sampling");
  cuda::sample(d.logits.p, R, d.V, d.samp_f.p, d.samp_f.p + R, d.samp_f.p + 2 * R, d.sample_out.p, d.stream);
  std::vector<int32_t> out(R);
  if (R) check(cudaMemcpyAsync(out.data(), d.sample_out.p, R * 4, cudaMemcpyDeviceToHost, d.stream), "sampling");
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
  d.roofline_gbps = 2.0 * bytes / (med * 1e-3) / 1e9;
  return d.roofline_gbps;
}

std::string CudaBackend::report() const {
  const Impl& d = *impl_;
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  const double pool_page_bytes = static_cast<double>(d.P) * (d.D * 4 + 4);
  const double ms_step = d.decode_steps ? 1000.0 * d.decode_s / d.decode_steps : 0.0;
  const double gbps = d.decode_s > 0 ? d.decode_bytes / d.decode_s / 1e9 : 0.0;
  std::string s =
      fmt::format("device: {} ({} SMs, {:.1f} GiB)\n", d.prop.name, d.prop.multiProcessorCount, total_b / 1073741824.0);
  s += fmt::format("device_weights_GiB: {:.2f}\n", d.weight_bytes / 1073741824.0);
  s += fmt::format("device_kv_pool_GiB: {:.2f} reserved, {:.2f} peak in use (bf16 K+V + positions)\n",
                   d.pool_pages * pool_page_bytes / 1073741824.0, d.peak_pool_pages * pool_page_bytes / 1073741824.0);
  s += fmt::format("host_kv_payload_MiB: {:.2f} (f32 host mirror; 0 unless the policy reads keys on the host)\n",
                   d.cache.host_payload_bytes() / 1048576.0);
  s += fmt::format("device_used_GiB: {:.2f} (cudaMemGetInfo total − free, whole process)\n",
                   (total_b - free_b) / 1073741824.0);
  s += fmt::format("decode: {} steps, {:.3f} ms/step, {:.1f} GB/s achieved (weights + KV read per step)",
                   d.decode_steps, ms_step, gbps);
  if (d.roofline_gbps > 0)
    s += fmt::format(", roofline {:.1f} GB/s (copy kernel), {:.1f}%", d.roofline_gbps, 100.0 * gbps / d.roofline_gbps);
  s += "\n";
  s += fmt::format("prefill: {} tokens, {:.1f} tok/s, attention {} (KVB_CUDA_PREFILL_ATTN=native: attention.cu)\n",
                   d.prefill_tokens, d.prefill_s > 0 ? d.prefill_tokens / d.prefill_s : 0.0, d.prefill_attention_name());
  s += fmt::format("decode_graphs: {} ({} captures, {} replays; KVB_CUDA_GRAPHS=0 switches them off)\n",
                   d.graphs ? "on" : "off", d.graph_captures, d.graph_replays);
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
