// LongProc (princeton-pli/LongProc; arXiv 2501.05414): six procedural long-output tasks ×
// output lengths. Data, prompts and limits: docs/benchmarks.md, LongProc.
//
// Two data layouts are read:
//  * GitHub layout (the reference loader's input): longproc/<task>/<task>_<len>.json plus
//    longproc/<task>/prompts.yaml (key USER_PROMPT, a Python str.format template) and, for
//    html_to_tsv, the webpage/*.html files. Prompts are rendered as longproc_data.py does.
//    travel_planning differs: one file longproc/travel_planning/travel_planning_all.json holds
//    both configs, split by estimated_output_tokens (2k = [0, 2048), 8k = [4096, 8192);
//    docs/benchmarks.md, LongProc),
//    and the prompt's {demonstration} is built from travel_planning_icl_examples.json by the
//    DFS trace of tasks/travel_trace.h, which also gives each example's reference output.
//  * HF rows (PrincetonPLI/LongProc): longproc/hf/<task>_<len>.jsonl (or .json), objects
//    {id, input_prompt, reference_output, metadata (JSON string)}, already rendered. Used for
//    files absent from the GitHub snapshot (path_traversal 2k/8k, tom_tracking 8k, travel).
// Sampling (option sample=helmet, default): HELMET's longproc add-on shuffles with
// datasets' shuffle(seed=42) — numpy default_rng(42).permutation(n) — and keeps the first 100.
#include <algorithm>
#include <filesystem>
#include <map>

#include "datasets/records.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "tasks/countdown_trace.h"
#include "tasks/families.h"
#include "tasks/longproc.h"
#include "tasks/text_format.h"
#include "tasks/travel_trace.h"

namespace kvb::tasks {

namespace {

/// `rel` (a path a dataset record supplies, field `field`) resolved inside the data directory
/// `dir`: symlinks are resolved (std::filesystem::weakly_canonical) and the result must still lie
/// under `dir`'s own resolved path. An absolute path, a `..` that climbs out, or a symlink that
/// points out is refused (issue 46, item 3): a record never reads a file outside its data.
/// Throws kvb::Error (exit 2) naming the record and the field.
std::string confined_path(const std::string& dir, const std::string& rel, const char* field,
                          const datasets::RecordPos& pos) {
  std::error_code ec;
  const std::filesystem::path base = std::filesystem::weakly_canonical(std::filesystem::path(dir), ec);
  if (ec) fail("{}: field '{}': cannot resolve the data directory {}: {}", pos.where(), field, dir, ec.message());
  if (rel.empty() || std::filesystem::path(rel).is_absolute())
    fail("{}: field '{}': '{}' must be a relative path inside the data directory", pos.where(), field, rel);
  const std::filesystem::path full = std::filesystem::weakly_canonical(base / rel, ec);
  if (ec) fail("{}: field '{}': cannot resolve '{}': {}", pos.where(), field, rel, ec.message());
  const std::filesystem::path inside = full.lexically_relative(base);
  if (inside.empty() || *inside.begin() == "..")
    fail("{}: field '{}': '{}' resolves outside the data directory {}", pos.where(), field, rel, base.string());
  return full.string();
}

// numpy.random.default_rng(42).permutation(n)[:100] for the row counts LongProc has.
const std::map<size_t, std::vector<uint32_t>>& helmet_orders() {
  static const std::map<size_t, std::vector<uint32_t>> m = {
#include "tasks/longproc_helmet_order.inc"
  };
  return m;
}

struct Config {
  std::string task;
  std::string len;
  size_t github_count;  // rows in the GitHub file (0 = not in the snapshot / unknown)
};

const std::vector<Config>& configs() {
  static const std::vector<Config> c = {
      {"html_to_tsv", "0.5k", 100},
      {"html_to_tsv", "2k", 189},
      {"html_to_tsv", "8k", 120},
      {"pseudo_to_code", "0.5k", 199},
      {"pseudo_to_code", "2k", 200},
      {"path_traversal", "0.5k", 200},
      {"path_traversal", "2k", 200},
      {"path_traversal", "8k", 200},
      {"tom_tracking", "0.5k", 200},
      {"tom_tracking", "2k", 200},
      {"tom_tracking", "8k", 200},
      {"countdown", "0.5k", 200},
      {"countdown", "2k", 200},
      {"countdown", "8k", 200},
      // travel_planning: rows of travel_planning_all.json in the config's estimated_output_tokens
      // range; the counts are the HF configs' row counts (docs/benchmarks.md, LongProc).
      {"travel_planning", "2k", 769},
      {"travel_planning", "8k", 239},
  };
  return c;
}

// travel_planning_all.json rows of a config: lo <= estimated_output_tokens < hi (longproc_data.py).
std::pair<double, double> travel_range(const std::string& len) {
  if (len == "2k") return {0, 2048};
  return {4096, 8192};
}

const char* const kTravelIclKey = "longproc/travel_planning/travel_planning_icl_examples.json";

// HELMET longproc add-on generation_max_length per output length.
int default_max_new(const Config& c) {
  if (c.len == "0.5k") return 1024;
  if (c.len == "2k") return 3072;
  return 10240;
}

const nlohmann::json& fld(const nlohmann::json& r, const char* k, const datasets::RecordPos& p) {
  return field(r, k, p);
}

std::vector<int64_t> int_list(const nlohmann::json& v, const char* name, const datasets::RecordPos& pos) {
  if (!v.is_array()) fail("{}: field '{}': expected a list of integers", pos.where(), name);
  std::vector<int64_t> out;
  for (const auto& x : v) {
    if (!x.is_number_integer()) fail("{}: field '{}': expected a list of integers", pos.where(), name);
    out.push_back(x.get<int64_t>());
  }
  return out;
}

std::string join_lines(const nlohmann::json& v, const char* name, const datasets::RecordPos& pos) {
  if (!v.is_array()) fail("{}: field '{}': expected a list of strings", pos.where(), name);
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) fail("{}: field '{}': item {} is not a string", pos.where(), name, i);
    if (i) out += "\n";
    out += v[i].get<std::string>();
  }
  return out;
}

