// Tree-walking renderer of the Jinja-subset interpreter (semantics of jinja2 3.1's compiled
// templates, as rendered by transformers' ImmutableSandboxedEnvironment). See jinja.h/interp.h.
#include <algorithm>
#include <cmath>

#include "engine/chat/jinja/interp.h"
#include "engine/util/error.h"

namespace kvb::jinja {

// ------------------------------------------------------------------------------ Template

Template::Template(const std::string& source, std::string origin, LexOptions opts) : origin_(std::move(origin)) {
  try {
    prog_ = std::make_shared<const Program>(parse_template(source, opts));
  } catch (const TemplateError& e) {
    throw Error(origin_ + ":" + std::to_string(e.line) + ": " + e.msg);
  }
}

std::string Template::render(const nlohmann::ordered_json& vars, const RenderLimits& limits) const {
  if (!vars.is_object()) throw Error(origin_ + ": render variables must be a JSON object");
  return render(Value::from_json(vars), limits);
}

std::string Template::render(const Value& vars, const RenderLimits& limits) const {
  if (!vars.is_dict()) throw Error(origin_ + ": render variables must be a dict");
  auto g = std::make_shared<Frame>();
  install_globals(*g);
  for (const auto& kv : vars.dict_ref().items) (*g)[kv.first] = kv.second;
  Interp in(prog_, limits);
  try {
    return in.run(g);
  } catch (const TemplateError& e) {
    throw Error(origin_ + ":" + std::to_string(e.line) + ": " + e.msg);
  }
}

// ------------------------------------------------------------------------------ Interp basics

void Interp::fail(const std::string& msg) const { throw TemplateError{line_, msg}; }

void Interp::check_size(size_t n) const {
  if (n > limits_.max_output_bytes)
    fail("output exceeds the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
}

std::string Interp::run(FrameP globals) {
  frames_ = {std::move(globals), std::make_shared<Frame>()};
  std::string out;
  exec(prog_->body, out);
  return out;
}

Value Interp::lookup(const std::string& name) const {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
    auto f = (*it)->find(name);
    if (f != (*it)->end()) return f->second;
  }
  return Value::undefined("'" + name + "' is undefined");
}

void Interp::assign(const std::string& name, Value v) { (*frames_.back())[name] = std::move(v); }

void Interp::assign_targets(const std::vector<std::string>& names, const Value& v) {
  if (names.size() == 1) {
    assign(names[0], v);
    return;
  }
  std::vector<Value> items = iterate(v);
  if (items.size() != names.size())
    fail(items.size() > names.size() ? "too many values to unpack (expected " + std::to_string(names.size()) + ")"
                                     : "not enough values to unpack (expected " + std::to_string(names.size()) +
                                           ", got " + std::to_string(items.size()) + ")");
  for (size_t i = 0; i < names.size(); ++i) assign(names[i], items[i]);
}

std::vector<Value> Interp::iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return v.list_ref();
    case Value::Kind::Dict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict_ref().items) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Value::Kind::String: {
      std::vector<Value> chars;
      for (char32_t c : utf8_decode(v.str_ref())) {
        std::string s;
        utf8_append(s, c);
        chars.push_back(Value::string(std::move(s)));
      }
      return chars;
    }
    default: fail("'" + v.type_name() + "' object is not iterable");
  }
}

// ------------------------------------------------------------------------------ statements

