// LeakSanitizer defaults for the sanitizer builds (KVB_SANITIZE=ON, and KVB_FUZZ=ON): linked into every executable
// of that build (kvbench and the test binaries) so that the suppressions hold wherever the
// binary runs — under ctest, during gtest_discover_tests at build time, and when a test starts
// kvbench as a child — without depending on LSAN_OPTIONS in the environment.
//
// Suppressed: one-time allocations that CLN (the bignum library under GiNaC, Debian libcln)
// makes in its static initialisers and never frees. They are not ours to free, and LSan reports
// them as direct leaks only when no pointer happens to survive in scanned memory, so the report
// comes and goes between binaries and runs. Nothing of kvbench's own code is suppressed.
// (The hook used to live in graders/grade.cpp, inside a static library: binaries that load
// libcln through the graders library without calling grade(), such as test_fidelity, did not
// link that object and had no suppression — the CI failure this file fixes.)

/// Read by the LeakSanitizer runtime at start-up (the documented hook of compiler-rt's
/// lsan_interface.h): one "leak:<module or function pattern>" per line.
extern "C" __attribute__((used, visibility("default"))) const char* __lsan_default_suppressions() {
  return "leak:libcln.so\n"
         "leak:libginac.so\n";
}

/// Read by the LeakSanitizer runtime at start-up (lsan_interface.h): without
/// print_suppressions=0 LSan appends its "Suppressions used" table (the CLN entries above) to
/// stderr at exit, which would turn kvbench's one `kvbench: error:` line into several in every
/// test that checks the error format. LSAN_OPTIONS in the environment still overrides it.
extern "C" __attribute__((used, visibility("default"))) const char* __lsan_default_options() {
  return "print_suppressions=0";
}
