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
  const CodeRange* it =
      std::upper_bound(std::begin(r), std::end(r), cp, [](char32_t c, const CodeRange& x) { return c < x.lo; });
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
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &out,
                   static_cast<utf8proc_option_t>(options));
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
