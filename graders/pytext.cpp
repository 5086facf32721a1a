// Python str semantics over UTF-8. See graders/pytext.h.
#include "graders/pytext.h"

#include <algorithm>

#include <utf8proc.h>

namespace kvb::graders::py {

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                          static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) {
      out.push_back(0xFFFD);
      ++i;
    } else {
      out.push_back(static_cast<char32_t>(cp));
      i += static_cast<size_t>(n);
    }
  }
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  utf8proc_uint8_t buf[4];
  for (char32_t c : s) {
    utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  }
  return out;
}

bool is_space(char32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85) return true;
  if (c < 0x80) return false;
  if (c == 0x2028 || c == 0x2029) return true;
  return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ZS;
}

bool is_word(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return true;
    default: return false;
  }
}

std::string lower(std::string_view s) {
  std::u32string u = decode(s);
  for (auto& c : u) c = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
  return encode(u);
}

std::string upper(std::string_view s) {
  std::u32string u = decode(s);
  for (auto& c : u) c = static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
  return encode(u);
}

std::string strip(std::string_view s) {
  std::u32string u = decode(s);
  size_t b = 0, e = u.size();
  while (b < e && is_space(u[b])) ++b;
  while (e > b && is_space(u[e - 1])) --e;
  return encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> split_ws(std::string_view s) {
  std::u32string u = decode(s);
  std::vector<std::string> out;
  size_t i = 0;
  while (i < u.size()) {
    while (i < u.size() && is_space(u[i])) ++i;
    size_t b = i;
    while (i < u.size() && !is_space(u[i])) ++i;
    if (i > b) out.push_back(encode(std::u32string_view(u).substr(b, i - b)));
  }
  return out;
}

std::vector<std::string> split(std::string_view s, std::string_view sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t p = s.find(sep, start);
    if (p == std::string_view::npos) {
      out.emplace_back(s.substr(start));
      return out;
    }
    out.emplace_back(s.substr(start, p - start));
    start = p + sep.size();
  }
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::string remove_punct(std::string_view s, std::string_view extra) {
  static const std::string_view kPunct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
  std::u32string ex = decode(extra);
  std::u32string u = decode(s), out;
  for (char32_t c : u) {
    if (c < 0x80 && kPunct.find(static_cast<char>(c)) != std::string_view::npos) continue;
    if (ex.find(c) != std::u32string::npos) continue;
    out.push_back(c);
  }
  return encode(out);
}

std::string replace_words(std::string_view s, const std::vector<std::string>& words) {
  std::u32string u = decode(s), out;
  std::vector<std::u32string> w;
  for (const auto& x : words) w.push_back(decode(x));
  size_t i = 0;
  while (i < u.size()) {
    if (!is_word(u[i])) {
      out.push_back(u[i++]);
      continue;
    }
    size_t b = i;
    while (i < u.size() && is_word(u[i])) ++i;
    std::u32string_view run = std::u32string_view(u).substr(b, i - b);
    if (std::find(w.begin(), w.end(), run) != w.end()) out.push_back(' ');
    else out.append(run);
  }
  return encode(out);
}

std::string collapse_ws(std::string_view s) { return join(split_ws(s), " "); }

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

}  // namespace kvb::graders::py
