// LongBench v1 (THUDM/LongBench; ACL 2024): 21 tasks, per-task prompt (config/dataset2prompt.json,
// embedded as tasks/assets/longbench_dataset2prompt.json), max_new_tokens and metric; option e=1
// reads LongBench-E (<task>_e.jsonl, 13 tasks). docs/benchmarks.md#longbench.
// Data: <data-dir>/longbench/data/<task>.jsonl when the HF data.zip was unzipped into the mirror,
// else member data/<task>.jsonl read in place (streamed, libzip) from longbench/data.zip — found
// in a data dir or, with a hub client, downloaded into the Hugging Face cache.
#include <set>

#include "datasets/zip_archive.h"
#include "engine/util/error.h"
#include "tasks/families.h"
#include "tasks/suite.h"
#include "tasks/text_format.h"

namespace kvb::tasks {

namespace {

struct LbSpec {
  const char* name;
  int max_new;
  const char* grader;
};

// pred.py dataset2maxlen + eval.py dataset2metric (graders registry names).
const LbSpec kLb[] = {
    {"narrativeqa", 128, "longbench.qa_f1"},
    {"qasper", 128, "longbench.qa_f1"},
    {"multifieldqa_en", 64, "longbench.qa_f1"},
    {"multifieldqa_zh", 64, "longbench.qa_f1_zh"},
    {"hotpotqa", 32, "longbench.qa_f1"},
    {"2wikimqa", 32, "longbench.qa_f1"},
    {"musique", 32, "longbench.qa_f1"},
    {"dureader", 128, "longbench.rouge_zh"},
    {"gov_report", 512, "longbench.rouge"},
    {"qmsum", 512, "longbench.rouge"},
    {"multi_news", 512, "longbench.rouge"},
    {"vcsum", 512, "longbench.rouge_zh"},
    {"trec", 64, "longbench.classification"},
    {"triviaqa", 32, "longbench.qa_f1"},
    {"samsum", 128, "longbench.rouge"},
    {"lsht", 64, "longbench.classification"},
    {"passage_count", 32, "longbench.count"},
    {"passage_retrieval_en", 32, "longbench.retrieval"},
    {"passage_retrieval_zh", 32, "longbench.retrieval_zh"},
    {"lcc", 64, "longbench.code_sim"},
    {"repobench-p", 64, "longbench.code_sim"},
};
// Registry key of the Hub archive holding every task file (datasets/registry.cpp).
const char* const kZipKey = "longbench/data.zip";
const std::set<std::string> kNoChat = {"trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p"};
const std::set<std::string> kFirstLine = {"trec", "triviaqa", "samsum", "lsht"};
const std::set<std::string> kE = {
    "qasper",     "multifieldqa_en", "hotpotqa", "2wikimqa",      "gov_report",           "multi_news",
    "trec",       "triviaqa",        "samsum",   "passage_count", "passage_retrieval_en", "lcc",
    "repobench-p"};

const nlohmann::json& prompts() {
  static const nlohmann::json p = nlohmann::json::parse(embedded_asset("longbench_dataset2prompt.json"));
  return p;
}

class LongBenchTask : public BasicTask {
 public:
  LongBenchTask(const LbSpec& s, TaskOptions opts)
      : BasicTask(TaskInfo{std::string("longbench_") + s.name,
                           "longbench",
                           s.grader,
                           "THUDM/LongBench data.zip: data/" + std::string(s.name) + ".jsonl",
                           std::nullopt,
                           {"longbench/data/" + std::string(s.name) + ".jsonl", kZipKey},
                           {{"e", "1: LongBench-E (data/<task>_e.jsonl, length-balanced; 13 tasks)"}}},
                  std::move(opts)),
        s_(s) {
    std::string n = s.name;
    info_.expected_count = n == "multifieldqa_en" ? 150 : (n == "lcc" || n == "repobench-p") ? 500 : 200;
    e_ = opt("e", "0") == "1";
    if (e_ && !kE.count(n)) fail("task {}: LongBench-E has no {} (option e=1)", info_.name, n);
    if (e_) {
      info_.data_files = {"longbench/data/" + n + "_e.jsonl", kZipKey};
      info_.source = "THUDM/LongBench data.zip: data/" + n + "_e.jsonl";
      info_.expected_count.reset();
    }
  }

