// LaTeX subset → GiNaC and the structural comparison, in the calling process (the module's
// implementation: graders/symbolic/ginac_symbolic.h). See graders/math_symbolic.h for the
// accepted language and the equality rules.
#include "graders/symbolic/ginac_symbolic.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <complex>
#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <ginac/ginac.h>

namespace kvb::graders {
namespace {

using GiNaC::ex;

struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Symbols by name, shared by the gold and the prediction so that "x" is the same variable.
struct SymTab {
  std::map<std::string, GiNaC::symbol> syms;
  ex get(const std::string& name) {
    auto it = syms.find(name);
    if (it == syms.end()) it = syms.emplace(name, GiNaC::symbol(name)).first;
    return it->second;
  }
};

const char* const kInfinity = "\\infty";

bool is_known_command(std::string_view c) {
  static const std::vector<std::string_view> known = {
      "frac",    "dfrac",      "tfrac",  "cfrac",        "sqrt",   "pi",     "infty", "sin",    "cos",   "tan",
      "cot",     "sec",        "csc",    "arcsin",       "arccos", "arctan", "ln",    "log",    "exp",   "text",
      "textbf",  "mathrm",     "mathit", "operatorname", "mbox",   "mathbb", "alpha", "beta",   "gamma", "delta",
      "epsilon", "varepsilon", "theta",  "vartheta",     "lambda", "mu",     "phi",   "varphi", "psi",   "omega",
      "sigma",   "tau",        "rho",    "eta",          "kappa",  "nu",     "xi",    "chi",    "zeta",  "cdot",
      "times",   "div",        "circ",   "quad",         "qquad",  "pm",     "cup",   "infin"};
  return std::find(known.begin(), known.end(), c) != known.end();
}

/// Recursive-descent parser of one LaTeX expression (no top-level commas / equations).
class Parser {
 public:
  Parser(std::string_view s, SymTab& st) : s_(s), st_(st) {}