Interp::Flow Interp::exec(const NodeList& body, std::string& out) {
  for (const auto& n : body) {
    Flow f = exec_node(*n, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

namespace {
struct FrameGuard {
  std::vector<FrameP>& frames;
  size_t size;
  FrameGuard(std::vector<FrameP>& f, FrameP push) : frames(f), size(f.size()) { frames.push_back(std::move(push)); }
  ~FrameGuard() { frames.resize(size); }
};
}  // namespace

void Interp::store_in_namespace(const Value& ns, const std::string& attr, Value v) {
  // Namespaces are the only mutable objects, so every reference cycle or unbounded nesting must
  // pass through here; refuse both (they would leak or overflow the stack when printed/freed).
  if (v.depth() > kMaxValueDepth) fail("value nested too deeply (limit " + std::to_string(kMaxValueDepth) + ")");
  if (v.reaches(&ns.dict_ref())) fail("cannot store a namespace inside itself");
  ns.dict_mut().set(attr, std::move(v));
}

Interp::Flow Interp::exec_node(const Node& n, std::string& out) {
  line_ = n.line;
  switch (n.k) {
    case Node::K::Text:
      out += n.name;
      check_size(out.size());
      return Flow::Normal;
    case Node::K::Print: {
      Value v = eval(*n.a);
      out += v.to_str();
      check_size(out.size());
      return Flow::Normal;
    }
    case Node::K::If: {
      for (size_t i = 0; i < n.kids.size(); ++i) {
        line_ = n.kids[i]->line;
        if (eval(*n.kids[i]).truthy()) return exec(n.bodies[i], out);
      }
      return exec(n.else_body, out);
    }
    case Node::K::For: exec_for(n, out); return Flow::Normal;
    case Node::K::Set: assign_targets(n.names, eval(*n.a)); return Flow::Normal;
    case Node::K::SetNs: {
      Value v = eval(*n.a);
      line_ = n.line;
      Value ns = lookup(n.name);
      if (!ns.is_namespace()) fail("cannot assign attribute on non-namespace object");
      if (!n.names[0].empty() && n.names[0][0] == '_')
        fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + n.names[0] + "'");
      store_in_namespace(ns, n.names[0], std::move(v));
      return Flow::Normal;
    }
    case Node::K::SetBlock: {
      std::string body;
      exec(n.body, body);
      Value v = Value::string(std::move(body));
      if (n.a) v = eval_filter_chain(*n.a, v);
      line_ = n.line;
      if (n.ns_target) {
        Value ns = lookup(n.name);
        if (!ns.is_namespace()) fail("cannot assign attribute on non-namespace object");
        store_in_namespace(ns, n.names[0], std::move(v));
      } else {
        assign(n.names[0], std::move(v));
      }
      return Flow::Normal;
    }
    case Node::K::Macro: assign(n.name, make_macro(n)); return Flow::Normal;
    case Node::K::CallBlock: {
      const Node& call = *n.a;
      Value fn = eval(*call.a);
      Args args;
      eval_args(call, args);
      args.kw.emplace_back("caller", make_macro(n, &n));
      line_ = n.line;
      Value r = this->call(fn, args);
      out += r.to_str();
      check_size(out.size());
      return Flow::Normal;
    }
    case Node::K::FilterBlock: {
      std::string body;
      exec(n.body, body);
      Value r = eval_filter_chain(*n.a, Value::string(std::move(body)));
      out += r.to_str();
      check_size(out.size());
      return Flow::Normal;
    }
    case Node::K::With: {
      std::vector<Value> vals;
      for (const auto& k : n.kids) vals.push_back(eval(*k));
      FrameGuard g(frames_, std::make_shared<Frame>());
      for (size_t i = 0; i < n.names.size(); ++i) assign(n.names[i], vals[i]);
      return exec(n.body, out);
    }
    case Node::K::Break: return Flow::Break;
    case Node::K::Continue: return Flow::Continue;
    case Node::K::Scope: return exec(n.body, out);
    default: fail("internal error: expression node used as statement");
  }
}

void Interp::exec_for(const Node& n, std::string& out) {
  Value seq = eval(*n.a);
  line_ = n.line;
  std::vector<Value> items = iterate(seq);
  if (n.b) {  // `for x in y if cond`: filter first (loop.length counts the kept items)
    std::vector<Value> kept;
    for (auto& it : items) {
      FrameGuard g(frames_, std::make_shared<Frame>());
      assign_targets(n.names, it);
      if (eval(*n.b).truthy()) kept.push_back(it);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec(n.else_body, out);
    return;
  }
  const int64_t len = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < len; ++i) {
    if (++iterations_ > limits_.max_loop_iterations) fail("too many loop iterations");
    FrameGuard g(frames_, std::make_shared<Frame>());
    Dict loop;
    loop.set("index0", Value::integer(i));
    loop.set("index", Value::integer(i + 1));
    loop.set("revindex0", Value::integer(len - i - 1));
    loop.set("revindex", Value::integer(len - i));
    loop.set("first", Value::boolean(i == 0));
    loop.set("last", Value::boolean(i == len - 1));
    loop.set("length", Value::integer(len));
    loop.set("depth", Value::integer(1));
    loop.set("depth0", Value::integer(0));
    loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    loop.set("nextitem", i + 1 < len ? items[i + 1] : Value::undefined("there is no next item"));
    loop.set("cycle", Value::callable("loop.cycle", [i](Interp& in, Args& a) -> Value {
               if (a.pos.empty()) in.fail("no items for cycling given");
               return a.pos[static_cast<size_t>(i) % a.pos.size()];
             }));
    assign("loop", Value::ns(std::move(loop)));
    assign_targets(n.names, items[i]);
    Flow f = exec(n.body, out);
    if (f == Flow::Break) break;
  }
}

// ------------------------------------------------------------------------------ macros

Value Interp::make_macro(const Node& n, const Node* caller_body) {
  // For call blocks, `n` is the CallBlock node: its names/kids are the caller's signature.
  // Captured weakly: the macro Value lives in one of these frames, so strong captures would form
  // a reference cycle (leak). The frames outlive every legitimate call during the render.
  std::vector<std::weak_ptr<Frame>> captured(frames_.begin(), frames_.end());
  const Node* node = &n;
  std::string name = caller_body ? std::string("caller") : n.name;
  return Value::callable(name, [node, captured, name](Interp& in, Args& args) -> Value {
    if (in.call_depth_ + 1 > in.limits_.max_call_depth)
      in.fail("maximum macro call depth exceeded (" + std::to_string(in.limits_.max_call_depth) + ")");
    std::vector<FrameP> scope;
    for (const auto& w : captured) {
      FrameP f = w.lock();
      if (!f) in.fail("macro '" + name + "' called after the scope that defined it ended");
      scope.push_back(std::move(f));
    }
    std::vector<FrameP> saved = std::move(in.frames_);
    in.frames_ = std::move(scope);
    in.frames_.push_back(std::make_shared<Frame>());
    ++in.call_depth_;
    struct Restore {
      Interp& in;
      std::vector<FrameP>& saved;
      int line;
      ~Restore() {
        in.frames_ = std::move(saved);
        --in.call_depth_;
        in.line_ = line;
      }
    } restore{in, saved, in.line_};
    const auto& params = node->names;
    size_t ndef = node->kids.size();
    size_t first_def = params.size() - ndef;
    std::vector<Value> extra_pos;
    std::vector<bool> bound(params.size(), false);
    // As jinja2's Macro.__call__: extra arguments are an error unless the body uses varargs /
    // kwargs (checked before any is bound: 100,000 unknown keywords cost one error, not a scan each).
    if (args.pos.size() > params.size() && !node->catch_varargs)
      in.fail("macro '" + name + "' takes not more than " + std::to_string(params.size()) + " argument(s)");
    if (!node->catch_kwargs)
      for (const auto& kv : args.kw)
        if (kv.first != "caller" && std::find(params.begin(), params.end(), kv.first) == params.end())
          in.fail("macro '" + name + "' takes no keyword argument '" + kv.first + "'");
    for (size_t i = 0; i < args.pos.size(); ++i) {
      if (i < params.size()) {
        in.assign(params[i], args.pos[i]);
        bound[i] = true;
      } else {
        extra_pos.push_back(args.pos[i]);
      }
    }
    Dict extra_kw;
    for (auto& kv : args.kw) {
      bool found = false;
      for (size_t p = 0; p < params.size(); ++p) {
        if (params[p] == kv.first) {
          if (bound[p]) in.fail("macro '" + name + "' got multiple values for argument '" + kv.first + "'");
          in.assign(params[p], kv.second);
          bound[p] = true;
          found = true;
        }
      }
      if (!found) {
        if (kv.first == "caller") in.assign("caller", kv.second);
        else extra_kw.set(kv.first, kv.second);
      }
    }
    for (size_t p = 0; p < params.size(); ++p) {
      if (bound[p]) continue;
      if (p >= first_def) in.assign(params[p], in.eval(*node->kids[p - first_def]));
      else in.assign(params[p], Value::undefined("parameter '" + params[p] + "' was not provided"));
    }
    in.assign("varargs", Value::list(std::move(extra_pos), true));
    in.assign("kwargs", Value::dict(std::move(extra_kw)));
    std::string out;
    in.exec(node->body, out);
    return Value::string(std::move(out));
  });
}

Value Interp::call(const Value& fn, Args& args) {
  if (fn.is_undefined()) fail(fn.undefined_hint());
  if (!fn.is_callable()) fail("'" + fn.type_name() + "' object is not callable");
  return fn.fn()(*this, args);
}

// ------------------------------------------------------------------------------ expressions

void Interp::eval_args(const Node& n, Args& args) {
  for (const auto& k : n.kids) args.pos.push_back(eval(*k));
  for (const auto& kv : n.kw) args.kw.emplace_back(kv.first, eval(*kv.second));
  if (n.b) {
    Value v = eval(*n.b);
    for (auto& x : iterate(v)) args.pos.push_back(x);
  }
  if (n.c) {
    Value v = eval(*n.c);
    if (!v.is_dict()) fail("argument after ** must be a mapping");
    for (const auto& kv : v.dict_ref().items) args.kw.emplace_back(kv.first, kv.second);
  }
}

Value Interp::eval_filter_chain(const Node& chain, Value v) {
  // chain is a Filter node whose innermost `a` is null (the subject).
  if (chain.a) v = eval_filter_chain(*chain.a, std::move(v));
  Args args;
  eval_args(chain, args);
  line_ = chain.line;
  return apply_filter(chain.name, v, args);
}

Value Interp::apply_filter(const std::string& name, const Value& v, Args& args) {
  FilterFn f = find_filter(name);
  if (!f) fail("No filter named '" + name + "'.");
  return f(*this, v, args);
}

bool Interp::apply_test(const std::string& name, const Value& v, Args& args) {
  TestFn t = find_test(name);
  if (!t) fail("No test named '" + name + "'.");
  return t(*this, v, args);
}

Value Interp::get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: fail(obj.undefined_hint());
    case Value::Kind::Namespace: {
      if (const Value* v = obj.dict_ref().find(name)) return *v;
      return Value::undefined("'Namespace' object has no attribute '" + name + "'");
    }
    case Value::Kind::Dict: {
      Value m = find_method(*this, obj, name);
      if (!m.is_undefined()) return m;
      if (const Value* v = obj.dict_ref().find(name)) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::String:
    case Value::Kind::List: {
      Value m = find_method(*this, obj, name);
      if (!m.is_undefined()) return m;
      return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
    }
    case Value::Kind::None: return Value::undefined("'None' has no attribute '" + name + "'");
    default: return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
  }
}

Value Interp::get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: fail(obj.undefined_hint());
    case Value::Kind::Dict:
      if (key.is_string()) {
        if (const Value* v = obj.dict_ref().find(key.str_ref())) return *v;
        Value m = find_method(*this, obj, key.str_ref());
        if (!m.is_undefined()) return m;
        return Value::undefined("'dict object' has no attribute '" + key.str_ref() + "'");
      }
      return Value::undefined("'dict object' has no attribute " + key.repr());
    case Value::Kind::Namespace:
      if (key.is_string()) return get_attr(obj, key.str_ref());
      return Value::undefined("'Namespace' object has no attribute " + key.repr());
    case Value::Kind::List: {
      if (key.is_string()) return get_attr(obj, key.str_ref());
      if (!(key.is_int() || key.is_bool())) fail("list indices must be integers or slices, not " + key.type_name());
      int64_t i = key.as_int();
      int64_t n = static_cast<int64_t>(obj.list_ref().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(obj.type_name() + " object has no element " + key.to_str());
      return obj.list_ref()[static_cast<size_t>(i)];
    }
    case Value::Kind::String: {
      if (key.is_string()) return get_attr(obj, key.str_ref());
      if (!(key.is_int() || key.is_bool())) fail("string indices must be integers, not '" + key.type_name() + "'");
      auto cps = utf8_decode(obj.str_ref());
      int64_t i = key.as_int();
      int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("str object has no element " + key.to_str());
      std::string s;
      utf8_append(s, cps[static_cast<size_t>(i)]);
      return Value::string(std::move(s));
    }
    default: return Value::undefined("'" + obj.type_name() + " object' has no attribute " + key.repr());
  }
}

