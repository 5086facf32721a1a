// The shared grading step of `kvbench run` / `kvbench grade` and `--judge` construction.
// See harness/judge_grading.h.
#include "harness/cli_checks.h"
#include "harness/judge_grading.h"

#include <deque>

#include <fmt/format.h>

#include "engine/util/error.h"
#include "graders/grade.h"
#include "graders/judge_longmemeval.h"

namespace kvb::cli {

void add_judge_options(CLI::App* c, JudgeArgs& a) {
  c->add_option("--judge", a.spec,
                "LLM judge for judge-graded tasks (LongMemEval): openai:MODEL (OPENAI_BASE_URL, OPENAI_API_KEY "
                "from the environment) or local:MODEL (a model kvbench loads)");
  // Upper bounds too: each request in flight is a thread (a million would fail to start long
  // after the generations), and a timeout or backoff of 1e300 s is a hang, not a setting.
  c->add_option("--judge-concurrency", a.opts.concurrency, "Judge requests in flight at once (1 to 256)")
      ->check(kvb::cli::in_range(1, 256));
  c->add_option("--judge-timeout", a.opts.timeout_s, "Seconds one judge request may take (at most a day)")
      ->check(kvb::cli::positive())
      ->check(kvb::cli::in_range(0, 86400));
  c->add_option("--judge-retries", a.opts.max_retries, "Retries of a judge request on 429/5xx/timeouts (0 to 100)")
      ->check(kvb::cli::in_range(0, 100));
  c->add_option("--judge-backoff", a.opts.backoff_base_s,
                "Base delay (s) of the exponential backoff between judge retries (doubles each retry, jittered; "
                "at most 3600)")
      ->check(kvb::cli::in_range(0, 3600));
}

std::unique_ptr<graders::Judge> make_judge(const JudgeArgs& a) {
  if (a.spec.empty()) return nullptr;
  auto s = graders::JudgeSpec::parse(a.spec);
  if (s.kind == "openai")
    return std::make_unique<graders::OpenAIJudge>(s.model, graders::OpenAIEndpoint::from_env(), a.opts);
  try {
    return make_local_judge(s.model, a.opts);
  } catch (const Error& e) {  // say which option named the model
    throw Error("--judge " + a.spec + ": " + e.what(), e.kind());
  }
}

namespace {

/// The stored record of job `j` graded by `grader` (name and version) with verdict `g`; an
/// ungraded verdict stores no score.
results::GradeRecord record_of(const GradeJob& j, std::string grader, const graders::Grade& g) {
  results::GradeRecord gr;
  gr.item_key = j.item_key;
  gr.grader = std::move(grader);
  gr.extracted = g.extracted;
  gr.pred_norm = g.pred_norm;
  gr.gold_norm = g.gold_norm;
  gr.reason = g.reason;
  gr.ungraded = g.ungraded;
  if (!g.ungraded) gr.score = g.score;
  return gr;
}

/// The record of job `j` whose grader threw `e`: ungraded, with the error as its reason.
results::GradeRecord error_record(const GradeJob& j, const Error& e) {
  results::GradeRecord gr;
  gr.item_key = j.item_key;
  gr.grader = j.ex->grader;
  gr.ungraded = true;
  gr.reason = std::string("grader error: ") + e.what();
  return gr;
}

results::GradeRecord rule_grade(const GradeJob& j) {
  try {
    return record_of(j, j.ex->grader, graders::grade(j.ex->grader, j.text, j.ex->references, j.ex->meta));
  } catch (const Error& e) {
    return error_record(j, e);
  }
}

}  // namespace

namespace {

std::vector<results::GradeRecord> grade_flat(const std::vector<GradeJob>& jobs, graders::Judge* judge,
                                             results::Store& store);

}  // namespace

std::vector<results::GradeRecord> grade_jobs(const std::vector<GradeJob>& jobs, graders::Judge* judge,
                                             results::Store& store) {
  // Multi-turn examples: one grade per turn with that turn's grader, references and metadata,
  // then one row per work item. Turns with no grader (an intermediate step such as
  // LongBench-v2's CoT reasoning) are not scored; the score is the mean over the scored turns
  // (SCBench reports per-turn scores averaged over sessions); any ungraded turn makes the row
  // ungraded. A turn that was not generated (the context ran out) is graded on empty text.
  std::deque<tasks::Example> turn_examples;  // stable addresses for the flat jobs
  std::vector<GradeJob> flat;
  std::vector<std::vector<size_t>> parts(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const GradeJob& j = jobs[i];
    if (!j.ex->grader.empty() || j.ex->followups.empty()) {
      parts[i].push_back(flat.size());
      flat.push_back({j.item_key, j.ex, j.text, {}});
    }
    for (size_t t = 0; t < j.ex->followups.size(); ++t) {
      const tasks::Turn& turn = j.ex->followups[t];
      if (turn.grader.empty()) continue;
      tasks::Example e;
      e.id = j.ex->id;
      e.task = j.ex->task;
      e.references = turn.references;
      e.meta = turn.meta;
      e.grader = turn.grader;
      turn_examples.push_back(std::move(e));
      parts[i].push_back(flat.size());
      flat.push_back({j.item_key, &turn_examples.back(), t < j.turn_texts.size() ? j.turn_texts[t] : "", {}});
    }
  }
  std::vector<results::GradeRecord> graded = grade_flat(flat, judge, store);
  std::vector<results::GradeRecord> out(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (parts[i].size() == 1 && jobs[i].ex->followups.empty()) {
      out[i] = std::move(graded[parts[i][0]]);
      continue;
    }
    results::GradeRecord& g = out[i];
    g.item_key = jobs[i].item_key;
    if (parts[i].empty()) {
      g.ungraded = true;
      g.reason = "no turn of this example has a grader";
      continue;
    }
    const results::GradeRecord& last = graded[parts[i].back()];
    g.grader = last.grader;
    g.extracted = last.extracted;
    g.pred_norm = last.pred_norm;
    g.gold_norm = last.gold_norm;
    std::string per_turn;
    double sum = 0;
    bool ungraded = false;
    for (size_t k : parts[i]) {
      const auto& t = graded[k];
      ungraded |= t.ungraded || !t.score;
      per_turn += (per_turn.empty() ? "" : ",") + (t.score ? fmt::format("{:g}", *t.score) : std::string("-"));
      if (t.score) sum += *t.score;
    }
    g.ungraded = ungraded;
    if (!ungraded) g.score = sum / static_cast<double>(parts[i].size());
    g.reason = fmt::format("{} scored turns [{}]{}; last turn: {}", parts[i].size(), per_turn,
                           ungraded ? " (a turn is ungraded)" : fmt::format(", mean {:.4g}", *g.score), last.reason);
  }
  return out;
}

namespace {

std::vector<results::GradeRecord> grade_flat(const std::vector<GradeJob>& jobs, graders::Judge* judge,
                                             results::Store& store) {
  std::vector<results::GradeRecord> out(jobs.size());
  std::vector<size_t> judged;
  std::vector<graders::LmeJob> lme;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const GradeJob& j = jobs[i];
    if (!judge || !graders::is_judge_grader(j.ex->grader)) {
      out[i] = rule_grade(j);
      continue;
    }
    try {
      lme.push_back(graders::lme_job(j.text, j.ex->references, j.ex->meta));
      judged.push_back(i);
    } catch (const Error& e) {
      out[i] = error_record(j, e);
    }
  }
  if (judged.empty()) return out;
  auto res = graders::judge_longmemeval(*judge, &store, lme);
  for (size_t k = 0; k < judged.size(); ++k) {
    const GradeJob& j = jobs[judged[k]];
    results::GradeRecord& gr = out[judged[k]];
    gr = record_of(j, j.ex->grader + ":" + judge->id(), res[k].grade);
    gr.judge_key = res[k].judge_key;
  }
  return out;
}

}  // namespace

}  // namespace kvb::cli
