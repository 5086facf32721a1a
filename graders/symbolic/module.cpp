// libkvbench_symbolic.so: the C entry points of graders/symbolic/symbolic_abi.h over the GiNaC
// implementation (graders/symbolic/ginac_symbolic.h). Built as a CMake MODULE next to the
// kvbench binary (graders/CMakeLists.txt); these two functions are its only exported symbols.
#include <algorithm>
#include <cstring>
#include <string>

#include "graders/symbolic/ginac_symbolic.h"
#include "graders/symbolic/symbolic_abi.h"

#define KVB_EXPORT extern "C" __attribute__((visibility("default")))

KVB_EXPORT int kvb_symbolic_abi_version(void) { return KVB_SYMBOLIC_ABI_VERSION; }

KVB_EXPORT int kvb_symbolic_compare(const char* pred, size_t pred_len, const char* gold, size_t gold_len,
                                    double rel_tol, char* reason, size_t reason_cap) {
  using kvb::graders::SymbolicStatus;
  int status = static_cast<int>(SymbolicStatus::kError);
  std::string why;
  const char* failed = nullptr;
  try {
    const kvb::graders::SymbolicResult r = kvb::graders::symbolic_equivalent_in_process(
        std::string(pred ? pred : "", pred ? pred_len : 0), std::string(gold ? gold : "", gold ? gold_len : 0), rel_tol);
    status = static_cast<int>(r.status);
    why = r.reason;
  } catch (...) {  // bad_alloc while copying; nothing may cross the C interface
    failed = "symbolic error: out of memory";
  }
  if (reason_cap > 0) {
    const char* text = failed ? failed : why.c_str();
    const size_t n = std::min(failed ? std::strlen(failed) : why.size(), reason_cap - 1);
    std::memcpy(reason, text, n);
    reason[n] = '\0';
  }
  return status;
}
