// LongProc pseudo_to_code: extract the C++ program, compile it with g++ and run the unit tests
// in a sandboxed child process (graders/sandbox.h: own process group, rlimits, a fresh mkdtemp()
// directory, minimal environment, 'nobody' when running as root, SIGKILL of the whole group at
// the wall-clock limit). See graders/longproc.h (longproc_pseudo_to_code).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <utf8proc.h>

#include "engine/util/error.h"
#include "graders/longproc.h"
#include "graders/pytext.h"
#include "graders/sandbox.h"

namespace kvb::graders {

namespace {

// LongProc spoc_evaluator _IMPORT_HEADER (the headers the prompt lists), then the model's code.
const char* kHeader =
    "#include <cstdio>\n#include <iostream>\n#include <vector>\n#include <algorithm>\n#include <numeric>\n"
    "#include <cmath>\n#include <cstring>\n#include <set>\n#include <map>\n#include <queue>\n#include <stack>\n"
    "#include <list>\n#include <fstream>\n#include <climits>\n#include <cassert>\n#include <iomanip>\n"
    "#include <sstream>\n#include <bitset>\nusing namespace std;\n";

std::string first_line(const std::string& s) {
  for (auto& l : py::split(s, "\n"))
    if (l.find("error") != std::string::npos) return l.substr(0, 200);
  return s.substr(0, s.find('\n')).substr(0, 200);
}

bool valid_utf8(const std::string& s) {  // Python's bytes.decode("utf-8") succeeds
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                          static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

struct TempDir {
  std::string path;
  TempDir() {
    // $TMPDIR when set, unless we run as root and it is not searchable by others (the program
    // runs as 'nobody' and must reach its directory): then /tmp.
    const char* env = std::getenv("TMPDIR");
    std::string base = env && *env ? env : "/tmp";
    struct stat st;
    if (geteuid() == 0 && (stat(base.c_str(), &st) != 0 || !(st.st_mode & S_IXOTH))) base = "/tmp";
    std::string tmpl = base + "/kvb-p2c-XXXXXX";
    std::vector<char> b(tmpl.begin(), tmpl.end());
    b.push_back('\0');
    if (!mkdtemp(b.data()))
      throw Error(fmt::format("pseudo_to_code sandbox: mkdtemp({}): {}", tmpl, std::strerror(errno)),
                  ErrorKind::kRuntime);
    path = b.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::string join_lines(const nlohmann::json& v, size_t i, const char* what) {
  if (!v.is_array()) fail("longproc_pseudo_to_code: testcases[{}]: {} is not a list of strings", i, what);
  std::string s;
  for (size_t k = 0; k < v.size(); ++k) {
    if (!v[k].is_string()) fail("longproc_pseudo_to_code: testcases[{}]: {}[{}] is not a string", i, what, k);
    if (k) s += "\n";
    s += v[k].get<std::string>();
  }
  return s + "\n";
}

}  // namespace

bool longproc_extract_cpp(std::string_view prediction, std::string& code) {
  std::string p(prediction);
  for (size_t at = 0; (at = p.find("```c++", at)) != std::string::npos; at += 6) p.replace(at, 6, "```cpp");
  size_t open = p.find("```cpp"), close = p.rfind("```");
  if (open == std::string::npos || close == std::string::npos || close < open + 6) return false;
  code = p.substr(open + 6, close - open - 6);
  return true;
}

LongProcResult longproc_pseudo_to_code(std::string_view prediction, const nlohmann::json& testcases,
                                       const CodeSandboxLimits& limits) {
  if (!testcases.is_array()) fail("longproc_pseudo_to_code: metadata 'testcases' must be a list of [inputs, outputs]");
  std::vector<std::pair<std::string, std::string>> cases;
  for (size_t i = 0; i < testcases.size() && cases.size() < limits.max_cases; ++i) {
    const auto& c = testcases[i];
    if (!c.is_array() || c.size() != 2) fail("longproc_pseudo_to_code: testcases[{}]: expected [inputs, outputs]", i);
    cases.emplace_back(join_lines(c[0], i, "inputs"), join_lines(c[1], i, "outputs"));
  }
  LongProcResult r;
  std::string code;
  if (!longproc_extract_cpp(prediction, code)) {
    r.reason = "no ```cpp code block in the output";
    return r;
  }
  r.extraction_rate = 1.0;
  r.extracted = code;
  r.normalized = std::string(kHeader) + code;

  TempDir dir;
  {
    std::ofstream f(dir.path + "/prog.cpp", std::ios::binary);
    f << r.normalized;
    if (!f) throw Error(fmt::format("pseudo_to_code sandbox: cannot write {}/prog.cpp", dir.path), ErrorKind::kRuntime);
  }
  SandboxSpec cc;
  cc.argv = {limits.compiler, "-std=c++11", "-O", "-o", "prog", "prog.cpp"};
  cc.cwd = dir.path;
  cc.wall_seconds = limits.compile_seconds;
  cc.cpu_seconds = static_cast<rlim_t>(std::ceil(limits.compile_seconds));
  cc.as_bytes = 4ull << 30;
  cc.fsize_bytes = 256ull << 20;
  SandboxResult cr = run_sandboxed(cc);
  if (cr.timed_out || cr.exit_code != 0) {
    r.reason = cr.timed_out ? fmt::format("compilation timed out after {:.0f} s", limits.compile_seconds)
                            : "compilation error: " + first_line(cr.err);
    return r;
  }
  chmod(dir.path.c_str(), 0711);
  chmod((dir.path + "/prog").c_str(), 0755);
  for (size_t i = 0; i < cases.size(); ++i) {
    SandboxSpec rs;
    rs.argv = {dir.path + "/prog"};
    rs.cwd = dir.path;
    rs.stdin_data = cases[i].first;
    rs.wall_seconds = limits.run_seconds;
    rs.cpu_seconds = static_cast<rlim_t>(std::ceil(limits.run_seconds)) + 1;
    rs.as_bytes = limits.memory_bytes;
    rs.fsize_bytes = limits.file_bytes;
    rs.nproc = limits.max_processes;
    rs.drop_root = true;
    rs.max_stdout = limits.output_bytes;
    SandboxResult rr = run_sandboxed(rs);
    // As LongProc: a timeout fails; otherwise only stdout matters (the exit status does not).
    std::string what;
    if (rr.timed_out) {
      what = fmt::format("time limit: killed after {:.1f} s wall clock", limits.run_seconds);
    } else if (rr.output_overflow) {
      what = fmt::format("output exceeds {} bytes", limits.output_bytes);
    } else if (!valid_utf8(rr.out)) {
      what = "output is not valid UTF-8";
    } else if (rr.out != cases[i].second) {
      bool oom = rr.err.find("bad_alloc") != std::string::npos;
      if (rr.signal && oom) {
        what = fmt::format("memory limit: out of memory under the {} MiB address-space limit ({})",
                           limits.memory_bytes >> 20, strsignal(rr.signal));
      } else if (rr.signal == SIGXCPU) {
        what = "time limit: CPU time limit exceeded (SIGXCPU)";
      } else if (rr.signal == SIGXFSZ) {
        what = "file size limit exceeded (SIGXFSZ)";
      } else if (rr.signal) {
        what = fmt::format("killed by signal {} ({})", rr.signal, strsignal(rr.signal));
      } else {
        what = fmt::format("wrong output: got '{}', expected '{}'{}", py::strip(rr.out).substr(0, 60),
                           py::strip(cases[i].second).substr(0, 60),
                           rr.exit_code ? fmt::format(" (exit code {})", rr.exit_code) : "");
      }
    }
    if (!what.empty()) {
      r.partial = 0.0;
      r.reason = fmt::format("test case {}/{} failed ({} passed before it): {}", i + 1, cases.size(), i, what);
      return r;
    }
  }
  r.accuracy = r.partial = 1.0;
  r.reason = fmt::format("compiled; all {} test cases pass", cases.size());
  return r;
}

}  // namespace kvb::graders
