// Synthetic result stores for the results tests: a grid of work items with deterministic,
// made-up generations and grades (no engine involved).
#pragma once

#include <string>
#include <vector>

#include "engine/util/hash.h"
#include "results/grid.h"
#include "results/store.h"

namespace kvb::results::testing {

/// A small grid: 1 model, policies full + snapkv + rkv, budgets {64,128}, `examples` math
/// examples, `samples` samples each.
inline GridSpec small_grid(int examples = 4, int samples = 2) {
  GridSpec g;
  g.models = {{"stories260K", "rev-abc"}};
  PolicySpec full{"full", nlohmann::json::object(), false, ""};
  g.policies = {full, {"snapkv", {{"window", 8}}, true, ""}, {"rkv", nlohmann::json::object(), true, ""}};
  g.budgets = {64, 128};
  for (int e = 0; e < examples; ++e)
    g.examples.push_back({"math", "ex" + std::to_string(e), "What is " + std::to_string(e) + "+1?"});
  g.samples = samples;
  g.sampling.temperature = 0.7;
  g.seed = 42;
  return g;
}

/// A deterministic fake generation for a work item (a function of its key only).
inline GenerationRecord fake_generation(const WorkItem& it) {
  GenerationRecord g;
  g.item_key = it.key;
  g.text = "answer " + it.key.substr(0, 6);
  g.prompt_tokens = 10 + (it.key[0] % 7);
  g.generated_tokens = 20 + (it.key[1] % 5);
  g.finish_reason = "stop";
  g.prefill_s = 0.01;
  g.decode_s = 0.1;
  g.ttft_s = 0.012;
  g.evictions = it.budget > 0 ? 3 : 0;
  g.kv_bytes_peak = it.budget > 0 ? it.budget * 1000 : 500000;
  g.kv_bytes_final = g.kv_bytes_peak / 2;
  g.device_peak_bytes = 1 << 20;
  return g;
}

/// A deterministic fake grade: correct when the first hex digit of the key is < `threshold`
/// (of 16), answer = "a" + that digit.
inline GradeRecord fake_grade(const WorkItem& it, int threshold = 8) {
  GradeRecord r;
  r.item_key = it.key;
  int d = std::stoi(it.key.substr(0, 1), nullptr, 16);
  r.score = d < threshold ? 1.0 : 0.0;
  r.extracted = r.pred_norm = "a" + std::to_string(d % 3);
  r.gold_norm = "a0";
  r.grader = "fake/1";
  return r;
}

inline RunInfo run_info(const std::string& name = "test") {
  RunInfo info;
  info.name = name;
  info.kvbench_version = "0.1.0";
  info.git_sha = "deadbeef";
  info.host = "testhost";
  info.backend = "cpu";
  info.device = "cpu";
  info.config = {{"suite", "math"}};
  info.models = {{"stories260K", "rev-abc", std::string(64, 'a')}};
  info.datasets = {{"math", "data/datasets/math", std::string(64, 'b')}};
  info.run_key = default_run_key(info);
  return info;
}

/// Writes `items` (all pending ones) in batches of `batch` into a run of `store`.
inline int64_t fill(Store& store, const std::vector<WorkItem>& items, const RunInfo& info, Shard shard = {},
                    size_t batch = 5, int threshold = 8) {
  int64_t run = store.begin_run(info, shard);
  store.add_work_items(items);
  auto todo = store.pending(run, items);
  for (size_t i = 0; i < todo.size(); i += batch) {
    std::vector<GenerationRecord> gens;
    std::vector<GradeRecord> grades;
    for (size_t j = i; j < std::min(todo.size(), i + batch); ++j) {
      gens.push_back(fake_generation(todo[j]));
      grades.push_back(fake_grade(todo[j], threshold));
    }
    store.write_batch(run, gens, grades);
  }
  store.end_run(run);
  return run;
}

/// Writes into `store` one finished run `info` holding, for every item of `items` (added to the
/// store when new), a fake generation and grade, all in one batch; `edit(gen, i)` first sets the
/// columns under test on the generation of `items[i]`. Returns the run id.
template <class Edit>
int64_t write_edited_run(Store& store, const RunInfo& info, const std::vector<WorkItem>& items, Edit edit) {
  const int64_t run = store.begin_run(info);
  store.add_work_items(items);
  std::vector<GenerationRecord> gens;
  std::vector<GradeRecord> grades;
  for (size_t i = 0; i < items.size(); ++i) {
    gens.push_back(fake_generation(items[i]));
    edit(gens.back(), i);
    grades.push_back(fake_grade(items[i]));
  }
  store.write_batch(run, gens, grades);
  store.end_run(run);
  return run;
}

/// A fresh temporary path (file removed if present, with its -wal/-shm).
inline std::string temp_db(const std::string& name) {
  std::string p = ::testing::TempDir() + "kvb_results_" + name + "_" + std::to_string(getpid()) + ".db";
  std::remove(p.c_str());
  std::remove((p + "-wal").c_str());
  std::remove((p + "-shm").c_str());
  return p;
}

}  // namespace kvb::results::testing
