// The AVX2 + FMA build of attention_impl.inc (this file alone gets those flags; see
// engine/CMakeLists.txt). Called only when best_isa() finds them on the running CPU.
#if defined(__x86_64__)
#define KVB_ATTN_FN attend_rows_avx2
#include "engine/kernels/attention_impl.inc"
#endif
