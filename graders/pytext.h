// Python `str` semantics that the LongProc and SCBench reference scorers rely on, over UTF-8.
//
// The reference graders are Python; their normalisers use str.lower/upper (Unicode case
// mapping), str.split()/strip() (Unicode whitespace), re's Unicode `\b`/`\w`, and
// string.punctuation (ASCII). These helpers reproduce those on code points (utf8proc's
// simple case mapping; Python's full mapping differs only for a handful of characters such
// as 'İ' and 'ß'.upper()). Invalid UTF-8 bytes decode to U+FFFD (the model output is text).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvb::graders::py {

/// UTF-8 → code points (invalid bytes → U+FFFD, one per byte).
std::u32string decode(std::string_view s);
/// Code points → UTF-8.
std::string encode(std::u32string_view s);

/// Python str.isspace() for one code point (ASCII \t\n\v\f\r, \x1c–\x1f, \x85, Zs, U+2028/9).
bool is_space(char32_t c);
/// Python re `\w` (Unicode): letters, numbers (categories L*, N*) and '_'.
bool is_word(char32_t c);

/// str.lower() / str.upper() (simple Unicode case mapping).
std::string lower(std::string_view s);
std::string upper(std::string_view s);
/// str.strip() (Unicode whitespace at both ends).
std::string strip(std::string_view s);
/// str.split() with no argument: runs of Unicode whitespace separate, empty pieces dropped.
std::vector<std::string> split_ws(std::string_view s);
/// str.split(sep) with an explicit separator (empty pieces kept; sep must not be empty).
std::vector<std::string> split(std::string_view s, std::string_view sep);
/// sep.join(parts).
std::string join(const std::vector<std::string>& parts, std::string_view sep);
/// "".join(ch for ch in s if ch not in string.punctuation) (ASCII punctuation only), also
/// deleting every code point listed in `extra` (UTF-8).
std::string remove_punct(std::string_view s, std::string_view extra = "");
/// re.sub(r"\b(w1|w2|...)\b", " ", s) for whole words (Unicode word boundaries): every maximal
/// run of word characters equal to one of `words` becomes a single space.
std::string replace_words(std::string_view s, const std::vector<std::string>& words);
/// " ".join(s.split()).
std::string collapse_ws(std::string_view s);
/// True when `s` starts with `prefix` (bytes).
bool starts_with(std::string_view s, std::string_view prefix);

}  // namespace kvb::graders::py