Value Interp::slice(const Value& obj, const Node& sl) {
  auto get = [&](const NodeP& p, bool& present) -> int64_t {
    present = false;
    if (!p) return 0;
    Value v = eval(*p);
    if (v.is_none()) return 0;
    if (!(v.is_int() || v.is_bool())) fail("slice indices must be integers or None");
    present = true;
    return v.as_int();
  };
  bool hs, he, hst;
  int64_t start = get(sl.a, hs), stop = get(sl.b, he), step = get(sl.c, hst);
  if (!hst) step = 1;
  if (step == 0) fail("slice step cannot be zero");
  if (obj.is_undefined()) fail(obj.undefined_hint());
  std::vector<char32_t> cps;
  int64_t n;
  if (obj.is_string()) {
    cps = utf8_decode(obj.str_ref());
    n = static_cast<int64_t>(cps.size());
  } else if (obj.is_list()) {
    n = static_cast<int64_t>(obj.list_ref().size());
  } else {
    fail("'" + obj.type_name() + "' object is not subscriptable");
  }
  // CPython PySlice_AdjustIndices
  auto adjust = [&](int64_t v, bool present, bool is_start) -> int64_t {
    if (!present) return step > 0 ? (is_start ? 0 : n) : (is_start ? n - 1 : -1);
    if (v < 0) {
      v += n;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= n) {
      v = step < 0 ? n - 1 : n;
    }
    return v;
  };
  start = adjust(start, hs, true);
  stop = adjust(stop, he, false);
  std::vector<int64_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    idx.push_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  if (obj.is_string()) {
    std::string s;
    for (int64_t i : idx) utf8_append(s, cps[static_cast<size_t>(i)]);
    return Value::string(std::move(s));
  }
  std::vector<Value> out;
  for (int64_t i : idx) out.push_back(obj.list_ref()[static_cast<size_t>(i)]);
  return Value::list(std::move(out), obj.is_tuple());
}

