// SCBench (microsoft/SCBench; arXiv 2412.10319): 12 multi-turn tasks over a shared context, in
// the chat-template multi-turn mode of MInference scbench/eval_utils.py (run_all_tasks.sh uses
// --use_chat_template): turn 1 = multiturn_templates[task] with the context; each later turn =
// the previous turn's GOLD answer as an assistant message (str() of the stored answer), then
// the user message from multiturn_follow_up_templates_in_chat_tempate.
// docs/benchmarks.md#scbench. Data: <data-dir>/scbench/scbench_<task>.jsonl.
//
// References: choice_eng → [answer text, option letter]; a stored list → its items; a string →
// one reference (the correct reading of the label; the reference scorer iterates over the
// string's characters, see docs/benchmarks.md#scbench); an int → its decimal text. The raw
// label is kept in Turn::meta["label"] so a grader can replicate either behaviour.
//
// Quirk kept from the reference: for scbench_mf in chat-template mode, every follow-up's
// "What is {target}?" prefix is the one computed for the LAST turn (a leaked loop variable).
#include <map>
#include <regex>

#include "engine/util/error.h"
#include "tasks/families.h"
#include "tasks/text_format.h"

namespace kvb::tasks {

namespace {

struct ScSpec {
  const char* name;
  const char* first;   // first-turn template
  const char* follow;  // follow-up user template (chat-template mode)
  int max_new;         // per turn (sub-task tasks: see subtask_max_new)
  const char* grader;  // per turn (sub-task tasks: see subtask_grader)
  size_t count;
};

const ScSpec kSc[] = {
    {"kv", "Extract the value corresponding to the specified key in the JSON object below.\n\n{context}\n\n{input}",
     "{input}", 150, "scbench_kv_retrieval", 100},
    {"prefix_suffix", "{context}\n\n{input}", "{input}", 150, "scbench_kv_retrieval", 100},
    {"vt", "{context}\n\n{input}", "{input}", 30, "scbench_string_match_all", 90},
    {"choice_eng",
     "Read the book and answer the question.\n\n{context}\n\nQuestion: {question}\nA. {OPTION_A}\nB. {OPTION_B}\nC. "
     "{OPTION_C}\nD. {OPTION_D}\n\nThe the correct answer is",
     "Question: {question}\nA. {OPTION_A}\nB. {OPTION_B}\nC. {OPTION_C}\nD. {OPTION_D}\n\nThe the correct answer is",
     40, "scbench_choice_eng", 58},
    {"qa_eng",
     "Read the book and answer the question. Be very concise in your answer.\n\n{context}\n\nQuestion: {question}\nAnswer:",
     "Question: {question}\nAnswer:", 40, "scbench_qa_eng", 69},
    {"qa_chn", "阅读以下书籍然后回答问题。\n\n{context}\n\n问题：{question}\n答案：", "问题：{question}\n答案：", 40,
     "scbench_qa_chn", 35},
    {"mf", "{prefix}\n\n{context}\n\n{input}", "{prefix}\n\n{input}", 5, "scbench_math_find", 100},
    {"repoqa",
     "Based on the function description and code context, please retrieve and repeat the exact described function from "
     "the code context in a code block wrapped by ```:\n\n{context}\n\n{input}",
     "{input}", 1024, "scbench_repoqa", 88},
    {"summary", "{context}\n\n{input}", "{input}", 200, "scbench_rouge_lsum", 70},
    {"many_shot", "{context}\n\n{input}", "{input}", 10, "scbench_qa_eng", 54},
    {"summary_with_needles", "{context}\n\n{input}", "{input}", 0, "", 70},
    {"repoqa_and_kv", "{context}\n\n{input}", "{input}", 0, "", 88},
};

// Python str() of a stored answer: strings as is, ints in decimal, lists as their repr.
std::string py_str(const nlohmann::json& v);

std::string py_repr_str(const std::string& s) {
  bool sq = s.find('\'') != std::string::npos, dq = s.find('"') != std::string::npos;
  char q = (sq && !dq) ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out + q;
}

std::string py_str(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<long long>());
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_null()) return "None";
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      out += v[i].is_string() ? py_repr_str(v[i].get<std::string>()) : py_str(v[i]);
    }
    return out + "]";
  }
  return v.dump();
}

std::vector<std::string> refs_of(const nlohmann::json& a) {
  std::vector<std::string> out;
  if (a.is_array()) {
    for (const auto& x : a) out.push_back(py_str(x));
  } else {
    out.push_back(py_str(a));
  }
  return out;
}

