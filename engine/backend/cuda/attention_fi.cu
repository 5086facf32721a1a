// kvb::cuda FiPrefill — see attention_fi.h for the mapping of kvbench's per-(layer, kv head) page
// lists onto FlashInfer requests. This file holds the three small layout kernels (query pack,
// page-list gather, output unpack), the planning through FlashInfer's PrefillPlan, and the
// FlashInfer template instantiations (head dims 64 and 128, CTA query tiles 16, 64, 128).
#include <cuda_bf16.h>

#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include "engine/backend/cuda/attention_fi.h"
#include "engine/backend/cuda/device_buffer.h"

namespace kvb::cuda {

namespace {

using bf16 = __nv_bfloat16;
using Params = flashinfer::BatchPrefillPagedParams<bf16, bf16, bf16, int32_t>;
using Variant = flashinfer::DefaultAttention</*custom_mask=*/false, /*sliding_window=*/false,
                                             /*logits_soft_cap=*/false, /*alibi=*/false>;

// The thread's (token t, query head hq, 8-dim chunk c) of a [T, Hq, D / 8] grid of chunks, one
// thread per chunk; false for the threads past the end.
__device__ __forceinline__ bool thread_chunk(int T, int Hq, int D, int64_t& t, int& hq, int& c) {
  const int chunks = D / 8;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(T) * Hq * chunks) return false;
  c = static_cast<int>(idx % chunks);
  hq = static_cast<int>((idx / chunks) % Hq);
  t = idx / (static_cast<int64_t>(chunks) * Hq);
  return true;
}

// q_bf[((h·T + t)·G + g)·D + d] = bf16(qkv[t·stride + (h·G + g)·D + d]): one thread per 8 dims.
__global__ void q_pack_k(const float* __restrict__ qkv, int64_t stride, int T, int Hq, int G, int D,
                         uint16_t* __restrict__ q_bf) {
  int64_t t;
  int hq, c;
  if (!thread_chunk(T, Hq, D, t, hq, c)) return;
  const float4* src = reinterpret_cast<const float4*>(qkv + t * stride + static_cast<int64_t>(hq) * D + c * 8);
  const float4 a = src[0], b = src[1];
  const int h = hq / G, g = hq % G;
  __align__(16) bf16 o[8] = {__float2bfloat16_rn(a.x), __float2bfloat16_rn(a.y), __float2bfloat16_rn(a.z),
                             __float2bfloat16_rn(a.w), __float2bfloat16_rn(b.x), __float2bfloat16_rn(b.y),
                             __float2bfloat16_rn(b.z), __float2bfloat16_rn(b.w)};
  *reinterpret_cast<uint4*>(q_bf + ((static_cast<int64_t>(h) * T + t) * G + g) * D + c * 8) =
      *reinterpret_cast<const uint4*>(o);
}

// out[(t·Hq + h·G + g)·D + d] = o_bf[((h·T + t)·G + g)·D + d]: one thread per 8 dims.
__global__ void o_unpack_k(const uint16_t* __restrict__ o_bf, int T, int Hq, int G, int D, uint16_t* __restrict__ out) {
  int64_t t;
  int hq, c;
  if (!thread_chunk(T, Hq, D, t, hq, c)) return;
  const int h = hq / G, g = hq % G;
  *reinterpret_cast<uint4*>(out + (t * Hq + hq) * D + c * 8) =
      *reinterpret_cast<const uint4*>(o_bf + ((static_cast<int64_t>(h) * T + t) * G + g) * D + c * 8);
}

// indices[kv_indptr[r] + j] = pages[pt_off[b·Hkv + h] + j] for request r = h·B + b: one block per
// request.
__global__ void gather_pages_k(const int32_t* __restrict__ pages, const int32_t* __restrict__ pt_off,
                               const int32_t* __restrict__ kv_indptr, int B, int Hkv, int32_t* __restrict__ indices) {
  const int r = blockIdx.x;
  const int h = r / B, b = r % B;
  const int32_t* src = pages + pt_off[b * Hkv + h];
  const int32_t beg = kv_indptr[r], n = kv_indptr[r + 1] - beg;
  for (int j = threadIdx.x; j < n; j += blockDim.x) indices[beg + j] = src[j];
}

template <uint32_t CTA, uint32_t HD>
cudaError_t dispatch_one(const Params& p, bf16* tmp_v, float* tmp_s, cudaStream_t s) {
  return flashinfer::BatchPrefillWithPagedKVCacheDispatched<
      /*SAME_KV_STRIDES=*/true, CTA, HD, HD, flashinfer::PosEncodingMode::kNone,
      /*USE_FP16_QK_REDUCTION=*/false, flashinfer::MaskMode::kCausal, Variant, Params>(p, tmp_v, tmp_s,
                                                                                       /*enable_pdl=*/false, s);
}

template <uint32_t HD>
cudaError_t dispatch_tile(int cta, const Params& p, bf16* tmp_v, float* tmp_s, cudaStream_t s) {
  switch (cta) {
    case 16: return dispatch_one<16, HD>(p, tmp_v, tmp_s, s);
    case 64: return dispatch_one<64, HD>(p, tmp_v, tmp_s, s);
    case 128: return dispatch_one<128, HD>(p, tmp_v, tmp_s, s);
    default: raise_error("CUDA FlashInfer prefill: unexpected CTA query tile from the plan");
  }
}

}  // namespace

