// kvb::graders — LongMemEval's LLM-judge grading: its five judge templates (verbatim), the
// yes/no verdict rule, and batch judging with a verdict cache in the results database.
//
// Source: xiaowu0162/LongMemEval @9e0b455 src/evaluation/evaluate_qa.py, as quoted in
// docs/benchmarks.md#longmemeval: one user message, temperature 0, max_tokens 10,
// n = 1; the template is chosen by question type (an `_abs` question id overrides the type) and
// filled with (question, answer, response) by Python's str.format; label = 'yes' in
// reply.strip().lower().
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "graders/grade.h"
#include "graders/judge.h"

namespace kvb::results {
class Store;
}

namespace kvb::graders {

/// The registry name of LongMemEval's judge grader (tasks/longmemeval.cpp binds it).
inline constexpr const char* kLongMemEvalJudgeGrader = "judge_longmemeval";

/// True for graders that need an LLM judge (graded in batches through a Judge, not by grade()).
bool is_judge_grader(std::string_view name);

/// LongMemEval's judge templates.
enum class LmeTemplate {
  kDefault,            ///< single-session-user, single-session-assistant, multi-session
  kTemporalReasoning,  ///< default + "do not penalize off-by-one errors" sentence
  kKnowledgeUpdate,    ///< updated answer counts
  kPreference,         ///< single-session-preference: a rubric instead of an answer
  kAbstention,         ///< any `_abs` question, whatever its type
};

/// "default", "temporal-reasoning", "knowledge-update", "single-session-preference", "abstention".
const char* lme_template_name(LmeTemplate t);

/// The template text with its three "{}" placeholders (question, answer, response), verbatim.
const std::string& lme_template_text(LmeTemplate t);

/// The template for a question: kAbstention when `abstention`, else by `question_type`.
/// Throws kvb::Error naming the type when it is none of LongMemEval's six.
LmeTemplate lme_template_for(std::string_view question_type, bool abstention);

/// Python's template.format(question, answer, response): each "{}" of the template replaced in
/// order; the inserted values are not re-scanned (braces in them stay as they are).
std::string lme_judge_prompt(LmeTemplate t, std::string_view question, std::string_view answer,
                             std::string_view response);

/// LongMemEval's verdict: 'yes' in reply.strip().lower(). (Lower-casing ASCII is exact here: no
/// non-ASCII character lower-cases to 'y', 'e' or 's'.)
bool lme_verdict(std::string_view reply);

/// One prediction to judge.
struct LmeJob {
  std::string question_type;
  bool abstention = false;
  std::string question;
  std::string answer;      ///< the gold answer (a rubric for preference, an explanation for _abs)
  std::string prediction;  ///< the model's response, as generated
};

/// Builds a job from what tasks/longmemeval.cpp stores: references[0] is the answer; `meta` has
/// string "question_type", string "question" and boolean "abstention". Throws kvb::Error naming
/// the missing or mistyped field.
LmeJob lme_job(std::string_view prediction, const std::vector<std::string>& references, const nlohmann::json& meta);

/// The verdict-cache key: SHA-256 hex of the compact JSON {"judge": judge_id, "template":
/// template text, "question", "answer", "prediction"} — any change of judge model, template or
/// content misses the cache.
std::string lme_judge_key(const std::string& judge_id, const LmeJob& job);

/// A judged prediction.
struct JudgedGrade {
  /// score 1 (yes) / 0 (no); extracted = the judge's reply (trimmed); pred_norm = the
  /// prediction (trimmed); gold_norm = the answer; reason names judge, template, verdict and
  /// whether it came from the cache. On failure: ungraded = true, reason = the request's error.
  Grade grade;
  std::optional<std::string> judge_key;  ///< set for verdicts (cached or new), not for failures
  bool cache_hit = false;
  int attempts = 0;  ///< HTTP requests made for it (0 on a cache hit)
};

/// Judges every job: verdicts found in `cache` (judge_cache table; may be null) are reused
/// without a request; identical jobs are asked once; new verdicts are written to `cache`
/// (failures never are). Returns one JudgedGrade per job, in order. Throws only on database
/// errors.
std::vector<JudgedGrade> judge_longmemeval(Judge& judge, results::Store* cache, const std::vector<LmeJob>& jobs);

}  // namespace kvb::graders
