// The grader registry: name -> GraderFn. See graders/grade.h.
#include "graders/grade.h"

#include <algorithm>

#include "engine/util/error.h"

namespace kvb::graders {
namespace {

std::vector<GraderInfo> make_registry() {
  std::vector<GraderInfo> v;
  for (auto* add : {detail::register_math_graders, detail::register_longbench_graders,
                    detail::register_longproc_graders, detail::register_scbench_graders, detail::register_judge_graders})
    add(v);
  std::sort(v.begin(), v.end(), [](const GraderInfo& a, const GraderInfo& b) { return a.name < b.name; });
  return v;
}

}  // namespace

Grade detail::best_of_references(const std::vector<std::string>& refs,
                                 const std::function<Grade(const std::string&)>& one) {
  Grade best;
  bool first = true;
  for (const auto& r : refs) {
    Grade g = one(r);
    if (first || g.score > best.score) best = std::move(g);
    first = false;
  }
  return best;
}

const std::vector<GraderInfo>& all_graders() {
  static const std::vector<GraderInfo> reg = make_registry();
  return reg;
}

const GraderInfo* find_grader(std::string_view name) {
  for (const auto& g : all_graders())
    if (g.name == name) return &g;
  return nullptr;
}

Grade grade(std::string_view name, std::string_view prediction, const std::vector<std::string>& references,
            const nlohmann::json& meta) {
  const GraderInfo* g = find_grader(name);
  if (!g) {
    std::string known;
    for (const auto& x : all_graders()) known += (known.empty() ? "" : ", ") + x.name;
    fail("unknown grader '{}' (known: {})", name, known);
  }
  if (references.empty()) fail("grader '{}': no reference answers given", name);
  return g->fn(prediction, references, meta);
}

}  // namespace kvb::graders
