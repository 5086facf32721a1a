// Helpers every test folder shares (header-only; tests/CMakeLists.txt puts tests/ on each test's
// include path): fixture and test-data paths, running the kvbench binary or any command with its
// output captured, the message of an expected kvb::Error, KVB_REQUIRE_TEST_DATA for the real
// models, tokenizers and datasets that ship in tests/data, and KVB_REQUIRE — the one way a test
// says it needs something outside the repository (a built binary, the default model, an optional
// tool).
//
// KVB_REQUIRE skips the test with its reason on a developer's machine; when the environment
// variable KVB_REQUIRE_ALL is 1 (.ci/run sets it) a missing prerequisite FAILS the test instead,
// so CI can never pass by skipping. See tests/README.md.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#if defined(__clang__) && __clang_major__ < 15
#include <immintrin.h>  // binary16_to_float, float_to_binary16
#endif

#include "engine/util/error.h"

namespace kvb::test {

/// IEEE 754 binary16 -> binary32 (exact) and binary32 -> binary16 (round to nearest even) by the
/// compiler or the CPU, the independent reference for the project's own half conversions
/// (engine/model/weights.h). GCC (x86-64) and clang 15+ convert _Float16; clang 14, with which the
/// sanitizer build compiles, has _Float16 on x86-64 only with AVX512-FP16, so there the CPU's F16C
/// instructions convert (every x86-64 CPU with AVX has them). NaN payloads are kept; signalling
/// NaNs may come back quiet.
#if defined(__clang__) && __clang_major__ < 15
__attribute__((target("f16c"))) inline float binary16_to_float(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) inline uint16_t float_to_binary16(float f) {
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
#else
inline float binary16_to_float(uint16_t h) {
  _Float16 x;
  std::memcpy(&x, &h, 2);
  return static_cast<float>(x);
}
inline uint16_t float_to_binary16(float f) {
  const _Float16 x = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &x, 2);
  return h;
}
#endif

/// A path under the source tree and tests/fixtures respectively.
inline std::string source_path(const std::string& rel) { return std::string(KVB_SOURCE_DIR) + "/" + rel; }
inline std::string fixture(const std::string& rel) { return source_path("tests/fixtures/" + rel); }
/// A path under the test data: tests/data as configuring unpacks it into the build tree
/// (KVB_TEST_DATA_DIR = <build>/test-data; tests/data/README.md lists what is there): e.g.
/// test_data("models/stories260K-hf"), test_data("tokenizers/qwen3/tokenizer.json"),
/// test_data("datasets") (a data directory laid out as `kvbench run --data-dir` expects).
inline std::string test_data(const std::string& rel) { return std::string(KVB_TEST_DATA_DIR) + "/" + rel; }

/// Where tools/fetch_default_model.sh puts the default model (SmolLM2-135M-Instruct Q4_1):
/// ${XDG_CACHE_HOME:-$HOME/.cache}/kvbench/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
/// (the same rule as harness/model_source.h's default_model_path, for tests that do not link it).
inline std::string default_model_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string cache = xdg && *xdg ? xdg : std::string(home ? home : ".") + "/.cache";
  return cache + "/kvbench/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf";
}

/// A fresh, empty directory for the running test, removed first if it exists:
/// $TMPDIR/kvb_<prefix>_<pid>_<test name>.
inline std::filesystem::path temp_dir(const std::string& prefix) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? info->name() : "global";
  for (char& c : name)
    if (c == '/') c = '_';  // parameterised test names
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("kvb_" + prefix + "_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

/// Exit status and captured output of a command.
struct CommandResult {
  int rc = -1;      ///< exit code; 128 + signal number when killed; -1 when it could not start
  std::string out;  ///< stdout, plus stderr unless the caller redirected it
};

/// Runs `cmd` through /bin/sh with stdout and (unless `merge_stderr` is false) stderr captured.
inline CommandResult run_command(const std::string& cmd, bool merge_stderr = true) {
  CommandResult r;
  FILE* p = popen((merge_stderr ? cmd + " 2>&1" : cmd).c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  return r;
}

/// Runs `kvbench <args>` (the binary of this build, KVB_BINARY) with stdout+stderr captured.
inline CommandResult run_cli(const std::string& args) { return run_command(std::string(KVB_BINARY) + " " + args); }

/// run_command / run_cli returning the exit code and storing the captured output in `*out`
/// (for `EXPECT_EQ(run_cli(args, &out), 0) << out;` chains that reuse one output string).
inline int run_command(const std::string& cmd, std::string* out) {
  CommandResult r = run_command(cmd);
  *out = std::move(r.out);
  return r.rc;
}
inline int run_cli(const std::string& args, std::string* out) {
  return run_command(std::string(KVB_BINARY) + " " + args, out);
}

/// The message of the kvb::Error `f` throws, or "(no kvb::Error)" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no kvb::Error)";
}

/// gtest assertion that `msg` contains every string of `parts`; on failure it names the first
/// missing one and prints `msg`. Use as EXPECT_TRUE(contains_all(msg, {"field", "value"})).
inline ::testing::AssertionResult contains_all(const std::string& msg, std::initializer_list<std::string_view> parts) {
  for (std::string_view part : parts)
    if (msg.find(part) == std::string::npos)
      return ::testing::AssertionFailure() << "expected '" << part << "' in: " << msg;
  return ::testing::AssertionSuccess();
}

/// contains_all over error_of(f): EXPECT_TRUE(error_has([&] { ... }, {"field"})).
inline ::testing::AssertionResult error_has(const std::function<void()>& f,
                                            std::initializer_list<std::string_view> parts) {
  return contains_all(error_of(f), parts);
}

/// error_of for bad input: also expects the error's exit code to be 2 (an input error) and
/// records a test failure when nothing is thrown.
inline std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a kvb::Error";
  return "";
}

