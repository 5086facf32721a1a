// Suites and run configs: tasks/suite.h parse_suite and harness/run_support.h load_run_config,
// i.e. the YAML reader plus every key, type and range check above it. Byte 0 picks the reader
// (bit 0: run config, else suite; bit 1: the run config's gpu_run profile); the rest is the YAML.
// Besides the fuzz_support.h contract, a parse that succeeds must hold only in-range values: a
// wrapped or saturated number (max_new_tokens 99999999999 stored as 1215752191) is a finding.
#include <climits>
#include <cstdlib>

#include "fuzz/fuzz_support.h"
#include "harness/run_support.h"
#include "tasks/suite.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(kvb::fuzz::as_text(data + 1, size - 1));
  return kvb::fuzz::expect_ok_or_error([&] {
    if (data[0] & 1) {
      const std::string path = kvb::fuzz::scratch_file(data + 1, size - 1, "run.yaml");
      const kvb::cli::RunConfigFile c = kvb::cli::load_run_config(path, (data[0] & 2) ? "gpu_run" : "");
      if (c.samples && *c.samples < 1) std::abort();
      if (c.max_new_tokens && *c.max_new_tokens < 1) std::abort();
      if (c.top_k && *c.top_k < 0) std::abort();
      if (c.top_p && !(*c.top_p >= 0 && *c.top_p <= 1)) std::abort();
      if (c.min_p && !(*c.min_p >= 0 && *c.min_p <= 1)) std::abort();
      if (c.temperature && !(*c.temperature >= 0)) std::abort();
      for (int64_t b : c.budgets)
        if (b < 1 || b > INT_MAX) std::abort();
      if (c.models.empty() && c.policies.empty() && c.budgets.empty() && c.data_dirs.empty()) return;
    } else {
      const kvb::tasks::Suite s = kvb::tasks::parse_suite(text, "fuzz.yaml");
      if (s.tasks.empty()) std::abort();
      for (const auto& t : s.tasks) {
        if (t.samples < 1 || (t.max_new_tokens && *t.max_new_tokens < 1)) std::abort();
        // A task's own lists: in range and never an empty name (an empty list means "the run's").
        for (long long b : t.budgets)
          if (b < 1 || b > INT_MAX) std::abort();
        for (const auto* names : {&t.models, &t.policies})
          for (const auto& n : *names)
            if (n.empty()) std::abort();
      }
      for (long long b : s.budgets)
        if (b < 1 || b > INT_MAX) std::abort();
    }
  });
}
