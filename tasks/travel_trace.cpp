#include "tasks/travel_trace.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/util/error.h"
#include "tasks/text_format.h"

namespace kvb::tasks {

namespace {

const char* const kStart = "the starting point";

struct Stay {
  std::string city;
  long long days = 0, first = 0, last = 0;  // duration; arrival and departure day (inclusive)
};

struct Fixed {
  std::string city;
  long long first = 0, last = 0;
};

const nlohmann::json& need(const nlohmann::json& o, const char* k, const std::string& where) {
  if (!o.is_object()) fail("{}: expected a JSON object", where);
  auto it = o.find(k);
  if (it == o.end()) fail("{}: missing field '{}'", where, k);
  return *it;
}
long long need_int(const nlohmann::json& o, const char* k, const std::string& where) {
  const auto& v = need(o, k, where);
  if (!v.is_number_integer()) fail("{}: field '{}': expected an integer, got {}", where, k, v.type_name());
  return v.get<long long>();
}
std::string need_str(const nlohmann::json& o, const char* k, const std::string& where) {
  const auto& v = need(o, k, where);
  if (!v.is_string()) fail("{}: field '{}': expected a string, got {}", where, k, v.type_name());
  return v.get<std::string>();
}

// "" at level 0, else `level` spaces and "|- ".
std::string indent(size_t level) { return level == 0 ? std::string() : std::string(level, ' ') + "|- "; }

std::string city_list(const std::vector<Stay>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i].city;
  return s + "]";
}

class Search {
 public:
  Search(size_t num_cities, std::vector<Fixed> fixed, std::set<std::pair<std::string, std::string>> flights,
         std::vector<std::string>& log, std::string where)
      : n_(num_cities), fixed_(std::move(fixed)), flights_(std::move(flights)), log_(log), where_(std::move(where)) {}

  // Places the next city arriving on `day`; true when a complete plan was found (in `plan`).
  bool place(long long day, std::vector<Stay>& plan, const std::vector<Stay>& free) {
    size_t depth = plan.size() * 2;
    say(depth, fmt::format("Current day: {}. Current plan: {}.", day, city_list(plan)));
    if (plan.size() == n_) {
      say(depth, fmt::format("All {} cities are arranged. Complete plan is found!", n_));
      return true;
    }
    say(depth, fmt::format("Check whether the city with an arrival day of Day {} - is fixed.", day));
    std::vector<Stay> options;
    auto fx = std::find_if(fixed_.begin(), fixed_.end(), [&](const Fixed& f) { return f.first == day; });
    if (fx != fixed_.end()) {
      say(depth, fmt::format("Yes. The city with an arrival day of Day {} - is fixed: {}.", day, fx->city));
      options.push_back({fx->city, fx->last - fx->first + 1, fx->first, fx->last});
    } else {
      say(depth, fmt::format("No. Consider possible options from cities needing arrangement: {} and explore these "
                             "options in order.",
                             city_list(free)));
      for (const auto& f : free) options.push_back({f.city, f.days, day, day + f.days - 1});
    }
    const std::string from = plan.empty() ? kStart : plan.back().city;
    auto next_fixed = std::find_if(fixed_.begin(), fixed_.end(), [&](const Fixed& f) { return f.first > day; });
    ++depth;
    for (const auto& o : options) {
      say(depth, fmt::format("Try arranging to visit {} from Day {}. Duration: {} days. Schedule: Day {} - {}.", o.city,
                             day, o.days, day, day + o.days - 1));
      say(depth, fmt::format("Check for direct flight from {} to {}.", from, o.city));
      if (!plan.empty() && !flights_.count({from, o.city})) {
        say(depth, "No. Drop this branch.");
        continue;
      }
      say(depth, "Yes.");
      if (next_fixed == fixed_.end()) {
        say(depth, fmt::format("Check whether this arrangement is compatible with the next fixed schedule after Day {}: "
                               "None.",
                               day));
        say(depth, "No following fixed schedules. This arrangement is compatible.");
      } else {
        const Fixed& nf = *next_fixed;
        say(depth, fmt::format("Check whether this arrangement is compatible with the next fixed schedule after Day {}: "
                               "{} (Day {} - {}).",
                               day, nf.city, nf.first, nf.last));
        if (nf.first == o.first) fail("{}: field 'constraints': invalid fixed schedule for {}", where_, nf.city);
        if (nf.first < o.last) {
          say(depth, fmt::format("The departure day of {} is Day {}. The arrival day of {} is Day {}. Day {} is later "
                                 "than (>) Day {}. This arrangement is incompatible. Drop this branch.",
                                 o.city, o.last, nf.city, nf.first, o.last, nf.first));
          continue;
        }
        say(depth, fmt::format("The departure day of {} is Day {}. The arrival day of {} is Day {}. Day {} is not "
                               "later than (<=) Day {}. This arrangement is compatible.",
                               o.city, o.last, nf.city, nf.first, o.last, nf.first));
      }
      say(depth, "This arrangement is feasible for now. Continue to arrange the rest of the plan.");
      std::vector<Stay> rest;
      for (const auto& f : free)
        if (f.city != o.city) rest.push_back(f);
      plan.push_back(o);
      if (place(o.last, plan, rest)) return true;
      plan.pop_back();
    }
    say(depth, fmt::format("Fail to arrange any option on day {} in the current arrangement. Drop this branch.", day));
    return false;
  }

