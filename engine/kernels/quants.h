// kvb kernels — weight element types (f32, f16, bf16 and ggml's block-quantised formats), their
// reference dequantisation, per-row activation quantisation and the dot products the CPU
// forward multiplies quantised weights with, dispatched on the running CPU's features.
//
// Block formats (bytes per block / elements per block) are ggml's (ggml/src/ggml-common.h; see
// docs/architecture.md, "Quantised weights"):
//   Q4_0 18/32  {f16 d; u8 qs[16]}                 x = d·(q − 8)
//   Q4_1 20/32  {f16 d, m; u8 qs[16]}              x = d·q + m
//   Q5_0 22/32  {f16 d; u8 qh[4]; u8 qs[16]}       x = d·(q − 16), q = nibble | bit·16
//   Q5_1 24/32  {f16 d, m; u8 qh[4]; u8 qs[16]}    x = d·q + m
//   Q8_0 34/32  {f16 d; i8 qs[32]}                 x = d·q
//   Q4_K 144/256, Q5_K 176/256 {f16 d, dmin; u8 scales[12]; (u8 qh[32];) u8 qs[128]}
//                                                  x = (d·sc)·q − dmin·m per 32-element sub-block
//   Q6_K 210/256 {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}   x = (d·sc)·(q − 32)
// Activations are quantised per row the way ggml pairs them (ggml-cpu type_traits vec_dot_type):
// Q4_0/Q5_0/Q8_0 weights × Q8_0 activations, Q4_1/Q5_1 × Q8_1, K-quants × Q8_K; F32/F16/BF16
// weights multiply f32 activations directly. Unlike ggml, the activation blocks keep their scale
// in f32 (ggml stores Q8_0/Q8_1 scales as f16), which is never less accurate.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvb {

// clang-format off
/// Element type of a stored tensor. The values are ggml's type ids (ggml.h enum ggml_type), so
/// a GGUF tensor's type converts with a cast.
enum class DType : uint32_t {
  F32 = 0, F16 = 1, BF16 = 30,                       // one element per value
  Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,  // blocks of 32
  Q4_K = 12, Q5_K = 13, Q6_K = 14,                   // super-blocks of 256
};
// clang-format on

