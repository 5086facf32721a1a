// Builtin filters, tests, str/dict/list methods and globals of the Jinja-subset interpreter.
//
// Semantics follow jinja2 3.1 (filters.py, tests.py, defaults.py) and the overrides transformers
// installs in chat_template_utils.py (tojson = json.dumps with ensure_ascii=False and no HTML
// escaping; raise_exception; strftime_now; namespace rejecting "_"-prefixed names; dict).
//
// Filters: abs attr batch capitalize count d default dictsort e escape first float format
//   indent int items join last length list lower map max min replace reject rejectattr reverse
//   round safe select selectattr sort string sum title tojson trim unique upper wordcount.
//   (map/select/reject/selectattr/rejectattr/reverse return lists where jinja2 returns
//   iterators; identical once iterated, joined or passed to |list.)
// Tests: defined undefined none boolean true false integer float number string mapping
//   iterable sequence callable sameas escaped odd even divisibleby eq equalto == ne != lt
//   lessthan < le <= gt greaterthan > ge >= in lower upper filter test.
// str methods: startswith endswith split rsplit strip lstrip rstrip replace upper lower title
//   capitalize find rfind index rindex count format join isdigit isalpha isalnum isspace
//   islower isupper splitlines zfill partition rpartition.
// dict methods: items keys values get copy.  list methods: index count.
// Globals: range dict namespace raise_exception strftime_now.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <map>
#include <string_view>
#include <utility>

#include "engine/chat/jinja/interp.h"
#include "engine/util/py_format.h"
#include "engine/util/utf8.h"

namespace kvb::jinja {
namespace {

// ------------------------------------------------------------------------ argument helpers

const Value* arg(Args& a, size_t idx, const char* name) {
  if (idx < a.pos.size()) return &a.pos[idx];
  for (auto& kv : a.kw)
    if (kv.first == name) return &kv.second;
  return nullptr;
}

Value arg_or(Args& a, size_t idx, const char* name, Value dflt) {
  const Value* v = arg(a, idx, name);
  return v ? *v : dflt;
}

std::string need_str(Interp& in, const Value& v, const char* what) {
  if (!v.is_string()) in.fail(std::string(what) + " must be str, not " + v.type_name());
  return v.str_ref();
}

int64_t need_int(Interp& in, const Value& v, const char* what) {
  if (!(v.is_int() || v.is_bool())) in.fail(std::string(what) + " must be an integer, not " + v.type_name());
  return v.as_int();
}

// ------------------------------------------------------------------------ string helpers

// Simple case mapping: ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (covers the text
// chat templates lower/upper in practice; other scripts are left unchanged).
char32_t ascii_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0xc0) return c;
  if (c <= 0xde && c != 0xd7) return c + 0x20;
  if (c == 0x178) return 0xff;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177)) return (c % 2 == 0) ? c + 1 : c;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c % 2 == 1) ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 0x20;
  if (c >= 0x410 && c <= 0x42f) return c + 0x20;
  if (c >= 0x400 && c <= 0x40f) return c + 0x50;
  return c;
}
char32_t ascii_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0xe0) return c;
  if (c <= 0xfe && c != 0xf7) return c - 0x20;
  if (c == 0xff) return 0x178;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177)) return (c % 2 == 1) ? c - 1 : c;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c % 2 == 0) ? c - 1 : c;
  if (c == 0x3c2) return 0x3a3;
  if (c >= 0x3b1 && c <= 0x3c9) return c - 0x20;
  if (c >= 0x430 && c <= 0x44f) return c - 0x20;
  if (c >= 0x450 && c <= 0x45f) return c - 0x50;
  return c;
}
bool is_cased(char32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || ascii_lower(c) != c || ascii_upper(c) != c || c == 0xdf;
}

std::string map_chars(const std::string& s, char32_t (*f)(char32_t)) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) utf8_append(out, f(c));
  return out;
}

std::string py_lower(const std::string& s) { return map_chars(s, ascii_lower); }
std::string py_upper(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) {
    if (c == 0xdf) out += "SS";  // German sharp s upper-cases to two letters, as in Python
    else utf8_append(out, ascii_upper(c));
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  auto cps = utf8_decode(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) utf8_append(out, i == 0 ? ascii_upper(cps[i]) : ascii_lower(cps[i]));
  return out;
}

// Python str.title()
std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    utf8_append(out, prev_cased ? ascii_lower(c) : ascii_upper(c));
    prev_cased = is_cased(c);
  }
  return out;
}

// Python str.strip family; chars = nullptr means whitespace.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  auto cps = utf8_decode(s);
  std::vector<char32_t> set;
  bool ws = !chars || chars->is_none();
  if (!ws) set = utf8_decode(chars->str_ref());
  auto strip_it = [&](char32_t c) {
    if (ws) return py_isspace(c);
    return std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  if (b == 0 && e == cps.size()) return s;
  return utf8_encode(cps, b, e);
}

