// LongProc pseudo_to_code: extract the C++ program, compile it with g++ and run the unit tests
// in a sandboxed child process. See graders/longproc.h (longproc_pseudo_to_code).
//
// Sandbox (POSIX): every child is fork()ed from prepared argv/env (nothing allocated after the
// fork), put in its own process group, given rlimits (RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE,
// RLIMIT_NPROC, RLIMIT_CORE = 0), fds 0/1/2 from pipes and every other fd closed, cwd = a fresh
// mkdtemp() directory, a minimal environment; when running as root the program (not g++)
// drops to the 'nobody' user so RLIMIT_NPROC applies. The parent feeds stdin and drains
// stdout/stderr with poll() and SIGKILLs the whole group at the wall-clock limit. The calling
// process makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER) so the orphans of a
// forking program come back to it and are killed and reaped before the grade returns.
#include <fcntl.h>
#include <poll.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
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

namespace kvb::graders {

namespace {

// LongProc spoc_evaluator _IMPORT_HEADER (the headers the prompt lists), then the model's code.
const char* kHeader =
    "#include <cstdio>\n#include <iostream>\n#include <vector>\n#include <algorithm>\n#include <numeric>\n"
    "#include <cmath>\n#include <cstring>\n#include <set>\n#include <map>\n#include <queue>\n#include <stack>\n"
    "#include <list>\n#include <fstream>\n#include <climits>\n#include <cassert>\n#include <iomanip>\n"
    "#include <sstream>\n#include <bitset>\nusing namespace std;\n";

struct RunSpec {
  std::vector<std::string> argv;
  std::string cwd;
  std::string stdin_data;
  double wall_seconds = 3;
  rlim_t cpu_seconds = 4;
  rlim_t as_bytes = RLIM_INFINITY;
  rlim_t fsize_bytes = RLIM_INFINITY;
  rlim_t nproc = RLIM_INFINITY;
  bool drop_root = false;
  size_t max_stdout = 16u << 20;
  size_t max_stderr = 64u << 10;
};

struct RunResult {
  bool timed_out = false;
  bool output_overflow = false;
  int exit_code = -1;  // when exited normally
  int signal = 0;      // when killed by a signal
  std::string out, err;
  double seconds = 0;
};

void close_from(int lowfd) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, lowfd, ~0U, 0) == 0) return;
#endif
  long maxfd = sysconf(_SC_OPEN_MAX);
  if (maxfd < 0 || maxfd > 65536) maxfd = 65536;
  for (int fd = lowfd; fd < maxfd; ++fd) close(fd);
}

