// 16 f32 lanes as a GCC vector, for kernels that are one source compiled per ISA
// (attention_impl.inc, gemm_f32_impl.inc): one zmm in the AVX-512 builds, two ymm / four xmm in
// the others. Everything here is always inlined, so no vector crosses a call; -Wpsabi (about
// such calls' ABI) is off for the including file, as GCC reports it at the end of the
// translation unit, past any diagnostic pop.
#pragma once

#include <cstddef>
#include <cstring>

#pragma GCC diagnostic ignored "-Wpsabi"

namespace kvb::kernels_detail::vec16 {

typedef float V16 __attribute__((vector_size(64)));
typedef float V16u __attribute__((vector_size(64), aligned(4)));  ///< loads from any float address
typedef int I16 __attribute__((vector_size(64)));

#define KVB_VEC16_INL static inline __attribute__((always_inline))
/// p[0..16) (unaligned).
KVB_VEC16_INL V16 ld16(const float* p) { return *reinterpret_cast<const V16u*>(p); }
/// p[0..m), m < 16, zero-padded.
KVB_VEC16_INL V16 ld16_tail(const float* p, int m) {
  float b[16] = {};
  std::memcpy(b, p, sizeof(float) * static_cast<size_t>(m));
  return ld16(b);
}
KVB_VEC16_INL void st16(float* p, V16 v) { *reinterpret_cast<V16u*>(p) = v; }
/// Σ lanes in a fixed tree: upper half onto lower (8 + 8), then 4 + 4, 2 + 2, 1 + 1.
/// (__builtin_shufflevector: GCC >= 12 and clang, which the fuzz build uses.)
KVB_VEC16_INL float hsum16(V16 v) {
  v += __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3);
  v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1);
  v += __builtin_shufflevector(v, v, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0);
  return v[0];
}
#undef KVB_VEC16_INL

}  // namespace kvb::kernels_detail::vec16
