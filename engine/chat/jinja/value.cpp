// Value type of the Jinja-subset interpreter: construction, Python str()/repr(), equality, JSON
// conversion and UTF-8 helpers. See value.h.
#include "engine/chat/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/util/utf8.h"

namespace kvb::jinja {

// ---------------------------------------------------------------- Dict

const Value* Dict::find(std::string_view key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

namespace {
uint64_t sat_add(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }
}  // namespace

void Dict::set(const std::string& key, Value v) {
  depth = std::max<uint32_t>(depth, 1 + v.depth());
  weight = sat_add(weight, v.weight());
  if (Value* p = find(key)) {
    *p = std::move(v);
    return;
  }
  items.emplace_back(key, std::move(v));
}

// ---------------------------------------------------------------- constructors

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() { return Value(Kind::None); }
Value Value::boolean(bool b) {
  Value v(Kind::Bool);
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v(Kind::Int);
  v.i_ = i;
  return v;
}
Value Value::number(double d) {
  Value v(Kind::Float);
  v.d_ = d;
  return v;
}
Value Value::string(std::string s) {
  Value v(Kind::String);
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::list(std::vector<Value> items, bool tuple) {
  Value v(Kind::List);
  v.tuple_ = tuple;
  uint32_t d = 0;
  uint64_t w = 1;
  for (const auto& x : items) d = std::max(d, x.depth()), w = sat_add(w, x.weight());
  v.depth_ = d + 1;
  v.weight_ = w;
  v.list_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}
static void compute_depth(Dict& d) {
  uint32_t m = 0;
  uint64_t w = 1;
  for (const auto& kv : d.items) m = std::max(m, kv.second.depth()), w = sat_add(w, kv.second.weight());
  d.depth = m + 1;
  d.weight = w;
}

uint64_t Value::weight() const {
  if (kind_ == Kind::List) return weight_;
  if (kind_ == Kind::Dict || kind_ == Kind::Namespace) return dict_->weight;
  if (kind_ == Kind::String) return 1 + str_ref().size() / 64;
  return 1;
}

uint32_t Value::depth() const {
  if (kind_ == Kind::List) return depth_;
  if (kind_ == Kind::Dict || kind_ == Kind::Namespace) return dict_->depth;
  return 0;
}

bool Value::reaches(const Dict* target) const {
  std::vector<const Value*> stack{this};
  std::vector<const void*> seen;
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    const void* id = nullptr;
    if (v->kind_ == Kind::List) id = v->list_.get();
    else if (v->kind_ == Kind::Dict || v->kind_ == Kind::Namespace) id = v->dict_.get();
    else continue;
    if (id == target) return true;
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    seen.push_back(id);
    if (v->kind_ == Kind::List)
      for (const auto& x : *v->list_) stack.push_back(&x);
    else
      for (const auto& kv : v->dict_->items) stack.push_back(&kv.second);
  }
  return false;
}

Value Value::dict(Dict d) {
  compute_depth(d);
  Value v(Kind::Dict);
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::ns(Dict d) {
  Value v = dict(std::move(d));
  v.kind_ = Kind::Namespace;
  return v;
}
Value Value::callable(std::string name, NativeFn fn) {
  Value v(Kind::Callable);
  v.s_ = std::make_shared<const std::string>(std::move(name));
  v.fn_ = std::make_shared<NativeFn>(std::move(fn));
  return v;
}

const std::string& Value::empty_string() {
  static const std::string e;
  return e;
}

double Value::as_double() const {
  switch (kind_) {
    case Kind::Float: return d_;
    case Kind::Int: return static_cast<double>(i_);
    case Kind::Bool: return b_ ? 1.0 : 0.0;
    default: return 0.0;
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b_;
    case Kind::Int: return i_ != 0;
    case Kind::Float: return d_ != 0.0;
    case Kind::String: return !str_ref().empty();
    case Kind::List: return !list_->empty();
    case Kind::Dict: return !dict_->items.empty();
    case Kind::Namespace:
    case Kind::Callable: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return tuple_ ? "tuple" : "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Callable: return "function";
  }
  return "object";
}

// ---------------------------------------------------------------- str / repr

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci = [-]D[.DDD]e[+-]XX
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -5 + 1 && exp < 16) {  // Python repr: fixed when -4 <= exp < 16
    if (exp >= 0) {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
      }
    } else {
      out = "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return neg ? "-" + out : out;
}

namespace {

// Code points CPython's str.isprintable() rejects that can appear in text (approximation of the
// Unicode categories Cc, Cf, Zl, Zp, Zs-other-than-space; documented in value.h).
bool py_nonprintable(char32_t c) {
  if (c < 0x20 || c == 0x7f) return true;
  if (c >= 0x80 && c <= 0xa0) return true;
  if (c == 0xad) return true;
  if (c == 0x1680 || c == 0x180e) return true;
  if (c >= 0x2000 && c <= 0x200f) return true;
  if (c >= 0x2028 && c <= 0x202f) return true;
  if (c >= 0x205f && c <= 0x206f) return true;
  if (c == 0x3000 || c == 0xfeff) return true;
  if (c >= 0xd800 && c <= 0xdfff) return true;
  if (c >= 0xfff9 && c <= 0xfffb) return true;
  if (c >= 0xe000 && c <= 0xf8ff) return true;  // private use (Co)
  return false;
}

}  // namespace

std::string py_str_repr(std::string_view s) {
  bool has_sq = s.find('\'') != std::string_view::npos;
  bool has_dq = s.find('"') != std::string_view::npos;
  char q = (has_sq && !has_dq) ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c >= 0xdc80 && c <= 0xdcff) {  // surrogate-escaped raw byte
      char b[16];
      std::snprintf(b, sizeof(b), "\\udc%02x", static_cast<unsigned>(c & 0xff));
      out += b;
    } else if (py_nonprintable(c)) {
      char b[16];
      if (c <= 0xff) std::snprintf(b, sizeof(b), "\\x%02x", static_cast<unsigned>(c));
      else std::snprintf(b, sizeof(b), "\\u%04x", static_cast<unsigned>(c));
      out += b;
    } else {
      utf8_append(out, c);
    }
  }
  out += q;
  return out;
}

