// The GiNaC implementation of the symbolic math check, in the calling process. Linked into the
// symbolic module (graders/symbolic/module.cpp, libkvbench_symbolic.so) and, directly, into the
// fuzz target fuzz_math_answer (so libFuzzer instruments the parser); everything else reaches it
// through graders/math_symbolic.h, which loads the module at the first use.
#pragma once

#include <string>

#include "graders/math_symbolic.h"

namespace kvb::graders {

/// The comparison of symbolic_equivalent (graders/math_symbolic.h: the LaTeX subset, the
/// equality rules, `rel_tol`), with GiNaC in the calling process and no time limit. Never
/// throws: parse failures give kUnparsable, GiNaC's exceptions kError.
SymbolicResult symbolic_equivalent_in_process(const std::string& pred, const std::string& gold, double rel_tol);

}  // namespace kvb::graders
