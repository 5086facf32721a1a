// The AVX-512 build of attention_impl.inc (512-bit vectors; this file alone gets -mavx512f/vl,
// see engine/CMakeLists.txt). Called only when best_isa() is kAvx512Vnni, which implies them.
#if defined(__x86_64__)
#define KVB_ATTN_FN attend_rows_avx512
#include "engine/kernels/attention_impl.inc"
#endif
