// Lexer and parser of the Jinja-subset interpreter.
//
// The lexer mirrors jinja2 3.1's lexer.py: newline normalisation (\r\n, \r -> \n), removal of a
// single trailing newline (keep_trailing_newline=False), `-`/`+` whitespace control,
// lstrip_blocks (whitespace between a line start and a `{%`/`{#` tag is dropped) and trim_blocks
// (the first newline after `%}`/`#}` is dropped), bracket balancing inside tags, raw blocks.
// The parser mirrors parser.py's grammar (see ast.h for the precedence ladder).
#include <algorithm>
#include <cstring>
#include <set>

#include "engine/chat/jinja/ast.h"

namespace kvb::jinja {
namespace {

enum class T { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  T type;
  std::string text;  // Data text, name, decoded string, operator, or number literal
  int line;
  Value num;  // Int/Float value
};

[[noreturn]] void syntax(int line, std::string msg) { throw TemplateError{line, std::move(msg)}; }

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's str.rstrip() over UTF-8 text.
std::string py_rstrip(const std::string& s) {
  auto cps = utf8_decode(s);
  size_t e = cps.size();
  while (e > 0 && py_isspace(cps[e - 1])) --e;
  if (e == cps.size()) return s;
  return utf8_encode(cps, 0, e);
}

bool all_py_space(const std::string& s, size_t from) {
  if (from >= s.size()) return false;  // jinja2 uses \s+ (needs at least one char)
  for (char32_t c : utf8_decode(std::string_view(s).substr(from)))
    if (!py_isspace(c)) return false;
  return true;
}

int count_nl(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

class Lexer {
 public:
  Lexer(const std::string& src, const LexOptions& o) : opt_(o) {
    // newline normalisation + trailing newline removal (jinja2 tokeniter)
    src_.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '\r') {
        src_ += '\n';
        if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
      } else {
        src_ += src[i];
      }
    }
    if (!opt_.keep_trailing_newline && !src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_root();
    toks_.push_back({T::Eof, "", line_, {}});
    return std::move(toks_);
  }

 private:
  const LexOptions opt_;
  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> toks_;

  void emit_data(std::string text, int line) {
    if (!text.empty()) toks_.push_back({T::Data, std::move(text), line, {}});
  }

  // Applies `-` / lstrip handling to the text before a tag; `sign` is '-', '+' or 0.
  std::string strip_before(std::string text, char sign, bool is_var) {
    if (sign == '-') return py_rstrip(text);
    if (sign != '+' && opt_.lstrip_blocks && !is_var) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_py_space(text, l_pos)) text.resize(l_pos);
    }
    return text;
  }

  // Consumes the end of a block/comment tag at pos_ (pointing at '+', '-' or '%'/'#').
  // `close` is "%}" or "#}". Returns false if the text at pos_ is not an end tag.
  bool match_block_end(const char* close) {
    size_t p = pos_;
    char sign = 0;
    if (src_[p] == '+' || src_[p] == '-') {
      sign = src_[p];
      ++p;
    }
    if (src_.compare(p, 2, close) != 0) return false;
    p += 2;
    if (sign == '-') {
      while (p < src_.size() && is_ws(src_[p])) ++p;
    } else if (sign == 0 && opt_.trim_blocks && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    line_ += count_nl(std::string_view(src_).substr(pos_, p - pos_));
    line_starting_ = src_[p - 1] == '\n';
    pos_ = p;
    return true;
  }

  void lex_root() {
    // find the next tag opener
    size_t p = pos_;
    size_t tag = std::string::npos;
    while (true) {
      p = src_.find('{', p);
      if (p == std::string::npos || p + 1 >= src_.size()) break;
      char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') {
        tag = p;
        break;
      }
      ++p;
    }
    int text_line = line_;
    if (tag == std::string::npos) {
      std::string text = src_.substr(pos_);
      line_ += count_nl(text);
      emit_data(std::move(text), text_line);
      line_starting_ = !src_.empty() && src_.back() == '\n';
      pos_ = src_.size();
      return;
    }
    char kind = src_[tag + 1];
    char sign = 0;
    if (tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')) sign = src_[tag + 2];
    std::string text = src_.substr(pos_, tag - pos_);
    int text_nl = count_nl(text);
    // raw block?
    if (kind == '%') {
      size_t q = tag + 2 + (sign ? 1 : 0);
      while (q < src_.size() && is_ws(src_[q])) ++q;
      if (src_.compare(q, 3, "raw") == 0 &&
          (q + 3 >= src_.size() || !(isalnum(static_cast<unsigned char>(src_[q + 3])) || src_[q + 3] == '_'))) {
        size_t r = q + 3;
        while (r < src_.size() && is_ws(src_[r])) ++r;
        size_t after = std::string::npos;
        if (src_.compare(r, 3, "-%}") == 0) {
          after = r + 3;
          while (after < src_.size() && is_ws(src_[after])) ++after;
        } else if (src_.compare(r, 2, "%}") == 0) {
          after = r + 2;
        }
        if (after != std::string::npos) {
          emit_data(strip_before(text, sign, false), text_line);
          line_ += text_nl + count_nl(std::string_view(src_).substr(tag, after - tag));
          lex_raw(after);
          return;
        }
      }
    }
    emit_data(strip_before(text, sign, kind == '{'), text_line);
    line_ += text_nl;
    pos_ = tag + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      lex_comment(text_line);
    } else {
      lex_tag(kind == '{');
    }
  }

