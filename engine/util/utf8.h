// UTF-8 and GPT-2's byte-level alphabet, the one implementation of the project: the tokenizer
// (byte-level BPE, decoding, from_utf8_lossy), the GGUF loader (rebuilding tokenizer.json from
// GGUF metadata) and the YAML/JSON readers (strings must be valid UTF-8 before they reach
// nlohmann::json, whose dump() throws on anything else) all use it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvb::utf8 {

/// Length of the well-formed UTF-8 sequence starting at s[i] (1..4), or −(bytes of the maximal
/// invalid subpart) when it is not well formed — the Unicode "well-formed UTF-8 byte sequences"
/// table (Unicode 15 §3.9, Table 3-7), as Rust's validator applies it: no overlongs, no
/// surrogates, nothing above U+10FFFF. Requires i < s.size().
inline int sequence_len(std::string_view s, size_t i) {
  const uint8_t b = static_cast<uint8_t>(s[i]);
  if (b < 0x80) return 1;
  int width = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) width = 2;
  else if (b == 0xE0) width = 3, lo = 0xA0;
  else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) width = 3;
  else if (b == 0xED) width = 3, hi = 0x9F;
  else if (b == 0xF0) width = 4, lo = 0x90;
  else if (b >= 0xF1 && b <= 0xF3) width = 4;
  else if (b == 0xF4) width = 4, hi = 0x8F;
  else return -1;
  for (int k = 1; k < width; ++k) {
    if (i + k >= s.size()) return -k;
    const uint8_t c = static_cast<uint8_t>(s[i + k]);
    if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return -k;
  }
  return width;
}

/// True when `s` is valid UTF-8.
inline bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const int n = sequence_len(s, i);
    if (n < 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

/// Decodes one UTF-8 character of `s` starting at byte `i` (< s.size()). Returns the code point
/// and stores its byte length in `*len` (>= 1). A sequence that is not well formed
/// (sequence_len) yields U+FFFD with *len = 1.
inline char32_t decode_utf8(std::string_view s, size_t i, size_t* len) {
  const uint8_t b = static_cast<uint8_t>(s[i]);
  if (b < 0x80) {
    *len = 1;
    return b;
  }
  const int n = sequence_len(s, i);
  if (n < 0) {
    *len = 1;
    return 0xFFFD;
  }
  *len = static_cast<size_t>(n);
  char32_t cp = b & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  return cp;
}

/// Appends the UTF-8 encoding of `cp` (<= U+10FFFF) to `out`.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// Appends the escape of code point `cp` inside a JSON string as Python's json.dumps writes it —
/// \" \\ \n \r \t \b \f, \uXXXX (lower-case hex) for the other characters below U+0020 and,
/// with `ensure_ascii`, for every code point from U+007F, as a UTF-16 surrogate pair above
/// U+FFFF — and returns true. Returns false, appending nothing, when json.dumps writes `cp` as
/// itself (the caller encodes it). Used by the chat templates' tojson and the tasks' JSON dumps.
inline bool append_json_escape(std::string& out, char32_t cp, bool ensure_ascii) {
  auto u4 = [&out](uint32_t v) {
    static constexpr char kHex[] = "0123456789abcdef";
    out += "\\u";
    for (int sh = 12; sh >= 0; sh -= 4) out += kHex[(v >> sh) & 0xF];
  };
  switch (cp) {
    case '"': out += "\\\""; return true;
    case '\\': out += "\\\\"; return true;
    case '\n': out += "\\n"; return true;
    case '\r': out += "\\r"; return true;
    case '\t': out += "\\t"; return true;
    case '\b': out += "\\b"; return true;
    case '\f': out += "\\f"; return true;
    default: break;
  }
  if (cp >= 0x20 && !(ensure_ascii && cp >= 0x7F)) return false;
  if (cp >= 0x10000) {
    const uint32_t v = static_cast<uint32_t>(cp) - 0x10000;
    u4(0xD800 | (v >> 10));
    u4(0xDC00 | (v & 0x3FF));
  } else {
    u4(static_cast<uint32_t>(cp));
  }
  return true;
}

/// `s` split into characters: each well-formed UTF-8 sequence is one element, each byte of an
/// ill-formed one an element of its own.
inline std::vector<std::string> split_chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const int n = sequence_len(s, i);
    const size_t len = n > 0 ? static_cast<size_t>(n) : 1;
    out.emplace_back(s.substr(i, len));
    i += len;
  }
  return out;
}

namespace detail {
/// GPT-2's bytes_to_unicode() (openai/gpt-2 src/encoder.py): printable Latin-1 bytes ('!'..'~',
/// U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves, the other 68 bytes for U+0100 + n in
/// byte order. Code points used are all < U+0144.
struct ByteAlphabet {
  std::array<std::string, 256> to_char;
  std::array<int, 512> from_char;
  ByteAlphabet() {
    from_char.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      append_utf8(to_char[b], cp);
      from_char[cp] = b;
    }
  }
};
inline const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet a;
  return a;
}
}  // namespace detail

/// GPT-2's byte-level alphabet: the UTF-8 text of the code point standing for byte `b`.
inline const std::string& byte_to_unicode(uint8_t b) { return detail::byte_alphabet().to_char[b]; }

/// Inverse of byte_to_unicode: the byte for code point `cp`, or -1 when `cp` is not in the
/// byte-level alphabet.
inline int unicode_to_byte(char32_t cp) { return cp < 512 ? detail::byte_alphabet().from_char[cp] : -1; }

}  // namespace kvb::utf8
