// LongMemEval (xiaowu0162/LongMemEval; ICLR 2025): 500 questions over a chat history, reading
// prompt of src/generation/run_generation.py (full-history-session, json format, CoT on by
// default). docs/benchmarks.md#longmemeval. Data: <data-dir>/longmemeval/
// longmemeval_{oracle,s_cleaned,m_cleaned}.json, one JSON array each (M: 2.75 GB, streamed with
// one question in memory at a time).
//
// History: sessions sorted by date (stable), `has_answer` removed from the turns, session i
// (1-based) appended as "\n### Session {i}:\nSession Date: {date}\nSession Content:\n{sess}\n"
// with sess = "\n" + json.dumps(turns) (Python defaults: ", " / ": ", ensure_ascii) or, with
// format=nl, the turns as "\n\n{role}: {content.strip()}". The reference truncates the history
// to (model max length − gen length − 1000) tokens keeping the head; that needs the tokenizer,
// so the harness does it: meta.history_chars gives the history's extent inside the prompt.
// Protocol (TRIM-KV, SCBench-style): context_chars marks the history, so the engine can
// compress it before the question arrives.
#include <algorithm>

#include "datasets/records.h"
#include "engine/util/error.h"
#include "tasks/families.h"
#include "tasks/text_format.h"

namespace kvb::tasks {

namespace {

const char* kCot =
    "I will give you several history chats between you and a user. Please answer the question based on the relevant "
    "chat history. Answer the question step by step: first extract all the relevant information, and then reason over "
    "the information to get the answer.\n\n\nHistory Chats:\n\n{history}\n\nCurrent Date: {question_date}\nQuestion: "
    "{question}\nAnswer (step by step):";
const char* kDirect =
    "I will give you several history chats between you and a user. Please answer the question based on the relevant "
    "chat history.\n\n\nHistory Chats:\n\n{history}\n\nCurrent Date: {question_date}\nQuestion: {question}\nAnswer:";

struct Variant {
  const char* name;
  const char* key;
};
const Variant kVariants[] = {{"longmemeval_s", "longmemeval/longmemeval_s_cleaned.json"},
                             {"longmemeval_m", "longmemeval/longmemeval_m_cleaned.json"},
                             {"longmemeval_oracle", "longmemeval/longmemeval_oracle.json"}};

using ojson = nlohmann::ordered_json;

std::string ostr(const ojson& r, const char* k, const datasets::RecordPos& pos) {
  if (!r.is_object() || !r.contains(k)) fail("{}: missing field '{}'", pos.where(), k);
  if (!r[k].is_string()) fail("{}: field '{}': expected a string", pos.where(), k);
  return r[k].get<std::string>();
}

class LongMemEvalTask : public BasicTask {
 public:
  LongMemEvalTask(const Variant& v, TaskOptions opts)
      : BasicTask(TaskInfo{v.name,
                           "longmemeval",
                           "judge_longmemeval",
                           "xiaowu0162/longmemeval-cleaned " + std::string(v.key).substr(12),
                           500,
                           {v.key},
                           {{"cot", "1 (default): step-by-step reading prompt; 0: direct answer"},
                            {"format", "json (default: json.dumps of each session) or nl (role: content lines)"}}},
                  std::move(opts)),
        v_(v) {
    cot_ = opt("cot", "1") != "0";
    nl_ = opt("format", "json") == "nl";
    if (opt("format", "json") != "json" && !nl_) fail("task {}: option format: expected json or nl", info_.name);
  }

  size_t load(const TaskContext& ctx, const ExampleSink& sink) const override {
    std::string path = ctx.locate(v_.key);
    datasets::BadRecords local;
    datasets::BadRecords& bad = ctx.bad ? *ctx.bad : local;
    size_t emitted = 0;
    struct Stop {};
    try {
      datasets::read_records_ordered(
          path,
          [&](ojson&& r, const datasets::RecordPos& pos) {
            Example ex = build(r, pos);
            ++emitted;
            if (!sink(std::move(ex)) || (ctx.limit && emitted >= ctx.limit)) throw Stop{};
          },
          bad);
    } catch (const Stop&) {
    }
    return emitted;
  }

