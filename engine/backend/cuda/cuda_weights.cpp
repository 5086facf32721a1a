// CudaBackend's weights on the device (cuda_impl.h DevWeights): every matrix as bf16 (f32 rounded
// to nearest even, stored blocks dequantised), the QKV and gate|up projections fused, norms and
// biases as f32.
#include <algorithm>
#include <cstring>

#include "engine/backend/cuda/cuda_impl.h"
#include "engine/model/weights.h"
#include "engine/util/error.h"

namespace kvb {

using cuda::check;
using cuda::DevBuf;
using cuda::DevLayer;

namespace {

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

}  // namespace

void CudaBackend::Impl::up_vec(DevBuf<float>& b, const float* src, size_t n, const char* what) {
  b.upload(src, n, stream, what);
  wts.bytes += n * 4;
}

void CudaBackend::Impl::up_mat(DevBuf<uint16_t>& b, const std::vector<uint16_t>& v, const char* what) {
  b.upload(v, stream, what);
  check(cudaStreamSynchronize(stream), what);  // v is freed by the caller
  wts.bytes += v.size() * 2;
}

void CudaBackend::Impl::upload_weights() {
  const int64_t HqD = static_cast<int64_t>(Hq) * D, HkvD = static_cast<int64_t>(Hkv) * D;
  wts.layers.resize(L);
  for (int l = 0; l < L; ++l) {
    const LayerWeights& w = m.layers()[l];
    DevLayer& d = wts.layers[l];
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
  up_mat(wts.embed, as_bf16(m.embed(), V, H), "upload embed");
  const bool tied = m.lm_head().data && m.lm_head().data == m.embed().data;
  if (tied) {
    wts.lm_head = wts.embed.p;
  } else {
    up_mat(wts.lm_head_own, as_bf16(m.lm_head(), V, H), "upload lm_head");
    wts.lm_head = wts.lm_head_own.p;
  }
  up_vec(wts.final_norm, m.final_norm(), H, "upload final norm");
  up_vec(wts.inv_freq, m.inv_freq().data(), m.inv_freq().size(), "upload inv_freq");
  check(cudaStreamSynchronize(stream), "upload weights");
  // A decode step reads every weight once except the embedding table (a gather of B rows); a
  // tied LM head reads the table in full.
  const size_t table = static_cast<size_t>(V) * H * 2;
  wts.step_bytes = wts.bytes - table + (tied ? table : 0);
}

}  // namespace kvb
