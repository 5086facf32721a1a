// LongProc travel_planning: the verbalized depth-first search that the reference prompt uses as
// its demonstrations and as each example's reference output (princeton-pli/LongProc
// longproc/travel_planning_evaluator.py, build_travel_plan_demonstration; the prompt layout is
// docs/benchmarks.md, LongProc: requirements + DFS approach + {demonstration} + {problem}).
//
// The search, restated: cities with a fixed schedule (constraint type "fixed") are placed on
// their arrival day; on any other day every not-yet-placed free city (constraint type
// "duration", in file order) is tried in turn. A choice is dropped when there is no direct
// one-way flight from the previous city (the first city needs none: "the starting point") or
// when its departure day is later than the arrival day of the next fixed schedule. The next
// stop starts on the departure day of the previous one. Every step is logged with an
// indentation of 2·(cities placed) [+1 for the options of a day] spaces followed by "|- ".
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace kvb::tasks {

/// The reference output of one travel-planning problem.
struct TravelTrace {
  std::string search_log;  ///< the log lines joined by "\n" (starts "Read the requirements ...")
  std::string plan;        ///< "**Day 1-5:** Arriving in X and visit X for 5 days.\n**Day 5:** Fly ..."
  /// "<Solving Procedure>\n{log}\n</Solving Procedure>\n\nOutput the plan in the required
  /// format:\n<Plan>\n{plan}\n</Plan>": the reference output and the demonstration body.
  std::string procedure;
};

/// Runs the search on one record of travel_planning_all.json / travel_planning_icl_examples.json
/// (fields num_cities, constraints [{type: "duration", city, num_days} | {type: "fixed", city,
/// start_day, end_day}], connected_cities [[from, to], ...], ground_truth_plan). As the reference
/// asserts, the found plan must equal the second "\n\n"-separated paragraph of
/// ground_truth_plan (stripped) and a "duration" constraint of a fixed city must be followed by
/// that city's "fixed" constraint. Throws kvb::Error "<where>: field '<f>': ..." for missing or
/// mistyped fields, an unsolvable problem, a search longer than 1,000,000 log lines (a crafted
/// problem; the real ones log a few hundred) or a plan that differs from ground_truth_plan.
TravelTrace travel_trace(const nlohmann::json& record, const std::string& where);

/// The demonstration block of the prompt: for each ICL example "# Example\n" +
/// disambig_question_text + "\n\n" + procedure, joined by "\n\n".
std::string travel_demonstration(const nlohmann::json& icl_examples, const std::string& where);

}  // namespace kvb::tasks
