// The grading step `kvbench run` and `kvbench grade` share: rule-based graders one prediction at
// a time, LLM-judge graders (LongMemEval) in one concurrent batch through a Judge whose verdicts
// are cached in the results DB. Also builds judges from `--judge openai:MODEL|local:MODEL`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "graders/judge.h"
#include "results/store.h"
#include "tasks/task.h"

namespace kvb::cli {

/// The `--judge*` options of `run` and `grade`.
struct JudgeArgs {
  std::string spec;  ///< "" (no judge), "openai:MODEL" or "local:MODEL"
  graders::JudgeOptions opts;
};

/// Adds --judge, --judge-concurrency, --judge-timeout, --judge-retries, --judge-backoff to `c`.
void add_judge_options(CLI::App* c, JudgeArgs& a);

/// A judge for `a.spec`, or null when it is empty. openai: OPENAI_BASE_URL / OPENAI_API_KEY from
/// the environment (graders::OpenAIJudge); local: the model loaded by harness/model_source on
/// kvbench's engine (greedy, a.opts.max_tokens new tokens, chat template when the model has
/// one). Throws kvb::Error on a bad spec or a model that does not load.
std::unique_ptr<graders::Judge> make_judge(const JudgeArgs& a);

/// A local judge on kvbench's own engine: `model` as harness/model_source accepts it. Each
/// prompt is one user message through the model's chat template with enable_thinking=false (raw
/// text with BOS when it has none), decoded greedily with the full KV cache for at most opts.max_tokens tokens, opts.concurrency sequences at
/// once. A prompt longer than the model's context fails that request (reported, not thrown).
std::unique_ptr<graders::Judge> make_local_judge(const std::string& model, const graders::JudgeOptions& opts);

/// One stored or fresh generation to grade.
struct GradeJob {
  std::string item_key;
  const tasks::Example* ex = nullptr;
  std::string text;                     ///< the (first) turn's output
  std::vector<std::string> turn_texts;  ///< outputs of ex->followups, in order (multi-turn only)
};

/// Grades every job: rule-based graders through graders::grade (a grader error becomes an
/// ungraded row naming it); judge graders together through `judge` with the verdict cache in
/// `store` (without a judge they are stored ungraded, "needs an LLM judge"). A failed judgment
/// is an ungraded row with the request's error as reason. Results are in job order; the grader
/// column records the judge (e.g. "judge_longmemeval:openai:gpt-4o-2024-08-06").
std::vector<results::GradeRecord> grade_jobs(const std::vector<GradeJob>& jobs, graders::Judge* judge,
                                             results::Store& store);

}  // namespace kvb::cli