class LongProcTask : public BasicTask {
 public:
  LongProcTask(const Config& c, TaskOptions opts)
      : BasicTask(TaskInfo{"longproc_" + c.task + "_" + c.len,
                           "longproc",
                           "longproc_" + c.task,
                           "princeton-pli/LongProc data/" + c.task + " (GitHub) or PrincetonPLI/LongProc (HF rows)",
                           std::nullopt,
                           {longproc_github_key(c.task, c.len), longproc_hf_key(c.task, c.len)},
                           {{"sample", "helmet (default: HELMET's shuffle(seed=42), first 100) or all (file order)"},
                            {"source", "auto (default: GitHub layout if present, else HF rows), github or hf"}}},
                  std::move(opts)),
        cfg_(c) {
    if (c.github_count) info_.expected_count = c.github_count;
    if (c.task == "travel_planning") {
      info_.data_files.push_back(kTravelIclKey);
      auto [lo, hi] = travel_range(c.len);
      info_.source = fmt::format(
          "princeton-pli/LongProc data/travel_planning (GitHub; {} <= estimated_output_tokens < {}) or "
          "PrincetonPLI/LongProc (HF rows)",
          lo, hi);
    }
    std::string s = opt("sample", "helmet");
    if (s != "helmet" && s != "all") fail("task {}: option sample: expected helmet or all, got '{}'", info_.name, s);
    std::string src = opt("source", "auto");
    if (src != "auto" && src != "github" && src != "hf")
      fail("task {}: option source: expected auto, github or hf, got '{}'", info_.name, src);
  }