struct FiPrefill::Impl {
  // The last plan's inputs (a plan is reused while they are equal).
  bool planned = false;
  int B = 0, Hkv = 0, G = 0, P = 0, D = 0, T = 0;
  int64_t total_pages = 0;
  flashinfer::PrefillPlanInfo info;
  // Device: request arrays [qo_indptr R+1 | kv_indptr R+1 | last_page_len R], page indices,
  // packed queries and outputs, FlashInfer's workspaces.
  DevBuf<int32_t> req, indices;
  DevBuf<uint16_t> q_bf, o_bf;
  DevBuf<uint8_t> float_ws, int_ws;
  // Pinned host copies: the request arrays' staging and FlashInfer's host-side int workspace.
  PinnedBuf<int32_t> req_h;
  PinnedBuf<uint8_t> int_ws_h;
  std::vector<int32_t> qo_indptr_h, kv_indptr_h, last_h;
};

FiPrefill::FiPrefill() : impl_(std::make_unique<Impl>()) {}
FiPrefill::~FiPrefill() = default;

bool FiPrefill::supports_head_dim(int D) { return D == 64 || D == 128; }

void FiPrefill::plan(const int32_t* qo_indptr, const int32_t* kv_indptr, const int32_t* last_page_len, int B, int Hkv,
                     int G, int P, int D, int T, cudaStream_t s) {
  Impl& m = *impl_;
  if (B < 1 || Hkv < 1 || G < 1 || P < 1 || T < B || !qo_indptr || !kv_indptr || !last_page_len)
    raise_error("CUDA FlashInfer prefill: inconsistent plan input");
  if (!supports_head_dim(D)) raise_error("CUDA FlashInfer prefill: head_dim must be 64 or 128");
  const int R = B * Hkv;
  if (m.planned && B == m.B && Hkv == m.Hkv && G == m.G && P == m.P && D == m.D && T == m.T &&
      std::equal(qo_indptr, qo_indptr + R + 1, m.qo_indptr_h.begin()) &&
      std::equal(kv_indptr, kv_indptr + R + 1, m.kv_indptr_h.begin()) &&
      std::equal(last_page_len, last_page_len + R, m.last_h.begin()))
    return;
  // The pinned staging buffers of the previous plan may still be read by pending copies.
  check(cudaStreamSynchronize(s), "FlashInfer prefill plan");
  m.planned = false;
  m.qo_indptr_h.assign(qo_indptr, qo_indptr + R + 1);
  m.kv_indptr_h.assign(kv_indptr, kv_indptr + R + 1);
  m.last_h.assign(last_page_len, last_page_len + R);
  // FlashInfer's workspaces for this plan.
  size_t fsize = 0, isize = 0;
  cudaError_t st = cudaSuccess;
  std::string err;
  try {
    st = flashinfer::PrefillPlanWorkspaceSize<int32_t>(
        fsize, isize, m.qo_indptr_h.data(), m.kv_indptr_h.data(), static_cast<uint32_t>(Hkv) * T, R, G, 1, D, D, P,
        /*enable_cuda_graph=*/false, /*sizeof_dtype_o=*/2, /*window_left=*/-1, /*fixed_split_size=*/-1,
        /*disable_split_kv=*/false, /*num_colocated_ctas=*/0, /*uniform_q_len=*/0, s);
  } catch (const std::exception& e) {
    err = e.what();
  }
  if (!err.empty()) raise_error(("CUDA FlashInfer prefill workspace size: " + err).c_str());
  check(st, "FlashInfer prefill workspace size");
  m.float_ws.grow(std::max<size_t>(fsize, 16), "FlashInfer float workspace");
  m.int_ws.grow(std::max<size_t>(isize, 16), "FlashInfer int workspace");
  m.int_ws_h.grow(std::max<size_t>(isize, 16), "FlashInfer pinned workspace");
  try {
    st = flashinfer::PrefillPlan<int32_t>(m.float_ws.p, m.float_ws.n, m.int_ws.p, m.int_ws_h.p, m.int_ws.n, m.info,
                                          m.qo_indptr_h.data(), m.kv_indptr_h.data(), static_cast<uint32_t>(Hkv) * T, R,
                                          G, 1, D, D, P, /*enable_cuda_graph=*/false, /*sizeof_dtype_o=*/2,
                                          /*window_left=*/-1, /*fixed_split_size=*/-1, /*disable_split_kv=*/false,
                                          /*num_colocated_ctas=*/0, /*uniform_q_len=*/0, s);
  } catch (const std::exception& e) {
    err = e.what();
  }
  if (!err.empty()) raise_error(("CUDA FlashInfer prefill plan: " + err).c_str());
  check(st, "FlashInfer prefill plan");
  // Request arrays to the device (pinned staging, one copy).
  const size_t words = static_cast<size_t>(3 * R + 2);
  m.req_h.grow(words, "FlashInfer request arrays");
  int32_t* w = m.req_h.p;
  std::copy(m.qo_indptr_h.begin(), m.qo_indptr_h.end(), w);
  std::copy(m.kv_indptr_h.begin(), m.kv_indptr_h.end(), w + R + 1);
  std::copy(m.last_h.begin(), m.last_h.end(), w + 2 * (R + 1));
  m.req.grow(words, "FlashInfer request arrays");
  check(cudaMemcpyAsync(m.req.p, w, words * 4, cudaMemcpyHostToDevice, s), "FlashInfer request arrays");
  m.total_pages = m.kv_indptr_h[R];
  m.indices.grow(static_cast<size_t>(std::max<int64_t>(m.total_pages, 1)), "FlashInfer page indices");
  m.q_bf.grow(static_cast<size_t>(T) * Hkv * G * D, "FlashInfer packed queries");
  m.o_bf.grow(static_cast<size_t>(T) * Hkv * G * D, "FlashInfer packed outputs");
  m.B = B;
  m.Hkv = Hkv;
  m.G = G;
  m.P = P;
  m.D = D;
  m.T = T;
  m.planned = true;
}