 private:
  void say(size_t level, const std::string& msg) {
    // The real problems log a few hundred lines; a crafted one could make the search factorial.
    if (log_.size() >= kMaxLogLines)
      fail("{}: the search log exceeds {} lines; the problem is too large for a demonstration", where_, kMaxLogLines);
    log_.push_back(indent(level) + msg);
  }
  static constexpr size_t kMaxLogLines = 1000000;

  size_t n_;
  std::vector<Fixed> fixed_;
  std::set<std::pair<std::string, std::string>> flights_;
  std::vector<std::string>& log_;
  std::string where_;
};

std::string format_plan(const std::vector<Stay>& plan) {
  std::string out;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Stay& s = plan[i];
    if (i) out += "\n";
    if (i == 0)
      out += fmt::format("**Day {}-{}:** Arriving in {} and visit {} for {} days.", s.first, s.last, s.city, s.city,
                         s.days);
    else out += fmt::format("**Day {}-{}:** Visit {} for {} days.", s.first, s.last, s.city, s.days);
    if (i + 1 < plan.size()) out += fmt::format("\n**Day {}:** Fly from {} to {}.", s.last, s.city, plan[i + 1].city);
  }
  return out;
}

}  // namespace

TravelTrace travel_trace(const nlohmann::json& r, const std::string& where) {
  const long long num_cities = need_int(r, "num_cities", where);
  if (num_cities < 1) fail("{}: field 'num_cities': expected a positive integer, got {}", where, num_cities);
  const auto& cons = need(r, "constraints", where);
  if (!cons.is_array()) fail("{}: field 'constraints': expected a list", where);
  const auto& conn = need(r, "connected_cities", where);
  if (!conn.is_array()) fail("{}: field 'connected_cities': expected a list of [from, to] pairs", where);
  const std::string gt_plan = need_str(r, "ground_truth_plan", where);

  std::set<std::pair<std::string, std::string>> flights;
  for (const auto& c : conn) {
    if (!c.is_array() || c.size() != 2 || !c[0].is_string() || !c[1].is_string())
      fail("{}: field 'connected_cities': expected a list of [from, to] pairs of city names", where);
    flights.insert({c[0].get<std::string>(), c[1].get<std::string>()});
  }
  std::vector<Fixed> fixed;
  for (size_t i = 0; i < cons.size(); ++i) {
    std::string w = fmt::format("{}: constraints[{}]", where, i);
    std::string type = need_str(cons[i], "type", w);
    if (type == "fixed") {
      fixed.push_back({need_str(cons[i], "city", w), need_int(cons[i], "start_day", w), need_int(cons[i], "end_day", w)});
    } else if (type != "duration") {
      fail("{}: field 'type': expected 'duration' or 'fixed', got '{}'", w, type);
    }
  }
  auto is_fixed = [&](const std::string& city) {
    return std::any_of(fixed.begin(), fixed.end(), [&](const Fixed& f) { return f.city == city; });
  };

  std::vector<std::string> log;
  log.push_back(
      "Read the requirements and identify the cities that have fixed schedules and the cities that need to "
      "be arranged.");
  std::vector<Stay> free;
  for (size_t i = 0; i < cons.size(); ++i) {
    const auto& c = cons[i];
    if (c["type"] == "fixed") continue;
    std::string w = fmt::format("{}: constraints[{}]", where, i);
    std::string city = need_str(c, "city", w);
    long long days = need_int(c, "num_days", w);
    if (is_fixed(city)) {
      if (i + 1 >= cons.size() || cons[i + 1]["type"] != "fixed" || cons[i + 1]["city"] != city)
        fail("{}: a duration constraint of the fixed-schedule city {} must be followed by its fixed constraint", w, city);
      const auto& fc = cons[i + 1];
      log.push_back(fmt::format("* City: {}, Duration: {} days, Fixed Schedule: Day {} - {}.", city, days,
                                fc["start_day"].get<long long>(), fc["end_day"].get<long long>()));
    } else {
      log.push_back(fmt::format("* City: {}, Duration: {} days.", city, days));
      free.push_back({city, days, 0, 0});
    }
  }
  log.emplace_back();
  if (!fixed.empty()) {
    log.push_back("Cities that have fixed schedules (sorted by their arrival days):");
    std::stable_sort(fixed.begin(), fixed.end(), [](const Fixed& a, const Fixed& b) { return a.first < b.first; });
    for (const auto& f : fixed)
      log.push_back(fmt::format("* City: {}, Fixed Schedule: Day {} - {}.", f.city, f.first, f.last));
  } else {
    log.push_back("Cities that have fixed schedules: None.");
  }
  log.emplace_back();
  if (!free.empty()) {
    log.push_back("Cities needing arrangement:");
    for (const auto& f : free) log.push_back(fmt::format("* City: {}, Duration: {} days.", f.city, f.days));
  } else {
    log.push_back("Cities needing arrangement: None.");
  }
  log.emplace_back();

  std::vector<Stay> plan;
  Search search(static_cast<size_t>(num_cities), fixed, std::move(flights), log, where);
  if (!search.place(1, plan, free)) fail("{}: no trip plan satisfies the constraints", where);

  TravelTrace t;
  t.plan = format_plan(plan);
  size_t para = gt_plan.find("\n\n");
  if (para == std::string::npos)
    fail("{}: field 'ground_truth_plan': expected an intro paragraph, a blank line, then the plan", where);
  size_t end = gt_plan.find("\n\n", para + 2);
  std::string expected =
      py_strip(gt_plan.substr(para + 2, end == std::string::npos ? std::string::npos : end - para - 2));
  if (expected != t.plan)
    fail("{}: field 'ground_truth_plan': the search finds a different plan:\n{}\nexpected:\n{}", where, t.plan, expected);
  for (size_t i = 0; i < log.size(); ++i) t.search_log += (i ? "\n" : "") + log[i];
  t.procedure = "<Solving Procedure>\n" + t.search_log +
                "\n</Solving Procedure>\n\nOutput the plan in the required format:\n<Plan>\n" + t.plan + "\n</Plan>";
  return t;
}

std::string travel_demonstration(const nlohmann::json& icl, const std::string& where) {
  if (!icl.is_array()) fail("{}: expected a JSON array of examples", where);
  std::string out;
  for (size_t i = 0; i < icl.size(); ++i) {
    std::string w = fmt::format("{}: element {}", where, i);
    std::string problem = need_str(icl[i], "disambig_question_text", w);
    if (i) out += "\n\n";
    out += "# Example\n" + problem + "\n\n" + travel_trace(icl[i], w).procedure;
  }
  return out;
}

}  // namespace kvb::tasks
