// kvb::jinja — a Jinja2-subset template interpreter for Hugging Face chat templates.
//
// Public entry point: jinja::Template. It renders the way transformers' apply_chat_template does
// (transformers/utils/chat_template_utils.py, _cached_compile_jinja_template): jinja2's
// ImmutableSandboxedEnvironment with trim_blocks=True, lstrip_blocks=True, the loopcontrols
// extension ({% break %}, {% continue %}), the `{% generation %}` tag, and the globals/filters
// transformers installs: raise_exception(msg), strftime_now(fmt), namespace(...), dict(...),
// and `tojson` = json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False). Supported syntax and builtins are listed in README-level detail in
// engine/chat/jinja/builtins.cpp; anything else is reported as an error naming the line.
//
// Known deviations from CPython/jinja2 (documented, not exercised by real chat templates):
// integers are 64-bit; str.lower/upper/title/capitalize map ASCII letters only; Python's
// repr() escapes only the common non-printable code points; `%` string formatting supports
// %s %d %i %r %f %% without flags.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/chat/jinja/ast.h"
#include "engine/chat/jinja/value.h"

namespace kvb::jinja {

/// Resource limits applied while rendering (guards against adversarial templates).
struct RenderLimits {
  int max_call_depth = 64;               ///< nested macro calls / caller() invocations
  size_t max_output_bytes = 256u << 20;  ///< output and any intermediate string
  int64_t max_range = 100000;            ///< largest range(), as jinja2's sandbox MAX_RANGE
  /// Total loop iterations per render. Real chat templates loop over the messages and tools (a
  /// few thousand at most); an adversarial nested loop reaches the bound in about 1.5 s.
  int64_t max_loop_iterations = 1000000;
  /// Largest Value::weight() of any value an expression yields: elements of lists and dicts,
  /// shared parts counted every time (a list doubled 64 times by `l + l` or `[l, l]` is refused
  /// at about 2^22), strings as 1 per 64 bytes. Real chat templates stay below a few thousand.
  uint64_t max_value_weight = 1u << 22;
};

/// A parsed template. Thread-safe to render concurrently (rendering does not mutate it).
class Template {
 public:
  /// Parses `source`. `origin` names the template in errors ("<origin>:<line>: <what>").
  /// Throws kvb::Error on syntax errors (unknown tag, unclosed block, bad expression, nesting
  /// deeper than 200 levels).
  Template(const std::string& source, std::string origin, LexOptions opts = {});

  /// Renders with the given top-level variables (a JSON object; key order is kept). The
  /// transformers globals (raise_exception, strftime_now, namespace, dict, range, ...) are
  /// always available and may be shadowed by `vars`. Throws kvb::Error("<origin>:<line>: ...")
  /// on runtime errors, including raise_exception() called by the template.
  std::string render(const nlohmann::ordered_json& vars, const RenderLimits& limits = {}) const;
  /// Same with variables given as an already-built dict Value (must be a dict).
  std::string render(const Value& vars, const RenderLimits& limits = {}) const;

  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
  std::shared_ptr<const Program> prog_;
};

}  // namespace kvb::jinja
