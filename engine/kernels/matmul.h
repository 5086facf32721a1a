// kvb::Mat and matmul_nt — y = x·Wᵀ with W held as stored (f32, f16, bf16 or a ggml block
// format), on the engine's one thread pool (OpenMP).
//
// Decode (few activation rows): each activation row is quantised once to the weight type's
// partner format (quants.h), then every output row j is one dot product of W's row j with it;
// the output rows are split between the OpenMP threads (the matrix is read once per step, which
// bounds decode by memory bandwidth, as in llama.cpp's ggml_compute_forward_mul_mat).
// Prefill (many rows): OpenBLAS sgemm on 64-row tiles of W (f32 in place, other types
// dequantised) in fixed 64-row pieces of the activations; optionally the dot-product kernels over tiles of 16
// weight rows × all activation rows. OpenBLAS itself runs single-threaded
// (openblas_set_num_threads(1) on first use) so that only OpenMP's threads exist.
#pragma once

#include <cstdint>
#include <span>

#include "engine/kernels/quants.h"

namespace kvb {

/// A row-major weight matrix [rows, cols] as stored in memory. `data` points at row 0 of the
/// stored order; stored rows are `row_bytes` apart. `row_index`, when set, maps logical row r
/// to stored row row_index[r] (a GGUF file's llama Q/K rows are in llama.cpp's rotary order;
/// the index undoes it without copying). `f32` / `bf16` alias `data` when the type is F32 / BF16
/// and there is no row_index (the CUDA backend's upload reads them).
struct Mat {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  DType type = DType::F32;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  size_t row_bytes = 0;
  const int32_t* row_index = nullptr;
  explicit operator bool() const { return data != nullptr; }
  /// Stored bytes of logical row r.
  const void* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(row_index ? row_index[r] : r) * row_bytes;
  }
  /// A Mat over an f32 / bf16 array [rows, cols] (no row index).
  static Mat of_f32(const float* p, int64_t rows, int64_t cols);
  static Mat of_bf16(const uint16_t* p, int64_t rows, int64_t cols);
  /// A Mat over stored bytes of `type` ([rows, cols], cols a multiple of the block size).
  static Mat of(DType type, const void* p, int64_t rows, int64_t cols, const int32_t* row_index = nullptr);
};

/// y[T, out] = x[T, in] · W[out, in]ᵀ (+ bias[out]), row-major f32 x and y, for a weight held as
/// stored (w.rows == out, w.cols == in). Accumulation is f32;
/// quantised weights multiply activations quantised per row to 8 bits (quants.h), so the result
/// differs from the dequantised f32 product by the activation rounding (tests/kernels state the
/// bounds). Kernels: vec_dot_fn(w.type, best_isa()); f32 weights below 64 rows: f32_tile_fn
/// (no activation rounding; an element's bits independent of T), from 64 rows on sgemm on
/// 64-row weight tiles. From 32 rows on, weights that are not f32
/// are dequantised in 64-row tiles and multiplied with sgemm (f32 activations, no activation
/// rounding; measured faster than the dot-product tiles on a 2-core Zen 4: 60 vs 38 prefill
/// tokens/s on the default model); KVB_PREFILL_GEMM=dot selects the dot-product tiles instead.
/// Every sgemm call multiplies exactly 64 activation rows (the last piece zero-padded) with one
/// weight tile, so on the sgemm path a row's bits depend only on its values and W, never on T,
/// on where the row sits in x, or on the thread count (issue 33: OpenBLAS picks its blocking
/// from the call shape, and some CPUs gave a row different bits at different T).
void matmul_nt(const float* x, const Mat& w, const float* bias, float* y, int64_t T, int64_t in, int64_t out);

/// One product of matmul_nt_many: y[T, w.rows] = x · Wᵀ (+ bias).
struct MatmulOut {
  const Mat* w;
  const float* bias;  ///< [w.rows] or nullptr
  float* y;           ///< [T, w.rows]
};

/// matmul_nt of the same activations x[T, in] with several weights (a layer's Q, K, V; its gate
/// and up projections), each output exactly as matmul_nt gives it, in one parallel region: the
/// activations are quantised once per weight type and one team of threads shares the weight
/// rows of all products (batch-1 decode of a 135M model runs 30 layers × 7 products, where each
/// fork/join and activation quantisation costs as much as a small product). Prefill shapes
/// (matmul_uses_sgemm) run matmul_nt per product.
void matmul_nt_many(const float* x, int64_t T, int64_t in, std::span<const MatmulOut> outs);

/// True when matmul_nt(…, w, …, T, …) multiplies f32 activations with dequantised (or f32)
/// weight tiles through sgemm rather than quantising the activations (T rows).
bool matmul_uses_sgemm(const Mat& w, int64_t T);

}  // namespace kvb
