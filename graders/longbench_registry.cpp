// Registration of the LongBench graders (v1 metrics, v2 choice). See graders/grade.h and
// graders/longbench.h.
#include <fmt/format.h>

#include "engine/util/error.h"
#include "graders/grade.h"
#include "graders/longbench.h"

namespace kvb::graders::detail {
namespace {

// LongBench eval.py: for trec, triviaqa, samsum, lsht the prediction is cut to its first line
// (meta {"first_line": true}).
std::string maybe_first_line(std::string_view p, const nlohmann::json& meta) {
  if (!meta.is_object() || !meta.value("first_line", false)) return std::string(p);
  size_t b = 0;
  while (b < p.size() && p[b] == '\n') ++b;
  std::string_view r = p.substr(b);
  return std::string(r.substr(0, r.find('\n')));
}

// A grader that scores each reference with `f` and keeps the max (LongBench eval.py).
GraderInfo scored(std::string name, std::string desc,
                  std::function<double(const std::string&, const std::string&, const nlohmann::json&)> f) {
  return {name, desc, [name, f](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json& meta) {
            const std::string pred = maybe_first_line(p, meta);
            Grade best = best_of_references(refs, [&](const std::string& r) {
              Grade g;
              g.score = f(pred, r, meta);
              g.gold_norm = r;
              return g;
            });
            best.extracted = best.pred_norm = pred;
            best.reason = fmt::format("{} = {:.4f} (max over {} reference(s))", name, best.score, refs.size());
            return best;
          }};
}

std::vector<std::string> classes_of(const nlohmann::json& meta) {
  if (!meta.is_object() || !meta.contains("all_classes") || !meta["all_classes"].is_array())
    fail("longbench.classification: example metadata needs an 'all_classes' array");
  return meta["all_classes"].get<std::vector<std::string>>();
}

}  // namespace

void register_longbench_graders(std::vector<GraderInfo>& v) {
  v.push_back(scored("longbench.qa_f1", "LongBench qa_f1_score: bag-of-words F1 after normalize_answer",
                     [](const std::string& p, const std::string& r, const nlohmann::json&) { return qa_f1(p, r); }));
  v.push_back(scored("longbench.qa_f1_zh", "Character-level F1 for Chinese (LongBench uses jieba words)",
                     [](const std::string& p, const std::string& r, const nlohmann::json&) { return qa_f1_chars(p, r); }));
  v.push_back(scored("longbench.rouge", "LongBench rouge_score: ROUGE-L F of the pltrdy rouge package",
                     [](const std::string& p, const std::string& r, const nlohmann::json&) { return rouge_l(p, r); }));
  v.push_back(
      scored("longbench.rouge_zh", "ROUGE-L on characters for Chinese (LongBench uses jieba words)",
             [](const std::string& p, const std::string& r, const nlohmann::json&) { return rouge_l_chars(p, r); }));
  v.push_back(scored("longbench.classification", "LongBench classification_score (meta.all_classes)",
                     [](const std::string& p, const std::string& r, const nlohmann::json& m) {
                       return classification_score(p, r, classes_of(m));
                     }));
  v.push_back(scored(
      "longbench.retrieval", "LongBench retrieval_score (Paragraph N)",
      [](const std::string& p, const std::string& r, const nlohmann::json&) { return retrieval_score(p, r, false); }));
  v.push_back(scored(
      "longbench.retrieval_zh", "LongBench retrieval_zh_score (段落N)",
      [](const std::string& p, const std::string& r, const nlohmann::json&) { return retrieval_score(p, r, true); }));
  v.push_back(scored("longbench.count", "LongBench count_score",
                     [](const std::string& p, const std::string& r, const nlohmann::json&) { return count_score(p, r); }));
  v.push_back(
      scored("longbench.code_sim", "LongBench code_sim_score: fuzz.ratio of the first code line",
             [](const std::string& p, const std::string& r, const nlohmann::json&) { return code_sim_score(p, r); }));
  v.push_back({"longbench_v2.choice", "LongBench-v2: 'The correct answer is (X)' regexes; X == gold letter",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json&) {
                 Grade g;
                 auto c = extract_choice_v2(p);
                 g.extracted = c ? std::string(1, *c) : "";
                 g.pred_norm = g.extracted;
                 g.gold_norm = refs.front();
                 g.score = (c && std::string(1, *c) == refs.front()) ? 1.0 : 0.0;
                 g.reason =
                     c ? fmt::format("choice {} vs gold {}", *c, refs.front()) : "no 'The correct answer is' found";
                 return g;
               }});
}

}  // namespace kvb::graders::detail