  ex parse_all() {
    ex e = expr();
    ws();
    if (i_ != s_.size()) throw ParseError(fmt::format("unexpected '{}'", s_.substr(i_, 12)));
    return e;
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
  SymTab& st_;
  int depth_ = 0;

  struct DepthGuard {
    int& d;
    explicit DepthGuard(int& dd) : d(dd) {
      if (++d > 100) throw ParseError("nesting too deep");
    }
    ~DepthGuard() { --d; }
  };

  void ws() {
    for (;;) {
      while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
      if (s_.compare(i_, 2, "\\,") == 0 || s_.compare(i_, 2, "\\;") == 0 || s_.compare(i_, 2, "\\ ") == 0 ||
          s_.compare(i_, 2, "\\:") == 0) {
        i_ += 2;
        continue;
      }
      if (peek_cmd() == "quad" || peek_cmd() == "qquad") {
        i_ += 1 + peek_cmd().size();
        continue;
      }
      break;
    }
  }
  bool at_end() {
    ws();
    return i_ >= s_.size();
  }
  char peekc() {
    ws();
    return i_ < s_.size() ? s_[i_] : '\0';
  }
  bool eat(char c) {
    if (peekc() == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) throw ParseError(fmt::format("expected '{}'", c));
  }
  // Name of the command at the cursor (letters after '\'), longest known prefix; "" if none.
  std::string peek_cmd() {
    if (i_ >= s_.size() || s_[i_] != '\\') return "";
    size_t j = i_ + 1;
    while (j < s_.size() && std::isalpha(static_cast<unsigned char>(s_[j]))) ++j;
    std::string_view all = s_.substr(i_ + 1, j - i_ - 1);
    for (size_t n = all.size(); n > 0; --n)
      if (is_known_command(all.substr(0, n))) return std::string(all.substr(0, n));
    return std::string(all);
  }
  bool eat_cmd(std::string_view name) {
    ws();
    if (peek_cmd() == name) {
      i_ += 1 + name.size();
      return true;
    }
    return false;
  }

  ex expr() {
    DepthGuard g(depth_);
    ex r = term();
    for (;;) {
      if (eat('+')) {
        r = r + term();
      } else if (eat('-')) {
        r = r - term();
      } else {
        break;
      }
    }
    return r;
  }

  bool starts_primary() {
    char c = peekc();
    if (c == '\0') return false;
    if (std::isdigit(static_cast<unsigned char>(c)) || std::isalpha(static_cast<unsigned char>(c)) || c == '(' ||
        c == '{' || c == '.')
      return true;
    if (c == '\\') {
      std::string cmd = peek_cmd();
      return !cmd.empty() && cmd != "cdot" && cmd != "times" && cmd != "div" && cmd != "pm" && cmd != "cup" &&
             cmd != "circ";
    }
    return false;
  }

  ex term() {
    ex r = unary();
    for (;;) {
      if (eat('*') || eat_cmd("cdot") || eat_cmd("times")) {
        r = r * unary();
      } else if (eat('/') || eat_cmd("div")) {
        r = r / unary();
      } else if (starts_primary()) {
        ws();
        // Mixed number: an integer literal directly followed by \frac{int}{int}.
        bool frac_next = peek_cmd() == "frac" || peek_cmd() == "dfrac" || peek_cmd() == "tfrac";
        if (frac_next && GiNaC::is_a<GiNaC::numeric>(r) && GiNaC::ex_to<GiNaC::numeric>(r).is_integer()) {
          ex f = power();
          if (GiNaC::is_a<GiNaC::numeric>(f) && GiNaC::ex_to<GiNaC::numeric>(f).is_rational()) {
            r = GiNaC::ex_to<GiNaC::numeric>(r).is_negative() ? r - f : r + f;
          } else {
            r = r * f;
          }
        } else {
          r = r * power();
        }
      } else {
        break;
      }
    }
    return r;
  }

  ex unary() {
    if (eat('-')) return -unary();
    if (eat('+')) return unary();
    return power();
  }

  ex exponent_atom() {
    char c = peekc();
    if (c == '{') return group();
    if (std::isdigit(static_cast<unsigned char>(c))) {
      ++i_;
      return GiNaC::numeric(c - '0');
    }
    if (c == '-') {
      ++i_;
      return -exponent_atom();
    }
    return primary();
  }

  ex power() {
    ex base = primary();
    for (;;) {
      if (eat('^')) {
        base = GiNaC::pow(base, exponent_atom());
      } else if (eat('!')) {
        base = GiNaC::factorial(base);
      } else if (peekc() == '\\' && s_.compare(i_, 2, "\\%") == 0) {
        i_ += 2;
        base = base / 100;
      } else if (eat('%')) {
        base = base / 100;
      } else {
        break;
      }
    }
    return base;
  }

  // {expr} or a single token (LaTeX argument).
  ex group() {
    char c = peekc();
    if (c == '{') {
      ++i_;
      ex e = expr();
      expect('}');
      return e;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      ++i_;
      return GiNaC::numeric(c - '0');
    }
    if (std::isalpha(static_cast<unsigned char>(c))) {
      ++i_;
      return letter(c);
    }
    if (c == '\\') return primary();
    throw ParseError("expected an argument");
  }

  std::string raw_group() {
    if (!eat('{')) throw ParseError("expected '{'");
    int d = 1;
    size_t start = i_;
    while (i_ < s_.size()) {
      if (s_[i_] == '{') ++d;
      if (s_[i_] == '}' && --d == 0) {
        std::string r(s_.substr(start, i_ - start));
        ++i_;
        return r;
      }
      ++i_;
    }
    throw ParseError("unbalanced braces");
  }

  ex letter(char c) {
    if (c == 'i') return GiNaC::I;
    std::string name(1, c);
    if (i_ < s_.size() && s_[i_] == '_') {
      ++i_;
      if (peekc() == '{') {
        name += "_" + raw_group();
      } else if (i_ < s_.size()) {
        name += std::string("_") + s_[i_++];
      }
    }
    return st_.get(name);
  }

  ex number() {
    size_t start = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    std::string ip(s_.substr(start, i_ - start)), fp;
    if (i_ < s_.size() && s_[i_] == '.' && i_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_ + 1]))) {
      ++i_;
      size_t fs = i_;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
      fp = std::string(s_.substr(fs, i_ - fs));
    }
    if (ip.empty() && fp.empty()) throw ParseError("bad number");
    if (ip.size() + fp.size() > 4000) throw ParseError("number too long");
    // Base subscript: 204_5, 2516_{8}.
    if (fp.empty() && i_ < s_.size() && s_[i_] == '_') {
      ++i_;
      std::string b = peekc() == '{' ? raw_group() : std::string(1, s_[i_++]);
      int base = std::atoi(b.c_str());
      if (base < 2 || base > 36) throw ParseError("bad base subscript");
      GiNaC::numeric v = 0;
      for (char d : ip) {
        int dv = d - '0';
        if (dv >= base) throw ParseError("digit out of range for base");
        v = v * base + dv;
      }
      return v;
    }
    GiNaC::numeric v((ip.empty() ? std::string("0") : ip).c_str());
    if (!fp.empty()) {
      GiNaC::numeric den = 1;
      for (size_t k = 0; k < fp.size(); ++k) den *= 10;
      v += GiNaC::numeric(fp.c_str()) / den;
    }
    return v;
  }

