// `smoke`: a handful of short arithmetic and reading problems written for kvbench itself,
// compiled into the binary so `kvbench run` with no arguments needs no dataset at all. Graded by
// the math grader; the prompt asks for just the final answer in \boxed{} (a small instruct model
// answers in one short sentence; the math grader falls back to "the answer is ..." and to the last
// number when there is no box), so the default run stays around a minute on a laptop CPU.
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

class SmokeTask : public Task {
 public:
  SmokeTask() {
    info_.name = "smoke";
    info_.benchmark = "smoke";
    info_.grader = "math";
    info_.source = "built into kvbench (tasks/smoke.cpp)";
    info_.expected_count = std::size(kItems);
  }
  const TaskInfo& info() const override { return info_; }
  size_t load(const TaskContext& ctx, const ExampleSink& sink) const override {
    size_t n = 0;
    for (size_t i = 0; i < std::size(kItems); ++i) {
      if (ctx.limit && n >= ctx.limit) break;
      Example e;
      e.id = "smoke/" + std::to_string(i);
      e.task = "smoke";
      e.messages.push_back({"user", std::string(kItems[i].question) +
                                        "\nGive only the final answer as a number in \\boxed{}."});
      e.references = {kItems[i].answer};
      e.max_new_tokens = 48;
      e.grader = "math";
      ++n;
      if (!sink(std::move(e))) break;
    }
    return n;
  }

 private:
  TaskInfo info_;
};

}  // namespace

TaskFactory smoke_factory() {
  TaskFactory f;
  f.names = {"smoke"};
  f.make = [](const std::string& name, const TaskOptions& opts) -> std::unique_ptr<Task> {
    if (!opts.empty()) fail("task smoke: unknown option '{}' (smoke takes none)", opts.begin()->first);
    return std::make_unique<SmokeTask>();
  };
  return f;
}

}  // namespace kvb::tasks
