// CLI11 validators with kvbench's wording, shared by every command: numbers must be finite (NaN
// and ±inf are refused before any work starts) and in range; the message names the rule
// ("--samples: must be >= 1"), which main() prints as `kvbench: error: --samples: must be >= 1`
// with exit status 2. Also the `--policies` and `--budgets` list parsers of run and fidelity.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/util/error.h"

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
/// An integer literal (optional sign, digits) that does not fit 64 bits (signed for a leading
/// '-', unsigned otherwise): CLI11 would saturate it (2^64 becomes 2^64-1) instead of refusing.
inline bool integer_overflows(const std::string& s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t j = i; j < s.size(); ++j)
    if (s[j] < '0' || s[j] > '9') return false;
  errno = 0;
  if (s[0] == '-') (void)std::strtoll(s.c_str(), nullptr, 10);
  else (void)std::strtoull(s.c_str(), nullptr, 10);
  return errno == ERANGE;
}
/// The validators' common first check: a finite number whose integer spelling fits 64 bits.
inline std::string number_problem(const std::string& s, double& v) {
  if (!finite_number(s, v)) return "must be a finite number, got '" + s + "'";
  if (integer_overflows(s)) return "out of range, got " + s;
  return {};
}
}  // namespace detail

/// A finite number ≥ lo.
inline CLI::Validator at_least(double lo) {
  return CLI::Validator(
      [lo](std::string& s) -> std::string {
        double v = 0;
        if (auto p = detail::number_problem(s, v); !p.empty()) return p;
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
        if (auto p = detail::number_problem(s, v); !p.empty()) return p;
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
        if (auto p = detail::number_problem(s, v); !p.empty()) return p;
        if (v < lo || v > hi) return "must be in [" + detail::fmt_num(lo) + ", " + detail::fmt_num(hi) + "], got " + s;
        return {};
      },
      "NUMBER in [" + detail::fmt_num(lo) + ", " + detail::fmt_num(hi) + "]");
}

namespace detail {
/// The comma-separated pieces of `s` (none for ""). An empty piece ("32,,64", a trailing comma)
/// is an error naming `option`, never silently dropped.
inline std::vector<std::string> csv_pieces(const std::string& s, const char* option) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  for (size_t start = 0; start <= s.size();) {
    const size_t comma = s.find(',', start);
    std::string piece = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (piece.empty()) fail("{}: empty item in '{}'", option, s);
    out.push_back(std::move(piece));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}
}  // namespace detail

/// Splits a `--policies` list on commas, re-joining pieces that are parameters of the previous
/// spec ("snapkv:window=8,kernel=5,h2o" → {"snapkv:window=8,kernel=5", "h2o"}): a piece holding
/// '=' and no ':' continues the previous spec. Throws kvb::Error on an empty list or a leading
/// parameter.
inline std::vector<std::string> split_policy_list(const std::string& text) {
  std::vector<std::string> out;
  for (const auto& piece : detail::csv_pieces(text, "--policies")) {
    if (piece.find('=') != std::string::npos && piece.find(':') == std::string::npos) {
      if (out.empty()) fail("--policies '{}': '{}' is a parameter before any policy name", text, piece);
      out.back() += "," + piece;
    } else {
      out.push_back(piece);
    }
  }
  if (out.empty()) fail("--policies: no policy given");
  return out;
}

/// Parses a `--budgets` list ("64,128"): positive integers (tokens per layer and kv head).
/// Throws kvb::Error naming the bad entry, or on an empty list.
inline std::vector<int64_t> parse_budget_list(const std::string& s) {
  std::vector<int64_t> out;
  for (const auto& piece : detail::csv_pieces(s, "--budgets")) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(piece, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != piece.size() || v < 1) fail("--budgets '{}': '{}' is not a positive integer", s, piece);
    out.push_back(v);
  }
  if (out.empty()) fail("--budgets: no budget given");
  return out;
}

}  // namespace kvb::cli