  ex function_arg() {
    ws();
    char c = peekc();
    if (c == '(' || c == '{') return primary();
    return power();
  }

  ex primary() {
    DepthGuard g(depth_);
    char c = peekc();
    // Grouping: ( ), [ ], { } group; | | is the absolute value.
    static constexpr std::pair<char, char> kGroups[] = {{'(', ')'}, {'[', ']'}, {'{', '}'}, {'|', '|'}};
    for (const auto& [open, close] : kGroups) {
      if (c != open) continue;
      ++i_;
      ex e = expr();
      expect(close);
      if (open == '|') return GiNaC::abs(e);
      return e;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return number();
    if (std::isalpha(static_cast<unsigned char>(c))) {
      ++i_;
      return letter(c);
    }
    if (c != '\\') throw ParseError(c == '\0' ? "unexpected end" : fmt::format("unexpected '{}'", c));
    std::string cmd = peek_cmd();
    i_ += 1 + cmd.size();
    if (cmd == "frac" || cmd == "dfrac" || cmd == "tfrac" || cmd == "cfrac") {
      ex num = group();
      ex den = group();
      return num / den;
    }
    if (cmd == "sqrt") {
      if (eat('[')) {
        ex n = expr();
        expect(']');
        return GiNaC::pow(group(), 1 / n);
      }
      return GiNaC::sqrt(group());
    }
    if (cmd == "pi") return GiNaC::Pi;
    if (cmd == "infty" || cmd == "infin") return st_.get(kInfinity);
    if (cmd == "text" || cmd == "textbf" || cmd == "mathrm" || cmd == "mathit" || cmd == "mbox" ||
        cmd == "operatorname" || cmd == "mathbb") {
      std::string inner = raw_group();
      std::string name;
      for (char ch : inner)
        if (!std::isspace(static_cast<unsigned char>(ch)))
          name += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (name.empty()) return 1;
      SymTab tmp;
      try {
        Parser p(inner, st_);
        return p.parse_all();
      } catch (const ParseError&) {
        return st_.get("\\text{" + name + "}");
      }
    }
    static const std::vector<std::string> greek = {"alpha", "beta",     "gamma",  "delta", "epsilon", "varepsilon",
                                                   "theta", "vartheta", "lambda", "mu",    "phi",     "varphi",
                                                   "psi",   "omega",    "sigma",  "tau",   "rho",     "eta",
                                                   "kappa", "nu",       "xi",     "chi",   "zeta"};
    if (std::find(greek.begin(), greek.end(), cmd) != greek.end()) return st_.get("\\" + cmd);
    static const std::vector<std::string> fns = {"sin",    "cos",    "tan",    "cot", "sec", "csc",
                                                 "arcsin", "arccos", "arctan", "ln",  "log", "exp"};
    if (std::find(fns.begin(), fns.end(), cmd) != fns.end()) {
      std::optional<ex> fpow;
      if (eat('^')) fpow = exponent_atom();
      ex a = function_arg();
      ex r;
      if (cmd == "sin") r = GiNaC::sin(a);
      else if (cmd == "cos") r = GiNaC::cos(a);
      else if (cmd == "tan") r = GiNaC::tan(a);
      else if (cmd == "cot") r = GiNaC::cos(a) / GiNaC::sin(a);
      else if (cmd == "sec") r = 1 / GiNaC::cos(a);
      else if (cmd == "csc") r = 1 / GiNaC::sin(a);
      else if (cmd == "arcsin") r = GiNaC::asin(a);
      else if (cmd == "arccos") r = GiNaC::acos(a);
      else if (cmd == "arctan") r = GiNaC::atan(a);
      else if (cmd == "exp") r = GiNaC::exp(a);
      else r = GiNaC::log(a);
      return fpow ? GiNaC::pow(r, *fpow) : r;
    }
    if (cmd == "circ") return 1;
    throw ParseError(fmt::format("unsupported command \\{}", cmd));
  }
};

// ---------------------------------------------------------------------------------------------
// Structure: tuples, intervals, sets, lists, matrices, unions, equations.

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// Splits at top-level occurrences of `sep` (outside () [] {} and \begin..\end).
std::vector<std::string> split_top(const std::string& s, std::string_view sep) {
  std::vector<std::string> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 6, "\\begin") == 0) ++depth;
    if (s.compare(i, 4, "\\end") == 0) --depth;
    char c = s[i];
    if (c == '\\' && i + 1 < s.size() && (s[i + 1] == '{' || s[i + 1] == '}')) {
      ++i;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (depth == 0 && s.compare(i, sep.size(), sep) == 0) {
      out.push_back(s.substr(start, i - start));
      start = i + sep.size();
      i += sep.size() - 1;
    }
  }
  out.push_back(s.substr(start));
  return out;
}

