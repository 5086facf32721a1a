// The plain C interface of the symbolic math module (libkvbench_symbolic.so), which holds the
// GiNaC implementation (graders/symbolic/ginac_symbolic.cpp) so that kvbench maps GiNaC, CLN and
// GMP (~3 MB resident) only when a math answer needs a symbolic comparison. The module is loaded
// with dlopen at the first such comparison by graders/math_symbolic.cpp (docs/architecture.md,
// "Memory"). Plain C types only, and no exception crosses it, so the loader and the module agree
// on nothing but this header.
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Bumped when the signature or the meaning of kvb_symbolic_compare changes; the loader refuses
/// a module reporting another version.
#define KVB_SYMBOLIC_ABI_VERSION 1

/// Returns the module's KVB_SYMBOLIC_ABI_VERSION.
int kvb_symbolic_abi_version(void);

/// Compares `pred` with `gold` (normalised answers: UTF-8 bytes, lengths in bytes, not
/// NUL-terminated) as kvb::graders::symbolic_equivalent does (graders/math_symbolic.h), in the
/// calling process with no time limit. Returns the status, the value of kvb::graders::
/// SymbolicStatus (0 equal, 1 not equal, 2 unparsable, 3 timeout (never returned here), 4
/// error), and writes the one-line reason to `reason`: NUL-terminated, cut to `reason_cap` - 1
/// bytes (nothing written when `reason_cap` is 0). Never throws, never aborts on bad input.
int kvb_symbolic_compare(const char* pred, size_t pred_len, const char* gold, size_t gold_len, double rel_tol,
                         char* reason, size_t reason_cap);

/// The type of kvb_symbolic_compare (the loader's dlsym result).
typedef int (*kvb_symbolic_compare_fn)(const char*, size_t, const char*, size_t, double, char*, size_t);

#ifdef __cplusplus
}
#endif
