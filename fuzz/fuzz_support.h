// Shared by the libFuzzer targets in fuzz/ (built with -DKVB_FUZZ=ON by clang; tools/fuzz.sh).
// The contract each target checks: any input either parses or raises kvb::Error (the one-line
// `kvbench: error:` path); any other exception (std::out_of_range, nlohmann's, bad_alloc from an
// unbounded allocation), a crash, a leak or undefined behaviour is a finding.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "engine/util/error.h"

namespace kvb::fuzz {

/// Writes the input to `name` inside a per-process scratch directory (loaders that take a path);
/// returns the file's path.
inline std::string scratch_file(const uint8_t* data, size_t size, const std::string& name) {
  static const std::string dir = [] {
    const char* t = std::getenv("TMPDIR");
    std::string d = std::string(t ? t : "/tmp") + "/kvb_fuzz_" + std::to_string(::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  const std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Runs `fn`; kvb::Error is the expected outcome for bad input, everything else propagates.
template <typename Fn>
int expect_ok_or_error(Fn&& fn) {
  try {
    fn();
  } catch (const kvb::Error&) {
  }
  return 0;
}

}  // namespace kvb::fuzz