// Whether s[0] is an opening bracket whose matching closer (any of ) ] }) is the last char.
bool wraps_whole(const std::string& s) {
  if (s.size() < 2 || (s[0] != '(' && s[0] != '[' && s[0] != '{')) return false;
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') {
      if (--depth == 0) return i == s.size() - 1;
    }
  }
  return false;
}

struct Value {
  enum Kind { kExpr, kTuple, kList, kSet, kMatrix, kUnion, kEquation } kind = kExpr;
  std::string text;                      // kExpr
  char open = 0, close = 0;              // kTuple brackets
  std::vector<Value> items;              // tuple/list/set/union elements; equation lhs, rhs
  std::vector<std::vector<Value>> rows;  // matrix
};

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
}

Value parse_value(const std::string& in, int depth = 0);

// "58,500", "-1,234,567.5": digits grouped by commas in threes.
bool is_thousands_number(const std::string& s) {
  size_t i = (!s.empty() && s[0] == '-') ? 1 : 0;
  size_t first = i;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  size_t lead = i - first;
  if (lead < 1 || lead > 3 || i >= s.size() || s[i] != ',') return false;
  while (i < s.size() && s[i] == ',') {
    for (int k = 1; k <= 3; ++k)
      if (i + k >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i + k]))) return false;
    i += 4;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (i >= s.size()) return false;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  }
  return i == s.size();
}

std::vector<Value> parse_items(const std::vector<std::string>& parts, int depth, bool flatten_sets) {
  std::vector<Value> v;
  for (const auto& p : parts) {
    Value x = parse_value(p, depth + 1);
    if (flatten_sets && x.kind == Value::kSet && p.find("\\pm") != std::string::npos) {
      for (auto& y : x.items) v.push_back(std::move(y));
    } else {
      v.push_back(std::move(x));
    }
  }
  return v;
}

