// CLI11 validators with kvbench's wording, shared by every command: numbers must be finite (NaN
// and ±inf are refused before any work starts) and in range; the message names the rule
// ("--samples: must be >= 1"), which main() prints as `kvbench: error: --samples: must be >= 1`
// with exit status 2.
#pragma once

#include <cmath>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace kvb::cli {

namespace detail {
/// Parses the option's text as a finite number; false for anything else (NaN, inf, garbage).
inline bool finite_number(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end && *end == '\0' && std::isfinite(out);
}
inline std::string fmt_num(double v) { return fmt::format("{}", v); }
}  // namespace detail

/// A finite number ≥ lo.
inline CLI::Validator at_least(double lo) {
  return CLI::Validator(
      [lo](std::string& s) -> std::string {
        double v = 0;
        if (!detail::finite_number(s, v)) return "must be a finite number, got '" + s + "'";
        if (v < lo) return "must be >= " + detail::fmt_num(lo) + ", got " + s;
        return {};
      },
      "NUMBER >= " + detail::fmt_num(lo));
}

/// A finite number > 0 (integers: ≥ 1).
inline CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double v = 0;
        if (!detail::finite_number(s, v)) return "must be a finite number, got '" + s + "'";
        if (!(v > 0)) return "must be > 0, got " + s;
        return {};
      },
      "NUMBER > 0");
}

/// A finite number ≥ 0.
inline CLI::Validator non_negative() { return at_least(0.0); }

/// A finite number in [lo, hi].
inline CLI::Validator in_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        if (!detail::finite_number(s, v)) return "must be a finite number, got '" + s + "'";
        if (v < lo || v > hi) return "must be in [" + detail::fmt_num(lo) + ", " + detail::fmt_num(hi) + "], got " + s;
        return {};
      },
      "NUMBER in [" + detail::fmt_num(lo) + ", " + detail::fmt_num(hi) + "]");
}

}  // namespace kvb::cli
