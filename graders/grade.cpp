// The grader registry: name -> GraderFn. See graders/grade.h.
#include "graders/grade.h"

#include <algorithm>

#include "engine/util/error.h"
#include "graders/math.h"

namespace kvb::graders {
namespace {

// Best grade over several references (max score; the first best wins ties).
template <typename F>
Grade best_of(const std::vector<std::string>& refs, F&& one) {
  Grade best;
  bool first = true;
  for (const auto& r : refs) {
    Grade g = one(r);
    if (first || g.score > best.score) best = std::move(g);
    first = false;
  }
  return best;
}

std::vector<GraderInfo> make_registry() {
  std::vector<GraderInfo> v;
  v.push_back({"math", "MATH-500: last \\boxed{} -> Qwen2.5-Math normalisation -> exact/numeric/symbolic (GiNaC)",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json&) {
                 return best_of(refs, [&](const std::string& r) { return grade_math(p, r); });
               }});
  v.push_back({"aime", "AIME: extracted answer is an integer 0-999 equal to the gold",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json&) {
                 return best_of(refs, [&](const std::string& r) { return grade_aime(p, r); });
               }});
  v.push_back({"gsm8k", "GSM8K: gold after '####'; extracted number equal within rel tol 1e-4",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json&) {
                 return best_of(refs, [&](const std::string& r) { return grade_gsm8k(p, r); });
               }});
  detail::register_extra_graders(v);
  detail::register_judge_graders(v);
  std::sort(v.begin(), v.end(), [](const GraderInfo& a, const GraderInfo& b) { return a.name < b.name; });
  return v;
}

}  // namespace

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
