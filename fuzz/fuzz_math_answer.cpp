// The math grader's answer extraction and equivalence (graders/grade.h, "math"): the input is
// "PREDICTION\0GOLD" (no NUL: the whole input is the prediction, gold "1/2"). The GiNaC code is
// linked in (kvbench_symbolic_impl) and registered in place of the module kvbench loads with
// dlopen (graders/math_symbolic.h), so it is built with the fuzzer's instrumentation.
#include <cstring>

#include "fuzz/fuzz_support.h"
#include "graders/grade.h"
#include "graders/math_symbolic.h"
#include "graders/symbolic/ginac_symbolic.h"

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  kvb::graders::set_symbolic_implementation(&kvb::graders::symbolic_equivalent_in_process);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;  // answers are short; GiNaC's cost grows with expression size
  const std::string_view in = kvb::fuzz::as_text(data, size);
  const size_t nul = in.find('\0');
  const std::string pred(in.substr(0, nul));
  const std::string gold = nul == std::string_view::npos ? "1/2" : std::string(in.substr(nul + 1));
  return kvb::fuzz::expect_ok_or_error([&] {
    if (gold.empty()) return;
    (void)kvb::graders::grade("math", pred, {gold});
  });
}
