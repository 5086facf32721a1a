// Helpers shared by the engine tests: fixture paths, golden loading, running the CLI.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/util/io.h"

namespace kvb::test {

inline std::string fixture(const std::string& rel) { return std::string(KVB_SOURCE_DIR) + "/tests/fixtures/" + rel; }
/// max |ours − ref| / max |ref| (0/0 = NaN fails every EXPECT_LE).
inline double rel_err(const std::vector<float>& ours, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::abs(double(ours[i]) - ref[i]));
    den = std::max(den, std::abs(double(ref[i])));
  }
  return num / den;
}
inline std::string shared_dir(const std::string& rel) { return std::string(KVB_SHARED_DIR) + "/" + rel; }

/// Runs `kvbench <args>` through the shell; returns (exit code, stdout+stderr).
inline std::pair<int, std::string> run_cli(const std::string& args) {
  std::string cmd = std::string(KVB_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

}  // namespace kvb::test
