// Structural + symbolic equivalence of two normalised LaTeX answers, with GiNaC.
//
// GiNaC (with CLN and GMP, ~3 MB resident) lives in a module, libkvbench_symbolic.so
// (graders/symbolic/), that the first comparison loads with dlopen (graders/math_symbolic.cpp),
// so a process that grades no math answer symbolically never maps it (docs/architecture.md,
// "Memory"). It is looked for at $KVB_SYMBOLIC_LIB when set, else next to the executable, else
// in the build directory.
//
// The LaTeX subset (graders/math_symbolic.cpp): numbers (exact rationals), single-letter
// variables (implicit multiplication; i = imaginary unit, e = Euler's number), \frac/\dfrac,
// \sqrt[n]{}, ^, _ (a_1 names; 204_5 = a number in base 5), !, \pi, \infty, \cdot, \times, \div,
// |x|, trig/log functions, Greek letters, \text{} names, mixed numbers (1\frac{4}{5} = 9/5),
// \pm (a two-element set); and structures: tuples / intervals ( (a,b], [a,b) ), unions
// (\cup), sets ({a,b} and bare comma lists, order-insensitive), matrices (pmatrix, rows "\\",
// cells "&"), equations (a=b). Source: Qwen2.5-Math `math_equal` (docs/benchmarks.md, Math),
// matched against Math-Verify's structural rules (§5.7).
#pragma once

#include <string>

namespace kvb::graders {

/// Outcome kind of a symbolic check.
enum class SymbolicStatus { kEqual, kNotEqual, kUnparsable, kTimeout, kError };

/// Outcome of a symbolic check, with a one-line reason.
struct SymbolicResult {
  SymbolicStatus status = SymbolicStatus::kNotEqual;
  std::string reason;
};

/// Compares `pred` with `gold` (normalised strings) in the calling process, no time limit.
/// Expressions are equal when (a−b) expands/normalises to 0, or, failing that, when numeric
/// evaluation agrees: closed forms with relative tolerance `rel_tol`; with free variables, at
/// three fixed pseudo-random points with relative tolerance 1e-9. Bad or unparsable input gives
/// a status, never an exception; raises Error(kRuntime) (one line naming the paths tried) only
/// when the module cannot be loaded.
SymbolicResult symbolic_equivalent(const std::string& pred, const std::string& gold, double rel_tol);

/// As symbolic_equivalent, but in a forked child process killed after `time_limit_s` seconds of
/// wall clock (result kTimeout, reason "timeout after X s"). A child that crashes gives kError.
/// The module is loaded in the calling process before the fork (same Error when it cannot be).
SymbolicResult symbolic_equivalent_limited(const std::string& pred, const std::string& gold, double time_limit_s,
                                           double rel_tol);

/// A comparison with symbolic_equivalent's contract, run in the calling process.
using SymbolicFn = SymbolicResult (*)(const std::string& pred, const std::string& gold, double rel_tol);

/// Makes every later check call `fn` instead of the module (nullptr: the module again). For a
/// binary that links the GiNaC implementation itself (kvbench_symbolic_impl:
/// symbolic_equivalent_in_process, graders/symbolic/ginac_symbolic.h): the fuzz target
/// fuzz_math_answer, so that libFuzzer instruments the parser. Thread-safe.
void set_symbolic_implementation(SymbolicFn fn);

}  // namespace kvb::graders