  void lex_raw(size_t from) {
    int start_line = line_;
    size_t p = from;
    while (true) {
      size_t t = src_.find("{%", p);
      if (t == std::string::npos) syntax(start_line, "Missing end of raw directive");
      size_t q = t + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      while (q < src_.size() && is_ws(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") == 0) {
        size_t r = q + 6;
        while (r < src_.size() && is_ws(src_[r])) ++r;
        size_t save = pos_;
        pos_ = r;
        int line_before = line_;
        std::string body = src_.substr(from, t - from);
        int body_nl = count_nl(body);
        int tag_nl = count_nl(std::string_view(src_).substr(t, r - t));
        if (match_block_end("%}")) {
          line_ = line_before;  // recompute below
          size_t end = pos_;
          emit_data(strip_before(body, sign, false), line_before);
          line_ = line_before + body_nl + tag_nl + count_nl(std::string_view(src_).substr(r, end - r));
          return;
        }
        pos_ = save;
      }
      p = t + 2;
    }
  }

  void lex_comment(int start_line) {
    size_t p = pos_;
    while (true) {
      size_t e = src_.find("#}", p);
      if (e == std::string::npos) syntax(start_line, "Missing end of comment tag");
      size_t s = e;
      if (e > pos_ && (src_[e - 1] == '-' || src_[e - 1] == '+')) s = e - 1;
      line_ += count_nl(std::string_view(src_).substr(pos_, s - pos_));
      pos_ = s;
      if (match_block_end("#}")) return;
      p = e + 2;
    }
  }

  void lex_tag(bool is_var) {
    int begin_line = line_;
    toks_.push_back({is_var ? T::VarBegin : T::BlockBegin, "", line_, {}});
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size())
        syntax(begin_line, std::string("unexpected end of template, expected '") + (is_var ? "}}" : "%}") + "'");
      char c = src_[pos_];
      // end of tag (only when brackets are balanced)
      if (balance.empty()) {
        if (is_var) {
          size_t p = pos_;
          bool minus = false;
          if (src_[p] == '-') {
            minus = true;
            ++p;
          }
          if (src_.compare(p, 2, "}}") == 0) {
            p += 2;
            if (minus)
              while (p < src_.size() && is_ws(src_[p])) ++p;
            line_ += count_nl(std::string_view(src_).substr(pos_, p - pos_));
            line_starting_ = src_[p - 1] == '\n';
            pos_ = p;
            toks_.push_back({T::VarEnd, "", line_, {}});
            return;
          }
        } else if ((c == '-' || c == '+' || c == '%') && match_block_end("%}")) {
          toks_.push_back({T::BlockEnd, "", line_, {}});
          return;
        }
      }
      if (is_ws(c)) {
        if (c == '\n') ++line_;
        ++pos_;
        continue;
      }
      if (isdigit(static_cast<unsigned char>(c))) {
        lex_number();
        continue;
      }
      if (isalpha(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80) {
        size_t s = pos_;
        while (pos_ < src_.size() && (isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_' ||
                                      static_cast<unsigned char>(src_[pos_]) >= 0x80))
          ++pos_;
        toks_.push_back({T::Name, src_.substr(s, pos_ - s), line_, {}});
        continue;
      }
      if (c == '\'' || c == '"') {
        lex_string(c);
        continue;
      }
      static const char* two[] = {"//", "**", "==", "!=", ">=", "<="};
      std::string op;
      for (const char* t : two)
        if (src_.compare(pos_, 2, t) == 0) op = t;
      if (op.empty()) {
        if (!strchr("+-/*%~[](){}><=.:|,;", c)) syntax(line_, std::string("unexpected char '") + c + "'");
        op = std::string(1, c);
      }
      if (op == "{" || op == "(" || op == "[") {
        balance.push_back(op == "{" ? '}' : op == "(" ? ')' : ']');
      } else if (op == "}" || op == ")" || op == "]") {
        if (balance.empty()) syntax(line_, "unexpected '" + op + "'");
        char want = balance.back();
        balance.pop_back();
        if (want != op[0]) syntax(line_, "unexpected '" + op + "', expected '" + std::string(1, want) + "'");
      }
      pos_ += op.size();
      toks_.push_back({T::Op, op, line_, {}});
    }
  }

