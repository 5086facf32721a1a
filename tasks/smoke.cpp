// `smoke`: a handful of short arithmetic and reading problems written for kvbench itself,
// compiled into the binary so `kvbench run` with no arguments needs no dataset at all. Graded by
// the math grader; the prompt asks for just the final answer in \boxed{} (a small instruct model
// answers in one short sentence; the math grader falls back to "the answer is ..." and to the last
// number when there is no box), so the default run stays around a minute on a laptop CPU.
// `smoke:extra=N` appends N more one-step arithmetic problems made by a fixed generator (the same
// N problems on every machine and build), for suites that need more examples than 8 — the
// nightly's paired sign test needs at least 6 examples that change (ci/README.md).
#include <cstdint>
#include <string>
#include <vector>

#include "tasks/families.h"
#include "engine/util/error.h"

namespace kvb::tasks {
namespace {

struct SmokeItem {
  const char* question;
  const char* answer;
};

// Each reading problem carries its own short passage.
const SmokeItem kItems[] = {
    {"What is 7 times 8?", "56"},
    {"What is 125 plus 375?", "500"},
    {"A box holds 12 eggs. How many eggs are in 3 boxes?", "36"},
    {"Tom had 20 apples and gave 7 to Anna. How many apples does Tom have now?", "13"},
    {"What is half of 90?", "45"},
    {"Read the passage and answer the question.\n\nPassage: Mia planted 4 rows of tulips with 6 tulips in "
     "each row. Later a rabbit ate 5 of them.\n\nQuestion: How many tulips are left?",
     "19"},
    {"Read the passage and answer the question.\n\nPassage: The library opens at 9 in the morning and closes "
     "8 hours later.\n\nQuestion: At what hour (on a 24-hour clock) does the library close?",
     "17"},
    {"Read the passage and answer the question.\n\nPassage: Sam's red bike cost 150 dollars. His sister's "
     "blue bike cost 30 dollars more.\n\nQuestion: How many dollars did the blue bike cost?",
     "180"},
};

/// splitmix64 (Steele, Lea & Flood 2014): the generator of the extra problems; fixed, so the
/// problems (and their prompts' hashes) never change.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct Problem {
  std::string question, answer;
};

/// The first `n` generated problems: sums, differences and products of small numbers, bare or
/// as a one-sentence story, in a fixed rotation of six forms.
std::vector<Problem> extra_problems(size_t n) {
  std::vector<Problem> out;
  uint64_t state = 0x736d6f6b65ULL;  // "smoke"
  auto draw = [&](int lo, int hi) {
    return lo + static_cast<int>(splitmix64(state) % static_cast<uint64_t>(hi - lo + 1));
  };
  const char* names[] = {"Ana", "Ben", "Carla", "Dev", "Eli", "Fatima", "Gus", "Hana"};
  const char* things[] = {"apples", "books", "coins", "pencils", "stickers", "shells", "cards", "marbles"};
  for (size_t i = 0; i < n; ++i) {
    const std::string who = names[draw(0, 7)], what = things[draw(0, 7)];
    int a = 0, b = 0;
    switch (i % 6) {
      case 0:
        a = draw(10, 99), b = draw(10, 99);
        out.push_back({"What is " + std::to_string(a) + " plus " + std::to_string(b) + "?", std::to_string(a + b)});
        break;
      case 1:
        a = draw(30, 99), b = draw(2, a - 1);
        out.push_back({"What is " + std::to_string(a) + " minus " + std::to_string(b) + "?", std::to_string(a - b)});
        break;
      case 2:
        a = draw(2, 12), b = draw(2, 12);
        out.push_back({"What is " + std::to_string(a) + " times " + std::to_string(b) + "?", std::to_string(a * b)});
        break;
      case 3:
        a = draw(5, 40), b = draw(2, 30);
        out.push_back({who + " has " + std::to_string(a) + " " + what + " and gets " + std::to_string(b) +
                           " more. How many " + what + " does " + who + " have now?",
                       std::to_string(a + b)});
        break;
      case 4:
        a = draw(12, 60), b = draw(2, a - 2);
        out.push_back({who + " had " + std::to_string(a) + " " + what + " and gave away " + std::to_string(b) +
                           ". How many " + what + " are left?",
                       std::to_string(a - b)});
        break;
      default:
        a = draw(2, 9), b = draw(2, 12);
        out.push_back({"There are " + std::to_string(a) + " bags with " + std::to_string(b) + " " + what +
                           " in each bag. How many " + what + " are there in all?",
                       std::to_string(a * b)});
    }
  }
  return out;
}

class SmokeTask : public Task {
 public:
  explicit SmokeTask(size_t extra) : extra_(extra) {
    info_.name = "smoke";
    info_.benchmark = "smoke";
    info_.grader = "math";
    info_.source = "built into kvbench (tasks/smoke.cpp)";
    info_.expected_count = std::size(kItems) + extra;
    info_.options = {{"extra", "N more generated one-step arithmetic problems after the 8 written ones (default 0)"}};
  }
  const TaskInfo& info() const override { return info_; }
  size_t load(const TaskContext& ctx, const ExampleSink& sink) const override {
    std::vector<Problem> all;
    for (const auto& it : kItems) all.push_back({it.question, it.answer});
    for (auto& p : extra_problems(extra_)) all.push_back(std::move(p));
    size_t n = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      if (ctx.limit && n >= ctx.limit) break;
      Example e;
      e.id = "smoke/" + std::to_string(i);
      e.task = "smoke";
      e.messages.push_back({"user", all[i].question + "\nGive only the final answer as a number in \\boxed{}."});
      e.references = {all[i].answer};
      e.max_new_tokens = 48;
      e.grader = "math";
      ++n;
      if (!sink(std::move(e))) break;
    }
    return n;
  }

 private:
  TaskInfo info_;
  size_t extra_ = 0;
};

}  // namespace

KVB_TASK_FAMILY(smoke) {
  TaskFactory f;
  f.names = {"smoke"};
  f.make = [](const std::string& name, const TaskOptions& opts) -> std::unique_ptr<Task> {
    size_t extra = 0;
    for (const auto& [k, v] : opts) {
      if (k != "extra") fail("task smoke: unknown option '{}' (known: extra)", k);
      size_t pos = 0;
      long long x = -1;
      try {
        x = std::stoll(v, &pos);
      } catch (const std::exception&) {
      }
      if (pos != v.size() || x < 0 || x > 10000)
        fail("task smoke: extra: expected an integer in [0, 10000], got '{}'", v);
      extra = static_cast<size_t>(x);
    }
    return std::make_unique<SmokeTask>(extra);
  };
  return f;
}

}  // namespace kvb::tasks
