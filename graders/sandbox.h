// The one subprocess sandbox of the graders: runs a program (or a function in a forked child)
// with a wall-clock limit, rlimits and captured output, and leaves nothing behind. Used by
// LongProc pseudo_to_code (compile with g++, run the unit tests: graders/longproc_code.cpp) and
// by the time-limited symbolic math check (graders/math_symbolic.cpp).
//
// POSIX: the child is fork()ed from argv/env prepared before the fork, put in its own process
// group, given rlimits (RLIMIT_CPU, and when set RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC;
// RLIMIT_CORE = 0), fds 0/1/2 from pipes and (exec mode) every other fd closed, cwd = `cwd`, a
// minimal environment (PATH, LANG=C, HOME=TMPDIR=cwd); with drop_root and running as root the
// program runs as 'nobody' so RLIMIT_NPROC applies. The parent feeds stdin, drains stdout and
// stderr with poll(), and SIGKILLs the whole group at the wall-clock limit or when stdout passes
// its cap. The calling process makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER) so
// the orphans of a forking program come back to it and are killed and reaped before
// run_sandboxed returns.
#pragma once

#include <sys/resource.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace kvb::graders {

/// What to run and under which limits. Exactly one of `argv` (exec mode: argv[0] absolute or
/// found on the minimal PATH) and `child` (function mode: its return value is written to stdout,
/// then the child exits 0; a backstop alarm(wall_seconds + 1) ends it if the parent dies) is set.
struct SandboxSpec {
  std::vector<std::string> argv;
  std::function<std::string()> child;
  std::string cwd;          ///< working directory ("" = inherited; exec mode wants a fresh one)
  std::string stdin_data;   ///< bytes fed to stdin, then EOF
  double wall_seconds = 3;  ///< wall-clock limit (s), from fork to kill
  rlim_t cpu_seconds = 4;   ///< RLIMIT_CPU (s)
  rlim_t as_bytes = RLIM_INFINITY;
  rlim_t fsize_bytes = RLIM_INFINITY;
  rlim_t nproc = RLIM_INFINITY;
  bool drop_root = false;         ///< run as 'nobody' when the caller is root
  size_t max_stdout = 16u << 20;  ///< bytes kept; reaching it ends the run (output_overflow)
  size_t max_stderr = 64u << 10;  ///< bytes kept; the rest is drained and dropped
};

/// How the child ended and what it wrote.
struct SandboxResult {
  bool timed_out = false;        ///< killed at wall_seconds
  bool output_overflow = false;  ///< killed when stdout reached max_stdout
  int exit_code = -1;            ///< when it exited normally (not timed out or overflowing)
  int signal = 0;                ///< when a signal ended it (e.g. SIGXCPU, SIGSEGV)
  std::string out, err;
  double seconds = 0;  ///< wall clock from fork to reaped
};

/// Runs `spec` (see the file comment). Throws kvb::Error(kRuntime) when a pipe or fork fails,
/// or (exec mode) the program cannot be started: "sandbox: could not start 'X' (step N: why)".
SandboxResult run_sandboxed(const SandboxSpec& spec);

}  // namespace kvb::graders