Value parse_value(const std::string& in, int depth) {
  if (depth > 20) throw ParseError("structure nesting too deep");
  std::string s = trim(in);
  Value v;
  if (s.empty()) throw ParseError("empty answer");
  auto cups = split_top(s, "\\cup");
  if (cups.size() > 1) {
    v.kind = Value::kUnion;
    v.items = parse_items(cups, depth, false);
    return v;
  }
  if (s == "\\mathbb{R}") return parse_value("(-\\infty,\\infty)", depth + 1);
  // "x\in[-2,7]" (a membership left by normalisation) → "[-2,7]".
  if (s.size() > 4 && std::isalpha(static_cast<unsigned char>(s[0])) && s.compare(1, 3, "\\in") == 0 &&
      !std::isalpha(static_cast<unsigned char>(s[4])))
    return parse_value(s.substr(4), depth + 1);
  // A number with thousands separators ("58,500") is one number, not a list.
  if (is_thousands_number(s)) {
    std::string t = s;
    replace_all(t, ",", "");
    v.text = t;
    return v;
  }
  const std::string mb = "\\begin{pmatrix}", me = "\\end{pmatrix}";
  if (s.compare(0, mb.size(), mb) == 0 && s.size() >= mb.size() + me.size() &&
      s.compare(s.size() - me.size(), me.size(), me) == 0) {
    v.kind = Value::kMatrix;
    std::string body = s.substr(mb.size(), s.size() - mb.size() - me.size());
    for (auto& row : split_top(body, "\\\\")) {
      if (trim(row).empty()) continue;
      v.rows.push_back(parse_items(split_top(row, "&"), depth, false));
    }
    return v;
  }
  if (s[0] == '{' && wraps_whole(s)) {
    std::string inner = trim(s.substr(1, s.size() - 2));
    v.kind = Value::kSet;
    if (!inner.empty()) v.items = parse_items(split_top(inner, ","), depth, true);
    return v;
  }
  if ((s[0] == '(' || s[0] == '[') && (s.back() == ')' || s.back() == ']') && wraps_whole(s)) {
    std::string inner = s.substr(1, s.size() - 2);
    auto parts = split_top(inner, ",");
    if (parts.size() > 1) {
      v.kind = Value::kTuple;
      v.open = s[0];
      v.close = s.back();
      v.items = parse_items(parts, depth, false);
      return v;
    }
  }
  auto commas = split_top(s, ",");
  if (commas.size() > 1) {
    v.kind = Value::kList;
    v.items = parse_items(commas, depth, true);
    return v;
  }
  auto eqs = split_top(s, "=");
  if (eqs.size() == 2) {
    v.kind = Value::kEquation;
    v.items = parse_items(eqs, depth, false);
    return v;
  }
  if (s.find("\\pm") != std::string::npos) {
    std::string plus = s, minus = s;
    replace_all(plus, "\\pm", "+");
    replace_all(minus, "\\pm", "-");
    v.kind = Value::kSet;
    v.items = {parse_value(plus, depth + 1), parse_value(minus, depth + 1)};
    return v;
  }
  v.text = s;
  return v;
}

// ---------------------------------------------------------------------------------------------
// Comparison.

struct Ctx {
  SymTab st;
  double rel_tol;
  std::string how;  // how the last leaf equality was decided
};

ex to_ex(const Value& v, Ctx& c) {
  if (v.kind != Value::kExpr) throw ParseError("not an expression");
  Parser p(v.text, c.st);
  return p.parse_all();
}

std::vector<GiNaC::symbol> free_symbols(const ex& e) {
  std::vector<GiNaC::symbol> out;
  for (auto it = e.preorder_begin(); it != e.preorder_end(); ++it)
    if (GiNaC::is_a<GiNaC::symbol>(*it)) {
      auto s = GiNaC::ex_to<GiNaC::symbol>(*it);
      if (std::none_of(out.begin(), out.end(), [&](const GiNaC::symbol& t) { return t.is_equal(s); })) out.push_back(s);
    }
  return out;
}

std::optional<std::complex<double>> eval_complex(const ex& e) {
  ex v = e.evalf();
  if (!GiNaC::is_a<GiNaC::numeric>(v)) return std::nullopt;
  auto n = GiNaC::ex_to<GiNaC::numeric>(v);
  double re = GiNaC::real(n).to_double(), im = GiNaC::imag(n).to_double();
  if (!std::isfinite(re) || !std::isfinite(im)) return std::nullopt;
  return std::complex<double>(re, im);
}

bool close_c(std::complex<double> a, std::complex<double> b, double rel, double abs_tol) {
  double d = std::abs(a - b);
  return d <= abs_tol || d <= rel * std::max(std::abs(a), std::abs(b));
}

