// Unicode helpers for the tokenizer; see unicode.h.
#include "engine/tokenizer/unicode.h"

#include "engine/util/utf8.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <vector>

#include <utf8proc.h>

namespace kvb::tok::uni {
namespace {

struct CodeRange {
  char32_t lo, hi;
};
#include "engine/tokenizer/unicode_tables.inc"

enum : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4 };

template <size_t N>
bool in_ranges(const CodeRange (&r)[N], char32_t cp) {
  const CodeRange* it = std::upper_bound(std::begin(r), std::end(r), cp,
                                         [](char32_t c, const CodeRange& x) { return c < x.lo; });
  if (it == std::begin(r)) return false;
  --it;
  return cp <= it->hi;
}

// Flags of the Basic Multilingual Plane, built once; astral planes use binary search.
const std::vector<uint8_t>& bmp_flags() {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(0x10000, 0);
    auto fill = [&](const auto& ranges, uint8_t flag) {
      for (const CodeRange& r : ranges)
        for (char32_t c = r.lo; c <= r.hi && c < 0x10000; ++c) t[c] |= flag;
    };
    fill(kLetterRanges, kLetter);
    fill(kNumberRanges, kNumber);
    fill(kSpaceRanges, kSpace);
    return t;
  }();
  return table;
}

// Well-formedness of a UTF-8 sequence: the project's one implementation (engine/util/utf8.h).
using utf8::sequence_len;

}  // namespace

char32_t decode_utf8(std::string_view s, size_t i, size_t* len) {
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

void append_utf8(std::string& out, char32_t cp) {
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

bool is_letter(char32_t cp) {
  if (cp < 0x10000) return bmp_flags()[cp] & kLetter;
  return in_ranges(kLetterRanges, cp);
}
bool is_number(char32_t cp) {
  if (cp < 0x10000) return bmp_flags()[cp] & kNumber;
  return in_ranges(kNumberRanges, cp);
}
bool is_space(char32_t cp) {
  if (cp < 0x10000) return bmp_flags()[cp] & kSpace;
  return false;
}

namespace {
struct ByteMap {
  std::array<std::string, 256> to_uni;
  std::array<int, 512> from_uni;  // code points used are all < 0x144
  ByteMap() {
    from_uni.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      append_utf8(to_uni[b], cp);
      from_uni[cp] = b;
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}
}  // namespace

const std::string& byte_to_unicode(uint8_t b) { return byte_map().to_uni[b]; }

int unicode_to_byte(char32_t cp) { return cp < 512 ? byte_map().from_uni[cp] : -1; }

std::string normalize(std::string_view s, std::string_view form) {
  bool ascii = true;
  for (char c : s) ascii &= static_cast<uint8_t>(c) < 0x80;
  if (ascii) return std::string(s);
  int options = UTF8PROC_STABLE;
  if (form == "NFC") options |= UTF8PROC_COMPOSE;
  else if (form == "NFD") options |= UTF8PROC_DECOMPOSE;
  else if (form == "NFKC") options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  else options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                   static_cast<utf8proc_ssize_t>(s.size()), &out, static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(s);
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const char32_t cp = decode_utf8(s, i, &len);
    append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    i += len;
  }
  return out;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const int n = sequence_len(bytes, i);
    if (n > 0) {
      out.append(bytes.data() + i, static_cast<size_t>(n));
      i += static_cast<size_t>(n);
    } else {
      out += "\xEF\xBF\xBD";
      i += static_cast<size_t>(-n);
    }
  }
  return out;
}

bool is_valid_utf8(std::string_view s) { return utf8::is_valid(s); }

}  // namespace kvb::tok::uni
