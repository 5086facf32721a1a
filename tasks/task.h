// Tasks: a benchmark's examples turned into exactly the prompts the papers used, plus what the
// harness needs to generate and grade them (references, generation limits, stop strings and the
// grader name). Sources, schemas and prompt templates: docs/benchmarks.md.
//
// Flow: make_task("gsm8k:template=rkv") → Task::load(ctx, sink) streams Examples. Every task
// file registers its own tasks (KVB_TASK_FAMILY, tasks/families.h); `kvbench tasks` and
// task_names() list them. Adding one: docs/benchmarks.md#adding-a-benchmark-task.
// A spec may carry options: "name:key=value,key=value" (see each task's TaskInfo::options).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "datasets/records.h"
#include "datasets/registry.h"

namespace kvb::tasks {

/// One chat message. role is "system", "user" or "assistant"; content is UTF-8 text.
struct ChatMessage {
  std::string role;
  std::string content;
  bool operator==(const ChatMessage& o) const { return role == o.role && content == o.content; }
};

/// A follow-up query of a multi-turn example (SCBench; LongMemEval under the SCBench protocol).
/// The harness appends an assistant message — `previous` turn's gold answer
/// (Example::golden_history) or the model's own output — then a user message `user`.
struct Turn {
  std::string user;                                ///< the user message of this turn
  std::vector<std::string> references;             ///< gold answers of this turn (any may match)
  nlohmann::json meta = nlohmann::json::object();  ///< grader metadata (options, sub-task, ...)
  int max_new_tokens = 0;                          ///< generation cap for this turn
  std::vector<std::string> stop;                   ///< extra stop strings (EOS is always a stop)
  std::string grader;                              ///< grader registry name for this turn
  std::string gold_history;                        ///< text inserted as the assistant reply after this turn
                                                   ///< when Example::golden_history is true
};

/// One unit of work for the harness: a prompt plus everything needed to grade the output.
struct Example {
  std::string id;    ///< stable across runs, unique within the task (e.g. "gsm8k/17")
  std::string task;  ///< task name, e.g. "gsm8k", "longproc_countdown_2k"
  /// The prompt as chat messages (system optional), ending with the first user message.
  std::vector<ChatMessage> messages;
  /// True when the prompt must go through the model's chat template. False for the LongBench
  /// completion tasks (trec, triviaqa, samsum, lsht, lcc, repobench-p): use raw_prompt().
  bool use_chat_template = true;
  /// Number of leading characters of the last user message that form the shared context
  /// (document, history) before the query; 0 when the prompt is not split. Lets the engine
  /// prefill and compress the context before the query arrives (SCBench protocol).
  size_t context_chars = 0;

  std::vector<std::string> references;             ///< gold answers (any may match)
  nlohmann::json meta = nlohmann::json::object();  ///< answer type, choices, tags, ...
  int max_new_tokens = 0;                          ///< generation cap (new tokens)
  std::vector<std::string> stop;                   ///< extra stop strings
  std::string grader;                              ///< graders/ registry name

  /// Follow-up turns sharing this example's context (empty for single-turn tasks).
  std::vector<Turn> followups;
  /// Gold answer of the first turn, inserted as assistant reply before followups[0].
  std::string gold_history;
  /// SCBench default: previous turns' gold answers (not the model's outputs) form the history.
  bool golden_history = true;

  /// The prompt for non-chat use: the contents of all messages concatenated (system, then
  /// user), which is what the references feed a base model when no chat template is applied.
  std::string raw_prompt() const;
};

/// Static description of a task, for `kvbench tasks` and the suites.
struct TaskInfo {
  std::string name;                            ///< registry name
  std::string benchmark;                       ///< family: "gsm8k", "longproc", "scbench", ...
  std::string grader;                          ///< default grader name
  std::string source;                          ///< where the data comes from (registry key / HF repo)
  std::optional<size_t> expected_count;        ///< examples in the full file, when known
  std::vector<std::string> data_files;         ///< registry keys the task reads
  std::map<std::string, std::string> options;  ///< option name → help text
};

/// Where a task finds its files and how it treats bad records.
struct TaskContext {
  /// Resolves a registry key (e.g. "gsm8k/test.jsonl") to a local path; throws kvb::Error when
  /// the file is unavailable. Usually DataLocator::locate (datasets/registry.h).
  std::function<std::string(const std::string& key)> locate;
  datasets::BadRecords* bad = nullptr;  ///< where skipped records go (nullptr: fail on first)
  size_t limit = 0;                     ///< stop after this many examples (0 = all)
};

/// Receives examples one at a time; return false to stop loading early.
using ExampleSink = std::function<bool(Example&&)>;

/// A benchmark task. Implementations live in tasks/<benchmark>.cpp.
class Task {
 public:
  virtual ~Task() = default;
  /// Name, grader, source and options of this task.
  virtual const TaskInfo& info() const = 0;
  /// Streams the task's examples in file order (LongProc: HELMET's sampled order) to `sink`.
  /// Returns the number of examples produced. Throws kvb::Error for missing files, malformed
  /// records (unless ctx.bad is in skip mode) and bad options.
  virtual size_t load(const TaskContext& ctx, const ExampleSink& sink) const = 0;

  /// Convenience: load everything into a vector.
  std::vector<Example> load_all(const TaskContext& ctx) const;
};

/// Options given in a task spec, "name:key=value,key=value".
using TaskOptions = std::map<std::string, std::string>;

/// The example as JSON (id, task, messages, use_chat_template, context_chars, references, meta,
/// max_new_tokens, stop, grader, followups, gold_history, golden_history): what
/// `kvbench tasks --show` prints and what a harness may store.
nlohmann::json to_json(const Example& e);

/// Splits "name:k=v,k2=v2" into name and options with the one spec parser (engine/util/spec.h,
/// parse_named_spec: a key given twice, a stray comma or a parameter without '=' is an error).
std::pair<std::string, TaskOptions> parse_task_spec(const std::string& spec);

/// Creates the task named by `spec` (with options). Throws kvb::Error("unknown task ...",
/// listing close names) for unknown names and for options the task does not accept.
std::unique_ptr<Task> make_task(const std::string& spec);

/// Every registered task name, sorted.
std::vector<std::string> task_names();

/// What one task file registers (KVB_TASK_FAMILY, tasks/families.h): the task names it makes,
/// the factory, and the data files it reads that the built-in datasets table does not list.
/// The registry calls every task file's factory once, at its first use (no static-init order).
struct TaskFactory {
  std::vector<std::string> names;  ///< names this factory makes (unique over all task files)
  std::function<std::unique_ptr<Task>(const std::string& name, const TaskOptions& opts)> make;
  /// Data files of these tasks, added to datasets::sources() when the registry is first used
  /// (where `kvbench datasets fetch` downloads them from, their sha256); TaskInfo::data_files
  /// names them by key.
  std::vector<datasets::SourceFile> sources;
};

}  // namespace kvb::tasks
