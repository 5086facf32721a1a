// Math extraction / normalisation / numeric equivalence. See graders/math.h and
// docs/benchmarks.md#math (Qwen2.5-Math evaluation/parser.py, grader.py).
#include "graders/math.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <re2/re2.h>

#include "graders/grade.h"
#include "graders/math_symbolic.h"

namespace kvb::graders {
namespace {

// Every occurrence of `from` replaced, left to right, in one pass (linear time: replacing in place
// moved the tail once per occurrence, quadratic on 1 MB of "\\!").
void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  size_t pos = s.find(from);
  if (pos == std::string::npos) return;
  std::string out;
  out.reserve(s.size());
  size_t start = 0;
  for (; pos != std::string::npos; pos = s.find(from, start)) {
    out.append(s, start, pos - start);
    out.append(to);
    start = pos + from.size();
  }
  out.append(s, start, std::string::npos);
  s = std::move(out);
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// Text after the last occurrence of `key` (Python str.split(key)[-1]).
std::string after_last(std::string_view s, std::string_view key) {
  size_t p = s.rfind(key);
  return std::string(s.substr(p + key.size()));
}

// Qwen's unit words (MathQA), less single letters and LaTeX-colliding words (see math.h).
const std::vector<std::string>& unit_words() {
  static const std::vector<std::string> words = [] {
    std::vector<std::string> base = {
        "east",    "degree", "mph",   "kmph",         "ft",     "m sqaure",  " m east",  "sq m",    "deg",     "mile",
        "monkey",  "prime",  "ratio", "profit of rs", "rd",     "gm",        "p . m",    "lb",      "tile",    "per",
        "dm",      "lt",     "gain",  "way",          "west",   "no change", "men",      "soldier", "pie",     "excess",
        "st",      "inches", "noon",  "percent",      "by",     "gal",       "kmh",      "acre",    "rise",    "a . m",
        "π r 2",   "sq",     "mark",  "toy",          "coin",   "sq . m",    "gallon",   "° f",     "profit",  "minw",
        "yr",      "women",  "feet",  "am",           "hr",     "cu cm",     "square",   "are",     "rupee",   "rounds",
        "cubic",   "cc",     "mtr",   "ohm",          "number", "day",       "hour",     "minute",  "min",     "second",
        "man",     "woman",  "sec",   "cube",         "mt",     "sq inch",   "mp",       "hectare", "more",    "unit",
        "cu . m",  "cm 2",   "rs .",  "rs",           "kg",     "month",     "km",       "cm",      "mm",      "apple",
        "liter",   "loss",   "yard",  "pure",         "year",   "increase",  "decrease", "less",    "Surface", "litre",
        "pi sq m", "metre",  "meter", "inch"};
    std::vector<std::string> all = base;
    for (const auto& w : base) all.push_back(w + "s");
    return all;
  }();
  return words;
}

const std::vector<std::unique_ptr<RE2>>& unit_regexes() {
  static const std::vector<std::unique_ptr<RE2>> res = [] {
    std::vector<std::unique_ptr<RE2>> v;
    for (const auto& w : unit_words()) {
      // (^|\W)unit($|\W), and not right after a backslash (a LaTeX command such as \sec).
      v.push_back(std::make_unique<RE2>("(^|[^\\w\\\\])" + RE2::QuoteMeta(w) + "($|\\W)"));
    }
    return v;
  }();
  return res;
}

// word2number for a whole string made only of English number words ("twenty five" → 25).
std::optional<long long> words_to_number(const std::string& text) {
  static const std::map<std::string, long long> small = {
      {"zero", 0},      {"one", 1},       {"two", 2},       {"three", 3},    {"four", 4},     {"five", 5},
      {"six", 6},       {"seven", 7},     {"eight", 8},     {"nine", 9},     {"ten", 10},     {"eleven", 11},
      {"twelve", 12},   {"thirteen", 13}, {"fourteen", 14}, {"fifteen", 15}, {"sixteen", 16}, {"seventeen", 17},
      {"eighteen", 18}, {"nineteen", 19}, {"twenty", 20},   {"thirty", 30},  {"forty", 40},   {"fifty", 50},
      {"sixty", 60},    {"seventy", 70},  {"eighty", 80},   {"ninety", 90}};
  std::string t = lower(text);
  for (auto& c : t)
    if (c == '-') c = ' ';
  std::vector<std::string> toks;
  size_t i = 0;
  while (i < t.size()) {
    while (i < t.size() && t[i] == ' ') ++i;
    size_t j = i;
    while (j < t.size() && t[j] != ' ') ++j;
    if (j > i) toks.push_back(t.substr(i, j - i));
    i = j;
  }
  if (toks.empty()) return std::nullopt;
  long long total = 0, cur = 0;
  for (const auto& w : toks) {
    if (auto it = small.find(w); it != small.end()) {
      cur += it->second;
    } else if (w == "hundred") {
      cur = (cur == 0 ? 1 : cur) * 100;
    } else if (w == "thousand" || w == "million" || w == "billion") {
      long long m = w == "thousand" ? 1000 : w == "million" ? 1000000 : 1000000000;
      total += (cur == 0 ? 1 : cur) * m;
      cur = 0;
    } else if (w != "and") {
      return std::nullopt;
    }
  }
  return total + cur;
}

// Qwen _fix_fracs: \frac12 → \frac{1}{2}, \frac1{72} → \frac{1}{72}.
std::string fix_fracs(const std::string& s) {
  const std::string key = "\\frac";
  std::vector<std::string> parts;
  size_t start = 0, p;
  while ((p = s.find(key, start)) != std::string::npos) {
    parts.push_back(s.substr(start, p - start));
    start = p + key.size();
  }
  parts.push_back(s.substr(start));
  std::string out = parts[0];
  for (size_t k = 1; k < parts.size(); ++k) {
    const std::string& sub = parts[k];
    out += key;
    if (!sub.empty() && sub[0] == '{') {
      out += sub;
      continue;
    }
    if (sub.size() < 2) return s;
    char a = sub[0], b = sub[1];
    if (b != '{') {
      out += std::string("{") + a + "}{" + b + "}" + sub.substr(2);
    } else {
      out += std::string("{") + a + "}" + sub.substr(1);
    }
  }
  return out;
}

// Whether `s` still holds an answer once LaTeX command names are ignored (a letter or digit).
bool has_content(const std::string& s) {
  static const RE2 cmd("\\\\[a-zA-Z]+");
  std::string t = s;
  RE2::GlobalReplace(&t, cmd, "");
  return std::any_of(t.begin(), t.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; });
}

bool is_int_text(std::string_view s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i >= s.size()) return false;
  for (; i < s.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

// Qwen _fix_a_slash_b: "3/4" → "\frac{3}{4}" when both sides are ints (or contain sqrt) and
// the string round-trips.
std::string fix_a_slash_b(const std::string& s) {
  if (std::count(s.begin(), s.end(), '/') != 1) return s;
  size_t p = s.find('/');
  std::string a = s.substr(0, p), b = s.substr(p + 1);
  auto ok = [](const std::string& x) {
    if (x.find("sqrt") != std::string::npos) return true;
    if (!is_int_text(x)) return false;
    // Python int() then str() must round-trip: no leading '+' or leading zeros.
    std::string d = x[0] == '-' ? x.substr(1) : x;
    return x[0] != '+' && (d == "0" || d[0] != '0') && x != "-0";
  };
  if (!ok(a) || !ok(b)) return s;
  return "\\frac{" + a + "}{" + b + "}";
}

}  // namespace

std::optional<std::string> last_boxed(std::string_view text) {
  size_t pb = text.rfind("\\boxed");
  size_t pf = text.rfind("\\fbox");
  size_t p;
  size_t klen;
  if (pb == std::string_view::npos && pf == std::string_view::npos) return std::nullopt;
  if (pf == std::string_view::npos || (pb != std::string_view::npos && pb > pf)) {
    p = pb;
    klen = 6;
  } else {
    p = pf;
    klen = 5;
  }
  size_t i = p + klen;
  while (i < text.size() && text[i] == ' ') ++i;
  if (i < text.size() && text[i] == '{') {
    int depth = 0;
    for (size_t j = i; j < text.size(); ++j) {
      if (text[j] == '{') ++depth;
      if (text[j] == '}' && --depth == 0) return std::string(text.substr(i + 1, j - i - 1));
    }
    return std::nullopt;
  }
  if (i == p + klen) return std::nullopt;  // "\boxedx": not a box
  std::string_view rest = text.substr(i);
  size_t d = rest.find('$');
  return trim(rest.substr(0, d));
}

std::string extract_math_answer(std::string_view text_in) {
  std::string text(text_in);
  replace_all(text, "\u043a\u0438", "");
  std::string pred;
  size_t fa = text.find("final answer is $");
  if (fa != std::string::npos && text.find("$. I hope") != std::string::npos) {
    std::string tmp = text.substr(fa + 17);
    pred = trim(tmp.substr(0, tmp.find("$. I hope")));
  } else if (text.find("boxed") != std::string::npos || text.find("\\fbox") != std::string::npos) {
    pred = last_boxed(text).value_or("");
  } else if (text.find("he answer is") != std::string::npos) {
    pred = trim(after_last(text, "he answer is"));
  } else if (text.find("final answer is") != std::string::npos) {
    pred = trim(after_last(text, "final answer is"));
  } else if (text.find("答案是") != std::string::npos) {
    std::string t = text.substr(text.find("答案是") + std::string("答案是").size());
    t = trim(t);
    pred = trim(t.substr(0, t.find("\n\n")));
  } else {
    std::string nc = text;
    replace_all(nc, ",", "");
    static const RE2 num("(-?\\d*\\.?\\d+)");
    re2::StringPiece in(nc);
    std::string m, last;
    while (RE2::FindAndConsume(&in, num, &m)) last = m;
    pred = last;
  }
  static const RE2 nl("\\n\\s*");
  RE2::GlobalReplace(&pred, nl, "");
  if (!pred.empty() && pred[0] == ':') pred.erase(0, 1);
  if (!pred.empty() && pred.back() == '.') pred.pop_back();
  if (!pred.empty() && pred.back() == '/') pred.pop_back();
  return pred;
}

std::string strip_math_string(std::string_view in, bool drop_short_lhs) {
  // 1.
  std::string s = trim(in);
  replace_all(s, "\n", "");
  while (!s.empty() && s.back() == '.') s.pop_back();
  replace_all(s, "\\!", "");
  // 2. matrices
  static const RE2 arr_begin("\\\\begin\\{array\\}\\{.*?\\}");
  RE2::GlobalReplace(&s, arr_begin, "\\\\begin{pmatrix}");
  replace_all(s, "\\end{array}", "\\end{pmatrix}");
  replace_all(s, "bmatrix", "pmatrix");
  // 3.
  replace_all(s, "tfrac", "frac");
  replace_all(s, "dfrac", "frac");
  replace_all(s, "\\neq", "\\ne");
  replace_all(s, "\\leq", "\\le");
  replace_all(s, "\\geq", "\\ge");
  // 4.
  replace_all(s, "\\left", "");
  replace_all(s, "\\right", "");
  replace_all(s, "\\{", "{");
  replace_all(s, "\\}", "}");
  // 5. trailing \text{...} (unit) if something is left
  {
    static const RE2 tail_text("\\\\text\\{.*?\\}$");
    std::string t = s;
    RE2::Replace(&t, tail_text, "");
    t = trim(t);
    if (!t.empty() && t != s) s = t;
  }
  // 6. unit words, twice
  for (int round = 0; round < 2; ++round) {
    for (const auto& re : unit_regexes()) {
      std::string t = s;
      RE2::GlobalReplace(&t, *re, "\\1\\2");
      if (t != s && has_content(t)) s = t;
    }
  }
  // 6b (ours): a unit group emptied above, with its exponent ("\mbox{ }^2" from "\mbox{ cm}^2").
  {
    static const RE2 empty_unit("\\\\(?:text|mbox|mathrm)\\{\\s*\\}(?:\\^\\{?\\d\\}?)?");
    std::string t = s;
    RE2::GlobalReplace(&t, empty_unit, "");
    if (!trim(t).empty()) s = t;
  }
  // 7.
  replace_all(s, "^{\\circ}", "");
  replace_all(s, "^\\circ", "");
  replace_all(s, "\\$", "");
  replace_all(s, "$", "");
  replace_all(s, "\\(", "");
  replace_all(s, "\\)", "");
  // 8.
  if (auto n = words_to_number(s)) s = std::to_string(*n);
  // 9.
  static const RE2 text_re("\\\\(?:text|textbf|mathrm)\\{(.*?)\\}");
  RE2::GlobalReplace(&s, text_re, "\\1");
  for (const char* key : {"x=", "y=", "z=", "x\\in", "y\\in", "z\\in", "x\\to", "y\\to", "z\\to"})
    replace_all(s, key, "");
  replace_all(s, "\\emptyset", "{}");
  replace_all(s, "(-\\infty,\\infty)", "\\mathbb{R}");
  replace_all(s, "\\%", "");
  replace_all(s, "%", "");
  // 10.
  replace_all(s, " .", " 0.");
  replace_all(s, "{.", "{0.");
  // 11.
  replace_all(s, "infinity", "\\infty");
  if (s.find("\\infty") == std::string::npos) replace_all(s, "inf", "\\infty");
  replace_all(s, "+\\inity", "\\infty");
  replace_all(s, "and", "");
  replace_all(s, "\\mathbf", "");
  static const RE2 mbox("\\\\mbox\\{.*?\\}");
  RE2::GlobalReplace(&s, mbox, "");
  if (s.find('j') != std::string::npos && s.find('i') == std::string::npos) replace_all(s, "j", "i");
  // 12.
  static const RE2 trail0a("(\\d+)\\.0*([^\\d])");
  static const RE2 trail0b("(\\d+)\\.0*$");
  RE2::GlobalReplace(&s, trail0a, "\\1\\2");
  RE2::GlobalReplace(&s, trail0b, "\\1");
  // 13.
  if (s.empty()) return s;
  if (s[0] == '.') s = "0" + s;
  if (drop_short_lhs && std::count(s.begin(), s.end(), '=') == 1) {
    size_t eq = s.find('=');
    if (eq <= 2) s = s.substr(eq + 1);
  }
  // 14.
  static const RE2 sqrt_re("\\\\sqrt(\\w+)");
  RE2::GlobalReplace(&s, sqrt_re, "\\\\sqrt{\\1}");
  replace_all(s, " ", "");
  s = fix_fracs(s);
  s = fix_a_slash_b(s);
  return s;
}

std::optional<double> parse_plain_number(std::string_view sv) {
  std::string s = trim(sv);
  if (s.empty()) return std::nullopt;
  static const RE2 dec("([-+]?)(\\d{1,3}(?:,\\d{3})+|\\d*\\.?\\d+)(?:[eE]([-+]?\\d+))?");
  static const RE2 sci("([-+]?\\d*\\.?\\d+)\\\\times10\\^\\{?([-+]?\\d+)\\}?");
  static const RE2 frac("(-?)\\\\frac\\{(-?\\d+)\\}\\{(-?\\d+)\\}");
  static const RE2 slash("(-?\\d+)/(-?\\d+)");
  std::string sign, mant, exp, a, b;
  std::string nospace = s;
  replace_all(nospace, " ", "");
  if (RE2::FullMatch(nospace, dec, &sign, &mant, &exp)) {
    replace_all(mant, ",", "");
    double v = std::strtod(mant.c_str(), nullptr);
    if (!exp.empty()) v *= std::pow(10.0, std::atof(exp.c_str()));
    return sign == "-" ? -v : v;
  }
  if (RE2::FullMatch(nospace, sci, &mant, &exp))
    return std::strtod(mant.c_str(), nullptr) * std::pow(10.0, std::atof(exp.c_str()));
  if (RE2::FullMatch(nospace, frac, &sign, &a, &b) || RE2::FullMatch(nospace, slash, &a, &b)) {
    double den = std::strtod(b.c_str(), nullptr);
    if (den == 0) return std::nullopt;
    double v = std::strtod(a.c_str(), nullptr) / den;
    return sign == "-" ? -v : v;
  }
  return std::nullopt;
}

namespace {
// Python math.isclose(a, b, rel_tol=rel): a non-finite value is close only to itself (the
// plain formula made inf "close" to every number: |inf - 18| <= rel * inf).
bool isclose(double a, double b, double rel) {
  if (a == b) return true;
  if (!std::isfinite(a) || !std::isfinite(b)) return false;
  return std::fabs(a - b) <= rel * std::max(std::fabs(a), std::fabs(b));
}

// An integer literal (is_int_text) in canonical form: no '+', no leading zeros, "-0" -> "0".
std::string canonical_int(std::string_view s) {
  const bool neg = !s.empty() && s[0] == '-';
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  while (s.size() > 1 && s[0] == '0') s.remove_prefix(1);
  if (s == "0") return "0";
  return (neg ? "-" : "") + std::string(s);
}

// Digits of an integer literal, sign and leading zeros not counted.
size_t int_digits(std::string_view s) {
  const std::string c = canonical_int(s);
  return c.size() - (c[0] == '-' ? 1 : 0);
}

// "(B)", "B", "\text{(B)}" → 'B' when the whole string is a choice letter A–E.
char choice_letter(const std::string& s) {
  std::string t = s;
  std::erase_if(t, [](char c) { return c == '(' || c == ')' || c == ' '; });
  if (t.size() == 1 && std::toupper(static_cast<unsigned char>(t[0])) >= 'A' &&
      std::toupper(static_cast<unsigned char>(t[0])) <= 'E')
    return static_cast<char>(std::toupper(static_cast<unsigned char>(t[0])));
  return 0;
}
}  // namespace

MathVerdict math_equivalent(const std::string& pred, const std::string& gold, const MathOptions& opt) {
  if (pred.empty()) return {false, "no answer extracted"};
  if (lower(pred) == lower(gold)) return {true, "exact match"};
  if (char g = choice_letter(gold); g != 0) {
    char p = choice_letter(pred);
    return {p == g, p == g ? "same choice letter" : "different choice"};
  }
  auto pv = parse_plain_number(pred);
  auto gv = parse_plain_number(gold);
  if (pv && gv) {
    // Two integer literals compare exactly, as integers of any size (ours: Qwen's rel tol 1e-4
    // would accept 28801 for 28800; as doubles, 10^20 + 1 would equal 10^20), as Math-Verify's
    // sympy Integers do. Percent variants: gold * 100 appends "00"; gold / 100 is an integer
    // only when the gold ends in "00".
    if (is_int_text(pred) && is_int_text(gold)) {
      const std::string p = canonical_int(pred), g = canonical_int(gold);
      std::vector<std::pair<std::string, const char*>> cands = {{g, ""}};
      if (opt.percent && g != "0") {
        cands.push_back({g + "00", " (gold*100, percent)"});
        if (g.size() > 2 && g.compare(g.size() - 2, 2, "00") == 0)
          cands.push_back({g.substr(0, g.size() - 2), " (gold/100, percent)"});
      }
      for (const auto& [c, why] : cands)
        if (p == c) return {true, fmt::format("integer {} == {}{}", p, g, why)};
      return {false, fmt::format("integer {} != {}", p.size() > 40 ? p.substr(0, 40) + "..." : p,
                                 g.size() > 40 ? g.substr(0, 40) + "..." : g)};
    }
    // A number beyond double range (1e400, a 1 MB digit string) parses as infinity; it equals
    // no finite gold (isclose).
    std::vector<std::pair<double, const char*>> cands = {{*gv, ""}};
    if (opt.percent) {
      cands.push_back({*gv / 100, " (gold/100, percent)"});
      cands.push_back({*gv * 100, " (gold*100, percent)"});
    }
    for (auto [c, why] : cands)
      if (std::isfinite(*pv) && std::isfinite(c) && isclose(*pv, c, opt.rel_tol))
        return {true, fmt::format("numeric {} == {}{} (rel tol {:g})", *pv, *gv, why, opt.rel_tol)};
    return {false, fmt::format("numeric {} != {}", *pv, *gv)};
  }
  SymbolicResult r = symbolic_equivalent_limited(pred, gold, opt.time_limit_s, opt.rel_tol);
  return {r.status == SymbolicStatus::kEqual, r.reason};
}

Grade grade_math(std::string_view prediction, std::string_view gold, const MathOptions& opt) {
  Grade g;
  g.extracted = extract_math_answer(prediction);
  g.pred_norm = strip_math_string(g.extracted);
  g.gold_norm = strip_math_string(gold);
  MathVerdict v = math_equivalent(g.pred_norm, g.gold_norm, opt);
  if (!v.equal && v.reason.rfind("timeout", 0) != 0 &&
      (g.extracted.find('=') != std::string::npos || gold.find('=') != std::string::npos)) {
    std::string pe = strip_math_string(g.extracted, false), ge = strip_math_string(gold, false);
    MathVerdict v2 = math_equivalent(pe, ge, opt);
    if (v2.equal) {
      v = v2;
      v.reason += " [equations kept whole]";
      g.pred_norm = pe;
      g.gold_norm = ge;
    }
  }
  g.score = v.equal ? 1.0 : 0.0;
  g.reason = v.reason;
  return g;
}

Grade grade_aime(std::string_view prediction, std::string_view gold) {
  Grade g;
  g.extracted = extract_math_answer(prediction);
  g.pred_norm = strip_math_string(g.extracted);
  g.gold_norm = strip_math_string(gold);
  auto iv = [](const std::string& s) -> std::optional<long> {
    auto v = parse_plain_number(s);
    if (!v || *v != std::floor(*v) || *v < 0 || *v > 999) return std::nullopt;
    return static_cast<long>(*v);
  };
  auto gi = iv(g.gold_norm);
  if (!gi) {
    g.reason = "gold is not an integer 0-999: " + g.gold_norm;
    return g;
  }
  auto pi = iv(g.pred_norm);
  if (!pi) {
    g.reason = g.pred_norm.empty() ? "no answer extracted" : "prediction is not an integer 0-999";
    return g;
  }
  g.score = *pi == *gi ? 1.0 : 0.0;
  g.reason = fmt::format("integer {} {} {}", *pi, *pi == *gi ? "==" : "!=", *gi);
  return g;
}

Grade grade_gsm8k(std::string_view prediction, std::string_view gold_in) {
  std::string gold(gold_in);
  if (size_t p = gold.rfind("####"); p != std::string::npos) gold = gold.substr(p + 4);
  replace_all(gold, ",", "");
  gold = trim(gold);
  Grade g;
  g.extracted = extract_math_answer(prediction);
  g.pred_norm = strip_math_string(g.extracted);
  g.gold_norm = strip_math_string(gold);
  std::string pn = g.pred_norm;
  replace_all(pn, ",", "");
  auto pv = parse_plain_number(pn);
  auto gv = parse_plain_number(g.gold_norm);
  if (!gv) {
    g.reason = "gold is not a number: " + g.gold_norm;
    return g;
  }
  if (!pv) {
    g.reason = g.pred_norm.empty() ? "no answer extracted" : "prediction is not a number";
    return g;
  }
  // Integers a double cannot hold exactly (more than 15 digits) compare exactly as integers:
  // 10^20 + 1 is not 10^20 (Math-Verify compares sympy Integers); shorter ones keep Qwen's rel tol.
  if (is_int_text(pn) && is_int_text(g.gold_norm) && std::max(int_digits(pn), int_digits(g.gold_norm)) > 15) {
    const bool eq = canonical_int(pn) == canonical_int(g.gold_norm);
    g.score = eq ? 1.0 : 0.0;
    auto clip = [](const std::string& x) { return x.size() > 40 ? x.substr(0, 40) + "..." : x; };
    g.reason = fmt::format("integer {} {} {} (exact: beyond 15 digits)", clip(canonical_int(pn)),
                           eq ? "==" : "!=", clip(canonical_int(g.gold_norm)));
    return g;
  }
  if (!std::isfinite(*pv) || !std::isfinite(*gv)) {  // beyond double range: equal to no finite gold
    g.reason = fmt::format("numeric {} != {} (not a finite number)", *pv, *gv);
    return g;
  }
  bool eq = isclose(*pv, *gv, 1e-4);
  g.score = eq ? 1.0 : 0.0;
  g.reason = fmt::format("numeric {} {} {} (rel tol 1e-4)", *pv, eq ? "==" : "!=", *gv);
  return g;
}

void detail::register_math_graders(std::vector<GraderInfo>& v) {
  v.push_back({"math", "MATH-500: last \\boxed{} -> Qwen2.5-Math normalisation -> exact/numeric/symbolic (GiNaC)",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json&) {
                 return best_of_references(refs, [&](const std::string& r) { return grade_math(p, r); });
               }});
  v.push_back({"aime", "AIME: extracted answer is an integer 0-999 equal to the gold",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json&) {
                 return best_of_references(refs, [&](const std::string& r) { return grade_aime(p, r); });
               }});
  v.push_back({"gsm8k", "GSM8K: gold after '####'; extracted number equal within rel tol 1e-4",
               [](std::string_view p, const std::vector<std::string>& refs, const nlohmann::json&) {
                 return best_of_references(refs, [&](const std::string& r) { return grade_gsm8k(p, r); });
               }});
}

}  // namespace kvb::graders
