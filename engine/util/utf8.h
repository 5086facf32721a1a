// UTF-8 well-formedness, the one implementation of the project: the tokenizer (byte-level
// decoding, from_utf8_lossy) and the YAML/JSON readers (strings must be valid UTF-8 before they
// reach nlohmann::json, whose dump() throws on anything else) both use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

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

}  // namespace kvb::utf8