// Runs spec.argv[0] (absolute or found via PATH of the minimal env) under the sandbox.
RunResult run_sandboxed(const RunSpec& spec) {
  // Everything the child needs, prepared before fork().
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_s = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C", "LC_ALL=C", "HOME=" + spec.cwd,
                                    "TMPDIR=" + spec.cwd};
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  uid_t uid = 65534;
  gid_t gid = 65534;
  if (struct passwd* pw = getpwnam("nobody")) {
    uid = pw->pw_uid;
    gid = pw->pw_gid;
  }
  bool drop = spec.drop_root && geteuid() == 0;

  // Orphans of the sandboxed program are reparented to this process so they can be reaped.
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

  int in_p[2], out_p[2], err_p[2], exec_p[2];
  if (pipe2(in_p, O_CLOEXEC) || pipe2(out_p, O_CLOEXEC) || pipe2(err_p, O_CLOEXEC) || pipe2(exec_p, O_CLOEXEC))
    throw Error(fmt::format("pseudo_to_code sandbox: pipe: {}", std::strerror(errno)), ErrorKind::kRuntime);
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid < 0) throw Error(fmt::format("pseudo_to_code sandbox: fork: {}", std::strerror(errno)), ErrorKind::kRuntime);
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    setpgid(0, 0);
    auto lim = [](int res, rlim_t v) {
      struct rlimit rl = {v, v};
      setrlimit(res, &rl);
    };
    lim(RLIMIT_CPU, spec.cpu_seconds);
    if (spec.as_bytes != RLIM_INFINITY) lim(RLIMIT_AS, spec.as_bytes);
    if (spec.fsize_bytes != RLIM_INFINITY) lim(RLIMIT_FSIZE, spec.fsize_bytes);
    if (spec.nproc != RLIM_INFINITY) lim(RLIMIT_NPROC, spec.nproc);
    lim(RLIMIT_CORE, 0);
    int code = 0;
    if (chdir(spec.cwd.c_str()) != 0) code = 1;
    if (!code && drop && (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0)) code = 2;
    if (!code && (dup2(in_p[0], 0) < 0 || dup2(out_p[1], 1) < 0 || dup2(err_p[1], 2) < 0)) code = 3;
    if (!code) {
      // Close every inherited fd except 0-2 and the (close-on-exec) error-report pipe.
      int keep = exec_p[1];
      for (int fd = 3; fd < keep; ++fd) close(fd);
      close_from(keep + 1);
      execvpe(argv[0], argv.data(), envp.data());
      code = 5;
    }
    char buf[2] = {static_cast<char>(code), static_cast<char>(errno)};
    ssize_t w = write(exec_p[1], buf, 2);
    (void)w;
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent, so the group exists before we may kill it
  close(in_p[0]);
  close(out_p[1]);
  close(err_p[1]);
  close(exec_p[1]);

  // Writing stdin to a program that exited raises SIGPIPE: block it in this thread while we
  // feed the child and swallow any pending one afterwards (EPIPE is handled as end of input).
  sigset_t pipe_set, old_mask;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask);

  RunResult res;
  size_t written = 0;
  int in_fd = in_p[1];
  if (spec.stdin_data.empty()) {
    close(in_fd);
    in_fd = -1;
  } else {
    fcntl(in_fd, F_SETFL, fcntl(in_fd, F_GETFL) | O_NONBLOCK);
  }
  int out_fd = out_p[0], err_fd = err_p[0];
  auto deadline = t0 + std::chrono::duration<double>(spec.wall_seconds);
  char buf[65536];
  while (out_fd >= 0 || err_fd >= 0) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      res.timed_out = true;
      break;
    }
    int ms = static_cast<int>(std::ceil(std::chrono::duration<double, std::milli>(deadline - now).count()));
    struct pollfd fds[3];
    int n = 0;
    if (out_fd >= 0) fds[n++] = {out_fd, POLLIN, 0};
    if (err_fd >= 0) fds[n++] = {err_fd, POLLIN, 0};
    if (in_fd >= 0) fds[n++] = {in_fd, POLLOUT, 0};
    int pr = poll(fds, static_cast<nfds_t>(n), ms);
    if (pr < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < n; ++i) {
      if (!fds[i].revents) continue;
      int fd = fds[i].fd;
      if (fd == in_fd) {
        ssize_t w = write(in_fd, spec.stdin_data.data() + written, spec.stdin_data.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN && errno != EINTR) written = spec.stdin_data.size();  // EPIPE: program closed stdin
        if (written >= spec.stdin_data.size()) {
          close(in_fd);
          in_fd = -1;
        }
        continue;
      }
      ssize_t rd = read(fd, buf, sizeof buf);
      if (rd <= 0) {
        if (rd < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        close(fd);
        (fd == out_fd ? out_fd : err_fd) = -1;
        continue;
      }
      std::string& dst = fd == out_fd ? res.out : res.err;
      size_t cap = fd == out_fd ? spec.max_stdout : spec.max_stderr;
      if (dst.size() < cap) dst.append(buf, std::min(static_cast<size_t>(rd), cap - dst.size()));
      if (fd == out_fd && res.out.size() >= spec.max_stdout) res.output_overflow = true;
    }
    if (res.output_overflow) break;
  }
  // Kill the whole group (grandchildren included) and reap the child; then keep killing and
  // reaping the group (orphaned grandchildren are reparented to us, the subreaper) until none
  // is left, so a forking program leaves nothing behind.
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  auto reap_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < reap_deadline) {
    kill(-pid, SIGKILL);
    int st = 0;
    pid_t w = waitpid(-pid, &st, WNOHANG);
    if (w < 0 && errno != EINTR) break;  // ECHILD: no process of the group is left
    if (w == 0) usleep(1000);
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int fd : {in_fd, out_fd, err_fd})
    if (fd >= 0) close(fd);
  struct timespec zero = {0, 0};
  while (sigtimedwait(&pipe_set, nullptr, &zero) > 0) {
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  char eb[2];
  ssize_t er = read(exec_p[0], eb, 2);
  close(exec_p[0]);
  if (er == 2)
    throw Error(fmt::format("pseudo_to_code sandbox: could not start '{}' (step {}: {})", spec.argv[0], int(eb[0]),
                            std::strerror(eb[1])),
                ErrorKind::kRuntime);
  if (!res.timed_out && !res.output_overflow) {
    if (WIFEXITED(status)) res.exit_code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) res.signal = WTERMSIG(status);
  }
  return res;
}

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
      throw Error(fmt::format("pseudo_to_code sandbox: mkdtemp({}): {}", tmpl, std::strerror(errno)), ErrorKind::kRuntime);
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
  RunSpec cc;
  cc.argv = {limits.compiler, "-std=c++11", "-O", "-o", "prog", "prog.cpp"};
  cc.cwd = dir.path;
  cc.wall_seconds = limits.compile_seconds;
  cc.cpu_seconds = static_cast<rlim_t>(std::ceil(limits.compile_seconds));
  cc.as_bytes = 4ull << 30;
  cc.fsize_bytes = 256ull << 20;
  RunResult cr = run_sandboxed(cc);
  if (cr.timed_out || cr.exit_code != 0) {
    r.reason = cr.timed_out ? fmt::format("compilation timed out after {:.0f} s", limits.compile_seconds)
                            : "compilation error: " + first_line(cr.err);
    return r;
  }
  chmod(dir.path.c_str(), 0711);
  chmod((dir.path + "/prog").c_str(), 0755);
  for (size_t i = 0; i < cases.size(); ++i) {
    RunSpec rs;
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
    RunResult rr = run_sandboxed(rs);
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
