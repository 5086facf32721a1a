// kvb::Mat and matmul_nt — y = x·Wᵀ with W held as stored (f32, f16, bf16 or a ggml block
// format), on the engine's one thread pool (OpenMP).
//
// Every row count takes the same kernels (issue 38, "one reduction order per output element"):
// each activation row is quantised once to the weight type's partner format (quants.h; f32
// rows as they are for f32/f16/bf16 weights), then every output element y[t, j] is exactly one
// vec_dot of W's row j with row t — computed by the register-blocked tile kernels at prefill row
// counts (VecDotTileFn: NW weight rows × 4 activation rows; f32 weights: F32TileFn) and by the
// single-row or four-row kernels at decode row counts, all bit-identical per element. So a
// row's bits depend only on its own values, W and the ISA: never on how many rows share the call
// (prefill chunk, batch, MLP pieces), on the row's place in it, or on the thread count. This is
// the batch-invariant construction of "Defeating Nondeterminism in LLM Inference" (Thinking
// Machines, 2025) and vLLM's batch-invariant mode, on the CPU. No BLAS library is used: a BLAS
// chooses its blocking and edge kernels from the call shape (OpenBLAS 0.3.21 gave a row other
// bits at other row counts on AMD EPYC, issue 38). Output rows of W are split between the OpenMP
// threads in 16-row tiles; decode reads W once per step, bounded by memory bandwidth, as in
// llama.cpp's ggml_compute_forward_mul_mat.
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
/// stored (w.rows == out, w.cols == in). Accumulation is f32; quantised weights multiply
/// activations quantised per row to 8 bits (quants.h), so the result differs from the
/// dequantised f32 product by the activation rounding (tests/kernels state the bounds). Every
/// element is vec_dot_fn(w.type, best_isa()) of its two rows (F32TileFn for f32 weights), bit for
/// bit, whatever T, the row's place and the thread count (tests/kernels:
/// MatmulRowsHaveOneReductionOrderWhateverTheCall).
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
/// fork/join and activation quantisation costs as much as a small product).
void matmul_nt_many(const float* x, int64_t T, int64_t in, std::span<const MatmulOut> outs);

}  // namespace kvb
