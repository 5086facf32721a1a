// The AVX-512 VNNI build of quants_x86.inc (256-bit vpdpbusd via AVX512VL; this file alone gets
// -mavx512f/vl/bw/vnni, see engine/CMakeLists.txt). Called only when best_isa() finds them.
#if defined(__x86_64__)
#define KVB_VNNI 1
#include "engine/kernels/quants_x86.inc"
#define KVB_F32_TILE_FN f32_tile_avx512
#include "engine/kernels/gemm_f32_impl.inc"
#endif
