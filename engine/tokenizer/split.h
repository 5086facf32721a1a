// Pattern splitting for the `Split` pre-tokenizer of Hugging Face `tokenizers`.
//
// The GPT-2 family of pre-tokenizer regexes (GPT-2's, Llama-3's and Qwen2/3's) uses the
// lookahead `\s+(?!\S)`, which re2 cannot express; those exact patterns are matched by a
// hand-written matcher that follows Oniguruma's leftmost-alternative backtracking semantics
// (character classes from unicode.h). Other regexes go through re2; literal ("String")
// patterns through a substring search.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace re2 {
class RE2;
}

namespace kvb::tok {

/// Byte span [first, second) of one match inside a string.
using Span = std::pair<size_t, size_t>;

/// The regex of GPT-2's ByteLevel pre-tokenizer (`use_regex: true`).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// A compiled Split pattern.
class SplitPattern {
 public:
  /// A literal pattern (tokenizer.json `{"String": ...}`).
  static SplitPattern literal(std::string text);
  /// A regex pattern (tokenizer.json `{"Regex": ...}`). Throws kvb::Error naming `origin` and
  /// `field` when the regex is neither a known GPT-2-family pattern nor accepted by re2.
  static SplitPattern regex(const std::string& re, const std::string& origin, const std::string& field);

  SplitPattern(SplitPattern&&) noexcept;
  SplitPattern& operator=(SplitPattern&&) noexcept;
  ~SplitPattern();

  /// Appends the non-overlapping matches in `s`, left to right, as byte spans (empty matches are
  /// dropped).
  void find_matches(std::string_view s, std::vector<Span>& out) const;

 private:
  SplitPattern();
  enum class Kind { kLiteral, kGpt2Family, kRe2 } kind_ = Kind::kLiteral;
  std::string literal_;
  // GPT-2 family variant flags.
  bool ci_contractions_ = false;  // (?i:'s|...) (Llama-3/Qwen) vs case-sensitive (GPT-2)
  bool qwen_style_ = false;       // [^\r\n\p{L}\p{N}]?\p{L}+ ... \s*[\r\n]+ (Llama-3/Qwen)
  int max_digits_ = 0;            // \p{N}{1,max}; 0 = GPT-2's " ?\p{N}+"
  std::unique_ptr<re2::RE2> re_;

  void match_gpt2_family(std::string_view s, std::vector<Span>& out) const;
};

/// How the pieces around matches are kept (tokenizer.json `behavior`).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

/// Splits `s` given its `matches` (sorted, non-overlapping) as HF's
/// NormalizedString::split(pattern, behavior) does, with `invert` swapping matches and
/// non-matches. Appends the non-empty pieces to `out`.
void split_by_matches(std::string_view s, const std::vector<Span>& matches, SplitBehavior behavior, bool invert,
                      std::vector<std::string>& out);

}  // namespace kvb::tok