 private:
  Example build(const ojson& r, const datasets::RecordPos& pos) const {
    std::string qid = ostr(r, "question_id", pos), qtype = ostr(r, "question_type", pos);
    std::string question = ostr(r, "question", pos), qdate = ostr(r, "question_date", pos);
    if (!r.contains("answer")) fail("{}: missing field 'answer'", pos.where());
    std::string answer = r["answer"].is_string() ? r["answer"].get<std::string>() : r["answer"].dump();
    const auto& dates = r.contains("haystack_dates") ? r["haystack_dates"] : ojson();
    const auto& sessions = r.contains("haystack_sessions") ? r["haystack_sessions"] : ojson();
    if (!dates.is_array() || !sessions.is_array() || dates.size() != sessions.size())
      fail("{}: haystack_dates / haystack_sessions: expected lists of equal length", pos.where());
    std::vector<size_t> order(dates.size());
    for (size_t i = 0; i < order.size(); ++i) {
      order[i] = i;
      if (!dates[i].is_string()) fail("{}: haystack_dates[{}]: expected a string", pos.where(), i);
    }
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return dates[a].get_ref<const std::string&>() < dates[b].get_ref<const std::string&>();
    });
    std::string history;
    for (size_t k = 0; k < order.size(); ++k) {
      const auto& sess = sessions[order[k]];
      if (!sess.is_array()) fail("{}: haystack_sessions[{}]: expected a list of turns", pos.where(), order[k]);
      // Every turn is a {"role": str, "content": str} object, in both formats (a turn that was a
      // number, or a content that was a list, went into the prompt as JSON).
      for (size_t i = 0; i < sess.size(); ++i) {
        const auto& t = sess[i];
        if (!t.is_object() || !t.contains("role") || !t.contains("content") || !t["role"].is_string() ||
            !t["content"].is_string())
          fail("{}: haystack_sessions[{}][{}]: expected a turn {{\"role\": string, \"content\": string}}, got {}",
               pos.where(), order[k], i,
               t.is_object() ? "an object without both as strings" : std::string(t.type_name()));
      }
      std::string body;
      if (nl_) {
        for (const auto& t : sess) {
          body += "\n\n" + t["role"].get<std::string>() + ": " + py_strip(t["content"].get<std::string>());
        }
      } else {
        ojson turns = ojson::array();
        for (const auto& t : sess) {
          ojson c = t;
          if (c.is_object()) c.erase("has_answer");
          turns.push_back(std::move(c));
        }
        body = "\n" + py_json_dumps(turns);
      }
      history += "\n### Session " + std::to_string(k + 1) + ":\nSession Date: " + dates[order[k]].get<std::string>() +
                 "\nSession Content:\n" + body + "\n";
    }
    const char* tmpl = cot_ ? kCot : kDirect;
    std::string t = tmpl;
    size_t hpos = t.find("{history}");
    Example ex;
    ex.id = info_.name + "/" + qid;
    ex.task = info_.name;
    std::string prompt =
        py_format(t, {{"history", history}, {"question_date", qdate}, {"question", question}}, pos.where());
    ex.context_chars = hpos + history.size();
    ex.messages = {{"user", std::move(prompt)}};
    ex.references = {answer};
    ex.meta = {{"question_type", qtype},
               {"abstention", qid.size() >= 4 && qid.substr(qid.size() - 4) == "_abs"},
               {"question", question},
               {"history_chars", {hpos, history.size()}},
               {"index", pos.index}};
    ex.max_new_tokens = max_new_tokens_or(cot_ ? 800 : 500);
    ex.grader = "judge_longmemeval";
    return ex;
  }

  const Variant& v_;
  bool cot_ = true, nl_ = false;
};

}  // namespace

KVB_TASK_FAMILY(longmemeval) {
  return table_factory<LongMemEvalTask>(kVariants, [](const Variant& v) { return std::string(v.name); });
}

}  // namespace kvb::tasks
