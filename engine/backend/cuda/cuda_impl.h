// CudaBackend::Impl — the state and the steps of the CUDA backend (cuda_backend.h), shared by its
// parts; private to engine/backend/cuda. Which file holds what:
//   cuda_backend.cpp  construction, cuBLAS loading, the public CudaBackend methods (dispatch,
//                     sampling, bandwidth, report), the GEMM dispatch (gemv.cu or cuBLAS);
//   cuda_weights.cpp  the bf16 upload of the model's weights (DevWeights);
//   cuda_kv.cpp       the device KV pool, device-resident page tables and keep-set compaction;
//   cuda_forward.cpp  forward(): the eager step's layer loop and the blocks it shares with graphs;
//   cuda_graphs.cpp   decode steps as one CUDA graph per batch shape;
//   cuda_policy.cpp   the policy primitives (LayerStep::head_mlp, window_attention, window_scores)
//                     and the per-layer policy hook of an eager step.
// Every device and pinned buffer is a DevBuf / PinnedBuf (device_buffer.h).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/device_buffer.h"
#include "engine/backend/cuda/kernels.h"
#ifdef KVB_HAVE_FLASHINFER
#include "engine/backend/cuda/attention_fi.h"
#endif
#include "engine/backend/cuda/plan.h"
#include "engine/backend/policy_driver.h"

