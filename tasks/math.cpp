// Math reasoning tasks: AIME 2024, AIME 2025, GSM8K (test), MATH-500.
// Data and prompts: docs/benchmarks.md#math; R-KV's template: Zefan-Cai/R-KV run_math.py
// (R-KV, arXiv 2505.24133), as TRIM-KV's math runs use it (docs/benchmarks.md#math).
#include <regex>
#include <algorithm>

#include "engine/util/error.h"
#include "engine/util/io.h"
#include "engine/util/utf8.h"
#include "tasks/families.h"
#include "tasks/math_prompt.h"
#include "tasks/text_format.h"

namespace kvb::tasks {

const char* const kBoxedInstruction = "Please reason step by step, and put your final answer within \\boxed{}.";
const char* const kRkvTemplate =
    "You are given a math problem.\n\nProblem: {question}\n\n You need to solve the problem step by "
    "step. First, you need to provide the chain-of-thought, then provide the final answer.\n\n "
    "Provide the final answer in the format: Final answer:  \\boxed{}";

MathPrompt MathPrompt::from_option(const std::string& value) {
  MathPrompt p;
  if (value.empty() || value == "r1") {
    p.kind = Kind::kR1;
  } else if (value == "qwen") {
    p.kind = Kind::kQwenSystem;
  } else if (value == "rkv") {
    p.kind = Kind::kUserTemplate;
    p.user_template = kRkvTemplate;
  } else if (value.rfind("file:", 0) == 0) {
    p.kind = Kind::kUserTemplate;
    std::string path = value.substr(5);
    p.user_template = read_file(path, InputKind::kChatTemplate);
    // Checked here, so invalid UTF-8 is blamed on the template, not on the first record it
    // renders (issue 46, item 7).
    if (!utf8::is_valid(p.user_template)) fail("{}: math prompt template is not valid UTF-8", path);
    if (p.user_template.find("{question}") == std::string::npos)
      fail("{}: math prompt template has no {{question}} placeholder", path);
  } else {
    fail("math template '{}': expected r1, qwen, rkv or file:PATH", value);
  }
  return p;
}

std::vector<ChatMessage> MathPrompt::render(const std::string& question) const {
  switch (kind) {
    case Kind::kR1: return {{"user", question + "\n" + kBoxedInstruction}};
    case Kind::kQwenSystem: return {{"system", kBoxedInstruction}, {"user", question}};
    case Kind::kUserTemplate: return {{"user", replace_all(user_template, "{question}", question)}};
  }
  return {};
}

namespace {

struct MathSpec {
  const char* name;
  const char* key;       // registry key of the data file
  const char* question;  // field holding the problem
  const char* grader;
  int max_new_tokens;
  size_t count;
};

// max_new_tokens: the R-KV / TRIM-KV protocol's limits (AIME 32768, MATH 16384, GSM8K 8192).
const MathSpec kSpecs[] = {
    {"aime24", "aime24/test.jsonl", "problem", "aime", 32768, 30},
    {"aime25", "aime25/test.jsonl", "problem", "aime", 32768, 30},
    {"gsm8k", "gsm8k/test.jsonl", "question", "gsm8k", 8192, 1319},
    {"math500", "math500/test.jsonl", "problem", "math", 16384, 500},
};

class MathTask : public BasicTask {
 public:
  MathTask(const MathSpec& s, TaskOptions opts)
      : BasicTask(TaskInfo{s.name,
                           "math",
                           s.grader,
                           s.key,
                           s.count,
                           {s.key},
                           {{"template", "r1 (default: user '{q}\\n" + std::string(kBoxedInstruction) +
                                             "'), qwen (same text as system prompt), rkv (R-KV's "
                                             "template), file:PATH ({question} is replaced)"}}},
                  std::move(opts)),
        spec_(s),
        prompt_(MathPrompt::from_option(opt("template"))) {}

  size_t load(const TaskContext& ctx, const ExampleSink& sink) const override {
    std::string path = ctx.locate(spec_.key);
    int max_new = max_new_tokens_or(spec_.max_new_tokens);
    return emit_records(
        ctx, path,
        [&](nlohmann::json&& rec, const datasets::RecordPos& pos, Example& ex) {
          std::string q = str_field(rec, spec_.question, pos);
          std::string gold;
          if (std::string(spec_.name) == "gsm8k") {
            // Official extraction: the text after "#### ", commas removed.
            std::string a = str_field(rec, "answer", pos);
            size_t h = a.rfind("####");
            if (h == std::string::npos) fail("{}: field 'answer': no '####' final answer", pos.where());
            gold = replace_all(py_strip(a.substr(h + 4)), ",", "");
            // GSM8K's finals are plain decimal numbers; anything else ("", "nan", "inf") could never
            // be matched and would score every sample 0 as if the model were wrong.
            static const std::regex kNumber(R"(-?[0-9]+(\.[0-9]+)?)");
            if (!std::regex_match(gold, kNumber))
              fail("{}: field 'answer': the final answer after '####' is {:?}, not a number", pos.where(), gold);
            ex.meta["solution"] = a;
          } else {
            gold = str_or_int_field(rec, "answer", pos);
            static const std::regex kInteger(R"(-?[0-9]+)");
            if (spec_.grader == std::string("aime") && !std::regex_match(gold, kInteger))
              fail("{}: field 'answer': {:?} is not an integer (AIME answers are integers)", pos.where(), gold);
            if (py_strip(gold).empty()) fail("{}: field 'answer': empty", pos.where());
          }
          std::string id = std::to_string(pos.index);
          if (spec_.name == std::string("math500")) {
            id = str_field(rec, "unique_id", pos);
            ex.meta["subject"] = field(rec, "subject", pos);
            ex.meta["level"] = field(rec, "level", pos);
          } else if (rec.contains("id")) {
            id = rec["id"].is_string() ? rec["id"].get<std::string>() : rec["id"].dump();
          }
          ex.id = std::string(spec_.name) + "/" + id;
          ex.task = spec_.name;
          ex.messages = prompt_.render(q);
          ex.references = {gold};
          ex.meta["answer_type"] = spec_.grader == std::string("aime")    ? "integer"
                                   : spec_.grader == std::string("gsm8k") ? "number"
                                                                          : "latex";
          ex.meta["index"] = pos.index;
          ex.max_new_tokens = max_new;
          ex.grader = spec_.grader;
          return true;
        },
        sink);
  }

 private:
  const MathSpec& spec_;
  MathPrompt prompt_;
};

}  // namespace

KVB_TASK_FAMILY(math) {
  return table_factory<MathTask>(kSpecs, [](const MathSpec& s) { return std::string(s.name); });
}

}  // namespace kvb::tasks
