// pseudo_to_code's sandbox: real g++ compiles and runs of a correct program, a wrong one, one
// that does not compile, one that loops forever, one that allocates without bound, one that
// forks repeatedly and one that probes for inherited file descriptors. Time limit 1 s.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "graders/longproc.h"

namespace kvb::graders {
namespace {

const nlohmann::json kCases = nlohmann::json::parse(R"([[["1 2"], ["3"]], [["5 7"], ["12"]], [["-4", "10"], ["6"]]])");

CodeSandboxLimits fast() {
  CodeSandboxLimits l;
  l.run_seconds = 1.0;
  l.memory_bytes = 256ull << 20;
  return l;
}

// This test process's own $TMPDIR (world-searchable, as the sandbox needs when run as root), so
// that leftover_processes() sees only this process's sandboxes: ctest -j runs the other
// sandbox tests at the same time, each in its own process.
const std::string& own_tmpdir() {
  static const std::string dir = [] {
    std::string d = "/tmp/kvb-sbxtest-" + std::to_string(getpid());
    mkdir(d.c_str(), 0755);
    chmod(d.c_str(), 0755);
    setenv("TMPDIR", d.c_str(), 1);
    return d;
  }();
  static const struct RemoveAtExit {
    ~RemoveAtExit() { rmdir(dir.c_str()); }  // empty once every sandbox has cleaned up
  } remove_at_exit;
  return dir;
}

LongProcResult run(const std::string& body, double* seconds = nullptr) {
  own_tmpdir();
  auto t0 = std::chrono::steady_clock::now();
  LongProcResult r = longproc_pseudo_to_code("Sure:\n```cpp\n" + body + "\n```\n", kCases, fast());
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// Processes whose command line mentions one of this process's pseudo_to_code temp dirs (none
// may survive a run).
int leftover_processes() {
  const std::string mine = own_tmpdir() + "/kvb-p2c-";
  int n = 0;
  DIR* d = opendir("/proc");
  if (!d) return 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline");
    std::string s((std::istreambuf_iterator<char>(f)), {});
    if (s.find(mine) != std::string::npos) ++n;
  }
  closedir(d);
  return n;
}

TEST(PseudoToCodeSandbox, CorrectProgramPasses) {
  LongProcResult r = run("int main() { long long a, b; cin >> a >> b; cout << a + b << endl; return 0; }");
  EXPECT_EQ(r.accuracy, 1.0) << r.reason;
  EXPECT_NE(r.reason.find("all 3 test cases pass"), std::string::npos) << r.reason;
  EXPECT_NE(r.normalized.find("#include <bitset>\nusing namespace std;\n"), std::string::npos);
}

TEST(PseudoToCodeSandbox, WrongOutputFails) {
  LongProcResult r = run("int main() { int a, b; cin >> a >> b; cout << a - b << endl; }");
  EXPECT_EQ(r.accuracy, 0.0);
  EXPECT_NE(r.reason.find("test case 1/3 failed"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("wrong output"), std::string::npos) << r.reason;
  // Passing the first case only: the reason says how far it got.
  r = run("int main() { int a, b; cin >> a >> b; cout << (a == 1 ? 3 : 0) << endl; }");
  EXPECT_NE(r.reason.find("test case 2/3 failed (1 passed before it)"), std::string::npos) << r.reason;
}

TEST(PseudoToCodeSandbox, OnlyStdoutCountsNotTheExitStatus) {
  // LongProc compares stdout only: a program that prints the right answer and then aborts passes.
  LongProcResult r = run("int main() { long long a, b; cin >> a >> b; cout << a + b << endl; cout.flush(); abort(); }");
  EXPECT_EQ(r.accuracy, 1.0) << r.reason;
}

TEST(PseudoToCodeSandbox, CompileErrorFails) {
  LongProcResult r = run("int main() { int a = ; }");
  EXPECT_EQ(r.accuracy, 0.0);
  EXPECT_EQ(r.extraction_rate, 1.0);
  EXPECT_NE(r.reason.find("compilation error"), std::string::npos) << r.reason;
}

TEST(PseudoToCodeSandbox, NoCodeBlock) {
  LongProcResult r = longproc_pseudo_to_code("int main() {}", kCases, fast());
  EXPECT_EQ(r.extraction_rate, 0.0);
  EXPECT_NE(r.reason.find("no ```cpp"), std::string::npos);
}

TEST(PseudoToCodeSandbox, InfiniteLoopIsKilledAtTheTimeLimit) {
  double s = 0;
  LongProcResult r = run("int main() { volatile long x = 0; while (true) ++x; }", &s);
  EXPECT_EQ(r.accuracy, 0.0);
  EXPECT_NE(r.reason.find("time limit"), std::string::npos) << r.reason;
  EXPECT_LT(s, 30.0);  // compile + one 1 s run, with room for a loaded machine
  EXPECT_EQ(leftover_processes(), 0);
}

TEST(PseudoToCodeSandbox, UnboundedAllocationHitsTheMemoryLimit) {
  LongProcResult r =
      run("int main() { vector<char*> v; while (true) { char* p = new char[1 << 24]; memset(p, 1, 1 << 24); "
          "v.push_back(p); } }");
  EXPECT_EQ(r.accuracy, 0.0);
  EXPECT_NE(r.reason.find("memory limit"), std::string::npos) << r.reason;
}

TEST(PseudoToCodeSandbox, ForkingProgramIsContainedAndCleanedUp) {
  double s = 0;
  LongProcResult r = run("#include <unistd.h>\nint main() { while (true) fork(); }", &s);
  EXPECT_EQ(r.accuracy, 0.0);
  EXPECT_FALSE(r.reason.empty());
  EXPECT_LT(s, 30.0);
  EXPECT_EQ(leftover_processes(), 0);
}

TEST(PseudoToCodeSandbox, NoFileDescriptorsAreInherited) {
  int fd = open("/dev/null", O_RDONLY);  // not close-on-exec
  ASSERT_GE(fd, 0);
  const nlohmann::json one = nlohmann::json::parse(R"([[["x"], ["0"]]])");
  LongProcResult r = longproc_pseudo_to_code(
      "```cpp\n#include <fcntl.h>\nint main() { int n = 0; for (int f = 3; f < 1024; ++f) if (fcntl(f, F_GETFD) != -1) ++n; "
      "cout << n << endl; }\n```",
      one, fast());
  close(fd);
  EXPECT_EQ(r.accuracy, 1.0) << r.reason;
}

TEST(PseudoToCodeSandbox, MalformedTestcasesAreAnError) {
  EXPECT_THROW(longproc_pseudo_to_code("```cpp\nint main(){}\n```", nlohmann::json::parse("[[1, 2]]")), std::exception);
  EXPECT_THROW(longproc_pseudo_to_code("```cpp\nint main(){}\n```", nlohmann::json::object()), std::exception);
}

}  // namespace
}  // namespace kvb::graders