void FiPrefill::run(const AttnArgs& a, cudaStream_t s) {
  Impl& m = *impl_;
  if (!m.planned) raise_error("CUDA FlashInfer prefill: run before plan");
  if (a.lse) raise_error("CUDA FlashInfer prefill: log-sum-exp rows are not produced on this path");
  if (a.D != m.D || a.Hkv != m.Hkv || a.G != m.G || a.P != m.P || a.Hq != m.Hkv * m.G)
    raise_error("CUDA FlashInfer prefill: run does not match the plan");
  const int R = m.B * m.Hkv, T = m.T, Hq = a.Hq, D = m.D;
  int32_t* qo_indptr = m.req.p;
  int32_t* kv_indptr = m.req.p + R + 1;
  int32_t* last_page_len = m.req.p + 2 * (R + 1);
  const int64_t vec = static_cast<int64_t>(T) * Hq * (D / 8);
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((vec + threads - 1) / threads);
  q_pack_k<<<blocks, threads, 0, s>>>(a.qkv, a.q_stride, T, Hq, m.G, D, m.q_bf.p);
  check_launch("FlashInfer prefill: pack queries");
  gather_pages_k<<<R, 128, 0, s>>>(a.pages, a.pt_off, kv_indptr, m.B, m.Hkv, m.indices.p);
  check_launch("FlashInfer prefill: gather page lists");

  flashinfer::paged_kv_t<bf16, int32_t> kv(
      /*num_heads=*/1, static_cast<uint32_t>(m.P), static_cast<uint32_t>(D), static_cast<uint32_t>(R),
      flashinfer::QKVLayout::kHND, reinterpret_cast<bf16*>(const_cast<uint16_t*>(a.k_pool)),
      reinterpret_cast<bf16*>(const_cast<uint16_t*>(a.v_pool)), m.indices.p, kv_indptr, last_page_len);
  Params p;
  p.q = reinterpret_cast<bf16*>(m.q_bf.p);
  p.paged_kv = kv;
  p.q_indptr = qo_indptr;
  p.o = reinterpret_cast<bf16*>(m.o_bf.p);
  p.lse = nullptr;
  p.num_qo_heads = static_cast<uint32_t>(m.G);
  p.group_size = flashinfer::uint_fastdiv(static_cast<uint32_t>(m.G));
  p.q_stride_n = m.G * D;
  p.q_stride_h = D;
  p.window_left = -1;
  p.logits_soft_cap = 0.0f;
  p.sm_scale = a.scale;
  p.rope_rcp_scale = 1.0f;
  p.rope_rcp_theta = 1.0f;
  void* ib = m.int_ws.p;
  void* fb = m.float_ws.p;
  using flashinfer::GetPtrFromBaseOffset;
  p.request_indices = GetPtrFromBaseOffset<int32_t>(ib, m.info.request_indices_offset);
  p.qo_tile_indices = GetPtrFromBaseOffset<int32_t>(ib, m.info.qo_tile_indices_offset);
  p.kv_tile_indices = GetPtrFromBaseOffset<int32_t>(ib, m.info.kv_tile_indices_offset);
  p.o_indptr = GetPtrFromBaseOffset<int32_t>(ib, m.info.o_indptr_offset);
  p.kv_chunk_size_ptr = GetPtrFromBaseOffset<int32_t>(ib, m.info.kv_chunk_size_ptr_offset);
  bf16* tmp_v = nullptr;
  float* tmp_s = nullptr;
  if (m.info.split_kv) {
    p.merge_indptr = GetPtrFromBaseOffset<int32_t>(ib, m.info.merge_indptr_offset);
    tmp_v = GetPtrFromBaseOffset<bf16>(fb, m.info.v_offset);
    tmp_s = GetPtrFromBaseOffset<float>(fb, m.info.s_offset);
  }
  p.padded_batch_size = static_cast<uint32_t>(m.info.padded_batch_size);
  p.max_total_num_rows = static_cast<uint32_t>(m.info.total_num_rows);
  p.partition_kv = m.info.split_kv;
  cudaError_t st = cudaSuccess;
  std::string err;
  try {
    const int cta = static_cast<int>(m.info.cta_tile_q);
    st = D == 64 ? dispatch_tile<64>(cta, p, tmp_v, tmp_s, s) : dispatch_tile<128>(cta, p, tmp_v, tmp_s, s);
  } catch (const std::exception& e) {
    err = e.what();
  }
  if (!err.empty()) raise_error(("CUDA FlashInfer prefill: " + err).c_str());
  check(st, "FlashInfer prefill attention");
  check_launch("FlashInfer prefill attention");
  o_unpack_k<<<blocks, threads, 0, s>>>(m.o_bf.p, T, Hq, m.G, D, a.out);
  check_launch("FlashInfer prefill: unpack outputs");
}

}  // namespace kvb::cuda
