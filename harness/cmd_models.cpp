// `kvbench models`: the models kvbench knows by name (harness/named_models.h), their size,
// source, licence and whether they are in the cache.
#include <cstdio>

#include <fmt/format.h>

#include "harness/commands.h"
#include "harness/named_models.h"

namespace kvb::cli {

void register_models(CLI::App& app) {
  CLI::App* c = app.add_subcommand(
      "models", "Models known by name (--model NAME): size, source, licence, and whether each is cached");
  c->callback([] {
    std::printf("%-30s %9s  %-40s %-11s %s\n", "name", "MB", "source (same bytes, from PyPI)", "licence", "cached");
    for (const auto& m : named_models()) {
      const std::string cached = named_model_cached(m) ? named_model_path(m) : "no (fetched on first use)";
      std::printf("%-30s %9.1f  %-40s %-11s %s\n", m.name.c_str(), m.bytes / 1e6, m.source.c_str(), m.licence.c_str(),
                  cached.c_str());
    }
    std::printf("\n");
    for (const auto& m : named_models()) std::printf("%s: %s\n", m.name.c_str(), m.note.c_str());
  });
}

}  // namespace kvb::cli