namespace kvb {

namespace cuda {

/// Throws kvb::Error("cuBLAS <what>: status <s>") when `s` is not CUBLAS_STATUS_SUCCESS.
void check_blas(cublasStatus_t s, const char* what);

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
/// toolkit's library folder of the build, KVB_CUDA_LIBDIR) once per process. Throws kvb::Error when
/// it or a symbol is missing.
const CublasApi& cublas();

/// One decoder layer's weights on the device: bf16 matrices [out, in] row-major (fused QKV
/// [(Hq + 2·Hkv)·D, H], Wo [H, Hq·D], fused gate|up [2·I, H], down [H, I]) and f32 vectors.
struct DevLayer {
  DevBuf<uint16_t> wqkv, wo, wgu, wd;
  DevBuf<float> bqkv, attn_norm, mlp_norm, q_norm, k_norm;
  DevBuf<float> post_attn_norm, post_mlp_norm;  ///< Gemma 2's norms of the block outputs (else empty)
  bool has_bias = false, has_qk_norm = false, has_post_norms = false;
  int32_t window = 0;  ///< sliding window of the layer (ModelConfig::window; 0 = full causal)
};

/// Every weight of the model on the device (cuda_weights.cpp upload_weights).
struct DevWeights {
  std::vector<DevLayer> layers;
  DevBuf<uint16_t> embed;              ///< embedding table [V, H] bf16
  DevBuf<uint16_t> lm_head_own;        ///< LM head [V, H] bf16 when not tied to the embedding
  const uint16_t* lm_head = nullptr;   ///< embed.p (tied) or lm_head_own.p
  DevBuf<float> final_norm, inv_freq;  ///< final RMSNorm weight [H]; RoPE inverse frequencies [D/2]
  size_t bytes = 0;                    ///< all weights on the device
  size_t step_bytes = 0;               ///< weights one decode step reads (all but the embedding gather)
};

/// A policy MLP (policy.h HeadMlp) uploaded once, keyed by its host W1 pointer; `probe` holds the
/// first values of W1, b1, W2 and b2 so that a different MLP reusing a freed address re-uploads.
struct DevMlp {
  DevBuf<float> w1, b1, w2, b2;
  int heads = 0, in = 0, hidden = 0;
  bool shared = false;
  float probe[4] = {0, 0, 0, 0};
};

/// A step's activations (rows T = tokens of the step; grown to the step's T, never shrunk).
struct Activations {
  DevBuf<float> x;        ///< residual stream [T, H]
  DevBuf<float> qkv;      ///< fused q|k|v [T, (Hq + 2·Hkv)·D] (post-RoPE after qk_norm_rope)
  DevBuf<float> gu;       ///< gate|up [T, 2·I]
  DevBuf<float> kpre;     ///< keys before RoPE [T, Hkv·D] (PolicyNeeds::keys_pre_rope)
  DevBuf<float> qpre;     ///< queries before RoPE [T, Hq·D] (PolicyNeeds::queries_pre_rope)
  DevBuf<float> blk;      ///< a block's output before its post-norm [T, H] (Gemma 2)
  DevBuf<float> lse;      ///< attention log-sum-exp per row and query head [T, Hq] (H2O)
  DevBuf<float> logits;   ///< [rows, V] of the rows that want logits
  DevBuf<float> part_o;   ///< split-KV partial outputs [parts · kAttnRows, D]
  DevBuf<float> part_ml;  ///< split-KV partial (max, sum) [parts · kAttnRows, 2]
  DevBuf<uint16_t> xn;    ///< normed input of the next GEMM [T, H] bf16
  DevBuf<uint16_t> att;   ///< attention output [T, Hq·D] bf16
  DevBuf<uint16_t> act;   ///< SiLU·mul (GeLU-tanh·mul) output [T, I] bf16
};

/// An eager step's uploads (through the pinned staging arena) and small device outputs.
struct StepBuffers {
  DevBuf<int32_t> tok, pos;          ///< token ids and positions [T]
  DevBuf<int64_t> dst_slot;          ///< append slots [T, Hkv] of the current layer
  DevBuf<int32_t> pt_off;            ///< page-table offsets [B, Hkv] of the current layer
  DevBuf<cuda::AttnItem> items_d;    ///< attention items [B]
  DevBuf<cuda::AttnUnit> units_d;    ///< attention plan units of the current layer
  DevBuf<cuda::AttnGroup> groups_d;  ///< attention plan groups of the current layer
  DevBuf<float> colsum;              ///< H2O column sums, all (item, kv head) lists concatenated
  DevBuf<int64_t> colsum_off;        ///< offsets of the lists in colsum [B·Hkv]
  DevBuf<int32_t> head_len;          ///< head lengths [B·Hkv] for the column sums
  DevBuf<float> samp_f;              ///< sampling parameters [3, R]: temperature, top-p, draw
  DevBuf<int32_t> sample_out;        ///< sampled tokens [R]
  PinnedStaging staging;             ///< eager steps' uploads (stage_upload)
};

/// The device KV pool: slots = pages · P, the same page ids as the host KVCache (cuda_kv.cpp).
struct KvPool {
  DevBuf<uint16_t> k, v;        ///< keys and values [slots, D] bf16
  DevBuf<int32_t> pos;          ///< positions [slots] i32
  int64_t pages = 0;            ///< pages reserved
  DevBuf<int64_t> csrc, cdst;   ///< compaction pairs (source, destination slots)
  DevBuf<uint16_t> scratch_kv;  ///< compaction scratch [2·n, D] bf16
  DevBuf<int32_t> scratch_pos;  ///< compaction scratch [n] i32
};

/// Device-resident page tables (plan.h PageTableStore): the device copy of the store's image,
/// updated by the store's writes; seen_shrinks tracks KVCache::page_list_shrinks so that lists
/// shrunk outside this backend (truncate_from, remove_sequence) are re-verified.
struct DevPageTables {
  std::unique_ptr<cuda::PageTableStore> store;
  DevBuf<int32_t> table;        ///< the store's image on the device
  DevBuf<int64_t> writes_d;     ///< the step's (index, page id) writes on the device
  std::vector<int64_t> writes;  ///< the step's (index, page id) writes, collected by store->sync
  uint64_t seen_shrinks = 0;
};

/// Decode CUDA graphs: one capture of a whole decode step (every layer, final norm, LM head) per
/// batch shape and buffer set, replayed while `key` (every pointer and size the captured kernels
/// take) is unchanged. Per-step data travel in one metadata upload (meta, from the pinned
/// meta_host). KVB_CUDA_GRAPHS=0 disables them (cuda_graphs.cpp).
struct DecodeGraphs {
  bool on = true;
  cudaGraphExec_t exec = nullptr;
  std::vector<uintptr_t> key;
  int64_t captures = 0, replays = 0;
  DevBuf<uint8_t> meta;
  PinnedBuf<uint8_t> meta_host;
};

/// Device scratch of the policy primitives (LayerStep::head_mlp / window_attention /
/// window_scores; cuda_policy.cpp) and the uploaded policy MLPs.
struct PolicyScratch {
  std::map<const float*, DevMlp> mlps;
  DevBuf<float> mlp_x, mlp_hid, mlp_o;        ///< MLP input, hidden and output rows
  DevBuf<float> win_q;                        ///< window queries [G·w, D]
  DevBuf<int32_t> win_qpos, win_pages;        ///< their positions [G·w]; the head's page list
  DevBuf<float> win_p, win_r, win_s, win_s2;  ///< probabilities / logits, reduced rows, scores
};

/// Measurements for CudaBackend::report().
struct Measurements {
  double decode_s = 0, decode_bytes = 0, prefill_s = 0;
  int64_t decode_steps = 0, prefill_tokens = 0, peak_pool_pages = 0;
  double roofline_gbps = 0;
};

/// Byte offsets of the per-step metadata of a graph decode step in `meta` (16-byte aligned):
/// tokens [T] i32, positions [T] i32, attention items [B], per layer {units, groups, ·, ·} i32,
/// append slots [L, T·Hkv] i64, page-table offsets [L, B·Hkv] i32, units [L, cap_units],
/// groups [L, cap_groups].
struct MetaLayout {
  size_t tok = 0, pos = 0, items = 0, counts = 0, dst = 0, ptoff = 0, units = 0, groups = 0, total = 0;
  int64_t cap_units = 0, cap_groups = 0;
};

}  // namespace cuda

/// The state of one CudaBackend (see the file comment for which part defines which method).
struct CudaBackend::Impl {
  /// One forward() call: its inputs and running totals, shared by the steps it is split into
  /// (cuda_forward.cpp). Built once per call and not moved (compact_fn refers to its members).
  struct Step {
    std::span<ForwardItem> items;
    Policy* policy = nullptr;
    PolicyNeeds needs;
    bool mirror = false;              ///< the policy reads the host K/V mirror (PolicyNeeds::host_kv)
    int B = 0, T = 0;                 ///< items, token rows
    bool decode = true;               ///< every item decodes one token
    std::vector<int32_t> row0;        ///< first activation row of each item [B + 1]
    std::vector<int32_t> toks, poss;  ///< token ids and positions [T]
    std::vector<int> rows;            ///< activation rows whose logits are wanted
    policy_driver::Dims dims;
    std::vector<int64_t> csrc_h, cdst_h;  ///< compaction pairs waiting for flush_compaction
    policy_driver::Compact compact_fn;
    policy_driver::Write write_fn;  ///< a policy's K/V row writes: host mirror and device pool (write_rows)
    double policy_s = 0;            ///< host time in policy code (s)
    int64_t evicted = 0;
    double kv_read_bytes = 0;            ///< K+V bytes the attention read (bf16)
    std::vector<int64_t> kv_read_items;  ///< ForwardStats::kv_read_tokens [B]
  };

