// kvbench — the command-line entry point. Dispatches to the sub-commands of harness/cmd_*.cpp.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/util/error.h"
#include "harness/commands.h"

namespace {

/// OpenMP workers (attention, elementwise) and OpenBLAS's own pthreads (the GEMMs) share the
/// cores. With libgomp's default active waiting, idle OpenMP workers spin while OpenBLAS
/// computes: measured on the 2-core machine, SmolLM2-135M-shaped decode at batch 1 took 255 ms
/// per step with it and 66 ms with OMP_WAIT_POLICY=PASSIVE (batch 8: 364 -> 153 ms). libgomp reads
/// the variable when it loads, before main(), so kvbench re-executes itself once with it set,
/// unless the user set OMP_WAIT_POLICY (then theirs stands). If the exec fails, it runs on.
void prefer_passive_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);  // the binary's own path
  if (n <= 0) return;
  self[n] = '\0';
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  execv(self, argv);
}

}  // namespace

int main(int argc, char** argv) {
  prefer_passive_openmp_wait(argv);
  CLI::App app{"kvbench: how KV-cache policies trade accuracy for memory and speed"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(KVB_VERSION) + " (" + KVB_GIT_SHA + ")");
  kvb::cli::register_all_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and exit 0 through CLI11, and a command's own
    // CLI::RuntimeError(code) (compare's exit 1 on a regression) keeps its code; every usage error
    // is one line in kvbench's format with exit 2, like any other bad input.
    if (e.get_exit_code() == 0 || e.get_name() == "RuntimeError") return app.exit(e);
    std::fprintf(stderr, "kvbench: error: %s\n", e.what());
    return 2;
  } catch (const kvb::Error& e) {
    std::fprintf(stderr, "kvbench: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "kvbench: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvbench: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