  size_t load(const TaskContext& ctx, const ExampleSink& sink) const override {
    const std::string name = s_.name;
    std::string tmpl = prompts().at(name).get<std::string>();
    RecordReader read = reader(ctx);
    size_t ctx_pos = tmpl.find("{context}");
    std::string head =
        ctx_pos == std::string::npos ? "" : py_format(tmpl.substr(0, ctx_pos), {}, "dataset2prompt/" + name);
    int max_new = max_new_tokens_or(s_.max_new);
    return emit_records(
        ctx, read,
        [&](nlohmann::json&& r, const datasets::RecordPos& pos, Example& ex) {
          std::string context = str_field(r, "context", pos);
          std::string input = str_field(r, "input", pos);
          const auto& answers = field(r, "answers", pos);
          if (!answers.is_array() || answers.empty())
            fail("{}: field 'answers': expected a non-empty list", pos.where());
          for (const auto& a : answers) {
            if (!a.is_string()) fail("{}: field 'answers': expected strings", pos.where());
            ex.references.push_back(a.get<std::string>());
          }
          // pred.py: prompt_format.format(**json_obj); only {context} and {input} occur.
          std::string prompt = py_format(tmpl, {{"context", context}, {"input", input}}, pos.where());
          ex.id = info_.name + "/" +
                  (r.contains("_id") && r["_id"].is_string() ? r["_id"].get<std::string>() : std::to_string(pos.index));
          ex.task = info_.name;
          ex.messages = {{"user", std::move(prompt)}};
          ex.use_chat_template = !kNoChat.count(name);
          if (ctx_pos != std::string::npos) ex.context_chars = head.size() + context.size();
          ex.max_new_tokens = max_new;
          if (name == "samsum") ex.stop = {"\n"};
          ex.grader = s_.grader;
          if (r.contains("all_classes")) ex.meta["all_classes"] = r["all_classes"];
          if (kFirstLine.count(name)) ex.meta["first_line"] = true;
          if (r.contains("length")) {
            ex.meta["length"] = r["length"];
            if (r["length"].is_number()) {
              double L = r["length"].get<double>();
              ex.meta["length_bucket"] = L < 4000 ? "0-4k" : L < 8000 ? "4-8k" : "8k+";
            }
          }
          if (r.contains("language")) ex.meta["language"] = r["language"];
          ex.meta["index"] = pos.index;
          return true;
        },
        sink);
  }

 private:
  /// The extracted file longbench/data/<file> when a data dir has it, else member data/<file>
  /// of longbench/data.zip. Throws kvb::Error naming both keys when neither is available.
  RecordReader reader(const TaskContext& ctx) const {
    const std::string& key = info_.data_files[0];
    std::string path;
    try {
      path = ctx.locate(key);
    } catch (const Error&) {
      std::string zip;
      try {
        zip = ctx.locate(kZipKey);
      } catch (const Error& zip_missing) {
        fail("task {}: no data: {} (an extracted {} is read too)", info_.name, zip_missing.what(), key);
      }
      std::string member = key.substr(std::string("longbench/").size());  // "data/<task>.jsonl"
      return [zip, member](const datasets::RecordFn& fn, datasets::BadRecords& bad) {
        return datasets::read_jsonl_zip(zip, member, fn, bad);
      };
    }
    return [path](const datasets::RecordFn& fn, datasets::BadRecords& bad) {
      return datasets::read_records(path, fn, bad);
    };
  }

  const LbSpec& s_;
  bool e_ = false;
};

}  // namespace

KVB_TASK_FAMILY(longbench) {
  return table_factory<LongBenchTask>(kLb, [](const LbSpec& s) { return std::string("longbench_") + s.name; });
}

}  // namespace kvb::tasks