  /// The host-side scratch of an eager step's layer loop (cuda_forward.cpp eager_step).
  struct EagerScratch {
    std::vector<float> kv_host, tmp;    ///< the new K/V rows (mirror); copies to the host
    std::vector<int64_t> dst_h;         ///< append slots [T, Hkv]
    std::vector<int32_t> len_h, off_h;  ///< head lengths and page-table offsets [B, Hkv]
    int max_len = 0;                    ///< longest head of the current layer
  };

  // Model and cache; the shapes the kernels take.
  const Model& m;
  KVCache& cache;
  int H, D, Hq, Hkv, I, V, L, G, P, QKV;
  float eps, scale;
  // Architecture choices (engine/model/architecture.h) the kernels apply, as the CPU forward does:
  // the embedding scale (Gemma 2's √H, else 1), the MLP activation, the attention-logit and final
  // logit soft-caps (0 = none). Per-layer windows and post-block norms are in DevLayer.
  float embed_scale = 1.0f, attn_softcap = 0.0f, final_softcap = 0.0f;
  bool gelu_tanh = false;
  // Device, stream and cuBLAS (with an explicit workspace, so that it allocates nothing during a
  // graph capture).
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cudaDeviceProp prop{};
  cuda::DevBuf<uint8_t> blas_ws;
  bool gemv = true;  // products of ≤ 8 rows on gemv.cu (KVB_CUDA_GEMV=0: cuBLAS for all)
#ifdef KVB_HAVE_FLASHINFER
  // Tensor-core prefill attention (attention_fi.h); null when the head dim is not built or
  // KVB_CUDA_PREFILL_ATTN=native.
  std::unique_ptr<cuda::FiPrefill> fi;
#endif
  cuda::DevWeights wts;
  cuda::Activations acts;
  cuda::StepBuffers io;
  cuda::KvPool pool;
  cuda::DevPageTables pt;
  cuda::DecodeGraphs graph;
  cuda::PolicyScratch pol;
  cuda::Measurements meas;
  int rows_last = 0;   // logit rows of the last forward
  bool defer = false;  // the next forward keeps its logits on the device (Backend::defer_logits)

