// LongProc evaluators (html_to_tsv, path_traversal, tom_tracking, countdown, travel_planning).
// See graders/longproc.h; pseudo_to_code lives in graders/longproc_code.cpp.
#include "graders/longproc.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <re2/re2.h>

#include "engine/util/error.h"
#include "graders/pytext.h"

namespace kvb::graders {

namespace {

std::string clip(std::string_view s, size_t n = 80) {
  std::string out(s.substr(0, n));
  for (auto& c : out)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  if (s.size() > n) out += "...";
  return out;
}

// Python str.splitlines() (no keepends).
std::vector<std::string> splitlines(std::string_view s) {
  std::u32string u = py::decode(s);
  std::vector<std::string> out;
  size_t b = 0, i = 0;
  while (i < u.size()) {
    char32_t c = u[i];
    bool br = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
              c == 0x2028 || c == 0x2029;
    if (!br) {
      ++i;
      continue;
    }
    out.push_back(py::encode(std::u32string_view(u).substr(b, i - b)));
    i += (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ? 2 : 1;
    b = i;
  }
  if (b < u.size()) out.push_back(py::encode(std::u32string_view(u).substr(b)));
  return out;
}

// ---------------------------------------------------------------- html_to_tsv

// Python csv.reader(lines, delimiter='\t') with the excel dialect (quotechar '"',
// doublequote, not strict). Each list item is one line without its terminator; a quoted
// field left open continues on the next item (joined with nothing, as CPython does).
// Returns false where csv raises (a bare '\r' inside an unquoted field).
bool py_csv_rows(const std::vector<std::string>& lines, std::vector<std::vector<std::string>>& rows) {
  enum State { kStartRecord, kStartField, kInField, kInQuoted, kQuoteInQuoted, kEatCrnl };
  State st = kStartRecord;
  std::vector<std::string> fields;
  std::string field;
  auto save = [&] {
    fields.push_back(field);
    field.clear();
  };
  for (const auto& line : lines) {
    // One "line" = its characters then the end-of-line pseudo character (-1).
    for (size_t i = 0; i <= line.size(); ++i) {
      int c = i < line.size() ? static_cast<unsigned char>(line[i]) : -1;
      bool eol = c == -1;
      bool nl = c == '\n' || c == '\r';
      switch (st) {
        case kStartRecord:
          if (eol) break;  // empty line → empty row, handled below
          if (nl) {
            st = kEatCrnl;
            break;
          }
          st = kStartField;
          [[fallthrough]];
        case kStartField:
          if (nl || eol) {
            save();
            st = eol ? kStartRecord : kEatCrnl;
          } else if (c == '"') {
            st = kInQuoted;
          } else if (c == '\t') {
            save();
          } else {
            field.push_back(static_cast<char>(c));
            st = kInField;
          }
          break;
        case kInField:
          if (nl || eol) {
            save();
            st = eol ? kStartRecord : kEatCrnl;
          } else if (c == '\t') {
            save();
            st = kStartField;
          } else {
            field.push_back(static_cast<char>(c));
          }
          break;
        case kInQuoted:
          if (eol) break;
          if (c == '"') st = kQuoteInQuoted;
          else field.push_back(static_cast<char>(c));
          break;
        case kQuoteInQuoted:
          if (c == '"') {
            field.push_back('"');
            st = kInQuoted;
          } else if (c == '\t') {
            save();
            st = kStartField;
          } else if (nl || eol) {
            save();
            st = eol ? kStartRecord : kEatCrnl;
          } else {
            field.push_back(static_cast<char>(c));
            st = kInField;
          }
          break;
        case kEatCrnl:
          if (nl) break;
          if (eol) {
            st = kStartRecord;
            break;
          }
          return false;  // "new-line character seen in unquoted field"
      }
      if (eol && st == kStartRecord) {
        rows.push_back(std::move(fields));
        fields.clear();
      }
    }
  }
  if (!field.empty() || st == kInQuoted) {  // end of data inside a field (non-strict: keep it)
    save();
    rows.push_back(std::move(fields));
  }
  return true;
}

// LongProc html_to_tsv normalize_answer: lower → no ASCII punctuation → articles → no whitespace.
std::string tsv_norm(const std::string& s) {
  std::string t = py::replace_words(py::remove_punct(py::lower(s)), {"a", "an", "the"});
  return py::join(py::split_ws(t), "");
}

// string_to_pd: header = row 0; last row dropped if its width differs; other bad rows →
// all "N/A"; cells normalised. nullopt where the reference gets None (csv error, no data row,
// duplicate column names).
std::optional<std::vector<std::vector<std::string>>> tsv_frame(std::string_view text, std::string& why) {
  std::vector<std::vector<std::string>> rows;
  if (!py_csv_rows(py::split(py::strip(text), "\n"), rows)) {
    why = "csv: new-line character in an unquoted field";
    return std::nullopt;
  }
  if (rows.size() < 2) {
    why = "no data row after the header";
    return std::nullopt;
  }
  const auto header = rows[0];
  std::vector<std::vector<std::string>> data(rows.begin() + 1, rows.end());
  if (data.back().size() != header.size()) data.pop_back();
  for (size_t i = 0; i < header.size(); ++i)
    for (size_t j = i + 1; j < header.size(); ++j)
      if (header[i] == header[j]) {
        why = fmt::format("duplicate column '{}'", header[i]);
        return std::nullopt;
      }
  for (auto& r : data) {
    if (r.size() != header.size()) r.assign(header.size(), "N/A");
    for (auto& c : r) c = tsv_norm(c);
  }
  return data;
}

}  // namespace

bool longproc_extract_tag(std::string_view response, std::string_view tag, std::string& out) {
  std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  size_t s = response.find(open), e = response.find(close);
  if (s == std::string_view::npos || e == std::string_view::npos) return false;
  size_t b = s + open.size();
  out = py::strip(b <= e ? response.substr(b, e - b) : std::string_view());
  return true;
}

LongProcResult longproc_html_to_tsv(std::string_view prediction, std::string_view gold_tsv) {
  LongProcResult r;
  std::string pred;
  size_t open = prediction.find("```tsv");
  size_t close = prediction.rfind("```");
  if (open != std::string_view::npos && close != std::string_view::npos && close >= open + 6) {
    pred = py::strip(prediction.substr(open + 6, close - open - 6));
  } else if (open != std::string_view::npos) {
    pred = py::strip(prediction.substr(open + 6));
  } else {
    pred = py::strip(prediction);
  }
  r.extracted = pred;
  std::string why;
  auto gt = tsv_frame(gold_tsv, why);
  if (!gt) fail("longproc_html_to_tsv: the gold TSV does not parse: {}", why);
  if (gt->empty()) fail("longproc_html_to_tsv: the gold TSV has no complete data row");
  auto pr = tsv_frame(pred, why);
  if (!pr) {
    r.reason = "prediction TSV unusable: " + why + " (all metrics 0)";
    return r;
  }
  size_t ncol = gt->empty() ? 0 : (*gt)[0].size();
  size_t pcol = pr->empty() ? 0 : (*pr)[0].size();
  if (pr->empty()) {
    r.reason = "prediction has no complete data row (all metrics 0)";
    return r;
  }
  if (!gt->empty() && pcol != ncol) {
    r.reason = fmt::format("prediction has {} columns, gold {} (all metrics 0)", pcol, ncol);
    return r;
  }
  auto contains = [](const std::vector<std::vector<std::string>>& t, const std::vector<std::string>& row) {
    return std::find(t.begin(), t.end(), row) != t.end();
  };
  size_t hit_p = 0, hit_r = 0;
  for (const auto& row : *pr) hit_p += contains(*gt, row);
  for (const auto& row : *gt) hit_r += contains(*pr, row);
  r.precision = static_cast<double>(hit_p) / static_cast<double>(pr->size());
  r.recall = gt->empty() ? 0.0 : static_cast<double>(hit_r) / static_cast<double>(gt->size());
  r.accuracy = r.precision + r.recall == 0 ? 0.0 : 2 * r.recall * r.precision / (r.recall + r.precision);
  r.partial = r.recall;
  r.extraction_rate = 1.0;
  std::vector<std::string> flat;
  for (const auto& row : *pr) flat.push_back(py::join(row, "\t"));
  r.normalized = py::join(flat, "\n");
  r.reason = fmt::format("F1 {:.4f}: {}/{} predicted rows in gold (P {:.4f}), {}/{} gold rows found (R {:.4f})",
                         r.accuracy, hit_p, pr->size(), r.precision, hit_r, gt->size(), r.recall);
  return r;
}

LongProcResult longproc_path_traversal(std::string_view prediction, std::string_view gold_route) {
  LongProcResult r;
  std::string pred;
  if (!longproc_extract_tag(prediction, "Route", pred)) {
    r.reason = "no <Route>...</Route> in the output";
    return r;
  }
  r.extraction_rate = 1.0;
  r.extracted = pred;
  r.normalized = pred;
  std::string gt = py::strip(gold_route);
  if (gt == pred) {
    r.accuracy = r.partial = 1.0;
    r.reason = "route matches exactly";
    return r;
  }
  auto gl = py::split(gt, "\n"), pl = py::split(pred, "\n");
  size_t n = std::min(gl.size(), pl.size()), i = 0;
  while (i < n && gl[i] == pl[i]) ++i;
  if (i < n) {
    r.partial = static_cast<double>(i + 1) / static_cast<double>(gl.size());
    r.reason = fmt::format("route differs at line {}: '{}' vs gold '{}'; partial {:.4f}", i + 1, clip(pl[i]),
                           clip(gl[i]), r.partial);
  } else {
    r.partial = static_cast<double>(n) / static_cast<double>(gl.size());
    r.reason = fmt::format("route has {} lines, gold {} (common prefix matches); partial {:.4f}", pl.size(), gl.size(),
                           r.partial);
  }
  return r;
}

namespace {

std::string tom_norm(const std::string& s) {
  static const std::vector<std::string> words = {"a",    "an",     "the",      "on",       "in",      "at",
                                                 "step", "thinks", "think",    "believes", "believe", "is",
                                                 "are",  "of",     "location", "know",     "knows",   "belief"};
  return py::collapse_ws(py::replace_words(py::remove_punct(py::lower(s), "\u2019"), words));
}

// `- Step N:` lines of the dash-only text, normalised (empty results dropped).
bool is_step_line(const std::string& line) {  // re.match(r'^- Step \d+:', line)
  if (!py::starts_with(line, "- Step ")) return false;
  size_t i = 7;
  while (i < line.size() && line[i] >= '0' && line[i] <= '9') ++i;
  return i > 7 && i < line.size() && line[i] == ':';
}

std::vector<std::string> tom_beliefs(std::string text) {
  size_t at = text.rfind("- Step 0:");
  if (at != std::string::npos) text = text.substr(at);
  std::vector<std::string> out;
  for (const auto& line : py::split(py::strip(text), "\n")) {
    if (!is_step_line(line)) continue;
    std::string b = tom_norm(py::strip(line.substr(line.find('-') + 1)));
    if (!b.empty()) out.push_back(std::move(b));
  }
  return out;
}

std::string dash_lines(std::string_view s) {
  std::vector<std::string> keep;
  for (auto& l : splitlines(s))
    if (py::starts_with(py::strip(l), "-")) keep.push_back(l);
  return py::join(keep, "\n");
}

}  // namespace

LongProcResult longproc_tom_tracking(std::string_view prediction, std::string_view gold_solution) {
  LongProcResult r;
  r.extraction_rate = 1.0;
  r.extracted = dash_lines(prediction);
  auto pb = tom_beliefs(r.extracted);
  auto gb = tom_beliefs(dash_lines(gold_solution));
  r.normalized = py::join(pb, "\n");
  if (pb == gb) {
    r.accuracy = r.partial = 1.0;
    r.reason = fmt::format("all {} belief steps match", gb.size());
    return r;
  }
  if (gb.empty()) {
    r.reason = "gold solution has no '- Step N:' lines (the reference divides by zero); scored 0";
    return r;
  }
  size_t n = std::min(pb.size(), gb.size()), i = 0;
  while (i < n && pb[i] == gb[i]) ++i;
  if (i < n) {
    r.partial = static_cast<double>(i) / static_cast<double>(gb.size());
    r.reason = fmt::format("step {} differs: '{}' vs gold '{}'; partial {:.4f}", i, clip(pb[i]), clip(gb[i]), r.partial);
  } else {
    r.partial = static_cast<double>(n) / static_cast<double>(gb.size());
    r.reason = fmt::format("{} steps, gold {} (common prefix matches); partial {:.4f}", pb.size(), gb.size(), r.partial);
  }
  return r;
}

namespace {

// Python int(s): optional surrounding whitespace, optional sign, ASCII digits with single '_'
// between digits. `literal` additionally requires a valid Python literal for eval() (no sign,
// no leading zeros unless all zeros).
std::optional<long long> py_int(std::string_view s, bool literal, bool allow_sign) {
  std::string t = py::strip(s);
  if (t.empty()) return std::nullopt;
  size_t i = 0;
  bool neg = false;
  if (t[0] == '+' || t[0] == '-') {
    if (!allow_sign) return std::nullopt;
    neg = t[0] == '-';
    i = 1;  // int() allows no whitespace after the sign
  }
  std::string digits;
  bool prev_digit = false;
  for (; i < t.size(); ++i) {
    char c = t[i];
    if (c >= '0' && c <= '9') {
      digits.push_back(c);
      prev_digit = true;
    } else if (c == '_' && prev_digit && i + 1 < t.size() && t[i + 1] >= '0' && t[i + 1] <= '9') {
      prev_digit = false;
    } else {
      return std::nullopt;
    }
  }
  if (digits.empty() || digits.size() > 17) return std::nullopt;
  if (literal && digits.size() > 1 && digits[0] == '0' && digits.find_first_not_of('0') != std::string::npos)
    return std::nullopt;  // eval: leading zeros are a SyntaxError
  long long v = std::stoll(digits);
  return neg ? -v : v;
}

// One "a op b = c" line as LongProc's _parse_line + the multiset checks. Returns "" if valid,
// else why not.
std::string countdown_line(const std::string& raw, std::vector<long long>& nums) {
  std::string line = py::strip(raw);
  auto sides = py::split(line, "=");
  if (sides.size() != 2) return "not of the form 'lhs = rhs'";
  const std::string& lhs = sides[0];
  char op = 0;
  for (char o : {'+', '-', '*', '/'})
    if (lhs.find(o) != std::string::npos) {
      op = o;
      break;
    }
  if (!op) return "no operator on the left-hand side";
  auto parts = py::split(lhs, std::string(1, op));
  if (parts.size() != 2) return "left-hand side is not 'a op b'";
  // Signs can only appear on operands of '+' (a '-' would have been taken as the operator).
  auto a = py_int(parts[0], true, op == '+'), b = py_int(parts[1], true, op == '+');
  auto c = py_int(sides[1], false, true);
  if (!a || !b) return "operands are not integers";
  if (!c) return "result is not an integer";
  bool ok;
  if (op == '+') ok = *a + *b == *c;
  else if (op == '-') ok = *a - *b == *c;
  else if (op == '*') ok = *a * *b == *c;
  else if (*b == 0) return "division by zero";
  else ok = static_cast<double>(*a) / static_cast<double>(*b) == static_cast<double>(*c);
  if (!ok) return "arithmetic is wrong";
  auto take = [&](long long x) {
    auto it = std::find(nums.begin(), nums.end(), x);
    if (it == nums.end()) return false;
    nums.erase(it);
    return true;
  };
  if (!take(*a)) return fmt::format("{} is not an available number", *a);
  if (!take(*b)) return fmt::format("{} is not an available number", *b);
  nums.push_back(*c);
  return "";
}

}  // namespace

LongProcResult longproc_countdown(std::string_view prediction, const std::vector<int64_t>& nums_in, int64_t target,
                                  std::string_view gold_demonstration) {
  LongProcResult r;
  std::string sol;
  bool have = longproc_extract_tag(prediction, "Solution", sol);
  std::string why = "no <Solution>...</Solution>";
  if (have) {
    r.extracted = sol;
    r.normalized = sol;
    auto lines = py::split(sol, "\n");
    std::vector<long long> nums(nums_in.begin(), nums_in.end());
    if (lines.size() != 3) {
      why = fmt::format("solution has {} lines, not 3", lines.size());
    } else {
      why.clear();
      for (size_t i = 0; i < 3 && why.empty(); ++i) {
        std::string w = countdown_line(lines[i], nums);
        if (!w.empty()) why = fmt::format("line {} '{}': {}", i + 1, clip(py::strip(lines[i])), w);
      }
      if (why.empty()) {
        if (!nums.empty() && nums[0] == target) {
          r.accuracy = r.partial = r.extraction_rate = 1.0;
          r.reason = fmt::format("valid solution reaching {}", target);
          return r;
        }
        why = fmt::format("solution ends at {}, target {}", nums.empty() ? 0 : nums[0], target);
      }
    }
  }
  r.extraction_rate = have ? 1.0 : 0.0;
  size_t p = prediction.rfind("# Search Procedure");
  if (p == std::string_view::npos) {
    r.reason = why + "; no '# Search Procedure' (partial 0)";
    return r;
  }
  std::string pred_proc = py::strip(prediction.substr(p + 18));
  std::string_view g = gold_demonstration;
  size_t gp = g.rfind("# Search Procedure");
  if (gp != std::string_view::npos) g = g.substr(gp + 18);
  g = g.substr(0, g.find("Now we have found the target"));
  auto pl = py::split(py::strip(pred_proc), "\n"), gl = py::split(py::strip(g), "\n");
  if (pl[0] != gl[0]) {
    r.reason = why + "; search trace's first line differs (partial 0)";
    return r;
  }
  pl.erase(pl.begin());
  gl.erase(gl.begin());
  if (gl.empty()) {
    r.reason = why + "; gold trace has one line (the reference divides by zero; partial 0)";
    return r;
  }
  long idx = -1;
  std::string div;
  for (size_t i = 0; i < std::min(pl.size(), gl.size()); ++i) {
    idx = static_cast<long>(i);
    const auto& pr = pl[i];
    const auto& gt = gl[i];
    if (pr == gt) continue;
    if (gt.find("Pick two numbers") != std::string::npos) {
      div = fmt::format("trace line {} differs", i + 1);
      break;
    }
    if (gt.find("|- Try") != std::string::npos) {
      if (pr.substr(0, pr.find('=')) != gt.substr(0, gt.find('=')) ||
          (pr.find("drop this branch") != std::string::npos) != (gt.find("drop this branch") != std::string::npos)) {
        div = fmt::format("trace line {} differs", i + 1);
        break;
      }
      continue;
    }
    r.reason = why + "; gold trace has an unknown line (the reference raises; partial 0)";
    return r;
  }
  r.partial = static_cast<double>(idx) / static_cast<double>(gl.size());
  // idx stays -1 when the output trace has only its first line: the reference then reports
  // -1/len (a negative partial accuracy); kept for parity.
  r.reason = fmt::format("{}; {}; partial {:.4f}", why, div.empty() ? "trace agrees as far as it goes" : div, r.partial);
  return r;
}

namespace {

// A run of ASCII digits as a number, saturated at 10^18: Python's int has no limit, and a day
// number that long matches no plan (std::stoll threw std::out_of_range on "Day 99999999999999999999").
long long day_number(const std::string& digits) {
  constexpr long long kCap = 1000000000000000000LL;
  long long v = 0;
  for (char c : digits) {
    if (v > kCap / 10) return kCap;
    v = std::min(kCap, v * 10 + (c - '0'));
  }
  return v;
}

// NATURAL-PLAN _parse_response → (city, stay days).
std::vector<std::pair<std::string, long long>> parse_plan(std::string_view response) {
  static const RE2 visit_re("(\\d+-\\d+)");
  static const RE2 flight_re(".*Day (\\d+).*from ([\\pL\\pN_]+) to ([\\pL\\pN_]+)");
  static const RE2 days_re("European cities for (\\d+) days");
  std::vector<std::string> days;
  std::vector<std::tuple<std::string, std::string, std::string>> flights;
  std::optional<long long> total;
  for (const auto& piece : py::split(response, "\n")) {
    std::string td;
    if (RE2::PartialMatch(piece, days_re, &td)) total = day_number(td);
    std::string v;
    if (RE2::PartialMatch(piece, visit_re, &v)) {
      days.push_back(v);
      long long end = day_number(v.substr(v.find('-') + 1));
      if (total && end == *total) break;
    }
    std::string d, from, to;
    if (RE2::PartialMatch(piece, flight_re, &d, &from, &to)) flights.emplace_back(d, from, to);
  }
  std::vector<std::string> cities;
  std::vector<long long> fdays;
  for (const auto& [d, from, to] : flights) {
    fdays.push_back(day_number(d));
    if (cities.empty()) cities.push_back(from);
    cities.push_back(to);
  }
  std::vector<std::pair<std::string, long long>> plan;
  if (days.empty() || flights.empty() || cities.empty()) return plan;
  long long last = day_number(days.back().substr(days.back().find('-') + 1));
  fdays.insert(fdays.begin(), 1);
  fdays.push_back(last);
  for (size_t i = 0; i < cities.size(); ++i) plan.emplace_back(cities[i], fdays[i + 1] - fdays[i] + 1);
  return plan;
}

std::string travel_norm(const std::string& s) {
  return py::collapse_ws(py::replace_words(py::remove_punct(py::lower(s)), {"a", "an", "the"}));
}

}  // namespace

LongProcResult longproc_travel_planning(std::string_view prediction, std::string_view cities,
                                        std::string_view durations, std::string_view gold_procedure) {
  LongProcResult r;
  std::string plan;
  bool have = longproc_extract_tag(prediction, "Plan", plan);
  r.extraction_rate = have ? 1.0 : 0.0;
  std::vector<std::string> stays;
  std::vector<long long> days;
  for (auto& c : py::split(cities, "**"))
    if (!c.empty()) stays.push_back(c);
  for (auto& d : py::split(durations, "**"))
    if (!d.empty()) {
      auto v = py_int(d, false, true);
      if (!v) fail("longproc_travel_planning: ground_truth_durations: '{}' is not an integer", d);
      days.push_back(*v);
    }
  if (stays.empty()) fail("longproc_travel_planning: ground_truth_cities is empty");
  if (days.size() < stays.size()) fail("longproc_travel_planning: fewer ground_truth_durations than cities");
  std::string why = "no <Plan>...</Plan>";
  if (have) {
    r.extracted = plan;
    auto parsed = parse_plan(plan);
    std::vector<std::string> shown;
    for (auto& [c, d] : parsed) shown.push_back(fmt::format("{}:{}", c, d));
    r.normalized = py::join(shown, " ");
    size_t n = std::min(stays.size(), parsed.size()), m = 0;
    while (m < n && stays[m] == parsed[m].first && days[m] == parsed[m].second) ++m;
    if (m == stays.size()) {
      r.accuracy = r.partial = 1.0;
      r.reason = fmt::format("plan matches all {} stays", stays.size());
      return r;
    }
    why = parsed.empty() ? "plan could not be parsed" : fmt::format("plan matches {}/{} stays", m, stays.size());
  }
  const std::string kOut = "Output the plan in the required format:";
  auto drop = [&](std::string s) {
    for (size_t p; (p = s.find(kOut)) != std::string::npos;) s.erase(p, kOut.size());
    return s;
  };
  std::string gt = drop(std::string(gold_procedure)), out = drop(std::string(prediction));
  const std::string kSp = "<Solving Procedure>";
  auto gparts = py::split(gt, kSp);
  if (gparts.size() < 2) fail("longproc_travel_planning: the gold procedure has no <Solving Procedure>");
  gt = kSp + gparts[1];
  if (out.find(kSp) != std::string::npos) out = kSp + py::split(out, kSp)[1];
  auto lines = [](const std::string& s) {
    std::vector<std::string> v;
    for (auto& l : py::split(py::strip(s), "\n"))
      if (!py::strip(l).empty()) {
        std::u32string u = py::decode(l);
        while (!u.empty() && py::is_space(u.back())) u.pop_back();
        v.push_back(py::encode(u));
      }
    return v;
  };
  auto pl = lines(out), gl = lines(gt);
  long idx = -1;
  std::string div = "procedure agrees as far as it goes";
  for (size_t i = 0; i < std::min(pl.size(), gl.size()); ++i) {
    idx = static_cast<long>(i);
    if (travel_norm(pl[i]).find(travel_norm(gl[i])) == std::string::npos) {
      div = fmt::format("procedure line {} differs", i + 1);
      break;
    }
  }
  if (idx < 0) {
    idx = 0;
    div = "empty procedure";
  }
  r.partial = static_cast<double>(idx) / static_cast<double>(gl.size());
  r.reason = fmt::format("{}; {}; partial {:.4f}", why, div, r.partial);
  return r;
}

}  // namespace kvb::graders
