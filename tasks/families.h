// Internal: the factory of each benchmark family (tasks/<benchmark>.cpp) and helpers they share.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tasks/task.h"

namespace kvb::tasks {

/// Starts the definition of a task file's factory: `KVB_TASK_FAMILY(mybench) { TaskFactory f; ...
/// return f; }` defines `TaskFactory kvb_task_family_mybench()`. The line must start the line
/// (column 0): the build lists every tasks/*.cpp with one (cmake/gen_registry_list.cmake) and the
/// registry calls them all (registry.cpp), so a new task file needs no other registration.
#define KVB_TASK_FAMILY(family) TaskFactory kvb_task_family_##family()

/// The factory of a family whose tasks are the entries of a static spec table: the task named
/// `name_of(spec)` is `TaskT(spec, opts)`. `specs` (an array or container of specs with static
/// storage duration) is referenced, not copied; `name_of` maps a spec to its registry name.
template <class TaskT, class Specs, class NameOf>
TaskFactory table_factory(const Specs& specs, NameOf name_of) {
  TaskFactory f;
  for (const auto& s : specs) f.names.push_back(name_of(s));
  f.make = [&specs, name_of](const std::string& name, const TaskOptions& opts) -> std::unique_ptr<Task> {
    for (const auto& s : specs)
      if (name == name_of(s)) return std::make_unique<TaskT>(s, opts);
    return nullptr;
  };
  return f;
}

/// Base for the tasks: holds TaskInfo and the options, and validates option names.
class BasicTask : public Task {
 public:
  BasicTask(TaskInfo info, TaskOptions opts);
  const TaskInfo& info() const override { return info_; }

 protected:
  /// Option value or `def` when absent.
  std::string opt(const std::string& key, const std::string& def = "") const;
  /// Integer option (kvb::Error naming the task and option when not an integer ≥ 0).
  long long opt_int(const std::string& key, long long def) const;
  /// The generic "max_new_tokens" override, or `def`.
  int max_new_tokens_or(int def) const { return static_cast<int>(opt_int("max_new_tokens", def)); }

  TaskInfo info_;
  TaskOptions opts_;
};

/// Shared record helpers: field access with errors naming file, line/element and field.
const nlohmann::json& field(const nlohmann::json& rec, const char* name, const datasets::RecordPos& pos);
std::string str_field(const nlohmann::json& rec, const char* name, const datasets::RecordPos& pos);
/// A string field, or the decimal text of an integer field.
std::string str_or_int_field(const nlohmann::json& rec, const char* name, const datasets::RecordPos& pos);

/// Reads records of a file through ctx (bad-record policy and limit) and calls `make` on each;
/// `make` returns false to skip a record silently. Stops at ctx.limit examples or when the
/// sink returns false. Returns the number of examples emitted.
size_t emit_records(const TaskContext& ctx, const std::string& path,
                    const std::function<bool(nlohmann::json&&, const datasets::RecordPos&, Example&)>& make,
                    const ExampleSink& sink);

/// Reads the records of some source: calls the record function once per record and reports
/// bad records through the BadRecords; returns the number delivered (e.g. read_records on a
/// path, or read_jsonl_zip on a ZIP member).
using RecordReader = std::function<size_t(const datasets::RecordFn&, datasets::BadRecords&)>;

/// emit_records over any record source (a ZIP member, ...); same semantics as the path form.
size_t emit_records(const TaskContext& ctx, const RecordReader& read,
                    const std::function<bool(nlohmann::json&&, const datasets::RecordPos&, Example&)>& make,
                    const ExampleSink& sink);

}  // namespace kvb::tasks