  void lex_number() {
    size_t s = pos_;
    auto digits = [&](size_t& p) {
      size_t st = p;
      while (p < src_.size() &&
             (isdigit(static_cast<unsigned char>(src_[p])) ||
              (src_[p] == '_' && p + 1 < src_.size() && isdigit(static_cast<unsigned char>(src_[p + 1])) && p > st)))
        ++p;
      return p > st;
    };
    // prefixed integers
    if (src_[s] == '0' && s + 1 < src_.size() && strchr("bBoOxX", src_[s + 1])) {
      int base = strchr("bB", src_[s + 1]) ? 2 : strchr("oO", src_[s + 1]) ? 8 : 16;
      size_t p = s + 2;
      std::string ds;
      while (p < src_.size() && (isxdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) {
        if (src_[p] != '_') ds += src_[p];
        ++p;
      }
      errno = 0;
      long long v = ds.empty() ? 0 : strtoll(ds.c_str(), nullptr, base);
      if (ds.empty() || errno) syntax(line_, "invalid integer literal");
      pos_ = p;
      toks_.push_back({T::Int, src_.substr(s, p - s), line_, Value::integer(v)});
      return;
    }
    size_t p = s;
    digits(p);
    bool is_float = false;
    if (p + 1 < src_.size() && src_[p] == '.' && isdigit(static_cast<unsigned char>(src_[p + 1]))) {
      ++p;
      digits(p);
      is_float = true;
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && isdigit(static_cast<unsigned char>(src_[q]))) {
        digits(q);
        p = q;
        is_float = true;
      }
    }
    std::string lit;
    for (size_t i = s; i < p; ++i)
      if (src_[i] != '_') lit += src_[i];
    pos_ = p;
    if (is_float) {
      toks_.push_back({T::Float, lit, line_, Value::number(strtod(lit.c_str(), nullptr))});
    } else {
      errno = 0;
      long long v = strtoll(lit.c_str(), nullptr, 10);
      if (errno) syntax(line_, "integer literal too large: " + lit);
      toks_.push_back({T::Int, lit, line_, Value::integer(v)});
    }
  }

  // Python 'unicode-escape' decoding of a string literal body.
  void lex_string(char q) {
    int start_line = line_;
    size_t p = pos_ + 1;
    std::string out;
    while (true) {
      if (p >= src_.size()) syntax(start_line, "unexpected end of string literal");
      char c = src_[p];
      if (c == q) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        out += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) syntax(start_line, "unexpected end of string literal");
      char e = src_[p + 1];
      p += 2;
      auto hex = [&](int n) -> char32_t {
        if (p + n > src_.size()) syntax(line_, "truncated \\x escape");
        char32_t v = 0;
        for (int i = 0; i < n; ++i) {
          char h = src_[p + i];
          if (!isxdigit(static_cast<unsigned char>(h))) syntax(line_, "truncated escape sequence");
          v = v * 16 + (isdigit(static_cast<unsigned char>(h)) ? h - '0' : (tolower(h) - 'a' + 10));
        }
        p += n;
        return v;
      };
      switch (e) {
        case '\n': ++line_; break;  // line continuation
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': utf8_append(out, hex(2)); break;
        case 'u': utf8_append(out, hex(4)); break;
        case 'U': {
          char32_t v = hex(8);
          if (v > 0x10ffff) syntax(line_, "illegal Unicode character");
          utf8_append(out, v);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            int v = e - '0';
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i)
              v = v * 8 + (src_[p++] - '0');
            utf8_append(out, static_cast<char32_t>(v));
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    pos_ = p + 1;
    toks_.push_back({T::String, std::move(out), start_line, {}});
  }
};

// ------------------------------------------------------------------------------- parser

class Parser {
 public:
  Parser(std::vector<Token> toks, int max_depth) : t_(std::move(toks)), max_depth_(max_depth) {}

  Program run() {
    Program p;
    p.body = subparse({});
    if (cur().type != T::Eof) syntax(cur().line, "unexpected tag");
    return p;
  }