  /// The device pool's page (engine/kv/page_geometry.h): bf16 K and V rows and i32 positions,
  /// no policy scalars (they stay in the host KVCache). The same page as kv_page_geometry("cuda",
  /// ...) in engine/backend/backend.h, which prices `--memory` (BackendInfo "cuda": kv_dtype bf16,
  /// on_device), computed here without the registry (kvb_cuda sits below kvb_backend).
  KvPageGeometry pool_geometry() const {
    KvPageGeometry g = cache.config().geometry();
    g.dtype = KvDtype::kBF16;
    g.num_scalars = 0;
    return g;
  }

  // ---- cuda_backend.cpp ----
  /// Opens device 0, creates the stream and the cuBLAS handle, uploads the weights. Throws
  /// kvb::Error without a usable device or on unsupported shapes.
  Impl(const Model& model, KVCache& c);
  /// Destroys the decode graph, the cuBLAS handle and the stream; the buffers free themselves
  /// afterwards (device_buffer.h).
  ~Impl();
  /// Uploads `v` to `d` (grown to fit) through the pinned staging arena: queued on the stream
  /// without waiting for earlier work.
  template <class T>
  void stage_upload(cuda::DevBuf<T>& d, const std::vector<T>& v, const char* what) {
    d.grow(v.size(), what);
    if (v.empty()) return;
    const void* src = io.staging.put(v.data(), v.size() * sizeof(T), stream);
    cuda::check(cudaMemcpyAsync(d.p, src, v.size() * sizeof(T), cudaMemcpyHostToDevice, stream), what);
  }
  /// Which prefill attention kernel eager steps use: "flashinfer" or "native" (attention.cu).
  const char* prefill_attention_name() const;
  /// y[T, out] (f32) = x[T, in] (bf16) · W[out, in]ᵀ (bf16) + β·y.
  void gemm(const uint16_t* xb, const uint16_t* w, float* y, int T, int in, int out, float beta);

  // ---- cuda_weights.cpp ----
  /// Uploads `n` f32 values (a norm, bias or table) and counts their bytes.
  void up_vec(cuda::DevBuf<float>& b, const float* src, size_t n, const char* what);
  /// Uploads a bf16 matrix, waits for the copy (the caller frees `v`) and counts its bytes.
  void up_mat(cuda::DevBuf<uint16_t>& b, const std::vector<uint16_t>& v, const char* what);
  /// Uploads every weight of the model as bf16 matrices (fused QKV and gate|up) and f32 vectors.
  void upload_weights();

  // ---- cuda_kv.cpp ----
  /// Makes the device pool hold every page id the host cache has allocated.
  void ensure_pool();
  /// Applies a keep-set to head (seq, layer, h) on the host cache and queues the device copies.
  int32_t compact(SeqId seq, int layer, int h, const std::vector<int32_t>& keep, std::vector<int64_t>& src,
                  std::vector<int64_t>& dst);
  /// Applies the page-table writes collected by pt.store->sync (or uploads the whole image after
  /// the store re-laid it out) to the device table, in stream order.
  void flush_pages();
  /// Applies a policy's K/V row write of (seq, layer) (LayerStep::write_keys / write_values,
  /// validated by policy_driver::run_layer): the rows rounded to bf16 are copied host→device into
  /// the pool slots of the written tokens (one copy per run of consecutive slots of a page), and
  /// into the host mirror when the cache holds one; waits for the copies. Call it before the
  /// step's compactions of that head are queued (run_layer does).
  void write_rows(SeqId seq, int layer, const KvRowWrite& w);
  /// Runs the queued compaction pairs (src → dst slots) on the device pool, waits, clears both.
  void flush_compaction(std::vector<int64_t>& src, std::vector<int64_t>& dst);
  /// Start of a forward: frees the device page-table rows of finished sequences and re-verifies
  /// every list after pages were dropped outside this backend.
  void refresh_page_tables();

