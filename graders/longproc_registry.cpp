// Registration of LongProc's six evaluators as graders (longproc_<task>). The example metadata
// comes from tasks/longproc.cpp: GitHub layout → top-level fields (nums, target, testcases);
// HF rows → meta.item (the row's metadata JSON). Both are accepted.
#include <fmt/format.h>

#include "engine/util/error.h"
#include "graders/grade.h"
#include "graders/longproc.h"

namespace kvb::graders::detail {
namespace {

const nlohmann::json* meta_field(const nlohmann::json& meta, const char* key) {
  if (!meta.is_object()) return nullptr;
  if (meta.contains(key)) return &meta[key];
  if (meta.contains("item") && meta["item"].is_object() && meta["item"].contains(key)) return &meta["item"][key];
  return nullptr;
}

const nlohmann::json& need(const nlohmann::json& meta, const char* grader, const char* key) {
  const nlohmann::json* v = meta_field(meta, key);
  if (!v) fail("{}: example metadata needs '{}' (top level or under 'item')", grader, key);
  return *v;
}

Grade to_grade(const LongProcResult& r, std::string gold) {
  Grade g;
  g.score = r.accuracy;
  g.extracted = r.extracted;
  g.pred_norm = r.normalized;
  g.gold_norm = std::move(gold);
  g.reason = r.reason;
  return g;
}

/// The grader function of an evaluator that needs only the gold answer (refs[0]):
/// to_grade(eval(prediction, gold), gold).
GraderFn gold_only(LongProcResult (*eval)(std::string_view, std::string_view)) {
  return [eval](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json&) {
    return to_grade(eval(p, refs.front()), refs.front());
  };
}

}  // namespace

void register_longproc_graders(std::vector<GraderInfo>& v) {
  v.push_back({"longproc_html_to_tsv", "LongProc html_to_tsv: row-level F1 of the ```tsv table (normalised cells)",
               gold_only(longproc_html_to_tsv)});
  v.push_back({"longproc_pseudo_to_code",
               "LongProc pseudo_to_code: g++ -std=c++11 -O, first 10 tests in a sandbox; 1 iff all pass",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json& meta) {
                 CodeSandboxLimits lim;
                 if (const auto* t = meta_field(meta, "time_limit_s"); t && t->is_number())
                   lim.run_seconds = t->get<double>();
                 return to_grade(longproc_pseudo_to_code(p, need(meta, "longproc_pseudo_to_code", "testcases"), lim),
                                 refs.front());
               }});
  v.push_back({"longproc_path_traversal", "LongProc path_traversal: <Route> equals the gold route (partial in reason)",
               gold_only(longproc_path_traversal)});
  v.push_back({"longproc_tom_tracking", "LongProc tom_tracking: every '- Step N:' belief line matches (rmodels evaluator)",
               gold_only(longproc_tom_tracking)});
  v.push_back({"longproc_countdown",
               "LongProc countdown: <Solution> reaches the target with the given numbers (meta nums/target)",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json& meta) {
                 const auto& n = need(meta, "longproc_countdown", "nums");
                 const auto& t = need(meta, "longproc_countdown", "target");
                 if (!n.is_array() || !t.is_number_integer())
                   fail("longproc_countdown: metadata 'nums' must be a list of integers and 'target' an integer");
                 std::vector<int64_t> nums;
                 for (const auto& x : n) {
                   if (!x.is_number_integer()) fail("longproc_countdown: metadata 'nums' must be a list of integers");
                   nums.push_back(x.get<int64_t>());
                 }
                 return to_grade(longproc_countdown(p, nums, t.get<int64_t>(), refs.front()), refs.front());
               }});
  v.push_back({"longproc_travel_planning", "LongProc travel_planning: NATURAL-PLAN parse of <Plan> equals the gold stays",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json& meta) {
                 const auto& c = need(meta, "longproc_travel_planning", "ground_truth_cities");
                 const auto& d = need(meta, "longproc_travel_planning", "ground_truth_durations");
                 if (!c.is_string() || !d.is_string())
                   fail("longproc_travel_planning: ground_truth_cities / ground_truth_durations must be strings");
                 return to_grade(longproc_travel_planning(p, c.get<std::string>(), d.get<std::string>(), refs.front()),
                                 c.get<std::string>() + " / " + d.get<std::string>());
               }});
}

}  // namespace kvb::graders::detail