 private:
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int max_depth_;
  std::vector<std::pair<std::string, int>> tag_stack_;  // open blocks for EOF messages

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& pp) : p(pp) {
      if (++p.depth_ > p.max_depth_)
        syntax(p.cur().line, "template nested too deeply (limit " + std::to_string(p.max_depth_) + ")");
    }
    ~DepthGuard() { --p.depth_; }
  };

  // Counts the links of a left-associative chain (a|f|g, a.b.c, a+b+c, ...) towards the depth
  // limit: each link makes the tree one level deeper.
  struct ChainGuard {
    Parser& p;
    int n = 0;
    explicit ChainGuard(Parser& pp) : p(pp) {}
    void step() {
      ++n;
      if (++p.depth_ > p.max_depth_)
        syntax(p.cur().line, "template nested too deeply (limit " + std::to_string(p.max_depth_) + ")");
    }
    ~ChainGuard() { p.depth_ -= n; }
  };

  const Token& cur() const { return t_[i_]; }
  const Token& look(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  Token next() {
    Token t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == T::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == T::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (is_op(op)) {
      next();
      return true;
    }
    return false;
  }
  bool skip_name(const char* n) {
    if (is_name(n)) {
      next();
      return true;
    }
    return false;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::Eof: return "end of template";
      case T::BlockEnd: return "end of statement block";
      case T::VarEnd: return "end of print statement";
      case T::BlockBegin: return "begin of statement block";
      case T::VarBegin: return "begin of print statement";
      case T::String: return "string";
      case T::Data: return "template data";
      default: return t.text;
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) syntax(cur().line, std::string("expected token '") + op + "', got '" + describe(cur()) + "'");
  }
  std::string expect_name() {
    if (cur().type != T::Name) syntax(cur().line, "expected name, got '" + describe(cur()) + "'");
    return next().text;
  }
  void expect(T type, const char* what) {
    if (cur().type != type) syntax(cur().line, std::string("expected ") + what + ", got '" + describe(cur()) + "'");
    next();
  }
  void expect_block_end() { expect(T::BlockEnd, "end of statement block"); }

  NodeP mk(Node::K k, int line) { return std::make_unique<Node>(k, line); }

  // Parses template content until a `{% <end name> ...` is found; leaves cur() at that name.
  NodeList subparse(const std::vector<std::string>& ends) {
    DepthGuard g(*this);
    NodeList out;
    while (true) {
      const Token& t = cur();
      if (t.type == T::Eof) {
        if (!ends.empty()) {
          std::string want;
          for (size_t k = 0; k < ends.size(); ++k) want += (k ? " or '" : "'") + ends[k] + "'";
          const auto& open = tag_stack_.back();
          syntax(open.second, "unexpected end of template: '" + open.first +
                                  "' block opened on this line is never closed (looking for " + want + ")");
        }
        return out;
      }
      if (t.type == T::Data) {
        auto n = mk(Node::K::Text, t.line);
        n->name = t.text;
        out.push_back(std::move(n));
        next();
      } else if (t.type == T::VarBegin) {
        int line = next().line;
        auto n = mk(Node::K::Print, line);
        n->a = parse_tuple(true, {}, false);
        expect(T::VarEnd, "end of print statement");
        out.push_back(std::move(n));
      } else if (t.type == T::BlockBegin) {
        next();
        if (cur().type == T::Name) {
          for (const auto& e : ends)
            if (cur().text == e) return out;
        }
        parse_statement(out);
      } else {
        syntax(t.line, "unexpected '" + describe(t) + "'");
      }
    }
  }

  // body after a tag header: expects block end, parses until one of `ends`, leaves cur at it.
  NodeList statements(const std::vector<std::string>& ends, bool drop) {
    skip_op(":");
    expect_block_end();
    NodeList body = subparse(ends);
    if (drop) next();
    return body;
  }

  void parse_statement(NodeList& out) {
    const Token& t = cur();
    if (t.type != T::Name) syntax(t.line, "tag name expected");
    std::string tag = t.text;
    int line = t.line;
    static const std::set<std::string> known = {"for",  "if",    "set",      "macro",      "call", "filter",
                                                "with", "break", "continue", "generation", "print"};
    if (!known.count(tag)) {
      static const std::set<std::string> unsupported = {"block", "extends",    "include", "import",
                                                        "from",  "autoescape", "do"};
      if (unsupported.count(tag)) syntax(line, "tag '" + tag + "' is not supported by this interpreter");
      static const std::set<std::string> enders = {"endfor",  "endif",         "endset",  "endmacro",
                                                   "endcall", "endfilter",     "endwith", "else",
                                                   "elif",    "endgeneration", "endraw"};
      if (enders.count(tag)) {
        if (tag_stack_.empty()) syntax(line, "Encountered unknown tag '" + tag + "'.");
        syntax(line, "Encountered unexpected tag '" + tag + "' inside '" + tag_stack_.back().first +
                         "' block opened on line " + std::to_string(tag_stack_.back().second));
      }
      syntax(line, "Encountered unknown tag '" + tag + "'.");
    }
    tag_stack_.emplace_back(tag, line);
    DepthGuard g(*this);
    if (tag == "for") out.push_back(parse_for());
    else if (tag == "if") out.push_back(parse_if());
    else if (tag == "set") out.push_back(parse_set());
    else if (tag == "macro") out.push_back(parse_macro());
    else if (tag == "call") out.push_back(parse_call_block());
    else if (tag == "filter") out.push_back(parse_filter_block());
    else if (tag == "with") out.push_back(parse_with());
    else if (tag == "print") {
      next();
      auto n = mk(Node::K::Print, line);
      n->a = parse_tuple(true, {}, false);
      expect_block_end();
      out.push_back(std::move(n));
    } else if (tag == "generation") {
      next();
      auto n = mk(Node::K::Scope, line);
      n->body = statements({"endgeneration"}, true);
      expect_block_end();
      out.push_back(std::move(n));
    } else {  // break / continue
      bool in_loop = false;
      for (const auto& s : tag_stack_)
        if (s.first == "for") in_loop = true;
      if (!in_loop) syntax(line, "'" + tag + "' outside of a loop");
      next();
      out.push_back(mk(tag == "break" ? Node::K::Break : Node::K::Continue, line));
      expect_block_end();
    }
    tag_stack_.pop_back();
  }

  NodeP parse_for() {
    int line = next().line;
    auto n = mk(Node::K::For, line);
    // targets: name or tuple of names
    bool paren = skip_op("(");
    n->names.push_back(expect_name());
    while (skip_op(",")) {
      if (is_name("in") || is_op(")")) break;
      n->names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    if (!skip_name("in")) syntax(cur().line, "expected 'in', got '" + describe(cur()) + "'");
    n->a = parse_tuple(false, {"recursive"}, false);
    if (skip_name("if")) n->b = parse_expression(true);
    if (is_name("recursive")) syntax(cur().line, "recursive for loops are not supported");
    n->body = statements({"endfor", "else"}, false);
    if (next().text == "else") n->else_body = statements({"endfor"}, true);
    expect_block_end();
    return n;
  }

  NodeP parse_if() {
    int line = next().line;
    auto n = mk(Node::K::If, line);
    while (true) {
      n->kids.push_back(parse_tuple(false, {}, false));
      n->bodies.push_back(statements({"elif", "else", "endif"}, false));
      Token t = next();
      if (t.text == "elif") continue;
      if (t.text == "else") n->else_body = statements({"endif"}, true);
      break;
    }
    expect_block_end();
    return n;
  }

  NodeP parse_set() {
    int line = next().line;
    // target: name, name.attr (namespace), or tuple of names
    std::string first = expect_name();
    if (is_op(".")) {
      next();
      std::string attr = expect_name();
      if (skip_op("=")) {
        auto n = mk(Node::K::SetNs, line);
        n->name = first;
        n->names.push_back(attr);
        n->a = parse_tuple(true, {}, false);
        expect_block_end();
        return n;
      }
      auto n = mk(Node::K::SetBlock, line);
      n->ns_target = true;
      n->name = first;
      n->names.push_back(attr);
      if (is_op("|")) n->a = parse_filter(nullptr, false);
      n->body = statements({"endset"}, true);
      expect_block_end();
      return n;
    }
    std::vector<std::string> targets{first};
    while (skip_op(",")) {
      if (is_op("=")) break;
      targets.push_back(expect_name());
    }
    if (skip_op("=")) {
      auto n = mk(Node::K::Set, line);
      n->names = targets;
      n->a = parse_tuple(true, {}, false);
      expect_block_end();
      return n;
    }
    if (targets.size() != 1) syntax(line, "block set needs a single target");
    auto n = mk(Node::K::SetBlock, line);
    n->names = targets;
    if (is_op("|")) n->a = parse_filter(nullptr, false);
    n->body = statements({"endset"}, true);
    expect_block_end();
    return n;
  }

  void parse_signature(Node& n) {
    expect_op("(");
    while (!is_op(")")) {
      if (!n.names.empty()) expect_op(",");
      if (is_op(")")) break;
      n.names.push_back(expect_name());
      if (skip_op("=")) n.kids.push_back(parse_expression(true));
      else if (!n.kids.empty()) syntax(cur().line, "non-default argument follows default argument");
    }
    expect_op(")");
  }

  // Whether a Name node called `name` occurs anywhere under `n` (jinja2 looks for undeclared
  // uses of kwargs/varargs/caller in a macro's body the same way; the AST is at most max_depth deep).
  static bool uses_name(const Node* n, const std::string& name) {
    if (!n) return false;
    if (n->k == Node::K::Name && n->name == name) return true;
    auto any = [&](const NodeList& l) {
      return std::any_of(l.begin(), l.end(), [&](const NodeP& k) { return uses_name(k.get(), name); });
    };
    if (uses_name(n->a.get(), name) || uses_name(n->b.get(), name) || uses_name(n->c.get(), name)) return true;
    if (any(n->kids) || any(n->body) || any(n->else_body)) return true;
    for (const auto& [k, v] : n->kw)
      if (uses_name(v.get(), name)) return true;
    for (const auto& [k, v] : n->ops)
      if (uses_name(v.get(), name)) return true;
    return std::any_of(n->bodies.begin(), n->bodies.end(), any);
  }

  static void mark_catches(Node& n) {
    for (const auto& k : n.body) {
      n.catch_kwargs = n.catch_kwargs || uses_name(k.get(), "kwargs");
      n.catch_varargs = n.catch_varargs || uses_name(k.get(), "varargs");
    }
  }

  NodeP parse_macro() {
    int line = next().line;
    auto n = mk(Node::K::Macro, line);
    n->name = expect_name();
    parse_signature(*n);
    n->body = statements({"endmacro"}, true);
    expect_block_end();
    mark_catches(*n);
    return n;
  }

  NodeP parse_call_block() {
    int line = next().line;
    auto n = mk(Node::K::CallBlock, line);
    if (is_op("(")) parse_signature(*n);
    n->a = parse_expression(true);
    if (n->a->k != Node::K::Call) syntax(line, "expected call");
    n->body = statements({"endcall"}, true);
    expect_block_end();
    mark_catches(*n);
    return n;
  }

  NodeP parse_filter_block() {
    int line = next().line;
    auto n = mk(Node::K::FilterBlock, line);
    n->a = parse_filter(nullptr, true);
    n->body = statements({"endfilter"}, true);
    expect_block_end();
    return n;
  }

  NodeP parse_with() {
    int line = next().line;
    auto n = mk(Node::K::With, line);
    while (cur().type != T::BlockEnd) {
      if (!n->names.empty()) expect_op(",");
      n->names.push_back(expect_name());
      expect_op("=");
      n->kids.push_back(parse_expression(true));
    }
    n->body = statements({"endwith"}, true);
    expect_block_end();
    return n;
  }

  // ---------------------------------------------------------------- expressions

  bool is_tuple_end(const std::vector<std::string>& extra) const {
    if (cur().type == T::VarEnd || cur().type == T::BlockEnd || cur().type == T::Eof || is_op(")")) return true;
    for (const auto& e : extra)
      if (is_name(e.c_str())) return true;
    return false;
  }

  NodeP parse_tuple(bool with_condexpr, const std::vector<std::string>& extra, bool explicit_parens) {
    int line = cur().line;
    NodeList args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra)) break;
      args.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) syntax(cur().line, "Expected an expression, got '" + describe(cur()) + "'");
    }
    auto n = mk(Node::K::TupleLit, line);
    n->kids = std::move(args);
    return n;
  }

  NodeP parse_expression(bool with_condexpr) {
    DepthGuard g(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  NodeP parse_condexpr() {
    int line = cur().line;
    NodeP e1 = parse_or();
    ChainGuard cg(*this);
    while (skip_name("if")) {
      cg.step();
      NodeP e2 = parse_or();
      NodeP e3;
      if (skip_name("else")) e3 = parse_condexpr();
      auto n = mk(Node::K::Cond, line);
      n->a = std::move(e2);
      n->b = std::move(e1);
      n->c = std::move(e3);
      e1 = std::move(n);
      line = cur().line;
    }
    return e1;
  }

  // A left-associative chain `operand (op operand)*` of one precedence level: `at_op()` says
  // whether the current token is one of the level's operators; `join(op, left, right)` builds the
  // node from the consumed operator token. Each link counts towards the depth limit (ChainGuard).
  template <class Operand, class AtOp, class Join>
  NodeP left_chain(Operand operand, AtOp at_op, Join join) {
    NodeP left = operand();
    ChainGuard cg(*this);
    while (at_op()) {
      cg.step();
      Token t = next();
      left = join(t, std::move(left), operand());
    }
    return left;
  }

  // `a or b` / `a and b`: a node of kind `k` with a = left, b = right.
  NodeP logical(Node::K k, const Token& t, NodeP l, NodeP r) {
    auto n = mk(k, t.line);
    n->a = std::move(l);
    n->b = std::move(r);
    return n;
  }

  NodeP parse_or() {
    return left_chain(
        [&] { return parse_and(); }, [&] { return is_name("or"); },
        [&](const Token& t, NodeP l, NodeP r) { return logical(Node::K::Or, t, std::move(l), std::move(r)); });
  }

  NodeP parse_and() {
    return left_chain(
        [&] { return parse_not(); }, [&] { return is_name("and"); },
        [&](const Token& t, NodeP l, NodeP r) { return logical(Node::K::And, t, std::move(l), std::move(r)); });
  }

  NodeP parse_not() {
    if (is_name("not")) {
      DepthGuard g(*this);
      int line = next().line;
      auto n = mk(Node::K::Not, line);
      n->a = parse_not();
      return n;
    }
    return parse_compare();
  }

  NodeP parse_compare() {
    int line = cur().line;
    NodeP expr = parse_math1();
    std::vector<std::pair<std::string, NodeP>> ops;
    while (true) {
      if (cur().type == T::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
                                  cur().text == ">" || cur().text == ">=")) {
        std::string op = next().text;
        ops.emplace_back(op, parse_math1());
      } else if (skip_name("in")) {
        ops.emplace_back("in", parse_math1());
      } else if (is_name("not") && look().type == T::Name && look().text == "in") {
        next();
        next();
        ops.emplace_back("notin", parse_math1());
      } else {
        break;
      }
    }
    if (ops.empty()) return expr;
    auto n = mk(Node::K::Compare, line);
    n->a = std::move(expr);
    n->ops = std::move(ops);
    return n;
  }

  NodeP bin(const std::string& op, NodeP l, NodeP r, int line) {
    auto n = mk(Node::K::Bin, line);
    n->name = op;
    n->a = std::move(l);
    n->b = std::move(r);
    return n;
  }

  // The Bin node of an arithmetic chain link.
  NodeP bin_link(const Token& t, NodeP l, NodeP r) { return bin(t.text, std::move(l), std::move(r), t.line); }

  NodeP parse_math1() {
    return left_chain([&] { return parse_concat(); }, [&] { return is_op("+") || is_op("-"); },
                      [&](const Token& t, NodeP l, NodeP r) { return bin_link(t, std::move(l), std::move(r)); });
  }

  NodeP parse_concat() {
    int line = cur().line;
    NodeList args;
    args.push_back(parse_math2());
    while (skip_op("~")) args.push_back(parse_math2());
    if (args.size() == 1) return std::move(args[0]);
    auto n = mk(Node::K::Concat, line);
    n->kids = std::move(args);
    return n;
  }

  NodeP parse_math2() {
    return left_chain([&] { return parse_pow(); }, [&] { return is_op("*") || is_op("/") || is_op("//") || is_op("%"); },
                      [&](const Token& t, NodeP l, NodeP r) { return bin_link(t, std::move(l), std::move(r)); });
  }

  NodeP parse_pow() {
    return left_chain([&] { return parse_unary(true); }, [&] { return is_op("**"); },
                      [&](const Token& t, NodeP l, NodeP r) { return bin_link(t, std::move(l), std::move(r)); });
  }

  NodeP parse_unary(bool with_filter) {
    DepthGuard g(*this);
    NodeP node;
    if (is_op("-") || is_op("+")) {
      Token t = next();
      node = mk(t.text == "-" ? Node::K::Neg : Node::K::Pos, t.line);
      node->a = parse_unary(false);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  NodeP parse_primary() {
    const Token& t = cur();
    int line = t.line;
    if (t.type == T::Name) {
      std::string v = next().text;
      if (v == "true" || v == "True" || v == "false" || v == "False") {
        auto n = mk(Node::K::Const, line);
        n->value = Value::boolean(v == "true" || v == "True");
        return n;
      }
      if (v == "none" || v == "None") {
        auto n = mk(Node::K::Const, line);
        n->value = Value::none();
        return n;
      }
      auto n = mk(Node::K::Name, line);
      n->name = v;
      return n;
    }
    if (t.type == T::String) {
      std::string s;
      while (cur().type == T::String) s += next().text;
      auto n = mk(Node::K::Const, line);
      n->value = Value::string(std::move(s));
      return n;
    }
    if (t.type == T::Int || t.type == T::Float) {
      auto n = mk(Node::K::Const, line);
      n->value = next().num;
      return n;
    }
    if (is_op("(")) {
      next();
      NodeP n = parse_tuple(true, {}, true);
      expect_op(")");
      return n;
    }
    if (is_op("[")) return parse_display(Node::K::ListLit, "]", line);
    if (is_op("{")) return parse_display(Node::K::DictLit, "}", line);
    syntax(line, "unexpected '" + describe(t) + "'");
  }

  // One link of a postfix chain: parses it after `node` and returns the new node.
  using Link = NodeP (Parser::*)(NodeP);

  // Applies links to `node` while `link_at()` names one at the current token (null: the chain
  // ends); each link counts towards the depth limit (ChainGuard).
  template <class LinkAt>
  NodeP link_chain(NodeP node, LinkAt link_at) {
    ChainGuard cg(*this);
    while (const Link link = link_at()) {
      cg.step();
      node = (this->*link)(std::move(node));
    }
    return node;
  }

  // `.name`, `[...]` and call links.
  // A list `[a, b]` or dict `{k: v, ...}` literal from its opening bracket (the current token) to
  // `close`; a trailing comma is allowed. Kids: the items, or key, value, key, value, ...
  NodeP parse_display(Node::K kind, const char* close, int line) {
    next();
    auto n = mk(kind, line);
    while (!is_op(close)) {
      if (!n->kids.empty()) expect_op(",");
      if (is_op(close)) break;
      n->kids.push_back(parse_expression(true));
      if (kind == Node::K::DictLit) {
        expect_op(":");
        n->kids.push_back(parse_expression(true));
      }
    }
    expect_op(close);
    return n;
  }

  NodeP parse_postfix(NodeP node) {
    return link_chain(std::move(node), [&]() -> Link {
      if (is_op(".") || is_op("[")) return &Parser::parse_subscript;
      return is_op("(") ? &Parser::parse_call : nullptr;
    });
  }

  // `| filter`, `is test` and call links.
  NodeP parse_filter_expr(NodeP node) {
    return link_chain(std::move(node), [&]() -> Link {
      if (is_op("|")) return &Parser::parse_filter_link;
      if (is_name("is")) return &Parser::parse_test;
      return is_op("(") ? &Parser::parse_call : nullptr;
    });
  }

  NodeP parse_filter_link(NodeP node) { return parse_filter(std::move(node), false); }

  NodeP parse_subscript(NodeP node) {
    DepthGuard g(*this);
    Token t = next();
    if (t.text == ".") {
      const Token& at = cur();
      if (at.type == T::Name) {
        auto n = mk(Node::K::GetAttr, t.line);
        n->a = std::move(node);
        n->name = next().text;
        return n;
      }
      if (at.type != T::Int) syntax(at.line, "expected name or number");
      auto n = mk(Node::K::GetItem, t.line);
      n->a = std::move(node);
      n->b = mk(Node::K::Const, at.line);
      n->b->value = next().num;
      return n;
    }
    // '['
    NodeList args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto n = mk(Node::K::GetItem, t.line);
    n->a = std::move(node);
    if (args.size() == 1) {
      n->b = std::move(args[0]);
    } else {
      n->b = mk(Node::K::TupleLit, t.line);
      n->b->kids = std::move(args);
    }
    return n;
  }

  NodeP parse_subscribed() {
    int line = cur().line;
    NodeP start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();  // ':'
    auto n = mk(Node::K::Slice, line);
    n->a = std::move(start);
    if (!is_op(":") && !is_op("]") && !is_op(",")) n->b = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) n->c = parse_expression(true);
    }
    return n;
  }

  void parse_call_args(Node& n) {
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*")) {
        next();
        n.b = parse_expression(true);
      } else if (is_op("**")) {
        next();
        n.c = parse_expression(true);
      } else if (cur().type == T::Name && look().type == T::Op && look().text == "=") {
        std::string key = next().text;
        next();
        n.kw.emplace_back(key, parse_expression(true));
      } else {
        if (!n.kw.empty() || n.b || n.c) syntax(cur().line, "invalid syntax for function call expression");
        n.kids.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  NodeP parse_call(NodeP node) {
    DepthGuard g(*this);
    auto n = mk(Node::K::Call, cur().line);
    n->a = std::move(node);
    parse_call_args(*n);
    return n;
  }

  NodeP parse_filter(NodeP node, bool start_inline) {
    ChainGuard cg(*this);
    while (is_op("|") || start_inline) {
      cg.step();
      if (!start_inline) next();
      int line = cur().line;
      std::string name = expect_name();
      while (skip_op(".")) name += "." + expect_name();
      auto n = mk(Node::K::Filter, line);
      n->name = name;
      n->a = std::move(node);
      if (is_op("(")) parse_call_args(*n);
      if (n->b || n->c) syntax(line, "*args/**kwargs in filter calls are not supported");
      node = std::move(n);
      start_inline = false;
    }
    return node;
  }

  NodeP parse_test(NodeP node) {
    DepthGuard g(*this);
    int line = next().line;  // 'is'
    bool negated = skip_name("not");
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    auto n = mk(Node::K::Test, line);
    n->name = name;
    n->a = std::move(node);
    if (is_op("(")) {
      parse_call_args(*n);
    } else if ((cur().type == T::Name || cur().type == T::String || cur().type == T::Int || cur().type == T::Float ||
                is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) syntax(cur().line, "You cannot chain multiple tests with is");
      NodeP arg = parse_primary();
      arg = parse_postfix(std::move(arg));
      n->kids.push_back(std::move(arg));
    }
    if (n->b || n->c) syntax(line, "*args/**kwargs in test calls are not supported");
    if (!negated) return n;
    auto nn = mk(Node::K::Not, line);
    nn->a = std::move(n);
    return nn;
  }
};

}  // namespace

Program parse_template(const std::string& source, const LexOptions& opts, int max_depth) {
  Lexer lx(source, opts);
  Parser p(lx.run(), max_depth);
  return p.run();
}

}  // namespace kvb::jinja