/// max |ours − ref| / max |ref| (0/0 = NaN fails every EXPECT_LE).
inline double rel_err(const std::vector<float>& ours, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::abs(double(ours[i]) - ref[i]));
    den = std::max(den, std::abs(double(ref[i])));
  }
  return num / den;
}

/// True when missing prerequisites must fail rather than skip: KVB_REQUIRE_ALL=1 (.ci/run).
/// Sets the environment variable `name` to `value` for the scope, restoring its old value (or
/// its absence) at the end.
struct ScopedEnv {
  std::string name;
  bool had = false;
  std::string old;
  ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) {
    if (const char* o = std::getenv(name.c_str())) {
      had = true;
      old = o;
    }
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had) ::setenv(name.c_str(), old.c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

inline bool require_all() {
  const char* v = std::getenv("KVB_REQUIRE_ALL");
  return v && std::string(v) == "1";
}

inline bool path_exists(const std::string& p) {
  std::error_code ec;
  return std::filesystem::exists(p, ec);
}

/// How many times longer than in the optimised build a wall-clock bound may take in this test
/// binary: 1 in the Release build, 5 in the sanitizer build (ASan's shadow checks and the -O0/-O1
/// code there make kvbench several times slower; .ci/run also runs two tests at once). Tests that
/// bound the time of a hostile input (linear, not quadratic, work) multiply their bound by it: a
/// quadratic blow-up on those inputs costs minutes, far beyond either bound.
inline double time_scale() {
#if defined(__SANITIZE_ADDRESS__)
  return 5.0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return 5.0;
#else
  return 1.0;
#endif
#else
  return 1.0;
#endif
}

}  // namespace kvb::test

/// Skips the current test (or fails it under KVB_REQUIRE_ALL=1) unless `cond` holds; `what`
/// is streamed into the message (say what is missing and how to get it). Use in a TEST body or
/// SetUp(), like GTEST_SKIP.
#define KVB_REQUIRE(cond, what)                                                                                \
  if (cond) {                                                                                                  \
  } else if (::kvb::test::require_all()) GTEST_FAIL() << "missing prerequisite (KVB_REQUIRE_ALL=1): " << what; \
  else GTEST_SKIP() << "missing prerequisite: " << what

/// KVB_REQUIRE for a file or directory.
#define KVB_REQUIRE_PATH(path, how) KVB_REQUIRE(::kvb::test::path_exists(path), (path) << " absent (" << how << ")")

/// Asserts that test_data(rel) exists. The test data ships with the repository, so a missing file
/// is a broken build tree, never a reason to skip: the test fails (re-running cmake unpacks it).
#define KVB_REQUIRE_TEST_DATA(rel)                                                                   \
  ASSERT_TRUE(::kvb::test::path_exists(::kvb::test::test_data(rel)))                                 \
      << ::kvb::test::test_data(rel) << " absent: configuring the build (cmake) unpacks tests/data " \
      << "there"

/// KVB_REQUIRE for the kvbench binary of this build.
#define KVB_REQUIRE_BINARY() KVB_REQUIRE_PATH(std::string(KVB_BINARY), "build the kvbench target first")

/// KVB_REQUIRE for the default model (bootstrap.sh / tools/fetch_default_model.sh fetch it).
#define KVB_REQUIRE_DEFAULT_MODEL() \
  KVB_REQUIRE_PATH(::kvb::test::default_model_path(), "tools/fetch_default_model.sh fetches it")
