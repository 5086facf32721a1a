// Python str.format template scanning, shared by the Jinja `str.format` method
// (engine/chat/jinja/builtins.cpp) and the task prompt templates (tasks/text_format.cpp): literal
// text with the "{{" and "}}" escapes, and replacement fields "{...}" whose meaning each caller
// defines (Python reference: string.Formatter.parse, https://docs.python.org/3/library/string.html#formatstrings).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace kvb {

/// Expands the str.format template `tmpl` (bytes; UTF-8 passes through unchanged): literal text is
/// copied with "{{" → "{" and "}}" → "}", and each replacement field "{text}" (text up to the first
/// '}', no nesting) is replaced by `field(std::string_view text, size_t pos)`, pos being the byte
/// offset of its '{'. A malformed template — a '{' with no '}' after it, or a lone '}' — calls
/// `bad(char brace, size_t pos)`, which must throw the caller's error (a std::logic_error is thrown
/// if it returns).
template <class Field, class Bad>
std::string expand_py_format(std::string_view tmpl, Field field, Bad bad) {
  const auto malformed = [&](char brace, size_t pos) {
    bad(brace, pos);
    throw std::logic_error("expand_py_format: the error callback returned");
  };
  std::string out;
  out.reserve(tmpl.size());
  for (size_t i = 0; i < tmpl.size(); ++i) {
    const char c = tmpl[i];
    if ((c == '{' || c == '}') && i + 1 < tmpl.size() && tmpl[i + 1] == c) {
      out += c;
      ++i;
    } else if (c == '}') {
      malformed('}', i);
    } else if (c != '{') {
      out += c;
    } else {
      const size_t end = tmpl.find('}', i + 1);
      if (end == std::string_view::npos) malformed('{', i);
      out += field(tmpl.substr(i + 1, end - i - 1), i);
      i = end;
    }
  }
  return out;
}

}  // namespace kvb
