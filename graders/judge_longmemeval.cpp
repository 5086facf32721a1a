// LongMemEval's judge grading. See graders/judge_longmemeval.h and
// docs/benchmarks.md#longmemeval (templates verbatim from
// xiaowu0162/LongMemEval @9e0b455 src/evaluation/evaluate_qa.py).
#include "graders/judge_longmemeval.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "engine/util/error.h"
#include "engine/util/hash.h"
#include "results/store.h"

namespace kvb::graders {

namespace {

// The five templates, byte for byte as in the reference note ("\n" there is a newline).
const std::string kDefault =
    "I will give you a question, a correct answer, and a response from a model. Please answer yes if the response "
    "contains the correct answer. Otherwise, answer no. If the response is equivalent to the correct answer or "
    "contains all the intermediate steps to get the correct answer, you should also answer yes. If the response only "
    "contains a subset of the information required by the answer, answer no. \n\nQuestion: {}\n\nCorrect Answer: "
    "{}\n\nModel Response: {}\n\nIs the model response correct? Answer yes or no only.";
const std::string kTemporal =
    "I will give you a question, a correct answer, and a response from a model. Please answer yes if the response "
    "contains the correct answer. Otherwise, answer no. If the response is equivalent to the correct answer or "
    "contains all the intermediate steps to get the correct answer, you should also answer yes. If the response only "
    "contains a subset of the information required by the answer, answer no. In addition, do not penalize "
    "off-by-one errors for the number of days. If the question asks for the number of days/weeks/months, etc., and "
    "the model makes off-by-one errors (e.g., predicting 19 days when the answer is 18), the model's response is "
    "still correct. \n\nQuestion: {}\n\nCorrect Answer: {}\n\nModel Response: {}\n\nIs the model response correct? "
    "Answer yes or no only.";
const std::string kKnowledgeUpdate =
    "I will give you a question, a correct answer, and a response from a model. Please answer yes if the response "
    "contains the correct answer. Otherwise, answer no. If the response contains some previous information along "
    "with an updated answer, the response should be considered as correct as long as the updated answer is the "
    "required answer.\n\nQuestion: {}\n\nCorrect Answer: {}\n\nModel Response: {}\n\nIs the model response correct? "
    "Answer yes or no only.";
const std::string kPreference =
    "I will give you a question, a rubric for desired personalized response, and a response from a model. Please "
    "answer yes if the response satisfies the desired response. Otherwise, answer no. The model does not need to "
    "reflect all the points in the rubric. The response is correct as long as it recalls and utilizes the user's "
    "personal information correctly.\n\nQuestion: {}\n\nRubric: {}\n\nModel Response: {}\n\nIs the model response "
    "correct? Answer yes or no only.";
const std::string kAbstention =
    "I will give you an unanswerable question, an explanation, and a response from a model. Please answer yes if the "
    "model correctly identifies the question as unanswerable. The model could say that the information is "
    "incomplete, or some other information is given but the asked information is not.\n\nQuestion: "
    "{}\n\nExplanation: {}\n\nModel Response: {}\n\nDoes the model correctly identify the question as unanswerable? "
    "Answer yes or no only.";

std::string trim(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  size_t b = 0, e = s.size();
  while (b < e && ws(s[b])) ++b;
  while (e > b && ws(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace

bool is_judge_grader(std::string_view name) { return name == kLongMemEvalJudgeGrader; }

const char* lme_template_name(LmeTemplate t) {
  switch (t) {
    case LmeTemplate::kDefault: return "default";
    case LmeTemplate::kTemporalReasoning: return "temporal-reasoning";
    case LmeTemplate::kKnowledgeUpdate: return "knowledge-update";
    case LmeTemplate::kPreference: return "single-session-preference";
    case LmeTemplate::kAbstention: return "abstention";
  }
  return "?";
}

const std::string& lme_template_text(LmeTemplate t) {
  switch (t) {
    case LmeTemplate::kDefault: return kDefault;
    case LmeTemplate::kTemporalReasoning: return kTemporal;
    case LmeTemplate::kKnowledgeUpdate: return kKnowledgeUpdate;
    case LmeTemplate::kPreference: return kPreference;
    case LmeTemplate::kAbstention: return kAbstention;
  }
  return kDefault;
}

LmeTemplate lme_template_for(std::string_view question_type, bool abstention) {
  if (abstention) return LmeTemplate::kAbstention;
  if (question_type == "single-session-user" || question_type == "single-session-assistant" ||
      question_type == "multi-session")
    return LmeTemplate::kDefault;
  if (question_type == "temporal-reasoning") return LmeTemplate::kTemporalReasoning;
  if (question_type == "knowledge-update") return LmeTemplate::kKnowledgeUpdate;
  if (question_type == "single-session-preference") return LmeTemplate::kPreference;
  fail(
      "longmemeval judge: question_type '{}' is not one of single-session-user, single-session-assistant, "
      "multi-session, temporal-reasoning, knowledge-update, single-session-preference",
      question_type);
}

std::string lme_judge_prompt(LmeTemplate t, std::string_view question, std::string_view answer,
                             std::string_view response) {
  const std::string& tmpl = lme_template_text(t);
  const std::string_view args[3] = {question, answer, response};
  std::string out;
  size_t pos = 0;
  for (const auto& a : args) {
    size_t p = tmpl.find("{}", pos);
    out.append(tmpl, pos, p - pos);
    out.append(a);
    pos = p + 2;
  }
  out.append(tmpl, pos, std::string::npos);
  return out;
}

bool lme_verdict(std::string_view reply) {
  std::string s = trim(reply);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; });
  return s.find("yes") != std::string::npos;
}

LmeJob lme_job(std::string_view prediction, const std::vector<std::string>& references, const nlohmann::json& meta) {
  if (references.empty()) fail("{}: no reference answer", kLongMemEvalJudgeGrader);
  if (!meta.is_object())
    fail("{}: example metadata: expected an object with question_type, question, abstention", kLongMemEvalJudgeGrader);
  auto str = [&](const char* k) {
    if (!meta.contains(k) || !meta[k].is_string())
      fail("{}: example metadata: field '{}': missing or not a string", kLongMemEvalJudgeGrader, k);
    return meta[k].get<std::string>();
  };
  LmeJob j;
  j.question_type = str("question_type");
  j.question = str("question");
  if (meta.contains("abstention")) {
    if (!meta["abstention"].is_boolean())
      fail("{}: example metadata: field 'abstention': expected true or false", kLongMemEvalJudgeGrader);
    j.abstention = meta["abstention"].get<bool>();
  }
  j.answer = references[0];
  j.prediction = std::string(prediction);
  lme_template_for(j.question_type, j.abstention);  // validates the type
  return j;
}

std::string lme_judge_key(const std::string& judge_id, const LmeJob& job) {
  nlohmann::json k = {{"judge", judge_id},
                      {"template", lme_template_text(lme_template_for(job.question_type, job.abstention))},
                      {"question", job.question},
                      {"answer", job.answer},
                      {"prediction", job.prediction}};
  return sha256_hex(k.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

std::vector<JudgedGrade> judge_longmemeval(Judge& judge, results::Store* cache, const std::vector<LmeJob>& jobs) {
  const std::string jid = judge.id();
  std::vector<JudgedGrade> out(jobs.size());
  std::vector<std::string> keys(jobs.size());
  std::vector<LmeTemplate> tmpls(jobs.size());
  std::map<std::string, size_t> ask_index;  // key -> position in `prompts`
  std::vector<std::string> prompts;
  std::vector<std::vector<size_t>> askers;  // per prompt: the jobs waiting for it
  for (size_t i = 0; i < jobs.size(); ++i) {
    const LmeJob& j = jobs[i];
    tmpls[i] = lme_template_for(j.question_type, j.abstention);
    keys[i] = lme_judge_key(jid, j);
    Grade& g = out[i].grade;
    g.pred_norm = trim(j.prediction);
    g.gold_norm = j.answer;
    if (cache) {
      if (auto e = cache->judge_get(keys[i]); e && e->score) {
        g.score = *e->score;
        g.extracted = trim(e->response);
        g.reason = fmt::format("judge {} ({}): {} (cached)", e->judge_model, lme_template_name(tmpls[i]),
                               *e->score >= 1 ? "yes" : "no");
        out[i].judge_key = keys[i];
        out[i].cache_hit = true;
        continue;
      }
    }
    auto [it, fresh] = ask_index.emplace(keys[i], prompts.size());
    if (fresh) {
      prompts.push_back(lme_judge_prompt(tmpls[i], j.question, j.answer, j.prediction));
      askers.emplace_back();
    }
    askers[it->second].push_back(i);
  }
  if (prompts.empty()) return out;
  std::vector<JudgeReply> replies = judge.ask(prompts);
  if (replies.size() != prompts.size())
    fail("judge {}: returned {} replies for {} prompts", jid, replies.size(), prompts.size());
  for (size_t p = 0; p < prompts.size(); ++p) {
    const JudgeReply& r = replies[p];
    const size_t first = askers[p].front();
    if (r.ok) {
      const bool yes = lme_verdict(r.text);
      if (cache) {
        results::JudgeEntry e;
        e.judge_key = keys[first];
        e.judge_model = jid;
        e.request = judge.request_json(prompts[p]);
        e.response = r.text;
        e.score = yes ? 1.0 : 0.0;
        e.template_name = lme_template_name(tmpls[first]);
        cache->judge_put(e);
      }
      for (size_t i : askers[p]) {
        Grade& g = out[i].grade;
        g.score = yes ? 1.0 : 0.0;
        g.extracted = trim(r.text);
        g.reason = fmt::format("judge {} ({}): {}", jid, lme_template_name(tmpls[i]), yes ? "yes" : "no");
        out[i].judge_key = keys[i];
        out[i].attempts = r.attempts;
      }
    } else {
      for (size_t i : askers[p]) {
        Grade& g = out[i].grade;
        g.ungraded = true;
        g.score = 0;
        g.reason = r.error.empty() ? "judge " + jid + ": failed" : r.error;
        out[i].attempts = r.attempts;
      }
    }
  }
  return out;
}

namespace detail {
void register_judge_graders(std::vector<GraderInfo>& v) {
  v.push_back(
      {kLongMemEvalJudgeGrader,
       "LongMemEval: LLM judge, 5 templates by question type, 'yes' in reply (needs --judge openai:MODEL|local:MODEL)",
       [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json& meta) {
         LmeJob j = lme_job(p, refs, meta);
         Grade g;
         g.pred_norm = trim(j.prediction);
         g.gold_norm = j.answer;
         g.ungraded = true;
         g.reason = fmt::format("needs an LLM judge (template {}): pass --judge openai:MODEL or local:MODEL",
                                lme_template_name(lme_template_for(j.question_type, j.abstention)));
         return g;
       }});
}
}  // namespace detail

}  // namespace kvb::graders
