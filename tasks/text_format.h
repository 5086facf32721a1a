// Python-compatible string building used by the prompt templates of the reference code, so the
// prompts equal what the Python references produce byte for byte.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvb::tasks {

/// Python `template.format(**fields)` for named fields: "{name}" is replaced by fields[name],
/// "{{" / "}}" become "{" / "}". Positional fields, attribute/index access and format specs are
/// not supported (the benchmark templates do not use them) and raise kvb::Error, as does a
/// field missing from `fields` (Python: KeyError). `where` names the template in messages.
std::string py_format(const std::string& tmpl, const std::map<std::string, std::string>& fields,
                      const std::string& where);

/// Python str.replace(old, new) for every occurrence (non-overlapping, left to right).
std::string replace_all(std::string s, const std::string& from, const std::string& to);

/// Python str.strip() for ASCII whitespace (space, \t, \n, \r, \v, \f).
std::string py_strip(const std::string& s);

/// Python repr of a list of ints: "[21, 16, 17, 26]".
std::string py_int_list(const std::vector<int64_t>& v);

/// Python `json.dumps(value)` with default arguments: separators ", " and ": ", ensure_ascii
/// (non-ASCII → \uXXXX, astral code points as surrogate pairs), keys in insertion order.
/// Floats are written like Python's repr for finite values that round-trip with %.17g.
std::string py_json_dumps(const nlohmann::ordered_json& v);

/// Python `"{:.1f}".format(x)`.
std::string py_fixed1(double x);

}  // namespace kvb::tasks