std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (!sep || sep->is_none()) {
    auto cps = utf8_decode(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0, n = cps.size();
    while (i < n) {
      while (i < n && py_isspace(cps[i])) ++i;
      if (i >= n) break;
      size_t j = i;
      while (j < n && !py_isspace(cps[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size() || words.empty()) {
      for (auto& w : words) out.push_back(utf8_encode(cps, w.first, w.second));
      return out;
    }
    // with maxsplit: the remainder keeps inner whitespace (trailing/leading stripped on its side)
    if (!from_right) {
      for (int64_t k = 0; k < maxsplit; ++k) out.push_back(utf8_encode(cps, words[k].first, words[k].second));
      out.push_back(utf8_encode(cps, words[maxsplit].first, words.back().second));
      // Python keeps trailing whitespace of the remainder? No: str.split strips only the separator
      // runs it consumed; the remainder runs to the end of the string including trailing spaces.
      out.back() = utf8_encode(cps, words[maxsplit].first, n);
    } else {
      size_t keep = words.size() - static_cast<size_t>(maxsplit);
      out.push_back(utf8_encode(cps, 0, words[keep - 1].second));
      for (size_t k = keep; k < words.size(); ++k) out.push_back(utf8_encode(cps, words[k].first, words[k].second));
    }
    return out;
  }
  const std::string& d = sep->str_ref();
  if (!from_right) {
    size_t start = 0;
    int64_t count = 0;
    while (maxsplit < 0 || count < maxsplit) {
      size_t p = s.find(d, start);
      if (p == std::string::npos) break;
      out.push_back(s.substr(start, p - start));
      start = p + d.size();
      ++count;
    }
    out.push_back(s.substr(start));
    return out;
  }
  std::vector<std::string> rev;
  size_t end = s.size();
  int64_t count = 0;
  while (maxsplit < 0 || count < maxsplit) {
    if (end < d.size()) break;
    size_t p = s.rfind(d, end - d.size());
    if (p == std::string::npos) break;
    rev.push_back(s.substr(p + d.size(), end - p - d.size()));
    end = p;
    ++count;
  }
  rev.push_back(s.substr(0, end));
  return std::vector<std::string>(rev.rbegin(), rev.rend());
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& neu, int64_t count) {
  std::string out;
  if (old.empty()) {
    auto cps = utf8_decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += neu;
        ++done;
      }
      if (i < cps.size()) utf8_append(out, cps[i]);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t p = s.find(old, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += neu;
    start = p + old.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

// Python str.splitlines() (keepends=False).
std::vector<std::string> py_splitlines(const std::string& s) {
  std::vector<std::string> out;
  auto cps = utf8_decode(s);
  size_t start = 0, i = 0;
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e || c == 0x85 ||
           c == 0x2028 || c == 0x2029;
  };
  while (i < cps.size()) {
    if (is_break(cps[i])) {
      out.push_back(utf8_encode(cps, start, i));
      if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
      start = ++i;
    } else {
      ++i;
    }
  }
  if (start < cps.size()) out.push_back(utf8_encode(cps, start, cps.size()));
  return out;
}

// Code-point index of a byte offset.
int64_t cp_index(const std::string& s, size_t byte_off) {
  return static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, byte_off)));
}

// Python str.format with {} / {0} / {name} fields and {{ }} escapes (no format specs).
std::string py_str_format(Interp& in, const std::string& fmt, Args& a) {
  size_t auto_idx = 0;
  const auto replace = [&](std::string_view text, size_t) {
    std::string field(text);
    std::string conv;
    if (auto bang = field.find('!'); bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    if (field.find(':') != std::string::npos) in.fail("format specs in str.format are not supported");
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_idx >= a.pos.size())
        in.fail("Replacement index " + std::to_string(auto_idx) + " out of range for positional args tuple");
      v = &a.pos[auto_idx++];
    } else if (isdigit(static_cast<unsigned char>(field[0]))) {
      size_t k = std::stoul(field);
      if (k >= a.pos.size()) in.fail("Replacement index " + field + " out of range for positional args tuple");
      v = &a.pos[k];
    } else {
      for (auto& kv : a.kw)
        if (kv.first == field) v = &kv.second;
      if (!v) in.fail("KeyError: '" + field + "'");
    }
    return conv == "r" ? v->repr() : v->to_str();
  };
  return expand_py_format(fmt, replace, [&](char brace, size_t) {
    in.fail(std::string("Single '") + brace + "' encountered in format string");
  });
}

Value str_list(const std::vector<std::string>& v) {
  std::vector<Value> out;
  out.reserve(v.size());
  for (const auto& s : v) out.push_back(Value::string(s));
  return Value::list(std::move(out));
}

