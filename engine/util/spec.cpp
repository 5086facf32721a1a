#include "engine/util/spec.h"

#include "engine/util/error.h"

namespace kvb {

NamedSpec parse_named_spec(const std::string& text, const char* what) {
  NamedSpec s;
  const size_t colon = text.find(':');
  s.name = text.substr(0, colon);
  if (s.name.empty()) fail("{} '{}': empty name", what, text);
  if (colon == std::string::npos) return s;
  const std::string rest = text.substr(colon + 1);
  if (rest.empty()) return s;
  size_t start = 0;
  while (true) {
    const size_t comma = rest.find(',', start);
    const std::string kv = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (kv.empty()) fail("{} '{}': empty parameter (a stray comma?)", what, text);
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) fail("{} '{}': expected key=value, got '{}'", what, text, kv);
    std::string key = kv.substr(0, eq);
    if (s.params.count(key)) fail("{} '{}': parameter '{}' given twice", what, text, key);
    s.params.emplace(std::move(key), kv.substr(eq + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return s;
}

}  // namespace kvb