namespace {

int64_t floordiv_i(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

Value py_add(Interp& in, const Value& a, const Value& b) {
  if (a.is_undefined()) in.fail(a.undefined_hint());
  if (b.is_undefined()) in.fail(b.undefined_hint());
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return Value::number(a.as_double() + b.as_double());
    int64_t r;
    if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) in.fail("integer overflow");
    return Value::integer(r);
  }
  if (a.is_string() && b.is_string()) {
    in.check_size(a.str_ref().size() + b.str_ref().size());
    return Value::string(a.str_ref() + b.str_ref());
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    in.check_weight(a.weight() > UINT64_MAX - b.weight() ? UINT64_MAX : a.weight() + b.weight());  // before copying
    std::vector<Value> v = a.list_ref();
    v.insert(v.end(), b.list_ref().begin(), b.list_ref().end());
    return Value::list(std::move(v), a.is_tuple());
  }
  if (a.is_string()) in.fail("can only concatenate str (not \"" + b.type_name() + "\") to str");
  if (a.is_list())
    in.fail("can only concatenate " + a.type_name() + " (not \"" + b.type_name() + "\") to " + a.type_name());
  in.fail("unsupported operand type(s) for +: '" + a.type_name() + "' and '" + b.type_name() + "'");
}

// printf-style `str % args` with the common conversions.
Value py_percent_format(Interp& in, const std::string& fmt, const Value& arg) {
  std::vector<Value> args = arg.is_tuple() ? arg.list_ref() : std::vector<Value>{arg};
  size_t ai = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) in.fail("incomplete format");
    char c = fmt[i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (ai >= args.size()) in.fail("not enough arguments for format string");
    const Value& v = args[ai++];
    if (c == 's') out += v.to_str();
    else if (c == 'r') out += v.repr();
    else if (c == 'd' || c == 'i') {
      if (!v.is_number()) in.fail("%d format: a real number is required, not " + v.type_name());
      if (v.is_float() && !(std::fabs(v.as_double()) < 9.2e18)) in.fail("%d format: number out of range");
      out += std::to_string(v.is_float() ? static_cast<int64_t>(v.as_double()) : v.as_int());
    } else if (c == 'f') {
      if (!v.is_number()) in.fail("must be real number, not " + v.type_name());
      char b[64];
      std::snprintf(b, sizeof(b), "%f", v.as_double());
      out += b;
    } else {
      in.fail(std::string("unsupported format character '") + c + "'");
    }
  }
  if (ai < args.size()) in.fail("not all arguments converted during string formatting");
  return Value::string(std::move(out));
}

