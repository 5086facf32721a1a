// kvb::graders — the result of grading one model answer, and the registry of graders by name.
//
// Every benchmark binds a grader by name (tasks/), the harness calls
//   grade(name, prediction, references, example_metadata) -> Grade
// and stores the whole Grade (not just the score) so any verdict can be audited later
// (`kvbench check-answer`). Algorithms follow docs/benchmarks.md (grading, per benchmark).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvb::graders {

/// The outcome of grading one prediction against its reference(s).
struct Grade {
  /// Score in [0, 1] (accuracy graders give 0 or 1; F1 / ROUGE / edit-similarity give a
  /// fraction). Meaningless when `ungraded` is true (kept at 0).
  double score = 0.0;
  /// The answer the grader pulled out of the model output (e.g. the last \boxed{} content).
  std::string extracted;
  /// The normalised prediction and the normalised gold it was compared with (the best-scoring
  /// reference when there are several).
  std::string pred_norm;
  std::string gold_norm;
  /// One line saying why: "exact match", "numeric 0.5 == 1/2 (rel tol 1e-4)", "timeout", ...
  std::string reason;
  /// True when no verdict could be made (judge unreachable, malformed judge reply). An
  /// ungraded result is never a verdict: it is stored as such and regraded later.
  bool ungraded = false;
};

/// A grader: (prediction, references, example metadata JSON) -> Grade. References are the
/// gold answers (at least one); `meta` carries per-example extras (e.g. LongBench's
/// all_classes, LongProc's test cases); it may be null. Throws kvb::Error on malformed
/// references or metadata (e.g. a missing required field), never on a malformed prediction.
using GraderFn =
    std::function<Grade(std::string_view prediction, const std::vector<std::string>& references, const nlohmann::json& meta)>;

/// Registered grader description.
struct GraderInfo {
  std::string name;         ///< registry key, e.g. "math", "longbench.qa_f1"
  std::string description;  ///< one line for `kvbench check-answer --list`
  GraderFn fn;
};

/// All built-in graders, sorted by name.
const std::vector<GraderInfo>& all_graders();

/// The grader called `name`, or nullptr when there is none.
const GraderInfo* find_grader(std::string_view name);

/// Grades with the grader called `name`. Throws kvb::Error naming the unknown grader (and
/// listing the known ones), or when `references` is empty.
Grade grade(std::string_view name, std::string_view prediction, const std::vector<std::string>& references,
            const nlohmann::json& meta = nullptr);

namespace detail {
/// The one registration mechanism: each grader module defines one function that appends its
/// graders to the registry, and graders/grade.cpp calls every function listed here, once.
/// Internal to the registry.
void register_math_graders(std::vector<GraderInfo>& v);  ///< math, aime, gsm8k (graders/math.cpp)
void register_longbench_graders(std::vector<GraderInfo>& v);  ///< longbench.*, longbench_v2.* (graders/longbench_registry.cpp)
void register_longproc_graders(std::vector<GraderInfo>& v);  ///< longproc_* (graders/longproc_registry.cpp)
void register_scbench_graders(std::vector<GraderInfo>& v);   ///< scbench_* (graders/scbench.cpp)
void register_judge_graders(std::vector<GraderInfo>& v);     ///< judge_longmemeval (graders/judge_longmemeval.cpp)

/// The best grade over several references: `one` grades against each; the highest score wins,
/// the first of equal scores (LongBench eval.py's max over answers).
Grade best_of_references(const std::vector<std::string>& refs, const std::function<Grade(const std::string&)>& one);
}  // namespace detail

}  // namespace kvb::graders