  size_t load(const TaskContext& ctx, const ExampleSink& sink) const override {
    std::vector<Example> all = load_file_order(ctx);
    std::vector<size_t> order(all.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (opt("sample", "helmet") == "helmet") {
      auto it = helmet_orders().find(all.size());
      if (it != helmet_orders().end()) {
        order.assign(it->second.begin(), it->second.end());
      } else {
        fail(
            "task {}: no precomputed HELMET sample order for {} rows (tools/gen_task_goldens.py "
            "--orders adds one); use sample=all",
            info_.name, all.size());
      }
    }
    size_t n = 0;
    for (size_t idx : order) {
      if (ctx.limit && n >= ctx.limit) break;
      ++n;
      if (!sink(std::move(all[idx]))) break;
    }
    return n;
  }

  /// All examples in file order (GitHub layout or HF rows).
  std::vector<Example> load_file_order(const TaskContext& ctx) const {
    std::string src = opt("source", "auto");
    std::string path;
    bool github = false;
    if (src != "hf") {
      try {
        path = ctx.locate(longproc_github_key(cfg_.task, cfg_.len));
        github = true;
      } catch (const Error&) {
        if (src == "github") throw;
      }
    }
    if (!github) path = ctx.locate(longproc_hf_key(cfg_.task, cfg_.len));
    TaskContext all_ctx = ctx;
    all_ctx.limit = 0;  // sampling needs every row
    std::vector<Example> out;
    auto sink = [&](Example&& e) {
      out.push_back(std::move(e));
      return true;
    };
    if (github) {
      load_github(all_ctx, path, sink);
    } else {
      load_hf(all_ctx, path, sink);
    }
    return out;
  }

 private:
  void finish(Example& ex, const std::string& id, std::string prompt, std::string reference) const {
    ex.id = info_.name + "/" + id;
    ex.task = info_.name;
    ex.messages = {{"user", std::move(prompt)}};
    ex.references = {std::move(reference)};
    ex.max_new_tokens = max_new_tokens_or(default_max_new(cfg_));
    ex.grader = info_.grader;
  }

  void load_hf(const TaskContext& ctx, const std::string& path, const ExampleSink& sink) const {
    emit_records(
        ctx, path,
        [&](nlohmann::json&& r, const datasets::RecordPos& pos, Example& ex) {
          std::string id = str_field(r, "id", pos);
          std::string prompt = str_field(r, "input_prompt", pos);
          std::string ref = str_field(r, "reference_output", pos);
          const auto& md = fld(r, "metadata", pos);
          if (md.is_string()) {
            ex.meta["item"] = parse_json(md.get<std::string>(), pos.where() + ": field 'metadata'");
          } else {
            ex.meta["item"] = md;
          }
          ex.meta["index"] = pos.index;
          ex.meta["hf_id"] = id;
          finish(ex, std::to_string(pos.index), std::move(prompt), std::move(ref));
          return true;
        },
        sink);
  }

  void load_github(const TaskContext& ctx, const std::string& path, const ExampleSink& sink) const {
    namespace fs = std::filesystem;
    std::string dir = fs::path(path).parent_path().string();
    std::string yaml_path = ctx.locate(longproc_prompts_key(cfg_.task));
    nlohmann::json y = datasets::load_yaml_file(yaml_path);
    if (!y.is_object() || !y.contains("USER_PROMPT") || !y["USER_PROMPT"].is_string())
      fail("{}: USER_PROMPT: missing or not a string", yaml_path);
    std::string tmpl = y["USER_PROMPT"].get<std::string>();
    const std::string& t = cfg_.task;

    if (t == "countdown") {
      // The reference fills the demonstration first (nums/target kept as "{nums}"/"{target}"),
      // then formats each example: two str.format passes.
      std::string demo;
      const std::pair<std::vector<int64_t>, int64_t> demos[] = {{{40, 19, 23, 7}, 29}, {{9, 16, 6, 18}, 12}};
      for (const auto& [nums, target] : demos) {
        if (!demo.empty()) demo += "\n\n";
        demo += "# Example\nNumbers: " + py_int_list(nums) + "\nTarget: " + std::to_string(target) + "\n\n" +
                countdown_trace(nums, target).demonstration;
      }
      tmpl = py_format(tmpl, {{"demonstration", demo}, {"nums", "{nums}"}, {"target", "{target}"}}, yaml_path);
    }
    // travel_planning: demonstrations from the ICL examples, then {problem} per row (two
    // str.format passes, as the reference).
    size_t travel_kept = 0;
    if (t == "travel_planning") {
      std::string icl_path = ctx.locate(kTravelIclKey);
      nlohmann::json icl = nlohmann::json::array();
      datasets::BadRecords strict;  // a broken demonstration breaks every prompt: always fail
      datasets::read_records(
          icl_path, [&](nlohmann::json&& r, const datasets::RecordPos&) { icl.push_back(std::move(r)); }, strict);
      tmpl =
          py_format(tmpl, {{"demonstration", travel_demonstration(icl, icl_path)}, {"problem", "{problem}"}}, yaml_path);
    }

    emit_records(
        ctx, path,
        [&](nlohmann::json&& r, const datasets::RecordPos& pos, Example& ex) {
          std::map<std::string, std::string> f;
          std::string ref;
          std::string id = std::to_string(pos.index);
          size_t index = pos.index;
          if (t == "html_to_tsv") {
            for (const char* k : {"task_topic", "task_description", "filtering_instruction", "tsv_header"})
              f[k] = str_field(r, k, pos);
            std::string html = str_field(r, "html_path", pos);
            f["html_str"] = read_file(confined_path(dir, html, "html_path", pos), InputKind::kDataRecord);
            ref = str_field(r, "gt", pos);
            ex.meta["task_id"] = str_field(r, "task_id", pos);
            ex.meta["tsv_header"] = f["tsv_header"];
          } else if (t == "pseudo_to_code") {
            f["pseudocode"] = join_lines(fld(r, "pseudocode_lines", pos), "pseudocode_lines", pos);
            ref = join_lines(fld(r, "code_lines", pos), "code_lines", pos);
            ex.meta["testcases"] = fld(r, "testcases", pos);
            ex.meta["problem_id"] = fld(r, "problem_id", pos);
          } else if (t == "path_traversal") {
            f["city_context"] = str_field(r, "context_nl", pos);
            const auto& q = fld(r, "question_repr", pos);
            if (!q.is_array() || q.size() < 2 || !q[0].is_string() || !q[1].is_string())
              fail("{}: field 'question_repr': expected [src, dst]", pos.where());
            f["src_city"] = q[0].get<std::string>();
            f["dst_city"] = q[1].get<std::string>();
            ref = str_field(r, "answer_nl", pos);
          } else if (t == "tom_tracking") {
            for (const char* k : {"story_components", "story", "question"}) f[k] = str_field(r, k, pos);
            ref = str_field(r, "solution", pos);
          } else if (t == "countdown") {
            auto nums = int_list(fld(r, "nums", pos), "nums", pos);
            const auto& tg = fld(r, "target", pos);
            if (!tg.is_number_integer()) fail("{}: field 'target': expected an integer", pos.where());
            int64_t target = tg.get<int64_t>();
            f["nums"] = py_int_list(nums);
            f["target"] = std::to_string(target);
            ref = countdown_trace(nums, target).demonstration;
            ex.meta["nums"] = nums;
            ex.meta["target"] = target;
          } else if (t == "travel_planning") {
            const auto& eot = fld(r, "estimated_output_tokens", pos);
            if (!eot.is_number()) fail("{}: field 'estimated_output_tokens': expected a number", pos.where());
            auto [lo, hi] = travel_range(cfg_.len);
            double n = eot.get<double>();
            if (!(lo <= n && n < hi)) return false;  // the other config's row
            index = travel_kept++;
            id = std::to_string(index);
            f["problem"] = str_field(r, "disambig_question_text", pos);
            ref = travel_trace(r, pos.where()).procedure;
            nlohmann::json item;
            for (const char* k : {"id", "ground_truth_plan", "ground_truth_cities", "ground_truth_durations"})
              item[k] = fld(r, k, pos);
            ex.meta["item"] = std::move(item);
            ex.meta["file_index"] = pos.index;
          } else {
            fail("{}: task {} has no GitHub-layout prompt builder; provide HF rows at {}", path, info_.name,
                 longproc_hf_key(cfg_.task, cfg_.len));
          }
          ex.meta["index"] = index;
          finish(ex, id, py_format(tmpl, f, yaml_path), std::move(ref));
          return true;
        },
        sink);
  }

  Config cfg_;
};

}  // namespace

std::string longproc_github_key(const std::string& task, const std::string& len) {
  if (task == "travel_planning") return "longproc/travel_planning/travel_planning_all.json";
  return "longproc/" + task + "/" + task + "_" + len + ".json";
}
std::string longproc_hf_key(const std::string& task, const std::string& len) {
  return "longproc/hf/" + task + "_" + len + ".jsonl";
}
std::string longproc_prompts_key(const std::string& task) { return "longproc/" + task + "/prompts.yaml"; }

KVB_TASK_FAMILY(longproc) {
  return table_factory<LongProcTask>(configs(), [](const Config& c) { return "longproc_" + c.task + "_" + c.len; });
}

}  // namespace kvb::tasks
