// kvbench — the command-line entry point. Dispatches to the sub-commands of harness/cmd_*.cpp.
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/util/error.h"
#include "harness/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"kvbench: how KV-cache policies trade accuracy for memory and speed"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(KVB_VERSION) + " (" + KVB_GIT_SHA + ")");
  kvb::cli::register_all_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
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
