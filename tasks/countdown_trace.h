// LongProc countdown: the verbalized depth-first search trace that the reference prompt uses
// as its demonstration and the reference output (princeton-pli/LongProc
// longproc/countdown_evaluator.py, build_countdown_demonstration; docs/benchmarks.md, LongProc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvb::tasks {

/// Result of the search: the three equations of the solution ("a + b = c", larger operand
/// first) and the demonstration text ("# Search Procedure\n<log>\n\n<solution block>").
struct CountdownTrace {
  std::vector<std::string> solution;
  std::string search_log;     ///< the DFS log alone (starts "Initial number set: ...")
  std::string demonstration;  ///< the full text used in prompts and as reference output
};

/// Runs the reference DFS on `nums` (four positive integers) for `target`: pairs (i<j) in
/// order, operations +, -, *, / with the larger operand first; intermediate results must be
/// integers below 2000. Throws kvb::Error when no solution exists.
CountdownTrace countdown_trace(const std::vector<int64_t>& nums, int64_t target);

}  // namespace kvb::tasks
