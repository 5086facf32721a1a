// Internal: the tree-walking renderer shared by interpreter.cpp and builtins.cpp.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/chat/jinja/ast.h"
#include "engine/chat/jinja/jinja.h"
#include "engine/chat/jinja/value.h"

namespace kvb::jinja {

using Frame = std::unordered_map<std::string, Value>;
using FrameP = std::shared_ptr<Frame>;

/// Renders one Program. Variables live in a stack of frames: [globals, template top-level,
/// per-iteration / macro frames...]. A `{% set %}` writes the innermost frame, so assignments
/// inside a for-loop body do not survive the iteration (jinja2 semantics) while assignments
/// inside `if` do.
class Interp {
 public:
  Interp(std::shared_ptr<const Program> prog, const RenderLimits& limits) : prog_(std::move(prog)), limits_(limits) {}

  /// Renders the whole program with `globals` as the outermost frame.
  std::string run(FrameP globals);

  /// Throws TemplateError at the current line.
  [[noreturn]] void fail(const std::string& msg) const;
  /// Calls a callable value with arguments (errors if not callable / undefined).
  Value call(const Value& fn, Args& args);
  /// Python str() with the output-size limit enforced.
  void check_size(size_t n) const;
  /// Throws TemplateError when a value of Value::weight() `w` exceeds RenderLimits::max_value_weight.
  void check_weight(uint64_t w) const;
  int line() const { return line_; }
  const RenderLimits& limits() const { return limits_; }

  /// Attribute access `obj.name` (jinja2 getattr: attribute/method first, then item).
  Value get_attr(const Value& obj, const std::string& name);
  /// Subscript `obj[key]` (jinja2 getitem: item first, then attribute).
  Value get_item(const Value& obj, const Value& key);
  /// Iterates a value as jinja2's for-loop does (Undefined -> empty; dict -> keys; str -> chars).
  std::vector<Value> iterate(const Value& v);
  /// Applies a filter/test by name (used by map/select/reject/selectattr).
  Value apply_filter(const std::string& name, const Value& v, Args& args);
  bool apply_test(const std::string& name, const Value& v, Args& args);
  /// Orders two values as Python's `<` does (raises for incomparable types).
  bool less(const Value& a, const Value& b);

 private:
  enum class Flow { Normal, Break, Continue };

  std::shared_ptr<const Program> prog_;
  RenderLimits limits_;
  std::vector<FrameP> frames_;
  int line_ = 0;
  int call_depth_ = 0;
  int64_t iterations_ = 0;

  Flow exec(const NodeList& body, std::string& out);
  Flow exec_node(const Node& n, std::string& out);
  void exec_for(const Node& n, std::string& out);
  /// Evaluates an expression (eval_node) and refuses a result heavier than max_value_weight.
  Value eval(const Node& n);
  Value eval_node(const Node& n);
  Value eval_bin(const Node& n, const Value& l, const Value& r);
  Value eval_compare(const Node& n);
  void eval_args(const Node& n, Args& args);
  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v);
  void assign_targets(const std::vector<std::string>& names, const Value& v);
  Value make_macro(const Node& n, const Node* caller_body = nullptr);
  Value eval_filter_chain(const Node& chain, Value v);
  Value slice(const Value& obj, const Node& sl);
  void store_in_namespace(const Value& ns, const std::string& attr, Value v);
  static constexpr uint32_t kMaxValueDepth = 256;

  friend struct MacroImpl;
};

/// Python operators used by both files.
Value py_add(Interp& in, const Value& a, const Value& b);
/// printf-style `fmt % arg` (%s %r %d %i %f %%); a tuple `arg` supplies several values.
Value py_percent_format(Interp& in, const std::string& fmt, const Value& arg);

/// The builtin registries (builtins.cpp).
using FilterFn = Value (*)(Interp&, const Value&, Args&);
using TestFn = bool (*)(Interp&, const Value&, Args&);
FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);
/// Bound methods of str and dict values (e.g. "abc".startswith); Undefined if none.
Value find_method(Interp& in, const Value& obj, const std::string& name);
/// The transformers global functions (raise_exception, strftime_now, namespace, dict, range).
void install_globals(Frame& g);
/// json.dumps as transformers' tojson calls it (ensure_ascii, indent, separators, sort_keys).
std::string py_json_dumps(Interp& in, const Value& v, bool ensure_ascii, const Value& indent,
                          const std::string& item_sep, const std::string& key_sep, bool sort_keys);

}  // namespace kvb::jinja
