// kvbench — the command-line entry point. Dispatches to the sub-commands of harness/cmd_*.cpp.
#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/util/error.h"
#include "harness/build_info.h"
#include "harness/commands.h"

namespace {

/// How OpenMP's idle workers wait between parallel regions. A decode step runs a few hundred short
/// regions; with libgomp's default (spin about 300k iterations, then sleep) a worker is awake
/// when the next region starts, with OMP_WAIT_POLICY=PASSIVE it sleeps at once and every region
/// pays a futex wake-up. Measured on the 2-core machine (SmolLM2-135M Q4_1, context 512):
///   idle machine:  batch 1 decode 105-115 tok/s spinning vs 51 tok/s passive (batch 8: 140-155
///                  vs 112 tok/s); llama.cpp's own threads spin too (108 tok/s).
///   loaded (ctest -j2, or load average ~10): spinning workers take the cores other processes
///                  need; one step took 510 ms spinning vs 47 ms passive.
/// So the choice is made at start-up from what else is running: when the other runnable threads
/// (other_runnable_threads: the least of five samples, so a kernel thread's blip is not a
/// competitor while another busy process is there in every sample) plus this
/// process's threads exceed the online CPUs, kvbench re-executes itself once with
/// OMP_WAIT_POLICY=PASSIVE (libgomp reads it when it loads, before main(), and glibc resets
/// `environ` after .preinit_array, so an exec is the only way); otherwise libgomp's default stands.
/// (The load average is not used: it lags by a minute, so a benchmark started right after another
/// tool would wrongly see a busy machine.) A user's OMP_WAIT_POLICY always stands (set it to
/// ACTIVE or PASSIVE to pin the behaviour; the choice changes speed only, never a result). If
/// /proc/stat cannot be read or the exec fails, it runs on with libgomp's default.
/// Threads of this process in state R (/proc/self/task/*/stat): OpenBLAS starts its own pool
/// when it loads, and those threads are briefly runnable at start-up.
int own_runnable_threads() {
  DIR* d = opendir("/proc/self/task");
  if (!d) return 0;
  int n = 0;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char path[64], buf[512];
    std::snprintf(path, sizeof path, "/proc/self/task/%.20s/stat", e->d_name);
    FILE* f = std::fopen(path, "r");
    if (!f) continue;
    const size_t len = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[len] = '\0';
    const char* rp = std::strrchr(buf, ')');  // "tid (comm) S ...": the state follows the name
    if (rp && rp[1] == ' ' && rp[2] == 'R') ++n;
  }
  closedir(d);
  return n;
}

/// Runnable threads of other processes: the least of five samples 1 ms apart of /proc/stat's
/// procs_running less this process's own runnable threads; -1 when /proc/stat is unreadable.
int other_runnable_threads() {
  int least = -1;
  for (int i = 0; i < 5; ++i) {
    if (i > 0) usleep(1000);
    FILE* f = std::fopen("/proc/stat", "r");
    if (!f) return -1;
    char line[256];
    int running = -1;
    while (std::fgets(line, sizeof line, f))
      if (std::strncmp(line, "procs_running ", 14) == 0) running = std::atoi(line + 14);
    std::fclose(f);
    if (running < 0) return -1;
    const int others = std::max(0, running - own_runnable_threads());
    least = least < 0 ? others : std::min(least, others);
  }
  return least;
}

void choose_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  long threads = cpus;
  if (const char* t = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    const long v = std::strtol(t, &end, 10);
    if (end != t && v > 0) threads = v;
  }
  const int others = other_runnable_threads();
  if (cpus <= 0 || others < 0 || others + threads <= cpus) return;  // idle CPUs: let the workers spin
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);  // the binary's own path
  if (n <= 0) return;
  self[n] = '\0';
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  execv(self, argv);
}

/// `msg` on one line: CR, LF and the other ASCII control characters but tab written as \n, \r,
/// \xNN (a template's raise_exception('a\nb'), a server's reply quoted in an error), so that
/// every error is exactly one line.
std::string one_line(const char* msg) {
  std::string out;
  for (const char* p = msg; *p; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if ((c < 0x20 && c != '\t') || c == 0x7F) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  // Past a file-size limit (ulimit -f) the kernel's default for SIGXFSZ kills the process with no
  // message; ignored, the write fails with EFBIG and is reported like a full disk.
  std::signal(SIGXFSZ, SIG_IGN);
  choose_openmp_wait(argv);
  CLI::App app{"kvbench: how KV-cache policies trade accuracy for memory and speed"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(KVB_VERSION) + " (" + kvb::kGitSha + ")");
  kvb::cli::register_all_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and exit 0 through CLI11, and a command's own
    // CLI::RuntimeError(code) (compare's exit 1 on a regression) keeps its code; every usage error
    // is one line in kvbench's format with exit 2, like any other bad input.
    if (e.get_exit_code() == 0 || e.get_name() == "RuntimeError") return app.exit(e);
    std::fprintf(stderr, "kvbench: error: %s\n", one_line(e.what()).c_str());
    return 2;
  } catch (const kvb::Error& e) {
    std::fprintf(stderr, "kvbench: error: %s\n", one_line(e.what()).c_str());
    return e.exit_code();
  } catch (const std::filesystem::filesystem_error& e) {
    // A path met by a std::filesystem call outside the loaders' checks (a symlink loop, a
    // permission): one line naming it, never "internal error". Input-like errors exit 2.
    const int ev = e.code().value();
    const bool input = ev == ELOOP || ev == ENOENT || ev == ENOTDIR || ev == ENAMETOOLONG || ev == EACCES ||
                       ev == EISDIR || ev == EEXIST;
    std::fprintf(stderr, "kvbench: error: %s: %s\n", e.path1().empty() ? "file system" : e.path1().c_str(),
                 e.code().message().c_str());
    return input ? 2 : 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "kvbench: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvbench: internal error: %s\n", one_line(e.what()).c_str());
    return 1;
  }
  return 0;
}