// Python's repr of a dict: {'k': repr(v), ...} in insertion order.
static std::string dict_repr(const Dict& d) {
  std::string out = "{";
  for (size_t i = 0; i < d.items.size(); ++i)
    out += (i ? ", " : "") + py_str_repr(d.items[i].first) + ": " + d.items[i].second.repr();
  return out + "}";
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::String: return str_ref();
    case Kind::None: return "None";
    case Kind::Bool: return b_ ? "True" : "False";
    case Kind::Int: return std::to_string(i_);
    case Kind::Float: return py_float_repr(d_);
    case Kind::Namespace: return "<Namespace " + dict_repr(*dict_) + ">";
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::String: return py_str_repr(str_ref());
    case Kind::List: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].repr();
      }
      if (tuple_ && list_->size() == 1) out += ",";
      out += tuple_ ? ")" : "]";
      return out;
    }
    case Kind::Dict: return dict_repr(*dict_);
    case Kind::Callable: return "<function " + str_ref() + ">";
    case Kind::Undefined: return "Undefined";
    default: return to_str();
  }
}

// ---------------------------------------------------------------- equality

bool py_equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.str_ref() == b.str_ref();
    case K::List: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto& x = a.list_ref();
      const auto& y = b.list_ref();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!py_equal(x[i], y[i])) return false;
      return true;
    }
    case K::Dict:
    case K::Namespace: {
      if (a.kind() == K::Namespace) return &a.dict_ref() == &b.dict_ref();
      const auto& x = a.dict_ref().items;
      const auto& y = b.dict_ref();
      if (x.size() != y.items.size()) return false;
      for (const auto& kv : x) {
        const Value* o = y.find(kv.first);
        if (!o || !py_equal(kv.second, *o)) return false;
      }
      return true;
    }
    case K::Callable: return &a.fn() == &b.fn();
    default: return false;
  }
}

// ---------------------------------------------------------------- JSON

template <typename J>
static Value from_json_impl(const J& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string: return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_impl(e));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(it.key(), from_json_impl(it.value()));
      return Value::dict(std::move(d));
    }
    default: return Value::none();
  }
}

Value Value::from_json(const nlohmann::ordered_json& j) { return from_json_impl(j); }
Value Value::from_json(const nlohmann::json& j) { return from_json_impl(j); }

// ---------------------------------------------------------------- UTF-8

std::vector<char32_t> utf8_decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = 0;
    char32_t cp = 0;
    if (c < 0x80) {
      out.push_back(c);
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    }
    bool ok = len > 0 && i + len <= n;
    for (int k = 1; ok && k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (ok) {
      // reject overlong forms and out-of-range values
      if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        ok = false;
    }
    if (!ok) {
      out.push_back(0xdc00 + c);  // surrogateescape
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp >= 0xdc80 && cp <= 0xdcff) out += static_cast<char>(cp & 0xff);  // raw byte
  else utf8::append_utf8(out, cp);
}

std::string utf8_encode(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  if (end > cps.size()) end = cps.size();
  for (size_t i = begin; i < end; ++i) utf8_append(out, cps[i]);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return utf8_decode(s).size();  // malformed: exact slow path
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return utf8_decode(s).size();
    i += len;
    ++n;
  }
  return n;
}

bool py_isspace(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

}  // namespace kvb::jinja
