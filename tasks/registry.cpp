#include <algorithm>
#include <exception>
#include <set>

#include "datasets/registry.h"

#include "engine/util/error.h"
#include "engine/util/spec.h"
#include "tasks/families.h"

namespace kvb::tasks {

std::string Example::raw_prompt() const {
  std::string out;
  for (const auto& m : messages) out += m.content;
  return out;
}

nlohmann::json to_json(const Example& e) {
  nlohmann::json msgs = nlohmann::json::array();
  for (const auto& m : e.messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  nlohmann::json fu = nlohmann::json::array();
  for (const auto& t : e.followups)
    fu.push_back({{"user", t.user},
                  {"references", t.references},
                  {"meta", t.meta},
                  {"max_new_tokens", t.max_new_tokens},
                  {"stop", t.stop},
                  {"grader", t.grader},
                  {"gold_history", t.gold_history}});
  return {{"id", e.id},
          {"task", e.task},
          {"messages", msgs},
          {"use_chat_template", e.use_chat_template},
          {"context_chars", e.context_chars},
          {"references", e.references},
          {"meta", e.meta},
          {"max_new_tokens", e.max_new_tokens},
          {"stop", e.stop},
          {"grader", e.grader},
          {"followups", fu},
          {"gold_history", e.gold_history},
          {"golden_history", e.golden_history}};
}

std::vector<Example> Task::load_all(const TaskContext& ctx) const {
  std::vector<Example> out;
  load(ctx, [&](Example&& e) {
    out.push_back(std::move(e));
    return true;
  });
  return out;
}

BasicTask::BasicTask(TaskInfo info, TaskOptions opts) : info_(std::move(info)), opts_(std::move(opts)) {
  info_.options.emplace("max_new_tokens", "override the generation cap (new tokens)");
  for (const auto& [k, v] : opts_) {
    if (!info_.options.count(k)) {
      std::string known;
      for (const auto& [name, help] : info_.options) known += (known.empty() ? "" : ", ") + name;
      fail("task {}: unknown option '{}' (options: {})", info_.name, k, known);
    }
  }
}

std::string BasicTask::opt(const std::string& key, const std::string& def) const {
  auto it = opts_.find(key);
  return it == opts_.end() ? def : it->second;
}

long long BasicTask::opt_int(const std::string& key, long long def) const {
  auto it = opts_.find(key);
  if (it == opts_.end()) return def;
  try {
    size_t used = 0;
    long long v = std::stoll(it->second, &used);
    if (used == it->second.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  fail("task {}: option {}: expected a non-negative integer, got '{}'", info_.name, key, it->second);
}

const nlohmann::json& field(const nlohmann::json& rec, const char* name, const datasets::RecordPos& pos) {
  if (!rec.is_object()) fail("{}: expected a JSON object", pos.where());
  auto it = rec.find(name);
  if (it == rec.end()) fail("{}: missing field '{}'", pos.where(), name);
  return *it;
}

std::string str_field(const nlohmann::json& rec, const char* name, const datasets::RecordPos& pos) {
  const auto& v = field(rec, name, pos);
  if (!v.is_string()) fail("{}: field '{}': expected a string, got {}", pos.where(), name, v.type_name());
  return v.get<std::string>();
}

std::string str_or_int_field(const nlohmann::json& rec, const char* name, const datasets::RecordPos& pos) {
  const auto& v = field(rec, name, pos);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<long long>());
  fail("{}: field '{}': expected a string or integer, got {}", pos.where(), name, v.type_name());
}

size_t emit_records(const TaskContext& ctx, const std::string& path,
                    const std::function<bool(nlohmann::json&&, const datasets::RecordPos&, Example&)>& make,
                    const ExampleSink& sink) {
  return emit_records(
      ctx,
      [&path](const datasets::RecordFn& fn, datasets::BadRecords& bad) { return datasets::read_records(path, fn, bad); },
      make, sink);
}

size_t emit_records(const TaskContext& ctx, const RecordReader& read,
                    const std::function<bool(nlohmann::json&&, const datasets::RecordPos&, Example&)>& make,
                    const ExampleSink& sink) {
  datasets::BadRecords local;
  datasets::BadRecords& bad = ctx.bad ? *ctx.bad : local;
  size_t emitted = 0;
  bool stop = false;
  struct Stop {};
  try {
    read(
        [&](nlohmann::json&& rec, const datasets::RecordPos& pos) {
          if (stop) return;
          Example ex;
          if (!make(std::move(rec), pos, ex)) return;
          ++emitted;
          if (!sink(std::move(ex)) || (ctx.limit && emitted >= ctx.limit)) {
            stop = true;
            throw Stop{};
          }
        },
        bad);
  } catch (const Stop&) {
  }
  return emitted;
}

std::pair<std::string, TaskOptions> parse_task_spec(const std::string& spec) {
  NamedSpec n = parse_named_spec(spec, "task spec");
  // "gsm8k:template=" meant the default template without saying so: every task option needs a value.
  for (const auto& [k, v] : n.params)
    if (v.empty()) fail("task spec '{}': parameter '{}' has an empty value", spec, k);
  return {std::move(n.name), std::move(n.params)};
}

// Every task file's factory (KVB_TASK_FAMILY in tasks/*.cpp), listed by the build.
#define KVB_TASK_FAMILY_ENTRY(family) TaskFactory kvb_task_family_##family();
#include "tasks/task_families.inc"
#undef KVB_TASK_FAMILY_ENTRY

namespace {

const std::vector<TaskFactory>& factories() {
  static const std::vector<TaskFactory> f = [] {
    std::vector<TaskFactory> all = {
#define KVB_TASK_FAMILY_ENTRY(family) kvb_task_family_##family(),
#include "tasks/task_families.inc"
#undef KVB_TASK_FAMILY_ENTRY
    };
    std::set<std::string> seen;
    for (const auto& fam : all) {
      for (const auto& n : fam.names)
        if (!seen.insert(n).second) fail("task registry: task '{}' is registered twice", n);
      datasets::add_sources(fam.sources);  // the files a task file declares next to its task
    }
    return all;
  }();
  return f;
}

}  // namespace

std::unique_ptr<Task> make_task(const std::string& spec) {
  auto [name, opts] = parse_task_spec(spec);
  for (const auto& f : factories())
    if (std::find(f.names.begin(), f.names.end(), name) != f.names.end()) return f.make(name, opts);
  std::string close;
  for (const auto& n : task_names())
    if (n.find(name) != std::string::npos || name.find(n.substr(0, n.find('_'))) == 0)
      close += (close.empty() ? "" : ", ") + n;
  fail("unknown task '{}'{}; `kvbench tasks` lists them", name,
       close.empty() ? std::string() : " (did you mean: " + close + "?)");
}

std::vector<std::string> task_names() {
  std::vector<std::string> out;
  for (const auto& f : factories()) out.insert(out.end(), f.names.begin(), f.names.end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kvb::tasks
