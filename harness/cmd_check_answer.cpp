// `kvbench check-answer`: grade one (gold, prediction) pair with a named grader and print how the
// verdict was reached — the extracted answer, both normalised forms, the reason, and on the last
// line the verdict (1 or 0; the score for fractional graders, "ungraded" when no verdict). How a
// user audits a grader. See graders/grade.h.
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/util/error.h"
#include "engine/util/io.h"
#include "graders/grade.h"
#include "harness/commands.h"

namespace kvb::cli {

void register_check_answer(CLI::App& app) {
  struct Opts {
    std::string grader = "math";
    std::vector<std::string> gold;
    std::string pred;
    std::string meta = "null";
    bool list = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* c = app.add_subcommand("check-answer", "Grade one prediction against a gold answer and explain the verdict");
  c->add_option("--grader", o->grader, "Grader name (see --list)")->capture_default_str();
  c->add_option("--gold", o->gold, "Gold answer (repeat for several references)");
  c->add_option("--pred", o->pred, "Model output (full text; the grader extracts the answer)");
  c->add_option("--meta", o->meta, "Example metadata as JSON (e.g. {\"all_classes\": [...]})");
  c->add_flag("--list", o->list, "List the graders and exit");
  c->callback([o] {
    if (o->list) {
      for (const auto& g : graders::all_graders()) std::printf("%-28s %s\n", g.name.c_str(), g.description.c_str());
      return;
    }
    if (o->gold.empty()) fail("check-answer: --gold is required");
    const nlohmann::json meta = parse_json(o->meta, "--meta");
    if (!meta.is_object() && !meta.is_null())  // graders read fields of an example's metadata object
      fail("--meta: expected a JSON object, got {}", meta.type_name());
    graders::Grade g = graders::grade(o->grader, o->pred, o->gold, meta);
    std::printf("grader:     %s\n", o->grader.c_str());
    std::printf("extracted:  %s\n", g.extracted.c_str());
    std::printf("pred_norm:  %s\n", g.pred_norm.c_str());
    std::printf("gold_norm:  %s\n", g.gold_norm.c_str());
    std::printf("reason:     %s\n", g.reason.c_str());
    std::printf("score:      %s\n", g.ungraded ? "ungraded" : fmt::format("{:g}", g.score).c_str());
    if (g.ungraded) {
      std::printf("ungraded\n");
    } else if (g.score == 0.0 || g.score == 1.0) {
      std::printf("%d\n", g.score == 1.0 ? 1 : 0);
    } else {
      std::printf("%s\n", fmt::format("{:.4f}", g.score).c_str());
    }
  });
}

}  // namespace kvb::cli