/// bf16 bits -> f32 (exact).
inline float bf16_bits_to_f32(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
/// IEEE 754 binary16 (half) bits -> f32, exact for every input (as numpy's float16 -> float32
/// cast): zeros keep their sign, subnormals are normalised, inf/NaN keep sign and payload.
/// The one half -> float conversion of the project (safetensors F16 tensors and GGUF F16 data
/// and block scales both use it).
inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: shift the mantissa up to the implicit bit, lowering the exponent
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
/// f32 -> bf16 bits, round to nearest even (as torch's .to(torch.bfloat16)); NaN stays NaN.
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t bits;
  __builtin_memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

/// Block geometry of a DType: `block` elements stored in `bytes` bytes (1 element for F32/F16/BF16).
struct DTypeTraits {
  const char* name;
  int64_t block;
  int64_t bytes;
};
/// Traits of `t`; name "?" and block 0 for a value outside the enum.
DTypeTraits dtype_traits(DType t);
/// "F32", "Q4_K", ...
inline const char* dtype_name(DType t) { return dtype_traits(t).name; }
/// True for the block-quantised types (everything but F32, F16, BF16).
bool dtype_is_quantised(DType t);
/// Bytes of `n` elements of type `t` (`n` a multiple of the block size).
inline size_t dtype_row_bytes(DType t, int64_t n) {
  const DTypeTraits tr = dtype_traits(t);
  return static_cast<size_t>(n / tr.block * tr.bytes);
}

/// Dequantises `n` elements of `t` at `data` into out[n] f32 — ggml's reference
/// dequantize_row_* with gguf-py's float32 operation order (bit-identical to gguf.quants;
/// tests/gguf). `n` must be a multiple of the block size (the caller checks).
void dequantize_row(DType t, const void* data, int64_t n, float* out);

/// Instruction sets the dot-product kernels are compiled for.
enum class Isa { kScalar, kAvx2, kAvx512Vnni };
/// "scalar", "avx2", "avx512vnni".
const char* isa_name(Isa isa);
/// The best ISA the running CPU supports (cpuid via __builtin_cpu_supports: AVX2+FMA+F16C for
/// kAvx2, additionally AVX512F/VL/BW + AVX512-VNNI for kAvx512Vnni). KVB_ISA=scalar|avx2|avx512vnni
/// in the environment lowers it (never raises it above what the CPU has).
Isa best_isa();
/// True when the running CPU can execute kernels compiled for `isa`.
bool isa_supported(Isa isa);

/// Activation row format for weights of type `w`: bytes needed for `n` f32 activations
/// (n a multiple of the weight block size). F32/F16/BF16 weights take the f32 row as is.
size_t act_row_bytes(DType w, int64_t n);
/// Quantises activations x[n] f32 into the format weights of type `w` multiply with
/// (Q8_0: {f32 d; i8 q[32]}, Q8_1: {f32 d, f32 s = d·Σq; i8 q[32]}, Q8_K: {f32 d; i8 q[256];
/// i16 bsums[16]}; d = max|x| / 127, q = round-half-away(x / d)); copies x for F32/F16/BF16.
void quantize_act_row(DType w, const float* x, int64_t n, void* out);

/// dot(w_row[n] of the weight type, activation row in act_row_bytes format) in f32.
using VecDotFn = float (*)(int64_t n, const void* w_row, const void* act_row);
/// The dot product for weights of `w` on `isa` (falls back to the best lower ISA that has one).
VecDotFn vec_dot_fn(DType w, Isa isa);
/// Four activation rows (act_row_bytes format, `act_bytes` apart) against one weight row:
/// y[t·ystride] = vec_dot_fn(w, isa)(n, w_row, act + t·act_bytes) for t < 4, bit for bit, with
/// each weight block decoded once for the four rows (batched decode).
using VecDot4Fn = void (*)(int64_t n, const void* w_row, const void* act, size_t act_bytes, float* y, int64_t ystride);
/// The four-row kernel from the same ISA build as vec_dot_fn(w, isa), or nullptr where that
/// build has none (then call the VecDotFn per row). x86 AVX2 / AVX-512 VNNI: Q4_0, Q4_1, Q5_0,
/// Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
VecDot4Fn vec_dot4_fn(DType w, Isa isa);

/// A tile of nw ≤ 16 weight rows × T activation rows (act_row_bytes format, `act_bytes` apart):
/// y[t·ystride + r] = vec_dot_fn(w, isa)(n, w_rows[r], act + t·act_bytes), bit for bit, with
/// each weight block decoded once per four activation rows and each activation block loaded
/// once per few weight rows (the register-blocked prefill GEMM of matmul_nt). Because every
/// element is the single-row kernel's, a result does not depend on T, on where the row sits in
/// the tile or on how the caller tiles (issue 38: one reduction order per output element).
using VecDotTileFn = void (*)(int64_t n, const void* const* w_rows, int nw, const void* act, size_t act_bytes,
                              int64_t T, float* y, int64_t ystride);
/// The tile kernel from the same ISA build as vec_dot_fn(w, isa), or nullptr where that build
/// has none (then call VecDot4Fn / VecDotFn per row). x86 AVX2 / AVX-512 VNNI: Q4_0, Q4_1, Q5_0,
/// Q5_1, Q8_0, Q6_K (eight activation rows per weight row with AVX-512 VNNI).
VecDotTileFn vec_dot_tile_fn(DType w, Isa isa);

/// y[t·ystride + r] = Σ_k w[r][k]·x[t·xstride + k] in f32 for nw ≤ 16 f32 weight rows w[r][in]
/// and T activation rows: the f32 weight kernel of matmul_nt at decode row counts
/// (gemm_f32_impl.inc). An element's bits do not depend on T, nw or the call's blocking
/// (16 lane sums along k, then a fixed tree), only on the ISA.
using F32TileFn = void (*)(int64_t in, const float* const* w, int nw, const float* x, int64_t T, int64_t xstride,
                           float* y, int64_t ystride);
/// The f32 tile kernel for `isa` (the best lower ISA where the CPU lacks it).
F32TileFn f32_tile_fn(Isa isa);

/// Per-ISA kernel tables (internal; defined in quants_scalar.cpp / quants_x86.cpp).
namespace kernels_detail {
VecDotFn scalar_dot(DType w);
VecDotFn avx2_dot(DType w);                 ///< nullptr where the type has no AVX2 kernel
VecDotFn avx512vnni_dot(DType w);           ///< nullptr where the type has no VNNI kernel
VecDot4Fn avx2_dot4(DType w);               ///< nullptr where the AVX2 build has no four-row kernel
VecDot4Fn avx512vnni_dot4(DType w);         ///< nullptr where the VNNI build has no four-row kernel
VecDotTileFn avx2_dot_tile(DType w);        ///< nullptr where the AVX2 build has no tile kernel
VecDotTileFn avx512vnni_dot_tile(DType w);  ///< nullptr where the VNNI build has no tile kernel
void f32_tile_scalar(int64_t, const float* const*, int, const float*, int64_t, int64_t, float*, int64_t);
void f32_tile_avx2(int64_t, const float* const*, int, const float*, int64_t, int64_t, float*, int64_t);
void f32_tile_avx512(int64_t, const float* const*, int, const float*, int64_t, int64_t, float*, int64_t);
}  // namespace kernels_detail

}  // namespace kvb
