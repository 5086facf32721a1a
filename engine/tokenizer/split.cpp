// Split patterns; see split.h.
#include "engine/tokenizer/split.h"

#include <algorithm>

#include <re2/re2.h>

#include "engine/tokenizer/unicode.h"
#include "engine/util/error.h"

namespace kvb::tok {
namespace {

constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum : uint8_t { kL = 1, kN = 2, kS = 4 };

// One decoded character with its class bits and byte offset.
struct Ch {
  char32_t cp;
  uint32_t off;
  uint8_t cls;
};

uint8_t classify(char32_t cp) {
  return static_cast<uint8_t>((uni::is_letter(cp) ? kL : 0) | (uni::is_number(cp) ? kN : 0) |
                              (uni::is_space(cp) ? kS : 0));
}

// Class bits of ASCII characters, precomputed.
struct AsciiClasses {
  uint8_t cls[128];
  AsciiClasses() {
    for (int c = 0; c < 128; ++c) cls[c] = classify(static_cast<char32_t>(c));
  }
};

}  // namespace

SplitPattern::SplitPattern() = default;
SplitPattern::SplitPattern(SplitPattern&&) noexcept = default;
SplitPattern& SplitPattern::operator=(SplitPattern&&) noexcept = default;
SplitPattern::~SplitPattern() = default;

SplitPattern SplitPattern::literal(std::string text) {
  SplitPattern p;
  p.kind_ = Kind::kLiteral;
  p.literal_ = std::move(text);
  return p;
}

SplitPattern SplitPattern::regex(const std::string& re, const std::string& origin, const std::string& field) {
  SplitPattern p;
  if (re == kGpt2Pattern) {
    p.kind_ = Kind::kGpt2Family;
    return p;
  }
  if (re == kLlama3Pattern || re == kQwenPattern) {
    p.kind_ = Kind::kGpt2Family;
    p.ci_contractions_ = true;
    p.qwen_style_ = true;
    p.max_digits_ = re == kLlama3Pattern ? 3 : 1;
    return p;
  }
  RE2::Options opts;
  opts.set_log_errors(false);
  auto compiled = std::make_unique<RE2>(re, opts);
  if (!compiled->ok())
    fail_at(origin, field,
            "unsupported regex {:?} ({}); only the GPT-2, Llama-3 and Qwen "
            "pre-tokenizer patterns and re2-compatible regexes are supported",
            re, compiled->error());
  p.kind_ = Kind::kRe2;
  p.re_ = std::move(compiled);
  return p;
}

void SplitPattern::find_matches(std::string_view s, std::vector<Span>& out) const {
  switch (kind_) {
    case Kind::kLiteral: {
      if (literal_.empty()) return;
      for (size_t pos = s.find(literal_); pos != std::string_view::npos; pos = s.find(literal_, pos + literal_.size()))
        out.emplace_back(pos, pos + literal_.size());
      return;
    }
    case Kind::kGpt2Family: match_gpt2_family(s, out); return;
    case Kind::kRe2: {
      re2::StringPiece input(s.data(), s.size()), m;
      size_t pos = 0;
      while (pos <= s.size()) {
        if (!re_->Match(input, pos, s.size(), RE2::UNANCHORED, &m, 1)) break;
        const size_t start = static_cast<size_t>(m.data() - s.data());
        const size_t end = start + m.size();
        if (end > start) {
          out.emplace_back(start, end);
          pos = end;
        } else {  // empty match: step over one character
          size_t len = 1;
          if (start < s.size()) uni::decode_utf8(s, start, &len);
          pos = start + len;
        }
      }
      return;
    }
  }
}

// Hand-written matcher for
//   GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Llama-3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2/3: the same with \p{N} (one digit).
// At each position the first alternative that matches wins (Oniguruma is a backtracking engine,
// not leftmost-longest); greedy quantifiers with backtracking are resolved in closed form below.
void SplitPattern::match_gpt2_family(std::string_view s, std::vector<Span>& out) const {
  static const AsciiClasses ascii;
  thread_local std::vector<Ch> chars;
  chars.clear();
  for (size_t i = 0; i < s.size();) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      chars.push_back({b, static_cast<uint32_t>(i), ascii.cls[b]});
      ++i;
    } else {
      size_t len;
      const char32_t cp = uni::decode_utf8(s, i, &len);
      chars.push_back({cp, static_cast<uint32_t>(i), classify(cp)});
      i += len;
    }
  }
  const size_t n = chars.size();
  auto off = [&](size_t k) -> size_t { return k < n ? chars[k].off : s.size(); };
  auto is_l = [&](size_t k) { return k < n && (chars[k].cls & kL); };
  auto is_n = [&](size_t k) { return k < n && (chars[k].cls & kN); };
  auto is_s = [&](size_t k) { return k < n && (chars[k].cls & kS); };
  auto is_other = [&](size_t k) { return k < n && chars[k].cls == 0; };
  auto is_crlf = [&](size_t k) { return k < n && (chars[k].cp == '\r' || chars[k].cp == '\n'); };
  auto lower = [&](size_t k) -> char32_t {
    if (k >= n) return 0;
    char32_t c = chars[k].cp;
    if (!ci_contractions_) return c;
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c == 0x17F) return 's';  // LATIN SMALL LETTER LONG S case-folds to 's'
    return c;
  };

  size_t i = 0;
  while (i < n) {
    size_t j = 0;  // match end (character index); 0 = no match yet
    const char32_t c = chars[i].cp;
    // 1. contractions
    if (c == '\'' && i + 1 < n) {
      const char32_t c1 = lower(i + 1);
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') j = i + 2;
      else if ((c1 == 'r' || c1 == 'v') && lower(i + 2) == 'e') j = i + 3;
      else if (c1 == 'l' && lower(i + 2) == 'l') j = i + 3;
    }
    // 2. letters, with an optional leading character
    if (!j) {
      size_t k = n + 1;  // start of the letter run; n + 1 = none
      if (is_l(i)) k = i;
      else if (qwen_style_ ? (!is_crlf(i) && !is_n(i) && is_l(i + 1)) : (c == ' ' && is_l(i + 1))) k = i + 1;
      if (k <= n) {
        while (is_l(k)) ++k;
        j = k;
      }
    }
    // 3. numbers
    if (!j) {
      if (max_digits_ > 0) {
        if (is_n(i)) {
          size_t k = i;
          while (is_n(k) && k - i < static_cast<size_t>(max_digits_)) ++k;
          j = k;
        }
      } else {
        size_t k = (c == ' ' && is_n(i + 1)) ? i + 1 : i;
        if (is_n(k)) {
          while (is_n(k)) ++k;
          j = k;
        }
      }
    }
    // 4. punctuation / symbols
    if (!j) {
      size_t k = (c == ' ' && is_other(i + 1)) ? i + 1 : i;
      if (is_other(k)) {
        while (is_other(k)) ++k;
        if (qwen_style_)
          while (is_crlf(k)) ++k;
        j = k;
      }
    }
    // 5-7. whitespace
    if (!j && is_s(i)) {
      size_t end = i;
      while (is_s(end)) ++end;
      if (qwen_style_) {  // \s*[\r\n]+ : up to the last CR/LF of the run
        for (size_t k = end; k > i; --k)
          if (is_crlf(k - 1)) {
            j = k;
            break;
          }
      }
      if (!j) {
        if (end == n) j = end;              // \s+(?!\S) at the end of the text
        else if (end - 1 > i) j = end - 1;  // \s+(?!\S): leave the last space to the next token
        else j = end;                       // \s+
      }
    }
    if (!j) {  // unreachable for these patterns: every character is L, N, \s or other
      ++i;
      continue;
    }
    out.emplace_back(off(i), off(j));
    i = j;
  }
}

