// Helpers shared by the engine tests: fixture paths, golden loading, running the CLI.
#pragma once

#include <cstdio>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/util/io.h"

namespace kvb::test {

inline std::string fixture(const std::string& rel) { return std::string(KVB_SOURCE_DIR) + "/tests/fixtures/" + rel; }
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