// "What is {target}?" with target = first match of "The .+ is" (greedy), lowercased, minus " is".
std::string mf_prefix(const std::string& input, const datasets::RecordPos& pos) {
  static const std::regex re("The .+ is");
  std::smatch m;
  if (!std::regex_search(input, m, re)) fail("{}: scbench_mf turn input has no 'The ... is' phrase", pos.where());
  std::string t = m.str(0);
  for (auto& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return "What is " + t.substr(0, t.size() - 3) + "?";
}

class ScBenchTask : public BasicTask {
 public:
  ScBenchTask(const ScSpec& s, TaskOptions opts)
      : BasicTask(TaskInfo{std::string("scbench_") + s.name,
                           "scbench",
                           *s.grader ? s.grader
                                     : (std::string(s.name) == "repoqa_and_kv" ? "scbench_repoqa+scbench_kv_retrieval"
                                                                               : "scbench_rouge_lsum+scbench_passkey"),
                           "microsoft/SCBench data/scbench_" + std::string(s.name) + ".jsonl",
                           s.count,
                           {"scbench/scbench_" + std::string(s.name) + ".jsonl"},
                           {{"max_turns", "keep only the first N turns of each session (0 = all)"}}},
                  std::move(opts)),
        s_(s) {}

  size_t load(const TaskContext& ctx, const ExampleSink& sink) const override {
    std::string path = ctx.locate(info_.data_files[0]);
    const std::string name = s_.name;
    // RepoQA compares an output with every needle function of its repository across the whole
    // file (compute_scores.py needle_by_repo): collect them first, give each repoqa turn its
    // repository's list as meta["needles"] = [{name, needle}].
    std::map<std::string, nlohmann::json> needles_by_repo;
    if (name == "repoqa" || name == "repoqa_and_kv") needles_by_repo = collect_needles(path);
    size_t max_turns = static_cast<size_t>(opt_int("max_turns", 0));
    std::string tmpl = s_.first;
    size_t cpos = tmpl.find("{context}");
    return emit_records(
        ctx, path,
        [&](nlohmann::json&& r, const datasets::RecordPos& pos, Example& ex) {
          const auto& turns = field(r, "multi_turns", pos);
          if (!turns.is_array() || turns.empty())
            fail("{}: field 'multi_turns': expected a non-empty list", pos.where());
          std::string context = r.contains("context")
                                    ? (r["context"].is_string() ? r["context"].get<std::string>() : py_str(r["context"]))
                                    : str_field(r, "input", pos);
          size_t n = max_turns ? std::min(max_turns, turns.size()) : turns.size();
          std::string last_mf_prefix;
          if (name == "mf") last_mf_prefix = mf_prefix(str_field(turns[turns.size() - 1], "input", pos), pos);
          std::vector<Turn> all;
          for (size_t i = 0; i < n; ++i) {
            const auto& t = turns[i];
            if (!t.is_object()) fail("{}: multi_turns[{}]: expected an object", pos.where(), i);
            std::string input = str_field(t, "input", pos);
            const auto& answer = field(t, "answer", pos);
            std::map<std::string, std::string> f{{"input", input}, {"question", input}};
            if (i == 0) f["context"] = context;
            Turn turn;
            if (name == "choice_eng") {
              const auto& o = field(t, "options", pos);
              if (!o.is_array() || o.size() != 4)
                fail("{}: multi_turns[{}].options: expected 4 strings", pos.where(), i);
              const char* keys[] = {"OPTION_A", "OPTION_B", "OPTION_C", "OPTION_D"};
              std::string letter;
              for (int k = 0; k < 4; ++k) {
                f[keys[k]] = py_str(o[k]);
                if (o[k] == answer) letter = std::string(1, static_cast<char>('A' + k));
              }
              turn.references = {py_str(answer)};
              if (!letter.empty()) turn.references.push_back(letter);
              turn.meta["options"] = o;
            } else {
              turn.references = refs_of(answer);
            }
            if (name == "mf") f["prefix"] = i == 0 ? mf_prefix(input, pos) : last_mf_prefix;
            turn.user = py_format(i == 0 ? tmpl : std::string(s_.follow), f, pos.where());
            turn.meta["label"] = answer;
            turn.gold_history = py_str(answer);
            turn.max_new_tokens = s_.max_new;
            turn.grader = s_.grader;
            if (name == "summary_with_needles" || name == "repoqa_and_kv") {
              std::string sub = str_field(t, "task", pos);
              turn.meta["subtask"] = sub;
              turn.max_new_tokens = sub == "scbench_summary"  ? 800
                                    : sub == "scbench_repoqa" ? 1024
                                    : sub == "scbench_kv"     ? 80
                                                              : 15;
              turn.grader = sub == "scbench_summary"  ? "scbench_rouge_lsum"
                            : sub == "scbench_repoqa" ? "scbench_repoqa"
                            : sub == "scbench_kv"     ? "scbench_kv_retrieval"
                                                      : "scbench_passkey";
            }
            if (name == "repoqa" || name == "repoqa_and_kv") {
              for (const char* k : {"name", "lang", "repo"}) {
                if (t.contains(k)) turn.meta[k] = t[k];
                else if (r.contains(k)) turn.meta[k] = r[k];
              }
              auto it =
                  turn.meta.contains("repo") ? needles_by_repo.find(py_str(turn.meta["repo"])) : needles_by_repo.end();
              if (turn.grader == "scbench_repoqa" && it != needles_by_repo.end()) turn.meta["needles"] = it->second;
              // The grader passes an output only when its best needle is this name: without one,
              // every sample would score 0 as if the model were wrong.
              if (turn.grader == "scbench_repoqa" && (!turn.meta.contains("name") || !turn.meta["name"].is_string() ||
                                                      turn.meta["name"].get<std::string>().empty()))
                fail(
                    "{}: multi_turns[{}]: field 'name': a repoqa turn needs the name of the function to retrieve "
                    "(a non-empty string, in the turn or the record)",
                    pos.where(), i);
            }
            if (opts_.count("max_new_tokens")) turn.max_new_tokens = max_new_tokens_or(turn.max_new_tokens);
            all.push_back(std::move(turn));
          }
          ex.id = info_.name + "/" + (r.contains("id") ? py_str(r["id"]) : std::to_string(pos.index));
          ex.task = info_.name;
          ex.messages = {{"user", all[0].user}};
          if (cpos != std::string::npos) {
            std::map<std::string, std::string> pf;
            if (name == "mf") pf["prefix"] = mf_prefix(str_field(turns[0], "input", pos), pos);
            ex.context_chars = py_format(tmpl.substr(0, cpos), pf, pos.where()).size() + context.size();
          }
          ex.references = all[0].references;
          ex.meta = all[0].meta;
          if (r.contains("task")) ex.meta["session_task"] = r["task"];
          ex.meta["index"] = pos.index;
          ex.max_new_tokens = all[0].max_new_tokens;
          ex.grader = all[0].grader;
          ex.gold_history = all[0].gold_history;
          ex.golden_history = true;
          for (size_t i = 1; i < all.size(); ++i) ex.followups.push_back(std::move(all[i]));
          return true;
        },
        sink);
  }

 private:
  // repo → [{name, needle}] over every repoqa turn of the file (bad records are left to the
  // main pass, which reports them).
  std::map<std::string, nlohmann::json> collect_needles(const std::string& path) const {
    std::map<std::string, nlohmann::json> out;
    datasets::BadRecords quiet;
    quiet.mode = datasets::OnBad::kSkip;
    datasets::read_records(
        path,
        [&](nlohmann::json&& r, const datasets::RecordPos&) {
          if (!r.is_object() || !r.contains("multi_turns") || !r["multi_turns"].is_array()) return;
          for (const auto& t : r["multi_turns"]) {
            if (!t.is_object() || !t.contains("answer") || !t.contains("name")) continue;
            if (t.contains("task") && t["task"] != "scbench_repoqa") continue;
            const nlohmann::json* repo = t.contains("repo") ? &t["repo"] : r.contains("repo") ? &r["repo"] : nullptr;
            if (!repo) continue;
            auto& list = out[py_str(*repo)];
            if (!list.is_array()) list = nlohmann::json::array();
            list.push_back({{"name", py_str(t["name"])}, {"needle", py_str(t["answer"])}});
          }
        },
        quiet);
    return out;
  }

  const ScSpec& s_;
};

}  // namespace

KVB_TASK_FAMILY(scbench) {
  return table_factory<ScBenchTask>(kSc, [](const ScSpec& s) { return std::string("scbench_") + s.name; });
}

}  // namespace kvb::tasks