Value Interp::eval_bin(const Node& n, const Value& l, const Value& r) {
  const std::string& op = n.name;
  line_ = n.line;
  if (op == "+") return py_add(*this, l, r);
  if (l.is_undefined()) fail(l.undefined_hint());
  if (r.is_undefined()) fail(r.undefined_hint());
  auto unsupported = [&]() -> Value {
    fail("unsupported operand type(s) for " + op + ": '" + l.type_name() + "' and '" + r.type_name() + "'");
  };
  if (op == "*") {
    if (l.is_number() && r.is_number()) {
      if (l.is_float() || r.is_float()) return Value::number(l.as_double() * r.as_double());
      int64_t x;
      if (__builtin_mul_overflow(l.as_int(), r.as_int(), &x)) fail("integer overflow");
      return Value::integer(x);
    }
    const Value* seq = nullptr;
    const Value* cnt = nullptr;
    if ((l.is_string() || l.is_list()) && (r.is_int() || r.is_bool())) seq = &l, cnt = &r;
    if ((r.is_string() || r.is_list()) && (l.is_int() || l.is_bool())) seq = &r, cnt = &l;
    if (!seq) return unsupported();
    int64_t k = std::max<int64_t>(0, cnt->as_int());
    size_t unit = seq->is_string() ? seq->str_ref().size() : seq->list_ref().size() * sizeof(Value);
    if (unit && static_cast<uint64_t>(k) > limits_.max_output_bytes / unit) fail("repetition result too large");
    if (seq->is_list() && k > 0)
      check_weight(seq->weight() > UINT64_MAX / static_cast<uint64_t>(k) ? UINT64_MAX
                                                                         : seq->weight() * static_cast<uint64_t>(k));
    if (seq->is_string()) {
      std::string s;
      for (int64_t i = 0; i < k; ++i) s += seq->str_ref();
      return Value::string(std::move(s));
    }
    std::vector<Value> v;
    for (int64_t i = 0; i < k; ++i) v.insert(v.end(), seq->list_ref().begin(), seq->list_ref().end());
    return Value::list(std::move(v), seq->is_tuple());
  }
  if (op == "%" && l.is_string()) return py_percent_format(*this, l.str_ref(), r);
  if (!l.is_number() || !r.is_number()) return unsupported();
  bool fl = l.is_float() || r.is_float();
  if (op == "-") {
    if (fl) return Value::number(l.as_double() - r.as_double());
    int64_t x;
    if (__builtin_sub_overflow(l.as_int(), r.as_int(), &x)) fail("integer overflow");
    return Value::integer(x);
  }
  if (op == "/") {
    if (r.as_double() == 0) fail("division by zero");
    return Value::number(l.as_double() / r.as_double());
  }
  if (op == "//") {
    if (r.as_double() == 0) fail(fl ? "float floor division by zero" : "integer division or modulo by zero");
    if (fl) return Value::number(std::floor(l.as_double() / r.as_double()));
    if (l.as_int() == INT64_MIN && r.as_int() == -1) fail("integer overflow");
    return Value::integer(floordiv_i(l.as_int(), r.as_int()));
  }
  if (op == "%") {
    if (r.as_double() == 0) fail(fl ? "float modulo" : "integer division or modulo by zero");
    if (fl) {
      double a = l.as_double(), b = r.as_double();
      double m = std::fmod(a, b);
      if (m != 0 && ((m < 0) != (b < 0))) m += b;
      return Value::number(m);
    }
    if (r.as_int() == -1) return Value::integer(0);
    int64_t m = l.as_int() % r.as_int();
    if (m != 0 && ((m < 0) != (r.as_int() < 0))) m += r.as_int();
    return Value::integer(m);
  }
  if (op == "**") {
    if (!fl && r.as_int() >= 0) {
      int64_t base = l.as_int(), e = r.as_int(), res = 1;
      while (e > 0) {
        if (e & 1)
          if (__builtin_mul_overflow(res, base, &res)) fail("integer overflow");
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) fail("integer overflow");
      }
      return Value::integer(res);
    }
    if (l.as_double() == 0 && r.as_double() < 0) fail("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(l.as_double(), r.as_double()));
  }
  fail("unknown operator " + op);
}