void split_by_matches(std::string_view s, const std::vector<Span>& matches, SplitBehavior behavior, bool invert,
                      std::vector<std::string>& out) {
  // All pieces covering `s`, flagged as match or not (HF Pattern::find_matches).
  struct Piece {
    size_t a, b;
    bool match;
  };
  std::vector<Piece> pieces;
  size_t prev = 0;
  for (const auto& [a, b] : matches) {
    if (a > prev) pieces.push_back({prev, a, invert});
    pieces.push_back({a, b, !invert});
    prev = b;
  }
  if (prev < s.size() || pieces.empty()) pieces.push_back({prev, s.size(), invert});

  std::vector<Piece> res;  // `match` now means "remove"
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (auto p : pieces) res.push_back({p.a, p.b, false});
      break;
    case SplitBehavior::kRemoved: res = pieces; break;
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (auto p : pieces) {
        if (p.match == prev_match && !res.empty()) res.back().b = p.b;
        else res.push_back({p.a, p.b, false});
        prev_match = p.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (auto p : pieces) {
        if (p.match && !prev_match && !res.empty()) res.back().b = p.b;
        else res.push_back({p.a, p.b, false});
        prev_match = p.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        if (it->match && !prev_match && !res.empty()) res.back().a = it->a;
        else res.push_back({it->a, it->b, false});
        prev_match = it->match;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
  }
  for (const auto& p : res)
    if (!p.match && p.b > p.a) out.emplace_back(s.substr(p.a, p.b - p.a));
}

}  // namespace kvb::tok