bool ex_equal(const ex& a, const ex& b, Ctx& c) {
  ex d = a - b;
  try {
    if (d.expand().is_zero()) {
      c.how = "difference expands to 0";
      return true;
    }
    if (GiNaC::normal(d).is_zero()) {
      c.how = "difference simplifies to 0";
      return true;
    }
  } catch (const std::exception&) {
  }
  std::vector<GiNaC::symbol> syms = free_symbols(a);
  for (const auto& s : free_symbols(b))
    if (std::none_of(syms.begin(), syms.end(), [&](const GiNaC::symbol& t) { return t.is_equal(s); }))
      syms.push_back(s);
  for (const auto& s : syms)
    if (s.get_name() == kInfinity) {
      c.how = "infinities differ";
      return false;
    }
  try {
    if (syms.empty()) {
      auto va = eval_complex(a), vb = eval_complex(b);
      if (!va || !vb) return false;
      bool ok = close_c(*va, *vb, c.rel_tol, 0.0);
      if (ok) c.how = fmt::format("numeric values agree (rel tol {:g})", c.rel_tol);
      return ok;
    }
    static const double pts[3][4] = {
        {0.5377, 1.8339, -2.2588, 0.8622}, {0.3188, -1.3077, -0.4336, 0.3426}, {3.5784, 2.7694, -1.3499, 3.0349}};
    for (const auto& row : pts) {
      GiNaC::exmap m;
      for (size_t k = 0; k < syms.size(); ++k)
        m[syms[k]] = GiNaC::numeric(row[k % 4] + 0.173 * static_cast<double>(k / 4));
      auto va = eval_complex(a.subs(m)), vb = eval_complex(b.subs(m));
      if (!va || !vb || !close_c(*va, *vb, 1e-9, 1e-12)) return false;
    }
    c.how = "equal at 3 random points";
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

bool value_equal(const Value& g, const Value& p, Ctx& c);

bool leaf_equal(const Value& g, const Value& p, Ctx& c) { return ex_equal(to_ex(g, c), to_ex(p, c), c); }

// A 2-tuple whose real endpoints satisfy lo < hi is an interval (brackets matter).
bool is_interval(const Value& v, Ctx& c) {
  if (v.kind != Value::kTuple || v.items.size() != 2) return false;
  auto endpoint = [&](const Value& x) -> std::optional<double> {
    if (x.kind != Value::kExpr) return std::nullopt;
    ex e = to_ex(x, c);
    ex inf = c.st.get(kInfinity);
    if (e.is_equal(inf)) return HUGE_VAL;
    if ((-e).is_equal(inf)) return -HUGE_VAL;
    if (!free_symbols(e).empty()) return std::nullopt;
    auto z = eval_complex(e);
    if (!z || z->imag() != 0) return std::nullopt;
    return z->real();
  };
  auto lo = endpoint(v.items[0]), hi = endpoint(v.items[1]);
  return lo && hi && *lo < *hi;
}

bool ordered_equal(const std::vector<Value>& a, const std::vector<Value>& b, Ctx& c) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!value_equal(a[i], b[i], c)) return false;
  return true;
}

bool unordered_equal(const std::vector<Value>& a, const std::vector<Value>& b, Ctx& c) {
  if (a.size() != b.size()) return false;
  std::vector<bool> used(b.size(), false);
  for (const auto& x : a) {
    bool found = false;
    for (size_t j = 0; j < b.size() && !found; ++j)
      if (!used[j] && value_equal(x, b[j], c)) used[j] = found = true;
    if (!found) return false;
  }
  return true;
}

// A short variable name such as "x", "y_1" (the side of "x = 5" that names the unknown).
bool single_letter_lhs(const Value& v) {
  return v.kind == Value::kExpr && v.text.size() <= 3 && !v.text.empty() &&
         std::isalpha(static_cast<unsigned char>(v.text[0]));
}