namespace {

// Python three-way comparison for ordering; returns false in `ok` when not orderable.
int py_cmp(const Value& a, const Value& b, bool& ok) {
  ok = true;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str_ref().compare(b.str_ref());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.list_ref();
    const auto& y = b.list_ref();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (py_equal(x[i], y[i])) continue;
      return py_cmp(x[i], y[i], ok);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  ok = false;
  return 0;
}

}  // namespace

bool Interp::less(const Value& a, const Value& b) {
  bool ok;
  int c = py_cmp(a, b, ok);
  if (!ok) fail("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
  return c < 0;
}

static bool py_contains(Interp& in, const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::String:
      if (!item.is_string()) in.fail("'in <string>' requires string as left operand, not " + item.type_name());
      return container.str_ref().find(item.str_ref()) != std::string::npos;
    case Value::Kind::List:
      for (const auto& x : container.list_ref())
        if (py_equal(x, item)) return true;
      return false;
    case Value::Kind::Dict: return item.is_string() && container.dict_ref().find(item.str_ref()) != nullptr;
    case Value::Kind::Undefined: return false;
    default: in.fail("argument of type '" + container.type_name() + "' is not iterable");
  }
}

Value Interp::eval_compare(const Node& n) {
  Value left = eval(*n.a);
  for (const auto& op : n.ops) {
    Value right = eval(*op.second);
    line_ = n.line;
    bool r;
    const std::string& o = op.first;
    if (o == "==") r = py_equal(left, right);
    else if (o == "!=") r = !py_equal(left, right);
    else if (o == "in") r = py_contains(*this, right, left);
    else if (o == "notin") r = !py_contains(*this, right, left);
    else {
      bool ok;
      int c = py_cmp(left, right, ok);
      if (!ok)
        fail("'" + o + "' not supported between instances of '" + left.type_name() + "' and '" + right.type_name() + "'");
      r = o == "<" ? c < 0 : o == "<=" ? c <= 0 : o == ">" ? c > 0 : c >= 0;
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

void Interp::check_weight(uint64_t w) const {
  if (w > limits_.max_value_weight)
    fail("value too large: more than " + std::to_string(limits_.max_value_weight) +
         " elements (counting shared parts each time; a list doubled again and again)");
}

Value Interp::eval(const Node& n) {
  Value v = eval_node(n);
  check_weight(v.weight());
  return v;
}

Value Interp::eval_node(const Node& n) {
  line_ = n.line;
  switch (n.k) {
    case Node::K::Const: return n.value;
    case Node::K::Name: return lookup(n.name);
    case Node::K::GetAttr: {
      Value o = eval(*n.a);
      line_ = n.line;
      return get_attr(o, n.name);
    }
    case Node::K::GetItem: {
      Value o = eval(*n.a);
      if (n.b->k == Node::K::Slice) {
        line_ = n.line;
        return slice(o, *n.b);
      }
      Value key = eval(*n.b);
      line_ = n.line;
      return get_item(o, key);
    }
    case Node::K::Call: {
      Value fn = eval(*n.a);
      Args args;
      eval_args(n, args);
      line_ = n.line;
      return call(fn, args);
    }
    case Node::K::Filter: {
      Value v = n.a ? eval(*n.a) : Value::undefined("missing filter subject");
      Args args;
      eval_args(n, args);
      line_ = n.line;
      return apply_filter(n.name, v, args);
    }
    case Node::K::Test: {
      Value v = eval(*n.a);
      Args args;
      eval_args(n, args);
      line_ = n.line;
      return Value::boolean(apply_test(n.name, v, args));
    }
    case Node::K::Neg:
    case Node::K::Pos: {
      Value v = eval(*n.a);
      line_ = n.line;
      if (v.is_undefined()) fail(v.undefined_hint());
      if (!v.is_number())
        fail("bad operand type for unary " + std::string(n.k == Node::K::Neg ? "-" : "+") + ": '" + v.type_name() + "'");
      if (n.k == Node::K::Pos) return v.is_bool() ? Value::integer(v.as_int()) : v;
      if (v.is_float()) return Value::number(-v.as_double());
      if (v.as_int() == INT64_MIN) fail("integer overflow");
      return Value::integer(-v.as_int());
    }
    case Node::K::Bin: {
      Value l = eval(*n.a);
      Value r = eval(*n.b);
      return eval_bin(n, l, r);
    }
    case Node::K::And: {
      Value l = eval(*n.a);
      return l.truthy() ? eval(*n.b) : l;
    }
    case Node::K::Or: {
      Value l = eval(*n.a);
      return l.truthy() ? l : eval(*n.b);
    }
    case Node::K::Not: return Value::boolean(!eval(*n.a).truthy());
    case Node::K::Compare: return eval_compare(n);
    case Node::K::Concat: {
      std::string s;
      for (const auto& k : n.kids) {
        s += eval(*k).to_str();
        check_size(s.size());
      }
      return Value::string(std::move(s));
    }
    case Node::K::Cond: {
      if (eval(*n.a).truthy()) return eval(*n.b);
      if (n.c) return eval(*n.c);
      return Value::undefined("the inline if-expression on line " + std::to_string(n.line) +
                              " evaluated to false and no else section was defined.");
    }
    case Node::K::ListLit:
    case Node::K::TupleLit: {
      std::vector<Value> items;
      for (const auto& k : n.kids) items.push_back(eval(*k));
      return Value::list(std::move(items), n.k == Node::K::TupleLit);
    }
    case Node::K::DictLit: {
      Dict d;
      for (size_t i = 0; i + 1 < n.kids.size(); i += 2) {
        Value k = eval(*n.kids[i]);
        Value v = eval(*n.kids[i + 1]);
        line_ = n.line;
        if (!k.is_string()) fail("only string keys are supported in dict literals, got " + k.type_name());
        d.set(k.str_ref(), std::move(v));
      }
      return Value::dict(std::move(d));
    }
    case Node::K::Slice: fail("slice outside of a subscript");
    default: fail("internal error: statement node used as expression");
  }
}

}  // namespace kvb::jinja
