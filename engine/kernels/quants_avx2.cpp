// The AVX2 + FMA + F16C build of quants_x86.inc (this file alone gets those flags; see
// engine/CMakeLists.txt). Called only when best_isa() finds them on the running CPU.
#if defined(__x86_64__)
#define KVB_VNNI 0
#include "engine/kernels/quants_x86.inc"
#define KVB_F32_TILE_FN f32_tile_avx2
#include "engine/kernels/gemm_f32_impl.inc"
#endif
