// LongProc's six evaluators (princeton-pli/LongProc `longproc/*.py`; paper arXiv 2501.05414).
//
// Algorithms: docs/benchmarks.md#longproc. Each function grades one model
// output and returns the reference's metrics plus what the harness stores (extracted answer,
// normalised form, one-line reason). Headline score per task: html_to_tsv → F1, all others →
// accuracy (0/1); `partial` is LongProc's partial_accuracy (reported in the reason).
// Reference behaviours kept on purpose: tag extraction takes the FIRST <tag> and the FIRST
// </tag>; html_to_tsv's pandas frame comparison is positional and a column-count mismatch
// zeroes every metric. Where the reference would crash (countdown: eval() raising anything but
// ValueError, or an unknown ground-truth trace line) the output is graded 0 with that reason.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvb::graders {

/// One LongProc verdict.
struct LongProcResult {
  double accuracy = 0.0;         ///< html_to_tsv: F1; others: 1 iff fully correct
  double partial = 0.0;          ///< partial_accuracy (html_to_tsv: recall), in [0, 1]
  double precision = 0.0;        ///< html_to_tsv only
  double recall = 0.0;           ///< html_to_tsv only
  double extraction_rate = 0.0;  ///< 1 when the answer section was found (and parsed)
  std::string extracted;         ///< the answer section pulled out of the output
  std::string normalized;        ///< its normalised / parsed form
  std::string reason;            ///< one line
};

/// `_extract_with_tag`: text between the first "<tag>" and the first "</tag>", stripped;
/// false when either is missing.
bool longproc_extract_tag(std::string_view response, std::string_view tag, std::string& out);

/// html_to_tsv: the ```tsv block (greedy to the last ```), parsed by Python's csv.reader
/// (tab, quote '"') into rows; header = row 0; a short/long last row is dropped, other bad rows
/// become all "N/A"; cells normalised (lowercase, no ASCII punctuation, no articles, no
/// whitespace). Precision/recall = fraction of pred/gt rows equal (positionally) to some row of
/// the other table; F1 = 2PR/(P+R). Parse failure, empty table or different column counts → 0.
LongProcResult longproc_html_to_tsv(std::string_view prediction, std::string_view gold_tsv);

/// path_traversal: <Route> content vs the gold route; exact → 1; else partial =
/// (first mismatching line index + 1) / #gold lines (min(len)/#gold if one is a prefix).
LongProcResult longproc_path_traversal(std::string_view prediction, std::string_view gold_route);

/// tom_tracking (`rmodels` evaluator): lines starting (after strip) with '-' of both texts;
/// from the last "- Step 0:" on, lines matching `^- Step \d+:` are normalised (lowercase, no
/// punctuation/’, function words removed). Accuracy 1 iff the lists are equal; partial = first
/// mismatch / #gold, or min(len)/#gold.
LongProcResult longproc_tom_tracking(std::string_view prediction, std::string_view gold_solution);

/// countdown: the <Solution> must be 3 lines "a op b = c" using the numbers of `nums` (each
/// once, results added back) and end at `target`. Otherwise partial accuracy compares the
/// output's "# Search Procedure" with the gold DFS trace `gold_demonstration` (the reference
/// output): same first line, identical "Pick two numbers" lines, "|- Try" lines equal up to '='
/// with the same drop decision; partial = index of the first divergence / #gold lines.
LongProcResult longproc_countdown(std::string_view prediction, const std::vector<int64_t>& nums, int64_t target,
                                  std::string_view gold_demonstration);

/// travel_planning: <Plan> parsed with NATURAL-PLAN's _parse_response into (city, days) stays;
/// accuracy 1 iff every gold stay (`cities`/`durations`, "**"-separated) matches in order.
/// Otherwise partial: the normalised gold <Solving Procedure> lines must each be contained in
/// the corresponding output line; partial = index of the first failure / #gold lines.
/// Throws kvb::Error when `durations` holds a non-integer.
LongProcResult longproc_travel_planning(std::string_view prediction, std::string_view cities,
                                        std::string_view durations, std::string_view gold_procedure);

/// Limits of the pseudo_to_code sandbox.
struct CodeSandboxLimits {
  double run_seconds = 3.0;              ///< wall-clock limit per test case (LongProc: 3 s)
  double compile_seconds = 120.0;        ///< wall-clock limit for g++
  uint64_t memory_bytes = 512ull << 20;  ///< RLIMIT_AS of the program
  uint64_t file_bytes = 16ull << 20;     ///< RLIMIT_FSIZE (files the program writes)
  uint64_t output_bytes = 16ull << 20;   ///< stdout captured at most (more → failure)
  unsigned max_processes = 16;           ///< RLIMIT_NPROC (for root: after dropping to 'nobody')
  size_t max_cases = 10;                 ///< LongProc runs the first 10 test cases
  std::string compiler = "g++";          ///< found on PATH
};

/// pseudo_to_code: replace ```c++ by ```cpp, take the greedy ```cpp block, prepend LongProc's
/// header (18 #includes + `using namespace std;`), compile with `g++ -std=c++11 -O` and run
/// the first `max_cases` test cases (`testcases` = [[input_lines], [output_lines]] pairs) in a
/// sandboxed child: own temp dir, rlimits (CPU, address space, file size, processes), no
/// inherited fds, own process group killed at the wall-clock limit; stdin = inputs joined by
/// '\n' plus '\n'; stdout must equal the outputs joined the same way, byte for byte (the exit
/// status is ignored; a wall-clock timeout fails). Accuracy 1
/// iff all pass (LongProc stops at the first failure; the reason names it). Throws kvb::Error
/// for malformed `testcases` or when the sandbox itself cannot be set up (no temp dir, no fork).
LongProcResult longproc_pseudo_to_code(std::string_view prediction, const nlohmann::json& testcases,
                                       const CodeSandboxLimits& limits = {});

/// The C++ code LongProc would compile from `prediction` (header + block), false when no
/// ```cpp block is found.
bool longproc_extract_cpp(std::string_view prediction, std::string& code);

}  // namespace kvb::graders
