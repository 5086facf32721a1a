// AST of the Jinja-subset interpreter, produced by parse_template() (parser.cpp) and walked by
// the renderer (interpreter.cpp). The grammar and operator precedence follow jinja2 3.1's
// parser.py: condexpr < or < and < not < compare < +,- < ~ < *,/,//,% < ** < unary < filters/tests
// < postfix (attribute, subscript, call) < primary.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat/jinja/value.h"

namespace kvb::jinja {

struct Node;
using NodeP = std::unique_ptr<Node>;
using NodeList = std::vector<NodeP>;

/// One AST node. Which fields are used depends on `k` (documented per kind below).
struct Node {
  enum class K {
    // ---- expressions
    Const,     ///< value
    Name,      ///< name
    GetAttr,   ///< a . name
    GetItem,   ///< a [ b ]
    Slice,     ///< a : b : c (each may be null); only as GetItem's b
    Call,      ///< a ( kids..., kw... , *b, **c )
    Filter,    ///< a | name(kids..., kw...); a is null inside filter blocks / set blocks
    Test,      ///< a is name(kids..., kw...)
    Neg,       ///< - a
    Pos,       ///< + a
    Bin,       ///< a <name> b for + - * / // % **
    And,       ///< a and b
    Or,        ///< a or b
    Not,       ///< not a
    Compare,   ///< a (ops[i].first ops[i].second)...; ops: == != < <= > >= in notin
    Concat,    ///< kids joined with ~
    Cond,      ///< b if a else c (c may be null)
    ListLit,   ///< [ kids ]
    TupleLit,  ///< ( kids )
    DictLit,   ///< { kids[0]: kids[1], ... }
    // ---- statements
    Text,         ///< literal template data in name
    Print,        ///< {{ a }}
    If,           ///< kids = tests, bodies = branch bodies, else_body
    For,          ///< names = targets, a = iterable, b = filter (nullable), body, else_body
    Set,          ///< names = targets (tuple unpacking), a = value
    SetNs,        ///< name = namespace variable, names[0] = attribute, a = value
    SetBlock,     ///< names = target (or name+names[0] for ns), a = filter chain (nullable), body
    Macro,        ///< name, names = params, kids = defaults for the last params, body
    CallBlock,    ///< a = call expression, names = caller params, kids = caller defaults, body
    FilterBlock,  ///< a = filter chain, body
    With,         ///< names = targets, kids = values, body
    Break,
    Continue,
    Scope,  ///< body rendered as is ({% generation %} from transformers' AssistantTracker)
  };

  K k;
  int line = 0;
  Value value;
  std::string name;
  NodeP a, b, c;
  NodeList kids;
  std::vector<std::pair<std::string, NodeP>> kw;   ///< keyword args of calls/filters/tests
  std::vector<std::pair<std::string, NodeP>> ops;  ///< comparison operands
  std::vector<std::string> names;
  std::vector<NodeList> bodies;
  NodeList body, else_body;
  bool ns_target = false;  ///< SetBlock: target is a namespace attribute
  /// Macro, CallBlock: the body names `kwargs` / `varargs`, so the macro accepts unknown
  /// keyword / extra positional arguments (jinja2's catch_kwargs / catch_varargs); otherwise
  /// a call with them is an error ("takes no keyword argument 'x'"), as in jinja2.
  bool catch_kwargs = false, catch_varargs = false;

  Node(K kind, int ln) : k(kind), line(ln) {}
};

/// Whitespace options of the lexer; defaults are transformers' (trim_blocks, lstrip_blocks).
struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

/// A parsed template.
struct Program {
  NodeList body;
};

/// Error raised by the lexer, parser or renderer, carrying the template line (1-based).
struct TemplateError {
  int line;
  std::string msg;
};

/// Parses `source` into a Program. Throws TemplateError{line, msg} on syntax errors, and on
/// nesting deeper than `max_depth` (adversarial input guard).
Program parse_template(const std::string& source, const LexOptions& opts, int max_depth = 200);

}  // namespace kvb::jinja