  // ---- cuda_forward.cpp ----
  /// Backend::forward (contract in backend.h).
  void forward(std::span<ForwardItem> items, Policy* policy, std::vector<float>& out_logits, ForwardStats* stats);
  /// Checks the items and fills the step's rows, tokens, positions and logit rows.
  void prepare_step(Step& step);
  /// Grows the activations to the step's T rows (before any graph capture).
  void grow_activations(const Step& step);
  /// A step that is not a graph decode step: embedding, then per layer the QKV block, appends,
  /// query history, attention, column sums, policy hook and MLP; then the logits.
  void eager_step(Step& step);
  /// Host metadata append of layer l's new tokens (and the K/V mirror for policies that read
  /// cached keys): the slots the device append writes.
  void host_append(Step& step, EagerScratch& e, int l);
  /// QKV block of layer l, the host appends (before the kernels without a mirror, after the K/V
  /// copy with one) and the device KV append.
  void layer_qkv_append(Step& step, EagerScratch& e, int l);
  /// Query history (host ring, as the CPU backend) for window-attention policies.
  void record_query_history(Step& step, EagerScratch& e, int l);
  /// Read selection, page tables and the attention of layer l; returns the launch's arguments.
  cuda::AttnArgs layer_attention(Step& step, EagerScratch& e, int l);
  /// H2O column sums of layer l per (item, kv head), copied to the host.
  std::vector<std::vector<float>> layer_colsums(Step& step, EagerScratch& e, const cuda::AttnArgs& aa);
  /// Step end: the logits copy (unless deferred), the stream synchronisation and the measurements.
  void finish_step(Step& step, bool keep_logits_on_device, std::chrono::steady_clock::time_point t_start,
                   std::vector<float>& out_logits, ForwardStats* stats);
  /// rmsnorm → fused QKV GEMM (+ bias) → q/k norm + RoPE of layer l for the step's T rows; kpre_d
  /// and qpre_d (nullable) receive k and q before RoPE.
  void qkv_block(int l, int T, const int32_t* pos_d, float* kpre_d, float* qpre_d = nullptr);
  /// Wo GEMM accumulated into the residual (β = 1) → rmsnorm → gate|up GEMM → SiLU·mul (GeLU-tanh
  /// for Gemma 2) → down GEMM (β = 1) of layer l. With post-block norms (Gemma 2) the Wo and down
  /// GEMMs write `blk` instead, which is normed and added to the residual (kernels.h rmsnorm_add).
  void mlp_block(int l, int T);
  /// Final norm of the given activation rows and the LM head into logits [rows, V] f32, soft-capped
  /// when the model has final_logit_softcapping (Gemma 2).
  void logits_block(const std::vector<int>& rows);
  /// The fields of an attention launch of layer l that do not depend on the step's plan (the
  /// layer's sliding window and the model's attention soft-cap included).
  cuda::AttnArgs attn_args(int l) const;
  /// Runs one layer's attention of an eager step on FlashInfer's tensor-core prefill kernel when
  /// it applies: built (KVB_HAVE_FLASHINFER) and enabled, some item has more than one new token
  /// (T > items), no log-sum-exp rows are wanted (H2O's column sums read attention.cu's), and the
  /// layer has no sliding window or logit soft-cap (attention.cu implements those).
  /// `aa` carries the step's pointers (pt_off uploaded); `n`, `len` as plan_attention. Returns
  /// false when the caller must run attention.cu instead.
  bool attention_prefill_fast(const cuda::AttnArgs& aa, const std::vector<int32_t>& n, const std::vector<int32_t>& len,
                              int T);
  /// Read selection of layer l (PolicyNeeds::read_select) for every decode item: copies the new
  /// token's post-RoPE queries [Hq, D] to the host, runs policy_driver::select_reads (validated
  /// spans; the policy reads the host K/V mirror) and fills spans[b] (empty: dense). Adds the
  /// token rows read to kv_read_items[b] and their K+V bytes (bf16) to kv_read_bytes, sets
  /// `ranged` when some item reads selected ranges, and adds the host time to policy_s.
  void read_selection(std::span<ForwardItem> items, int l, const std::vector<int32_t>& row0,
                      const policy_driver::Dims& dims, Policy& policy, std::vector<std::vector<cuda::TokenSpans>>& spans,
                      bool& ranged, std::vector<int64_t>& kv_read_items, double& kv_read_bytes, double& policy_s);