bool starts_or_ends(Interp& in, const std::string& s, const Value& pat, bool start) {
  auto one = [&](const Value& p) {
    const std::string& x = need_str(in, p, start ? "startswith first arg" : "endswith first arg");
    if (x.size() > s.size()) return false;
    return start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (pat.is_tuple()) {
    for (const auto& p : pat.list_ref())
      if (one(p)) return true;
    return false;
  }
  return one(pat);
}

// ------------------------------------------------------------------------ methods

Value make_method(const std::string& name, std::function<Value(Interp&, Args&)> f) {
  return Value::callable(name, std::move(f));
}

/// str methods that search: startswith, endswith, find, rfind, index, rindex, count, partition,
/// rpartition. Undefined for any other name.
Value str_search_method(const Value& sv, const std::string& name) {
  if (name == "startswith" || name == "endswith") {
    bool start = name == "startswith";
    return make_method(name, [sv, start](Interp& in, Args& a) {
      const std::string& s = sv.str_ref();
      if (a.pos.empty())
        in.fail(std::string(start ? "startswith" : "endswith") + "() takes at least 1 argument (0 given)");
      return Value::boolean(starts_or_ends(in, s, a.pos[0], start));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    bool right = name[0] == 'r';
    bool raise = name.find("index") != std::string::npos;
    return make_method(name, [sv, right, raise](Interp& in, Args& a) {
      const std::string& s = sv.str_ref();
      if (a.pos.empty()) in.fail("find() takes at least 1 argument");
      const std::string& sub = need_str(in, a.pos[0], "find arg");
      size_t p = right ? s.rfind(sub) : s.find(sub);
      if (p == std::string::npos) {
        if (raise) in.fail("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(cp_index(s, p));
    });
  }
  if (name == "count") {
    return make_method(name, [sv](Interp& in, Args& a) {
      const std::string& s = sv.str_ref();
      if (a.pos.empty()) in.fail("count() takes at least 1 argument");
      const std::string& sub = need_str(in, a.pos[0], "count arg");
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    });
  }
  if (name == "partition" || name == "rpartition") {
    bool right = name == "rpartition";
    return make_method(name, [sv, right](Interp& in, Args& a) {
      const std::string& s = sv.str_ref();
      if (a.pos.empty()) in.fail("partition() takes exactly one argument");
      const std::string& sep = need_str(in, a.pos[0], "sep");
      if (sep.empty()) in.fail("empty separator");
      size_t p = right ? s.rfind(sep) : s.find(sep);
      if (p == std::string::npos)
        return right ? Value::list({Value::string(""), Value::string(""), Value::string(s)}, true)
                     : Value::list({Value::string(s), Value::string(""), Value::string("")}, true);
      return Value::list({Value::string(s.substr(0, p)), Value::string(sep), Value::string(s.substr(p + sep.size()))},
                         true);
    });
  }
  return Value::undefined();
}

/// str methods that build new strings or lists: split, rsplit, strip, lstrip, rstrip, replace,
/// upper, lower, title, capitalize, format, join, splitlines, zfill. Undefined for any other name.
Value str_edit_method(const Value& sv, const std::string& name) {
  if (name == "split" || name == "rsplit") {
    bool right = name == "rsplit";
    return make_method(name, [sv, right](Interp& in, Args& a) {
      const std::string& s = sv.str_ref();
      const Value* sep = arg(a, 0, "sep");
      if (sep && !sep->is_none()) {
        need_str(in, *sep, "sep");
        if (sep->str_ref().empty()) in.fail("empty separator");
      }
      int64_t maxsplit = need_int(in, arg_or(a, 1, "maxsplit", Value::integer(-1)), "maxsplit");
      return str_list(py_split(s, sep, maxsplit, right));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return make_method(name, [sv, l, r](Interp& in, Args& a) {
      const std::string& s = sv.str_ref();
      const Value* chars = arg(a, 0, "chars");
      if (chars && !chars->is_none()) need_str(in, *chars, "strip arg");
      return Value::string(py_strip(s, chars, l, r));
    });
  }
  if (name == "replace") {
    return make_method(name, [sv](Interp& in, Args& a) {
      const std::string& s = sv.str_ref();
      const Value* o = arg(a, 0, "old");
      const Value* n = arg(a, 1, "new");
      if (!o || !n) in.fail("replace() takes at least 2 arguments");
      int64_t count = need_int(in, arg_or(a, 2, "count", Value::integer(-1)), "count");
      std::string r = py_replace(s, need_str(in, *o, "replace arg 1"), need_str(in, *n, "replace arg 2"), count);
      in.check_size(r.size());
      return Value::string(std::move(r));
    });
  }
  // The case methods: str.upper(), lower(), title(), capitalize().
  using CaseFn = std::string (*)(const std::string&);
  static constexpr std::pair<std::string_view, CaseFn> kCaseMethods[] = {
      {"upper", py_upper}, {"lower", py_lower}, {"title", py_title}, {"capitalize", py_capitalize}};
  for (const auto& [method, fn] : kCaseMethods)
    if (name == method)
      return make_method(name, [sv, fn = fn](Interp&, Args&) { return Value::string(fn(sv.str_ref())); });
  if (name == "format")
    return make_method(name, [sv](Interp& in, Args& a) {
      const std::string& s = sv.str_ref();
      return Value::string(py_str_format(in, s, a));
    });
  if (name == "join") {
    return make_method(name, [sv](Interp& in, Args& a) {
      const std::string& s = sv.str_ref();
      if (a.pos.empty()) in.fail("join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const auto& x : in.iterate(a.pos[0])) {
        if (!x.is_string()) in.fail("sequence item: expected str instance, " + x.type_name() + " found");
        if (!first) out += s;
        first = false;
        out += x.str_ref();
        in.check_size(out.size());
      }
      return Value::string(std::move(out));
    });
  }
  if (name == "splitlines")
    return make_method(name, [sv](Interp&, Args&) {
      const std::string& s = sv.str_ref();
      return str_list(py_splitlines(s));
    });
  if (name == "zfill") {
    return make_method(name, [sv](Interp& in, Args& a) {
      const std::string& s = sv.str_ref();
      if (a.pos.empty()) in.fail("zfill() takes exactly one argument");
      int64_t w = need_int(in, a.pos[0], "width");
      int64_t n = static_cast<int64_t>(utf8_length(s));
      if (w <= n) return Value::string(s);
      std::string pad(static_cast<size_t>(w - n), '0');
      if (!s.empty() && (s[0] == '-' || s[0] == '+')) return Value::string(s.substr(0, 1) + pad + s.substr(1));
      return Value::string(pad + s);
    });
  }
  return Value::undefined();
}

/// str predicates on character classes: isdigit, isalpha, isalnum, isspace, islower, isupper.
/// Undefined for any other name.
Value str_class_method(const Value& sv, const std::string& name) {
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper") {
    return make_method(name, [sv, name](Interp&, Args&) {
      const std::string& s = sv.str_ref();
      auto cps = utf8_decode(s);
      if (cps.empty()) return Value::boolean(false);
      if (name == "islower" || name == "isupper") {
        bool any = false;
        for (char32_t c : cps) {
          if (c >= 'a' && c <= 'z') {
            if (name == "isupper") return Value::boolean(false);
            any = true;
          } else if (c >= 'A' && c <= 'Z') {
            if (name == "islower") return Value::boolean(false);
            any = true;
          }
        }
        return Value::boolean(any);
      }
      for (char32_t c : cps) {
        bool ok = name == "isdigit"   ? (c >= '0' && c <= '9')
                  : name == "isalpha" ? ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
                  : name == "isalnum" ? ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
                                      : py_isspace(c);
        if (!ok) return Value::boolean(false);
      }
      return Value::boolean(true);
    });
  }
  return Value::undefined();
}

Value str_method(const Value& obj, const std::string& name) {
  const Value sv = obj;  // shares the text
  for (auto group : {str_search_method, str_edit_method, str_class_method}) {
    Value m = group(sv, name);
    if (!m.is_undefined()) return m;
  }
  return Value::undefined();
}

Value dict_items_list(const Value& d) {
  std::vector<Value> out;
  for (const auto& kv : d.dict_ref().items) out.push_back(Value::list({Value::string(kv.first), kv.second}, true));
  return Value::list(std::move(out));
}

Value dict_method(const Value& obj, const std::string& name) {
  if (name == "items") return make_method(name, [obj](Interp&, Args&) { return dict_items_list(obj); });
  if (name == "keys") {
    return make_method(name, [obj](Interp&, Args&) {
      std::vector<Value> out;
      for (const auto& kv : obj.dict_ref().items) out.push_back(Value::string(kv.first));
      return Value::list(std::move(out));
    });
  }
  if (name == "values") {
    return make_method(name, [obj](Interp&, Args&) {
      std::vector<Value> out;
      for (const auto& kv : obj.dict_ref().items) out.push_back(kv.second);
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return make_method(name, [obj](Interp& in, Args& a) {
      if (a.pos.empty()) in.fail("get expected at least 1 argument, got 0");
      Value dflt = a.pos.size() > 1 ? a.pos[1] : Value::none();
      if (!a.pos[0].is_string()) return dflt;
      const Value* v = obj.dict_ref().find(a.pos[0].str_ref());
      return v ? *v : dflt;
    });
  }
  if (name == "copy") return make_method(name, [obj](Interp&, Args&) { return Value::dict(obj.dict_ref()); });
  return Value::undefined();
}

Value list_method(const Value& obj, const std::string& name) {
  if (name == "index" || name == "count") {
    bool idx = name == "index";
    return make_method(name, [obj, idx](Interp& in, Args& a) {
      if (a.pos.empty()) in.fail(std::string(idx ? "index" : "count") + "() takes exactly one argument");
      int64_t n = 0, i = 0;
      for (const auto& x : obj.list_ref()) {
        if (py_equal(x, a.pos[0])) {
          if (idx) return Value::integer(i);
          ++n;
        }
        ++i;
      }
      if (idx) in.fail(a.pos[0].repr() + " is not in list");
      return Value::integer(n);
    });
  }
  return Value::undefined();
}

// ------------------------------------------------------------------------ filters

Value f_abs(Interp& in, const Value& v, Args&) {
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  if (v.is_number()) {
    if (v.as_int() == INT64_MIN) in.fail("integer overflow");
    return Value::integer(std::llabs(v.as_int()));
  }
  in.fail("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_attr(Interp& in, const Value& v, Args& a) {
  const Value* n = arg(a, 0, "name");
  if (!n) in.fail("attr filter needs a name");
  return in.get_attr(v, n->to_str());
}

// Resolves jinja2's "a.b.0" attribute paths (make_attrgetter).
Value attr_path(Interp& in, const Value& v, const Value& attribute) {
  if (attribute.is_int()) return in.get_item(v, attribute);
  std::string path = attribute.to_str();
  Value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() &&
                  std::all_of(part.begin(), part.end(), [](char c) { return isdigit(static_cast<unsigned char>(c)); });
    cur = digits ? in.get_item(cur, Value::integer(std::stoll(part))) : in.get_item(cur, Value::string(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

Value f_batch(Interp& in, const Value& v, Args& a) {
  int64_t n = need_int(in, arg_or(a, 0, "linecount", Value::integer(1)), "linecount");
  if (n <= 0) in.fail("batch linecount must be positive");
  const Value* fill = arg(a, 1, "fill_with");
  std::vector<Value> out, cur;
  for (auto& x : in.iterate(v)) {
    cur.push_back(x);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

Value f_capitalize(Interp&, const Value& v, Args&) { return Value::string(py_capitalize(v.to_str())); }

Value f_length(Interp& in, const Value& v, Args&) {
  switch (v.kind()) {
    case Value::Kind::String: return Value::integer(static_cast<int64_t>(utf8_length(v.str_ref())));
    case Value::Kind::List: return Value::integer(static_cast<int64_t>(v.list_ref().size()));
    case Value::Kind::Dict: return Value::integer(static_cast<int64_t>(v.dict_ref().items.size()));
    case Value::Kind::Undefined: return Value::integer(0);
    default: in.fail("object of type '" + v.type_name() + "' has no len()");
  }
}

Value f_default(Interp&, const Value& v, Args& a) {
  Value dflt = arg_or(a, 0, "default_value", Value::string(""));
  bool boolean = arg_or(a, 1, "boolean", Value::boolean(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return dflt;
  return v;
}

// Sort with jinja2's ignore_case key (lower-casing strings).
void sort_values(Interp& in, std::vector<Value>& items, bool reverse, bool case_sensitive,
                 const std::function<Value(const Value&)>& key_of) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& x : items) {
    Value k = key_of(x);
    if (k.is_string() && !case_sensitive) k = Value::string(py_lower(k.str_ref()));
    keyed.emplace_back(std::move(k), x);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& p, const auto& q) {
    return reverse ? in.less(q.first, p.first) : in.less(p.first, q.first);
  });
  for (size_t i = 0; i < items.size(); ++i) items[i] = keyed[i].second;
}

Value f_dictsort(Interp& in, const Value& v, Args& a) {
  if (!v.is_dict()) in.fail("dictsort: expected a mapping, got " + v.type_name());
  bool cs = arg_or(a, 0, "case_sensitive", Value::boolean(false)).truthy();
  std::string by = arg_or(a, 1, "by", Value::string("key")).to_str();
  bool rev = arg_or(a, 2, "reverse", Value::boolean(false)).truthy();
  if (by != "key" && by != "value") in.fail("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> items = dict_items_list(v).list_ref();
  int pos = by == "key" ? 0 : 1;
  sort_values(in, items, rev, cs, [pos](const Value& p) { return p.list_ref()[pos]; });
  return Value::list(std::move(items));
}

Value f_escape(Interp&, const Value& v, Args&) {
  std::string out;
  for (char c : v.to_str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value::string(std::move(out));
}

Value f_first(Interp& in, const Value& v, Args&) {
  auto items = in.iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interp& in, const Value& v, Args&) {
  auto items = in.iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

bool parse_py_int(const std::string& s0, int64_t base, int64_t& out) {
  std::string s = py_strip(s0, nullptr, true, true);
  std::string t;
  for (char c : s)
    if (c != '_') t += c;
  if (t.empty()) return false;
  size_t i = 0;
  if (t[0] == '+' || t[0] == '-') i = 1;
  if (i >= t.size()) return false;
  for (size_t k = i; k < t.size(); ++k)
    if (!isalnum(static_cast<unsigned char>(t[k]))) return false;
  errno = 0;
  char* end = nullptr;
  long long v = strtoll(t.c_str(), &end, static_cast<int>(base));
  if (errno || *end) return false;
  out = v;
  return true;
}

bool parse_py_float(const std::string& s0, double& out) {
  std::string s = py_strip(s0, nullptr, true, true);
  if (s.empty()) return false;
  if (s.find('x') != std::string::npos || s.find('X') != std::string::npos) return false;
  char* end = nullptr;
  out = strtod(s.c_str(), &end);
  return *end == 0;
}

Value f_int(Interp& in, const Value& v, Args& a) {
  Value dflt = arg_or(a, 0, "default", Value::integer(0));
  int64_t base = need_int(in, arg_or(a, 1, "base", Value::integer(10)), "base");
  if (v.is_bool() || v.is_int()) return Value::integer(v.as_int());
  if (v.is_float()) {
    double d = v.as_double();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    int64_t r;
    if (parse_py_int(v.str_ref(), base, r)) return Value::integer(r);
    double d;
    if (parse_py_float(v.str_ref(), d) && std::isfinite(d) && std::fabs(d) < 9.2e18)
      return Value::integer(static_cast<int64_t>(d));
  }
  return dflt;
}

Value f_float(Interp&, const Value& v, Args& a) {
  Value dflt = arg_or(a, 0, "default", Value::number(0.0));
  if (v.is_number()) return Value::number(v.as_double());
  double d;
  if (v.is_string() && parse_py_float(v.str_ref(), d)) return Value::number(d);
  return dflt;
}

Value f_format(Interp& in, const Value& v, Args& a) {
  if (!a.kw.empty() && !a.pos.empty()) in.fail("can't handle positional and keyword arguments at the same time");
  return py_percent_format(in, v.to_str(), a.pos.size() == 1 ? a.pos[0] : Value::list(a.pos, true));
}

Value f_indent(Interp& in, const Value& v, Args& a) {
  Value w = arg_or(a, 0, "width", Value::integer(4));
  bool first = arg_or(a, 1, "first", Value::boolean(false)).truthy();
  bool blank = arg_or(a, 2, "blank", Value::boolean(false)).truthy();
  std::string ind = w.is_string()
                        ? w.str_ref()
                        : std::string(static_cast<size_t>(std::max<int64_t>(0, need_int(in, w, "width"))), ' ');
  std::string s = v.to_str() + "\n";
  auto lines = py_splitlines(s);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
  }
  if (first) rv = ind + rv;
  return Value::string(std::move(rv));
}

Value f_items(Interp& in, const Value& v, Args&) {
  if (v.is_undefined()) return Value::list();
  if (!v.is_dict()) in.fail("Can only get item pairs from a mapping.");
  return dict_items_list(v);
}

Value f_join(Interp& in, const Value& v, Args& a) {
  std::string d = arg_or(a, 0, "d", Value::string("")).to_str();
  const Value* attribute = arg(a, 1, "attribute");
  std::string out;
  bool first = true;
  for (auto& x : in.iterate(v)) {
    if (!first) out += d;
    first = false;
    out += (attribute && !attribute->is_none() ? attr_path(in, x, *attribute) : x).to_str();
    in.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value f_list(Interp& in, const Value& v, Args&) { return Value::list(in.iterate(v)); }
Value f_lower(Interp&, const Value& v, Args&) { return Value::string(py_lower(v.to_str())); }
Value f_upper(Interp&, const Value& v, Args&) { return Value::string(py_upper(v.to_str())); }

Value f_map(Interp& in, const Value& v, Args& a) {
  std::vector<Value> out;
  const Value* attribute = nullptr;
  Value dflt;
  bool has_default = false;
  for (auto& kv : a.kw) {
    if (kv.first == "attribute") attribute = &kv.second;
    else if (kv.first == "default") {
      dflt = kv.second;
      has_default = true;
    }
  }
  if (attribute) {
    for (auto& x : in.iterate(v)) {
      Value r = attr_path(in, x, *attribute);
      if (r.is_undefined() && has_default) r = dflt;
      out.push_back(r);
    }
    return Value::list(std::move(out));
  }
  if (a.pos.empty()) in.fail("map requires a filter argument");
  std::string name = need_str(in, a.pos[0], "map filter name");
  Args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (auto& x : in.iterate(v)) {
    Args copy = rest;
    out.push_back(in.apply_filter(name, x, copy));
  }
  return Value::list(std::move(out));
}

Value f_minmax(Interp& in, const Value& v, Args& a, bool is_max) {
  bool cs = arg_or(a, 0, "case_sensitive", Value::boolean(false)).truthy();
  const Value* attribute = arg(a, 1, "attribute");
  auto items = in.iterate(v);
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  auto key = [&](const Value& x) {
    Value k = attribute && !attribute->is_none() ? attr_path(in, x, *attribute) : x;
    if (k.is_string() && !cs) k = Value::string(py_lower(k.str_ref()));
    return k;
  };
  size_t best = 0;
  Value bk = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (is_max ? in.less(bk, k) : in.less(k, bk)) {
      best = i;
      bk = k;
    }
  }
  return items[best];
}
Value f_max(Interp& in, const Value& v, Args& a) { return f_minmax(in, v, a, true); }
Value f_min(Interp& in, const Value& v, Args& a) { return f_minmax(in, v, a, false); }

Value f_replace(Interp& in, const Value& v, Args& a) {
  const Value* o = arg(a, 0, "old");
  const Value* n = arg(a, 1, "new");
  if (!o || !n) in.fail("replace filter needs old and new");
  Value c = arg_or(a, 2, "count", Value::none());
  int64_t count = c.is_none() ? -1 : need_int(in, c, "count");
  std::string r = py_replace(v.to_str(), o->to_str(), n->to_str(), count);
  in.check_size(r.size());
  return Value::string(std::move(r));
}

Value select_impl(Interp& in, const Value& v, Args& a, bool attr_mode, bool keep_if) {
  size_t k = 0;
  Value attribute;
  if (attr_mode) {
    if (a.pos.empty()) in.fail("selectattr/rejectattr need an attribute");
    attribute = a.pos[0];
    k = 1;
  }
  std::string test;
  Args targs;
  bool has_test = a.pos.size() > k;
  if (has_test) {
    test = need_str(in, a.pos[k], "test name");
    targs.pos.assign(a.pos.begin() + static_cast<long>(k) + 1, a.pos.end());
    targs.kw = a.kw;
  }
  std::vector<Value> out;
  for (auto& x : in.iterate(v)) {
    Value subj = attr_mode ? attr_path(in, x, attribute) : x;
    bool r;
    if (has_test) {
      Args c = targs;
      r = in.apply_test(test, subj, c);
    } else {
      r = subj.truthy();
    }
    if (r == keep_if) out.push_back(x);
  }
  return Value::list(std::move(out));
}
Value f_select(Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, true, false); }

Value f_reverse(Interp& in, const Value& v, Args&) {
  if (v.is_string()) {
    auto cps = utf8_decode(v.str_ref());
    std::reverse(cps.begin(), cps.end());
    return Value::string(utf8_encode(cps));
  }
  auto items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_round(Interp& in, const Value& v, Args& a) {
  int64_t prec = need_int(in, arg_or(a, 0, "precision", Value::integer(0)), "precision");
  std::string method = arg_or(a, 1, "method", Value::string("common")).to_str();
  if (method != "common" && method != "ceil" && method != "floor")
    in.fail("method must be 'common', 'ceil' or 'floor'");
  if (!v.is_number()) in.fail("type " + v.type_name() + " doesn't define __round__ method");
  if (method == "common") {
    if (!v.is_float())
      return prec >= 0 ? Value::integer(v.as_int()) : Value::integer(v.as_int());  // round(int, n) -> int
    double d = v.as_double();
    if (!std::isfinite(d)) return Value::number(d);
    if (prec >= 0 && prec < 300) {
      char buf[512];
      std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(prec), d);
      return Value::number(strtod(buf, nullptr));
    }
    double f = std::pow(10.0, static_cast<double>(-prec));
    return Value::number(std::nearbyint(d / f) * f);
  }
  double f = std::pow(10.0, static_cast<double>(prec));
  double d = v.as_double() * f;
  return Value::number((method == "ceil" ? std::ceil(d) : std::floor(d)) / f);
}

Value f_safe(Interp&, const Value& v, Args&) { return v; }
Value f_string(Interp&, const Value& v, Args&) { return Value::string(v.to_str()); }

Value f_sort(Interp& in, const Value& v, Args& a) {
  bool rev = arg_or(a, 0, "reverse", Value::boolean(false)).truthy();
  bool cs = arg_or(a, 1, "case_sensitive", Value::boolean(false)).truthy();
  Value attribute = arg_or(a, 2, "attribute", Value::none());
  auto items = in.iterate(v);
  sort_values(in, items, rev, cs, [&](const Value& x) { return attribute.is_none() ? x : attr_path(in, x, attribute); });
  return Value::list(std::move(items));
}

Value f_sum(Interp& in, const Value& v, Args& a) {
  Value attribute = arg_or(a, 0, "attribute", Value::none());
  Value acc = arg_or(a, 1, "start", Value::integer(0));
  for (auto& x : in.iterate(v)) acc = py_add(in, acc, attribute.is_none() ? x : attr_path(in, x, attribute));
  return acc;
}

// jinja2's title filter: capitalises each run split by [-\s({[<]+.
Value f_title(Interp&, const Value& v, Args&) {
  auto cps = utf8_decode(v.to_str());
  auto is_delim = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c); };
  std::string out;
  bool start = true;
  for (char32_t c : cps) {
    if (is_delim(c)) {
      utf8_append(out, c);
      start = true;
    } else {
      utf8_append(out, start ? ascii_upper(c) : ascii_lower(c));
      start = false;
    }
  }
  return Value::string(std::move(out));
}

Value f_tojson(Interp& in, const Value& v, Args& a) {
  bool ensure_ascii = arg_or(a, 0, "ensure_ascii", Value::boolean(false)).truthy();
  Value indent = arg_or(a, 1, "indent", Value::none());
  Value seps = arg_or(a, 2, "separators", Value::none());
  bool sort_keys = arg_or(a, 3, "sort_keys", Value::boolean(false)).truthy();
  std::string item_sep = indent.is_none() ? ", " : ",";
  std::string key_sep = ": ";
  if (!seps.is_none()) {
    auto parts = in.iterate(seps);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string())
      in.fail("tojson separators must be a pair of strings");
    item_sep = parts[0].str_ref();
    key_sep = parts[1].str_ref();
  }
  return Value::string(py_json_dumps(in, v, ensure_ascii, indent, item_sep, key_sep, sort_keys));
}

Value f_trim(Interp& in, const Value& v, Args& a) {
  const Value* chars = arg(a, 0, "chars");
  if (chars && !chars->is_none()) need_str(in, *chars, "trim chars");
  return Value::string(py_strip(v.to_str(), chars, true, true));
}

Value f_unique(Interp& in, const Value& v, Args& a) {
  bool cs = arg_or(a, 0, "case_sensitive", Value::boolean(false)).truthy();
  Value attribute = arg_or(a, 1, "attribute", Value::none());
  std::vector<Value> out, seen;
  for (auto& x : in.iterate(v)) {
    Value k = attribute.is_none() ? x : attr_path(in, x, attribute);
    if (k.is_string() && !cs) k = Value::string(py_lower(k.str_ref()));
    bool dup = false;
    for (auto& s : seen)
      if (py_equal(s, k)) dup = true;
    if (!dup) {
      seen.push_back(k);
      out.push_back(x);
    }
  }
  return Value::list(std::move(out));
}

Value f_wordcount(Interp&, const Value& v, Args&) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(v.to_str())) {
    bool w = (c < 0x80) ? (isalnum(static_cast<int>(c)) || c == '_') : !py_isspace(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> m = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"batch", f_batch},
      {"capitalize", f_capitalize},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"format", f_format},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"replace", f_replace},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return m;
}

// ------------------------------------------------------------------------ tests

const Value& test_arg(Interp& in, Args& a, const char* test) {
  if (a.pos.empty()) in.fail(std::string("test '") + test + "' needs an argument");
  return a.pos[0];
}

bool t_defined(Interp&, const Value& v, Args&) { return !v.is_undefined(); }
bool t_undefined(Interp&, const Value& v, Args&) { return v.is_undefined(); }
bool t_none(Interp&, const Value& v, Args&) { return v.is_none(); }
bool t_boolean(Interp&, const Value& v, Args&) { return v.is_bool(); }
bool t_true(Interp&, const Value& v, Args&) { return v.is_bool() && v.as_bool(); }
bool t_false(Interp&, const Value& v, Args&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Interp&, const Value& v, Args&) { return v.is_int(); }
bool t_float(Interp&, const Value& v, Args&) { return v.is_float(); }
bool t_number(Interp&, const Value& v, Args&) { return v.is_number(); }
bool t_string(Interp&, const Value& v, Args&) { return v.is_string(); }
bool t_mapping(Interp&, const Value& v, Args&) { return v.is_dict(); }
bool t_iterable(Interp&, const Value& v, Args&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_sequence(Interp&, const Value& v, Args&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_callable(Interp&, const Value& v, Args&) { return v.is_callable(); }
bool t_escaped(Interp&, const Value&, Args&) { return false; }
bool t_odd(Interp& in, const Value& v, Args&) { return need_int(in, v, "odd test value") % 2 != 0; }
bool t_even(Interp& in, const Value& v, Args&) { return need_int(in, v, "even test value") % 2 == 0; }
bool t_divisibleby(Interp& in, const Value& v, Args& a) {
  int64_t d = need_int(in, test_arg(in, a, "divisibleby"), "divisor");
  if (d == 0) in.fail("integer division or modulo by zero");
  return need_int(in, v, "divisibleby value") % d == 0;
}
bool t_eq(Interp& in, const Value& v, Args& a) { return py_equal(v, test_arg(in, a, "eq")); }
bool t_ne(Interp& in, const Value& v, Args& a) { return !py_equal(v, test_arg(in, a, "ne")); }
bool t_lt(Interp& in, const Value& v, Args& a) { return in.less(v, test_arg(in, a, "lt")); }
bool t_gt(Interp& in, const Value& v, Args& a) { return in.less(test_arg(in, a, "gt"), v); }
bool t_le(Interp& in, const Value& v, Args& a) { return !in.less(test_arg(in, a, "le"), v); }
bool t_ge(Interp& in, const Value& v, Args& a) { return !in.less(v, test_arg(in, a, "ge")); }
bool t_in(Interp& in, const Value& v, Args& a) {
  const Value& c = test_arg(in, a, "in");
  if (c.is_string()) return v.is_string() && c.str_ref().find(v.str_ref()) != std::string::npos;
  if (c.is_dict()) return v.is_string() && c.dict_ref().find(v.str_ref());
  for (auto& x : in.iterate(c))
    if (py_equal(x, v)) return true;
  return false;
}
bool t_sameas(Interp& in, const Value& v, Args& a) {
  const Value& o = test_arg(in, a, "sameas");
  if (v.kind() != o.kind()) return false;
  if (v.is_none() || v.is_undefined()) return true;
  if (v.is_bool()) return v.as_bool() == o.as_bool();
  if (v.is_list()) return &v.list_ref() == &o.list_ref();
  if (v.is_dict() || v.is_namespace()) return &v.dict_ref() == &o.dict_ref();
  return py_equal(v, o);
}
bool t_lower(Interp&, const Value& v, Args&) {
  std::string s = v.to_str();
  return py_lower(s) == s && py_upper(s) != s;
}
bool t_upper(Interp&, const Value& v, Args&) {
  std::string s = v.to_str();
  return py_upper(s) == s && py_lower(s) != s;
}
bool t_filter(Interp& in, const Value& v, Args&) { return v.is_string() && find_filter(v.str_ref()) != nullptr; }
bool t_test(Interp& in, const Value& v, Args&) { return v.is_string() && find_test(v.str_ref()) != nullptr; }

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> m = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"sameas", t_sameas},
      {"escaped", t_escaped},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"lower", t_lower},
      {"upper", t_upper},
      {"filter", t_filter},
      {"test", t_test},
  };
  return m;
}

// ------------------------------------------------------------------------ JSON

void json_str(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t c : utf8_decode(s))
    if (!utf8::append_json_escape(out, c, ensure_ascii)) utf8_append(out, c);
  out += '"';
}

void json_dump(Interp& in, std::string& out, const Value& v, bool ea, const std::string* ind, int level,
               const std::string& isep, const std::string& ksep, bool sort_keys, int depth) {
  if (depth > 200) in.fail("tojson: value nested too deeply");
  in.check_size(out.size());
  auto newline = [&](int lvl) {
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += *ind;
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += py_float_repr(d);
      return;
    }
    case Value::Kind::String: json_str(out, v.str_ref(), ea); return;
    case Value::Kind::List: {
      const auto& items = v.list_ref();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += isep;
        if (ind) newline(level + 1);
        json_dump(in, out, items[i], ea, ind, level + 1, isep, ksep, sort_keys, depth + 1);
      }
      if (ind) newline(level);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      auto items = v.dict_ref().items;
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += isep;
        if (ind) newline(level + 1);
        json_str(out, items[i].first, ea);
        out += ksep;
        json_dump(in, out, items[i].second, ea, ind, level + 1, isep, ksep, sort_keys, depth + 1);
      }
      if (ind) newline(level);
      out += '}';
      return;
    }
    default: in.fail("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

// ------------------------------------------------------------------------ globals

Value g_range(Interp& in, Args& a) {
  if (a.pos.empty() || a.pos.size() > 3) in.fail("range expected 1 to 3 arguments");
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = need_int(in, a.pos[0], "range() argument");
  } else {
    start = need_int(in, a.pos[0], "range() argument");
    stop = need_int(in, a.pos[1], "range() argument");
    if (a.pos.size() == 3) step = need_int(in, a.pos[2], "range() argument");
  }
  if (step == 0) in.fail("range() arg 3 must not be zero");
  // count without overflow
  long double cnt =
      step > 0 ? (static_cast<long double>(stop) - start) / step : (static_cast<long double>(start) - stop) / -step;
  if (cnt > in.limits().max_range)
    in.fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(in.limits().max_range) +
            ").");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    out.push_back(Value::integer(i));
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  return Value::list(std::move(out));
}

Dict dict_from_args(Interp& in, Args& a, const char* fn) {
  Dict d;
  if (a.pos.size() > 1) in.fail(std::string(fn) + " expected at most 1 positional argument");
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.is_dict() || src.is_namespace()) {
      d = src.dict_ref();
    } else {
      for (auto& pair : in.iterate(src)) {
        auto kv = in.iterate(pair);
        if (kv.size() != 2 || !kv[0].is_string()) in.fail(std::string(fn) + ": expected (str, value) pairs");
        d.set(kv[0].str_ref(), kv[1]);
      }
    }
  }
  for (auto& kv : a.kw) d.set(kv.first, kv.second);
  return d;
}

}  // namespace

std::string py_json_dumps(Interp& in, const Value& v, bool ensure_ascii, const Value& indent,
                          const std::string& item_sep, const std::string& key_sep, bool sort_keys) {
  std::string ind;
  const std::string* indp = nullptr;
  if (!indent.is_none()) {
    if (indent.is_string()) ind = indent.str_ref();
    else ind = std::string(static_cast<size_t>(std::max<int64_t>(0, need_int(in, indent, "indent"))), ' ');
    indp = &ind;
  }
  std::string out;
  json_dump(in, out, v, ensure_ascii, indp, 0, item_sep, key_sep, sort_keys, 0);
  return out;
}

FilterFn find_filter(const std::string& name) {
  auto it = filters().find(name);
  return it == filters().end() ? nullptr : it->second;
}

TestFn find_test(const std::string& name) {
  auto it = tests().find(name);
  return it == tests().end() ? nullptr : it->second;
}

Value find_method(Interp& in, const Value& obj, const std::string& name) {
  static const char* unsafe_list[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
  static const char* unsafe_dict[] = {"pop", "popitem", "setdefault", "update", "clear"};
  if (obj.is_string()) return str_method(obj, name);
  if (obj.is_dict()) {
    for (const char* u : unsafe_dict)
      if (name == u) in.fail("access to attribute '" + name + "' of 'dict' object is unsafe.");
    return dict_method(obj, name);
  }
  if (obj.is_list()) {
    if (!obj.is_tuple())
      for (const char* u : unsafe_list)
        if (name == u) in.fail("access to attribute '" + name + "' of 'list' object is unsafe.");
    return list_method(obj, name);
  }
  return Value::undefined();
}

void install_globals(Frame& g) {
  g["range"] = Value::callable("range", g_range);
  g["dict"] = Value::callable("dict", [](Interp& in, Args& a) { return Value::dict(dict_from_args(in, a, "dict")); });
  g["namespace"] = Value::callable("namespace", [](Interp& in, Args& a) {
    Dict d = dict_from_args(in, a, "namespace");
    for (auto& kv : d.items)
      if (!kv.first.empty() && kv.first[0] == '_')
        in.fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + kv.first + "'");
    return Value::ns(std::move(d));
  });
  g["raise_exception"] = Value::callable("raise_exception", [](Interp& in, Args& a) -> Value {
    // One line: the message ends up in an error line (and a run's stored error); CR/LF escaped.
    std::string msg;
    for (char c : a.pos.empty() ? std::string() : a.pos[0].to_str())
      msg += c == '\n' ? std::string("\\n") : c == '\r' ? std::string("\\r") : std::string(1, c);
    in.fail("raise_exception: " + msg);
  });
  g["strftime_now"] = Value::callable("strftime_now", [](Interp& in, Args& a) {
    if (a.pos.empty()) in.fail("strftime_now() missing argument 'format'");
    std::string fmt = need_str(in, a.pos[0], "format");
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    std::string buf(fmt.size() * 8 + 64, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    buf.resize(n);
    return Value::string(buf);
  });
}

}  // namespace kvb::jinja
