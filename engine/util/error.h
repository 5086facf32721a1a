// kvb::Error — the one exception type for bad input anywhere in kvbench.
//
// Every error names where the bad input is (a file, and within it a field, tensor, line or
// key) so a user can fix it without a debugger. The CLI catches kvb::Error, prints
// "kvbench: error: <what>" to stderr and exits with exit_code() (2 for bad input, 1 for
// runtime failures such as a full disk or a failed network request).
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace kvb {

/// Category of a kvb::Error; decides the process exit code.
enum class ErrorKind {
  kInput = 2,    ///< bad user input: corrupt file, malformed JSON, unknown option value
  kRuntime = 1,  ///< the environment failed: I/O error, out of memory, network failure
};

/// An error with a message that already names the file and field it concerns.
class Error : public std::runtime_error {
 public:
  explicit Error(std::string msg, ErrorKind kind = ErrorKind::kInput)
      : std::runtime_error(std::move(msg)), kind_(kind) {}
  /// Process exit code for this error: 2 (input) or 1 (runtime).
  int exit_code() const { return static_cast<int>(kind_); }
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

/// Throws kvb::Error("<file>: <field>: <formatted message>") — the standard shape.
template <typename... Args>
[[noreturn]] void fail_at(const std::string& file, const std::string& field, fmt::format_string<Args...> f,
                          Args&&... args) {
  std::string msg = file;
  if (!field.empty()) msg += ": " + field;
  msg += ": " + fmt::format(f, std::forward<Args>(args)...);
  throw Error(std::move(msg));
}

/// Throws kvb::Error(formatted message) of the given kind.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kvb