  // ---- cuda_graphs.cpp ----
  /// True when the step can run as one decode graph: every item decodes one token and the policy
  /// (if any) needs nothing between layers (no per-layer hook, host K/V mirror, query history,
  /// pre-RoPE keys or column sums).
  static bool graph_eligible(const Policy* policy, const PolicyNeeds& needs, bool decode);
  /// The metadata layout of a graph decode step of B items and T = B rows under `bound`.
  cuda::MetaLayout meta_layout(int B, int T, const cuda::AttnBound& bound) const;
  /// Every kernel of a decode step (one token per item, no per-layer host work) reading its
  /// per-step data from `meta`: what a decode graph captures, or what runs directly when graphs
  /// are off after a failed capture.
  void enqueue_decode(const cuda::MetaLayout& ml, int B, const std::vector<int>& rows);
  /// Captures enqueue_decode into graph.exec. On failure (a CUDA or cuBLAS call that capture does
  /// not support) graphs are switched off for this backend with one line on stderr, and false is
  /// returned: the caller then runs the same kernels directly.
  bool capture_decode(const cuda::MetaLayout& ml, int B, const std::vector<int>& rows);
  /// A decode step as one CUDA graph (graph_eligible steps); see cuda_graphs.cpp.
  void decode_graph(std::span<ForwardItem> items, const std::vector<int32_t>& toks, const std::vector<int32_t>& poss,
                    const std::vector<int>& rows, double& kv_read_bytes, std::vector<int64_t>& kv_read_items);

  // ---- cuda_policy.cpp ----
  /// The device copy of `m` (uploaded on first use; see DevMlp).
  const cuda::DevMlp& device_mlp(const HeadMlp& m);
  /// LayerStep::head_mlp on the device (contract in policy.h). x == null reads rows [xrow0,
  /// xrow0 + rows) of the step's normed layer inputs (xn, bf16). First layer: one SGEMM (shared
  /// hidden or a single head) or a strided-batched SGEMM over heads, f32 in and out (cuBLAS
  /// default math: no TF32); second layer, bias and activation: kernels.h mlp_out.
  void head_mlp(const HeadMlp& m, const float* x, int rows, int head, float* out, int64_t xrow0);
  /// Uploads the G·w window queries of kv head h of (seq, layer l) from the host query ring,
  /// row r = g·w + j (oldest query first), and the head's page list; returns w.
  int stage_window(const QueryHistory& qh, SeqId seq, int l, int h);
  /// LayerStep::window_scores on the device: scoring::window_importance (GQA reduction as
  /// spec.gqa, mean over the w window queries) and scoring::pool1d, copying only the L − w scores.
  std::vector<float> window_scores(const QueryHistory& qh, SeqId seq, int l, int h, const WindowScoreSpec& sp,
                                   int* w_out);
  /// The per-layer policy hook of an eager step (PolicyNeeds::layer_hook): waits for the device,
  /// then runs policy_driver::run_layer for every item and applies its keep-sets.
  void policy_layer(Step& step, int l, const std::vector<std::vector<float>>& colsum_h);
  /// policy_layer for item b: builds its LayerStep (signals copied to the host, device
  /// primitives), runs the policy; returns the evicted token count.
  int64_t policy_layer_item(Step& step, int l, int b, const std::vector<std::vector<float>>& colsum_h);
};

}  // namespace kvb
