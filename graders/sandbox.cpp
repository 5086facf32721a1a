// The subprocess sandbox; see graders/sandbox.h.
#include "graders/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "engine/util/error.h"

namespace kvb::graders {

namespace {

void close_from(int lowfd) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, lowfd, ~0U, 0) == 0) return;
#endif
  long maxfd = sysconf(_SC_OPEN_MAX);
  if (maxfd < 0 || maxfd > 65536) maxfd = 65536;
  for (int fd = lowfd; fd < maxfd; ++fd) close(fd);
}

/// What the child needs, prepared before fork() (the child may only make async-signal-safe
/// calls): argv and the environment as C arrays, and the user to drop to. Not movable: envp
/// points into env.
struct ChildSetup {
  explicit ChildSetup(const SandboxSpec& spec) {
    for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    env = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C", "LC_ALL=C", "HOME=" + spec.cwd, "TMPDIR=" + spec.cwd};
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    if (struct passwd* pw = getpwnam("nobody")) {
      uid = pw->pw_uid;
      gid = pw->pw_gid;
    }
    drop = spec.drop_root && geteuid() == 0;
  }
  ChildSetup(const ChildSetup&) = delete;
  ChildSetup& operator=(const ChildSetup&) = delete;

  std::vector<char*> argv;
  std::vector<std::string> env;
  std::vector<char*> envp;
  uid_t uid = 65534;
  gid_t gid = 65534;
  bool drop = false;
};

/// The four pipes between parent and child: stdin, stdout, stderr, and the close-on-exec pipe
/// on which the child reports a failed exec (step, errno).
struct SandboxPipes {
  int in[2], out[2], err[2], exec[2];
};

/// The forked child: own process group, rlimits, cwd, dropped privileges, pipes on 0-2, then
/// either the function (function mode) or execvpe. Never returns; on a failed step it writes
/// (step, errno) to the exec pipe and exits 127.
[[noreturn]] void run_child(const SandboxSpec& spec, const ChildSetup& setup, const SandboxPipes& p) {
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
  if (!spec.cwd.empty() && chdir(spec.cwd.c_str()) != 0) code = 1;
  if (!code && setup.drop && (setgroups(0, nullptr) != 0 || setgid(setup.gid) != 0 || setuid(setup.uid) != 0)) code = 2;
  if (!code && (dup2(p.in[0], 0) < 0 || dup2(p.out[1], 1) < 0 || dup2(p.err[1], 2) < 0)) code = 3;
  if (!code && spec.child) {
    // Function mode: a backstop alarm in case the parent dies, then the function's bytes on
    // stdout. (Not async-signal-safe: the caller accepts that for a single-threaded function.)
    alarm(static_cast<unsigned>(std::ceil(spec.wall_seconds)) + 1);
    const std::string out = spec.child();
    for (size_t off = 0; off < out.size();) {
      ssize_t w = write(1, out.data() + off, out.size() - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    _exit(0);
  }
  if (!code) {
    // Close every inherited fd except 0-2 and the (close-on-exec) error-report pipe.
    int keep = p.exec[1];
    for (int fd = 3; fd < keep; ++fd) close(fd);
    close_from(keep + 1);
    execvpe(setup.argv[0], setup.argv.data(), setup.envp.data());
    code = 5;
  }
  char buf[2] = {static_cast<char>(code), static_cast<char>(errno)};
  ssize_t w = write(p.exec[1], buf, 2);
  (void)w;
  _exit(127);
}

/// The parent's side of the exchange until the deadline, both outputs' end or an output
/// overflow: feeds spec.stdin_data to `in_fd` (non-blocking; EPIPE ends the input) and collects
/// stdout and stderr up to their caps into `res`. Descriptors it finishes with are closed and set
/// to −1; the caller closes the rest.
void exchange_io(const SandboxSpec& spec, std::chrono::steady_clock::time_point deadline, int& in_fd, int& out_fd,
                 int& err_fd, SandboxResult& res) {
  size_t written = 0;
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
        if (w < 0 && errno != EAGAIN && errno != EINTR)
          written = spec.stdin_data.size();  // EPIPE: program closed stdin
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
}

/// Kills the child's whole process group (grandchildren included) and reaps the child; then keeps
/// killing and reaping the group (orphaned grandchildren are reparented to us, the subreaper)
/// until none is left or 5 s have passed, so a forking program leaves nothing behind. Returns
/// the child's wait status.
int kill_and_reap(pid_t pid) {
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
  return status;
}

}  // namespace

SandboxResult run_sandboxed(const SandboxSpec& spec) {
  const bool exec_mode = !spec.child;
  if (exec_mode && spec.argv.empty()) fail("sandbox: neither argv nor a child function given");
  const ChildSetup setup(spec);  // everything the child needs, prepared before fork()

  // Orphans of the sandboxed program are reparented to this process so they can be reaped.
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

  SandboxPipes p;
  if (pipe2(p.in, O_CLOEXEC) || pipe2(p.out, O_CLOEXEC) || pipe2(p.err, O_CLOEXEC) || pipe2(p.exec, O_CLOEXEC))
    throw Error(fmt::format("sandbox: pipe: {}", std::strerror(errno)), ErrorKind::kRuntime);
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid < 0) throw Error(fmt::format("sandbox: fork: {}", std::strerror(errno)), ErrorKind::kRuntime);
  if (pid == 0) run_child(spec, setup, p);
  setpgid(pid, pid);  // also from the parent, so the group exists before we may kill it
  close(p.in[0]);
  close(p.out[1]);
  close(p.err[1]);
  close(p.exec[1]);

  // Writing stdin to a program that exited raises SIGPIPE: block it in this thread while we
  // feed the child and swallow any pending one afterwards (EPIPE is handled as end of input).
  sigset_t pipe_set, old_mask;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask);

  SandboxResult res;
  int in_fd = p.in[1];
  if (spec.stdin_data.empty()) {
    close(in_fd);
    in_fd = -1;
  } else {
    fcntl(in_fd, F_SETFL, fcntl(in_fd, F_GETFL) | O_NONBLOCK);
  }
  int out_fd = p.out[0], err_fd = p.err[0];
  exchange_io(spec,
              t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(spec.wall_seconds)),
              in_fd, out_fd, err_fd, res);
  const int status = kill_and_reap(pid);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int fd : {in_fd, out_fd, err_fd})
    if (fd >= 0) close(fd);
  struct timespec zero = {0, 0};
  while (sigtimedwait(&pipe_set, nullptr, &zero) > 0) {
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  char eb[2];
  ssize_t er = read(p.exec[0], eb, 2);
  close(p.exec[0]);
  if (er == 2)
    throw Error(
        fmt::format("sandbox: could not start '{}' (step {}: {})", spec.argv.at(0), int(eb[0]), std::strerror(eb[1])),
        ErrorKind::kRuntime);
  if (!res.timed_out && !res.output_overflow) {
    if (WIFEXITED(status)) res.exit_code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) res.signal = WTERMSIG(status);
  }
  return res;
}

}  // namespace kvb::graders