bool value_equal(const Value& g, const Value& p, Ctx& c) {
  using K = Value::Kind;
  if (g.kind == K::kEquation && p.kind == K::kEquation) {
    ex dg = to_ex(g.items[0], c) - to_ex(g.items[1], c);
    ex dp = to_ex(p.items[0], c) - to_ex(p.items[1], c);
    if (ex_equal(dg, dp, c) || ex_equal(dg, -dp, c)) return true;
    // Same equation up to a non-zero constant factor: (lhs-rhs)_gold / (lhs-rhs)_pred is a number.
    try {
      if (!dp.is_zero()) {
        ex ratio = GiNaC::normal(dg / dp);
        if (GiNaC::is_a<GiNaC::numeric>(ratio) && !ratio.is_zero()) {
          c.how = "equations differ by a constant factor";
          return true;
        }
      }
    } catch (const std::exception&) {
    }
    return false;
  }
  // "x = v" (or "v = x") against a bare value: compare v.
  if (p.kind == K::kEquation && g.kind != K::kEquation) {
    if (single_letter_lhs(p.items[0])) return value_equal(g, p.items[1], c);
    if (single_letter_lhs(p.items[1])) return value_equal(g, p.items[0], c);
  }
  if (g.kind == K::kEquation && p.kind != K::kEquation) {
    if (single_letter_lhs(g.items[0])) return value_equal(g.items[1], p, c);
    if (single_letter_lhs(g.items[1])) return value_equal(g.items[0], p, c);
  }
  if (g.kind == K::kExpr && p.kind == K::kExpr) return leaf_equal(g, p, c);
  bool gi = is_interval(g, c), pi = is_interval(p, c);
  if (gi || pi) {
    if (!(gi && pi)) return false;
    if (g.open != p.open || g.close != p.close) {
      c.how = "interval brackets differ";
      return false;
    }
    return ordered_equal(g.items, p.items, c);
  }
  auto is_coll = [](K k) { return k == K::kList || k == K::kSet; };
  if (is_coll(g.kind) && is_coll(p.kind)) return unordered_equal(g.items, p.items, c);
  if (g.kind == K::kTuple && (p.kind == K::kTuple || p.kind == K::kList)) return ordered_equal(g.items, p.items, c);
  if (p.kind == K::kTuple && g.kind == K::kList) return ordered_equal(g.items, p.items, c);
  if (g.kind == K::kUnion && p.kind == K::kUnion) return unordered_equal(g.items, p.items, c);
  if (g.kind == K::kSet && g.items.size() == 1 && p.kind == K::kExpr) return value_equal(g.items[0], p, c);
  if (p.kind == K::kSet && p.items.size() == 1 && g.kind == K::kExpr) return value_equal(g, p.items[0], c);
  auto flat = [](const Value& m) {
    std::vector<Value> v;
    for (const auto& r : m.rows)
      for (const auto& x : r) v.push_back(x);
    return v;
  };
  auto is_vector = [](const Value& m) {
    return m.rows.size() == 1 || std::all_of(m.rows.begin(), m.rows.end(), [](const auto& r) { return r.size() == 1; });
  };
  if (g.kind == K::kMatrix && p.kind == K::kMatrix) {
    if (g.rows.size() != p.rows.size()) return false;
    for (size_t r = 0; r < g.rows.size(); ++r)
      if (!ordered_equal(g.rows[r], p.rows[r], c)) return false;
    return true;
  }
  if (g.kind == K::kMatrix && p.kind == K::kTuple && is_vector(g)) return ordered_equal(flat(g), p.items, c);
  if (p.kind == K::kMatrix && g.kind == K::kTuple && is_vector(p)) return ordered_equal(g.items, flat(p), c);
  c.how = "different structure";
  return false;
}

}  // namespace

SymbolicResult symbolic_equivalent_in_process(const std::string& pred, const std::string& gold, double rel_tol) {
  Ctx c;
  c.rel_tol = rel_tol;
  try {
    Value g = parse_value(gold);
    Value p = parse_value(pred);
    bool eq = value_equal(g, p, c);
    if (eq) return {SymbolicStatus::kEqual, "symbolic: equivalent (" + c.how + ")"};
    return {SymbolicStatus::kNotEqual, "symbolic: not equivalent" + (c.how.empty() ? std::string() : " (" + c.how + ")")};
  } catch (const ParseError& e) {
    return {SymbolicStatus::kUnparsable, std::string("unparsable: ") + e.what()};
  } catch (const std::exception& e) {
    return {SymbolicStatus::kError, std::string("symbolic error: ") + e.what()};
  }
}

}  // namespace kvb::graders
