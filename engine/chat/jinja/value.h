// kvb::jinja::Value — the dynamic value type of the Jinja-subset interpreter.
//
// Models the Python objects that Hugging Face chat templates see when rendered by jinja2 inside
// transformers' ImmutableSandboxedEnvironment: None, bool, int, float, str, list, tuple, dict,
// jinja2's Namespace, callables (builtins, bound methods, macros) and jinja2's default
// `Undefined`. Strings are UTF-8; lengths, indices and slices count Unicode code points as
// Python does. Lists, dicts and namespaces have reference semantics (shared_ptr), as in Python.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvb::jinja {

class Value;
class Interp;

/// Positional and keyword arguments of one call (filter, test, function or method).
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

/// A native callable: receives the interpreter (for rendering macros, raising errors) and args.
using NativeFn = std::function<Value(Interp&, Args&)>;

/// Insertion-ordered string-keyed dictionary (Python dicts keep insertion order).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  /// Upper bound of the nesting depth of the values stored (maintained by set()).
  uint32_t depth = 1;
  /// Upper bound of Value::weight() of the values stored, plus one (maintained by set()).
  uint64_t weight = 1;
  /// Pointer to the value under `key`, or nullptr.
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  /// Inserts or replaces (keeping the original position on replace).
  void set(const std::string& key, Value v);
};

/// The dynamic value. Cheap to copy: strings and containers are shared (strings are immutable).
class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

  Value() = default;  // Undefined
  static Value undefined(std::string hint = "");
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  /// A list (or a tuple when `tuple` is true; tuples print as `(a, b)`).
  static Value list(std::vector<Value> items = {}, bool tuple = false);
  static Value dict(Dict d = {});
  /// jinja2's Namespace: a mutable attribute bag assignable with `{% set ns.x = ... %}`.
  static Value ns(Dict d = {});
  /// A callable. `name` is used in error messages.
  static Value callable(std::string name, NativeFn fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  /// int, float or bool (Python's numbers.Number, bool being an int subclass).
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::List && tuple_; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_callable() const { return kind_ == Kind::Callable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }
  /// Numeric value as double (int, bool or float).
  double as_double() const;
  const std::string& str_ref() const { return s_ ? *s_ : empty_string(); }
  const std::vector<Value>& list_ref() const { return *list_; }
  const Dict& dict_ref() const { return *dict_; }
  Dict& dict_mut() const { return *dict_; }
  const std::string& callable_name() const { return str_ref(); }
  const NativeFn& fn() const { return *fn_; }
  /// Nesting depth: 0 for scalars, 1 + deepest element for containers (an upper bound for
  /// dicts/namespaces, which are mutable). Used to refuse runaway nesting.
  uint32_t depth() const;
  /// Logical size, counting shared parts every time they are reachable (saturating at 2^64-1):
  /// 1 for a scalar, 1 + bytes/64 for a string, 1 + the elements' weights for a container (an
  /// upper bound for dicts/namespaces). A list doubled 64 times (`l + l`, or `[l, l]`) has a
  /// weight of 2^64 while its storage stays small; the interpreter refuses any value whose weight
  /// exceeds RenderLimits::max_value_weight, so printing or converting it can never run away.
  uint64_t weight() const;
  /// True when `target`'s storage is reachable from this value (cycle check before storing).
  bool reaches(const Dict* target) const;
  /// For Undefined: the name or description used in "... is undefined" errors.
  const std::string& undefined_hint() const { return str_ref(); }

  /// Python truthiness (Undefined is falsy).
  bool truthy() const;
  /// Python str(): what `{{ v }}` prints. Undefined prints as "".
  std::string to_str() const;
  /// Python repr() (used inside containers).
  std::string repr() const;
  /// Python type name for error messages ("str", "int", "list", "dict", ...).
  std::string type_name() const;

  /// Converts JSON (objects keep the json's key order).
  static Value from_json(const nlohmann::ordered_json& j);
  static Value from_json(const nlohmann::json& j);

 private:
  /// An empty value of kind `k` (the named constructors fill its payload).
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  bool tuple_ = false;
  uint32_t depth_ = 0;
  uint64_t weight_ = 1;
  int64_t i_ = 0;
  double d_ = 0;
  static const std::string& empty_string();
  std::shared_ptr<const std::string> s_;  // shared: copying a Value never copies text
  std::shared_ptr<std::vector<Value>> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<NativeFn> fn_;
};

/// Python equality (1 == 1.0 == True; Undefined == Undefined; containers element-wise).
bool py_equal(const Value& a, const Value& b);

/// Python's float repr (shortest round-trip; "1.0", "1e+20", "1.5e-07", "inf", "nan").
std::string py_float_repr(double d);
/// Python's repr of a str (quote choice and escapes as CPython does for printable text).
std::string py_str_repr(std::string_view s);

// ---- UTF-8 helpers (strings index by code point, as Python does) ----

/// Decodes UTF-8 into code points; invalid bytes decode as U+FFFD-free raw values 0xDC80+byte
/// (like Python's surrogateescape) so that re-encoding round-trips them.
std::vector<char32_t> utf8_decode(std::string_view s);
/// Encodes code points (including surrogate-escaped raw bytes) back to UTF-8.
std::string utf8_encode(const std::vector<char32_t>& cps, size_t begin = 0, size_t end = SIZE_MAX);
void utf8_append(std::string& out, char32_t cp);
/// Number of code points.
size_t utf8_length(std::string_view s);
/// Python's str.isspace() for one code point.
bool py_isspace(char32_t c);

}  // namespace kvb::jinja
