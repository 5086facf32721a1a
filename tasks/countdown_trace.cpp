#include "tasks/countdown_trace.h"

#include <algorithm>
#include <variant>

#include "engine/util/error.h"
#include "tasks/text_format.h"

namespace kvb::tasks {

namespace {

constexpr int64_t kMaxIntermediate = 2000;

// A number in the search: an integer, or a non-integer quotient (immediately dropped).
struct Num {
  bool is_int = true;
  int64_t i = 0;
  double d = 0;
};

struct State {
  int parent;
  std::string eq;
};

std::string indent(int level) { return level == 0 ? "" : std::string(level, ' ') + "|- "; }

std::string list_str(const std::vector<int64_t>& v) { return py_int_list(v); }

std::string pairs_str(const std::vector<int64_t>& v) {
  std::string out = "[";
  bool first = true;
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t j = i + 1; j < v.size(); ++j) {
      if (!first) out += ", ";
      first = false;
      out += "(" + std::to_string(v[i]) + ", " + std::to_string(v[j]) + ")";
    }
  return out + "]";
}

class Search {
 public:
  explicit Search(int64_t target) : target_(target) {}

  // first: the new number (front), rest: leftover; eq empty for the initial state.
  bool dfs(const Num& first, const std::vector<int64_t>& rest, bool init, int parent, const std::string& eq, int depth) {
    int id = static_cast<int>(states_.size());
    states_.push_back({parent, eq});
    std::vector<int64_t> nums;
    if (!init) {
      if (!first.is_int) {
        log_ += "\n" + indent(depth) + "Try " + eq + ". " + py_fixed1(first.d) + " is a decimal, drop this branch.";
        return false;
      }
      if (first.i >= kMaxIntermediate) {
        log_ += "\n" + indent(depth) + "Try " + eq + ". " + std::to_string(first.i) +
                " exceeds the maximum intermediate result, drop this branch.";
        return false;
      }
      nums.push_back(first.i);
    }
    nums.insert(nums.end(), rest.begin(), rest.end());
    if (nums.size() == 1) {
      bool hit = nums[0] == target_;
      log_ += "\n" + indent(depth) + "Try " + eq + ". Evaluate " + std::to_string(nums[0]) + (hit ? " == " : " != ") +
              std::to_string(target_) + (hit ? ", target found!" : ", drop this branch.");
      return hit;
    }
    if (!init) log_ += "\n" + indent(depth) + "Try " + eq + ". Add " + std::to_string(nums[0]) + " to the number set.";
    if (nums.size() == 2) {
      log_ +=
          " Current number set: " + list_str(nums) + ", target: " + std::to_string(target_) + ", just two numbers left.";
    } else {
      if (!init)
        log_ += " Current number set: " + list_str(nums) + ", target: " + std::to_string(target_) +
                ". Options for choosing two numbers: " + pairs_str(nums) + ".";
      else
        log_ += "Initial number set: " + list_str(nums) + ", target: " + std::to_string(target_) +
                ". Options for choosing two numbers: " + pairs_str(nums) + ".";
      ++depth;
    }
    for (size_t i = 0; i < nums.size(); ++i)
      for (size_t j = i + 1; j < nums.size(); ++j) {
        int64_t a = nums[i], b = nums[j];
        std::vector<int64_t> left;
        for (size_t k = 0; k < nums.size(); ++k)
          if (k != i && k != j) left.push_back(nums[k]);
        if (nums.size() > 2)
          log_ += "\n" + indent(depth) + "Pick two numbers (" + std::to_string(a) + ", " + std::to_string(b) +
                  ") (numbers left: " + list_str(left) + "). Try possible operations.";
        if (a < b) std::swap(a, b);
        auto sa = std::to_string(a), sb = std::to_string(b);
        if (dfs({true, a + b, 0}, left, false, id, sa + " + " + sb + " = " + std::to_string(a + b), depth + 1))
          return true;
        if (dfs({true, a - b, 0}, left, false, id, sa + " - " + sb + " = " + std::to_string(a - b), depth + 1))
          return true;
        if (dfs({true, a * b, 0}, left, false, id, sa + " * " + sb + " = " + std::to_string(a * b), depth + 1))
          return true;
        if (b == 0) {
          // The reference logs the invalid division and drops the branch.
          states_.push_back({id, sa + " / " + sb + " (invalid operation)"});
          log_ += "\n" + indent(depth + 1) + "Try " + sa + " / " + sb + " (invalid operation). drop this branch.";
        } else if (a % b == 0) {
          if (dfs({true, a / b, 0}, left, false, id, sa + " / " + sb + " = " + std::to_string(a / b), depth + 1))
            return true;
        } else {
          double q = static_cast<double>(a) / static_cast<double>(b);
          if (dfs({false, 0, q}, left, false, id, sa + " / " + sb + " = " + py_fixed1(q), depth + 1)) return true;
        }
      }
    return false;
  }

  std::vector<State> states_;
  std::string log_;
  int64_t target_;
};

}  // namespace

CountdownTrace countdown_trace(const std::vector<int64_t>& nums, int64_t target) {
  Search s(target);
  if (!s.dfs({}, nums, true, -1, "", 0)) fail("countdown: no solution for {} -> {}", py_int_list(nums), target);
  CountdownTrace t;
  int st = static_cast<int>(s.states_.size()) - 1;
  while (s.states_[st].parent != -1) {
    t.solution.push_back(s.states_[st].eq);
    st = s.states_[st].parent;
  }
  std::reverse(t.solution.begin(), t.solution.end());
  if (t.solution.size() != 3) fail("countdown: expected a 3-step solution for {}", py_int_list(nums));
  t.search_log = s.log_;
  const auto& q = t.solution;
  t.demonstration = "# Search Procedure\n" + s.log_ + "\n\n" +
                    "Now we have found the target, let's trace back the solution:\nFinal step: " + q[2] +
                    "\nThe step before: " + q[1] + "\nThe first step: " + q[0] +
                    "\n\nOutput the solution in the required format:\n<Solution>\n" + q[0] + "\n" + q[1] + "\n" + q[2] +
                    "\n</Solution>\n";
  return t;
}

}  // namespace kvb::tasks
