#include "tasks/text_format.h"

#include <cmath>
#include <cstdio>

#include "engine/util/error.h"
#include "engine/util/py_format.h"
#include "engine/util/utf8.h"

namespace kvb::tasks {

std::string py_format(const std::string& tmpl, const std::map<std::string, std::string>& fields,
                      const std::string& where) {
  return expand_py_format(
      tmpl,
      [&](std::string_view field, size_t i) -> const std::string& {
        const std::string name(field);
        if (name.empty() || name.find_first_of("!:.[{") != std::string::npos)
          fail("{}: unsupported replacement field '{{{}}}' at byte {}", where, name, i);
        auto it = fields.find(name);
        if (it == fields.end()) fail("{}: no value for field '{{{}}}'", where, name);
        return it->second;
      },
      [&](char brace, size_t i) {
        if (brace == '{') fail("{}: single '{{' in format string at byte {}", where, i);
        fail("{}: single '}}' in format string at byte {}", where, i);
      });
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string py_strip(const std::string& s) {
  const char* ws = " \t\n\r\v\f";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::string py_int_list(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(v[i]);
  }
  return out + "]";
}

std::string py_fixed1(double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f", x);
  return buf;
}

namespace {

// Python json.dumps (ensure_ascii=True) of a string.
void dump_string(const std::string& s, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    const char32_t cp = utf8::decode_utf8(s, i, &len);
    if (!utf8::append_json_escape(out, cp, /*ensure_ascii=*/true)) out.append(s, i, len);
    i += len;
  }
  out += '"';
}

void dump(const nlohmann::ordered_json& v, std::string& out) {
  switch (v.type()) {
    case nlohmann::json::value_t::null: out += "null"; break;
    case nlohmann::json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case nlohmann::json::value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
    case nlohmann::json::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
    case nlohmann::json::value_t::number_float: {
      double d = v.get<double>();
      if (std::isnan(d)) {
        out += "NaN";
        break;
      }
      if (std::isinf(d)) {
        out += d > 0 ? "Infinity" : "-Infinity";
        break;
      }
      std::string s = v.dump();  // shortest round-trip repr, like Python's float repr
      if (s.find_first_of(".eE") == std::string::npos) s += ".0";
      out += s;
      break;
    }
    case nlohmann::json::value_t::string: dump_string(v.get_ref<const std::string&>(), out); break;
    case nlohmann::json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& x : v) {
        if (!first) out += ", ";
        first = false;
        dump(x, out);
      }
      out += ']';
      break;
    }
    case nlohmann::json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        dump_string(it.key(), out);
        out += ": ";
        dump(it.value(), out);
      }
      out += '}';
      break;
    }
    default: fail("py_json_dumps: unsupported JSON value type");
  }
}

}  // namespace

std::string py_json_dumps(const nlohmann::ordered_json& v) {
  std::string out;
  dump(v, out);
  return out;
}

}  // namespace kvb::tasks
