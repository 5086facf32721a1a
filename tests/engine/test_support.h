// Helpers shared by the engine tests: fixture paths, golden loading, running the CLI.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/util/io.h"

namespace kvb::test {

inline std::string fixture(const std::string& rel) { return std::string(KVB_SOURCE_DIR) + "/tests/fixtures/" + rel; }
inline std::string shared_dir(const std::string& rel) { return std::string(KVB_SHARED_DIR) + "/" + rel; }

/// Runs `cmd` through /bin/sh; returns (exit code, or 128 + signal; stdout+stderr).
inline std::pair<int, std::string> run_shell(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {-1, "popen failed: " + cmd};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

/// Runs `kvbench <args>` through the shell; returns (exit code, stdout+stderr).
inline std::pair<int, std::string> run_cli(const std::string& args) {
  return run_shell(std::string(KVB_BINARY) + " " + args);
}

}  // namespace kvb::test
