// LongBench v2 (THUDM/LongBench-v2; arXiv 2412.15204): 503 four-choice questions over long
// contexts. Prompts from the repo's prompts/*.txt (embedded as tasks/assets/longbench_v2_*.txt),
// "$X$" placeholders replaced in order with str.replace, each value .strip()ed (pred.py).
// docs/benchmarks.md#longbench-v2. Data: <data-dir>/longbench_v2/data.json
// (one 465 MB JSON array, streamed).
//
// Option cot=1: two steps. The first turn asks for the reasoning (max 1024 new tokens); the
// follow-up Turn carries the step-2 prompt with the literal "$COT$", which the harness replaces
// by the model's stripped step-1 output, in a fresh conversation (meta.fresh_context = true:
// step 2 omits the document), max 128 new tokens. Without cot: one turn, 128 new tokens.
#include "engine/util/error.h"
#include "tasks/families.h"
#include "tasks/suite.h"
#include "tasks/text_format.h"

namespace kvb::tasks {

namespace {

std::string fill(std::string t, const std::string& doc, const std::string& q, const std::string (&c)[4]) {
  t = replace_all(t, "$DOC$", py_strip(doc));
  t = replace_all(t, "$Q$", py_strip(q));
  t = replace_all(t, "$C_A$", py_strip(c[0]));
  t = replace_all(t, "$C_B$", py_strip(c[1]));
  t = replace_all(t, "$C_C$", py_strip(c[2]));
  t = replace_all(t, "$C_D$", py_strip(c[3]));
  return t;
}

class LongBenchV2Task : public BasicTask {
 public:
  explicit LongBenchV2Task(TaskOptions opts)
      : BasicTask(TaskInfo{"longbench_v2",
                           "longbench_v2",
                           "longbench_v2.choice",
                           "THUDM/LongBench-v2 data.json",
                           503,
                           {"longbench_v2/data.json"},
                           {{"cot", "1: chain-of-thought in two steps (0shot_cot then 0shot_cot_ans)"}}},
                  std::move(opts)) {
    cot_ = opt("cot", "0") == "1";
  }

  size_t load(const TaskContext& ctx, const ExampleSink& sink) const override {
    std::string path = ctx.locate("longbench_v2/data.json");
    std::string t0 = embedded_asset(cot_ ? "longbench_v2_0shot_cot.txt" : "longbench_v2_0shot.txt");
    std::string t_ans = embedded_asset("longbench_v2_0shot_cot_ans.txt");
    return emit_records(
        ctx, path,
        [&](nlohmann::json&& r, const datasets::RecordPos& pos, Example& ex) {
          std::string doc = str_field(r, "context", pos), q = str_field(r, "question", pos);
          std::string c[4] = {str_field(r, "choice_A", pos), str_field(r, "choice_B", pos),
                              str_field(r, "choice_C", pos), str_field(r, "choice_D", pos)};
          std::string ans = str_field(r, "answer", pos);
          if (ans.size() != 1 || ans[0] < 'A' || ans[0] > 'D')
            fail("{}: field 'answer': expected A-D, got '{}'", pos.where(), ans);
          ex.id = "longbench_v2/" + str_field(r, "_id", pos);
          ex.task = info_.name;
          std::string prompt = fill(t0, doc, q, c);
          size_t doc_end = t0.find("$DOC$");
          if (doc_end != std::string::npos) ex.context_chars = doc_end + py_strip(doc).size();
          ex.messages = {{"user", std::move(prompt)}};
          ex.references = {ans};
          for (const char* k : {"domain", "sub_domain", "difficulty", "length"})
            if (r.contains(k)) ex.meta[k] = r[k];
          ex.meta["choices"] = {c[0], c[1], c[2], c[3]};
          ex.meta["index"] = pos.index;
          ex.grader = info_.grader;
          if (cot_) {
            ex.max_new_tokens = 1024;
            ex.grader = "";  // step 1 is not graded
            Turn t;
            t.user = fill(t_ans, doc, q, c);
            t.references = {ans};
            t.meta = {{"substitute_previous_output", "$COT$"}, {"fresh_context", true}};
            t.max_new_tokens = max_new_tokens_or(128);
            t.grader = info_.grader;
            ex.followups.push_back(std::move(t));
            ex.golden_history = false;
          } else {
            ex.max_new_tokens = max_new_tokens_or(128);
          }
          return true;
        },
        sink);
  }

 private:
  bool cot_ = false;
};

}  // namespace

KVB_TASK_FAMILY(longbench_v2) {
  TaskFactory f;
  f.names = {"longbench_v2"};
  f.make = [](const std::string&, const TaskOptions& opts) -> std::unique_ptr<Task> {
    return std::make_unique<LongBenchV2Task>(opts);
  };
  return f;
}

}  // namespace kvb::tasks
