#include "engine/util/io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <vector>

#include "engine/util/error.h"

namespace kvb {

namespace {
constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;

// The noun of a kind in messages ("over the 16 MiB limit for YAML files").
const char* kind_name(InputKind k) {
  switch (k) {
    case InputKind::kMetadata: return "model and policy metadata";
    case InputKind::kTokenizer: return "tokenizer.json";
    case InputKind::kChatTemplate: return "template";
    case InputKind::kYaml: return "YAML";
    case InputKind::kMessages: return "chat messages";
    case InputKind::kPrompts: return "prompt";
    case InputKind::kDataRecord: return "data record";
    case InputKind::kDataFile: return "data";
    case InputKind::kCheckpoint: return "policy checkpoint";
    case InputKind::kPolicyMetadata: return "policy metadata";
    case InputKind::kSmall: return "small";
    case InputKind::kWeights: return "weight";
  }
  return "input";
}

// "is a directory" / "is a FIFO, not a regular file" for a non-regular st_mode, "" for a regular file.
std::string not_regular(mode_t m) {
  if (S_ISREG(m)) return "";
  if (S_ISDIR(m)) return "is a directory";
  if (S_ISFIFO(m)) return "is a FIFO, not a regular file";
  if (S_ISCHR(m)) return "is a character device, not a regular file";
  if (S_ISBLK(m)) return "is a block device, not a regular file";
  if (S_ISSOCK(m)) return "is a socket, not a regular file";
  if (S_ISLNK(m)) return "is a symbolic link, not a regular file";
  return "is not a regular file";
}

// Reads from `fd` until EOF or `cap` + 1 bytes (EINTR retried). Throws naming `path` on an error.
std::string read_capped(int fd, const std::string& path, uint64_t cap, uint64_t size_hint) {
  std::string out;
  out.reserve(static_cast<size_t>(std::min<uint64_t>(size_hint, cap)) + 1);
  char buf[1 << 16];
  for (;;) {
    const uint64_t room = cap - std::min<uint64_t>(cap, out.size()) + 1;
    const ssize_t n = ::read(fd, buf, static_cast<size_t>(std::min<uint64_t>(sizeof buf, room)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("{}: read error: {}", path, std::strerror(errno));
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > cap) break;
  }
  return out;
}
}  // namespace

uint64_t input_cap(InputKind kind) {
  switch (kind) {
    case InputKind::kMetadata: return 64 * kMiB;
    case InputKind::kTokenizer: return 256 * kMiB;
    case InputKind::kChatTemplate: return 4 * kMiB;
    case InputKind::kYaml: return 16 * kMiB;
    case InputKind::kMessages: return 64 * kMiB;
    case InputKind::kPrompts: return 64 * kMiB;
    case InputKind::kDataRecord: return 256 * kMiB;
    case InputKind::kDataFile: return 4 * kGiB;
    case InputKind::kCheckpoint: return 4 * kGiB;
    case InputKind::kPolicyMetadata: return 64 * kMiB;
    case InputKind::kSmall: return 64 * kKiB;
    case InputKind::kWeights: return std::numeric_limits<uint64_t>::max();
  }
  return 64 * kMiB;
}

std::string cap_text(uint64_t bytes) {
  if (bytes >= kGiB && bytes % kGiB == 0) return std::to_string(bytes / kGiB) + " GiB";
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  if (bytes >= kKiB && bytes % kKiB == 0) return std::to_string(bytes / kKiB) + " KiB";
  return std::to_string(bytes) + " bytes";
}

namespace {
std::mutex& opened_mutex() {
  static std::mutex m;
  return m;
}
std::vector<OpenedInput>& opened_list() {
  static std::vector<OpenedInput> v;
  return v;
}
}  // namespace

std::vector<OpenedInput> opened_inputs() {
  std::lock_guard<std::mutex> g(opened_mutex());
  return opened_list();
}

int open_input(const std::string& path, InputKind kind, uint64_t* size) {
  if (path.empty()) fail("an empty file name");
  if (kind == InputKind::kChatTemplate || kind == InputKind::kDataRecord || kind == InputKind::kCheckpoint ||
      kind == InputKind::kPolicyMetadata || kind == InputKind::kWeights) {
    // Opening is registering: the run's input identity hashes every such file (issue 46).
    std::lock_guard<std::mutex> g(opened_mutex());
    auto& v = opened_list();
    if (std::none_of(v.begin(), v.end(), [&](const OpenedInput& o) { return o.path == path; }))
      v.push_back({path, kind});
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(e));
  }
  if (const std::string why = not_regular(st.st_mode); !why.empty()) {
    ::close(fd);
    fail("{}: {}", path, why);
  }
  const uint64_t n = static_cast<uint64_t>(st.st_size);
  if (n > input_cap(kind)) {
    ::close(fd);
    fail("{}: {} bytes is over the {} limit for {} files (docs/robustness.md)", path, n, cap_text(input_cap(kind)),
         kind_name(kind));
  }
  // Back to blocking reads (O_NONBLOCK only kept open() from waiting on a FIFO).
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) (void)::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  if (size) *size = n;
  return fd;
}

std::string read_file(const std::string& path, InputKind kind) {
  uint64_t size = 0;
  const int fd = open_input(path, kind, &size);
  std::string out;
  try {
    out = read_capped(fd, path, input_cap(kind), size);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (out.size() > input_cap(kind))
    fail("{}: grew past the {} limit for {} files while being read", path, cap_text(input_cap(kind)), kind_name(kind));
  return out;
}

namespace {
struct CappedStream {
  int fd;
  uint64_t left;
  bool* over;
};

ssize_t capped_read(void* cookie, char* buf, size_t n) {
  auto* c = static_cast<CappedStream*>(cookie);
  if (c->left == 0) {
    // At the cap: one more byte means the file is larger than allowed.
    char probe;
    ssize_t r;
    do r = ::read(c->fd, &probe, 1);
    while (r < 0 && errno == EINTR);
    if (r == 0) return 0;
    if (c->over) *c->over = true;
    errno = EFBIG;
    return -1;
  }
  ssize_t r;
  do r = ::read(c->fd, buf, static_cast<size_t>(std::min<uint64_t>(n, c->left)));
  while (r < 0 && errno == EINTR);
  if (r > 0) c->left -= static_cast<uint64_t>(r);
  return r;
}

int capped_close(void* cookie) {
  auto* c = static_cast<CappedStream*>(cookie);
  const int r = ::close(c->fd);
  delete c;
  return r;
}
}  // namespace

std::FILE* open_input_stream(const std::string& path, InputKind kind, bool* over_cap) {
  const int fd = open_input(path, kind, nullptr);
  if (over_cap) *over_cap = false;
  auto* c = new CappedStream{fd, input_cap(kind), over_cap};
  cookie_io_functions_t io{};
  io.read = capped_read;
  io.close = capped_close;
  std::FILE* f = ::fopencookie(c, "r", io);
  if (!f) {
    ::close(fd);
    delete c;
    fail("{}: cannot open: {}", path, std::strerror(errno));
  }
  return f;
}

namespace {
struct TooDeep {};

// Throws TooDeep when an array or object opens inside kMaxJsonDepth others (outside strings).
// A linear pre-scan: nlohmann's callback parser, which checked this before, searches the
// enclosing array for discarded values after every element, so 100,000 messages took seconds
// (quadratic).
void check_depth(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (depth >= kMaxJsonDepth) throw TooDeep{};
      ++depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

template <typename Json>
Json parse_limited(std::string_view text, const std::string& origin) {
  try {
    check_depth(text);
    return Json::parse(text.begin(), text.end());
  } catch (const TooDeep&) {
    fail("{}: JSON nested deeper than {} levels", origin, kMaxJsonDepth);
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: invalid JSON at byte {}: {}", origin, e.byte, e.what());
  } catch (const nlohmann::json::out_of_range& e) {
    // 406: "number overflow parsing '1e999999'"
    std::string what = e.what();
    const size_t q = what.find('\'');
    fail("{}: number out of range: {}", origin,
         q == std::string::npos
             ? what
             : what.substr(q + 1, what.rfind('\'') > q ? what.rfind('\'') - q - 1 : std::string::npos));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", origin, e.what());
  }
}
}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& origin) {
  return parse_limited<nlohmann::json>(text, origin);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& origin) {
  return parse_limited<nlohmann::ordered_json>(text, origin);
}

nlohmann::json parse_json_file(const std::string& path, InputKind kind) {
  return parse_json(read_file(path, kind), path);
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

namespace {
// The canonical spelling of `p` (weakly: a missing last part is kept as written), "" on error.
std::string canonical_or_empty(const std::string& p) {
  std::error_code ec;
  const auto c = std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
  return ec ? std::string() : c.string();
}
}  // namespace

void check_output_not_input(const std::string& out, const std::string& option, const std::vector<std::string>& inputs) {
  const std::string out_canon = canonical_or_empty(out);
  for (const auto& in : inputs) {
    if (in.empty()) continue;
    if (in == out || same_file(in, out) || (!out_canon.empty() && canonical_or_empty(in) == out_canon))
      throw Error(option + " " + out + ": is also an input (" + in + "); name another file", ErrorKind::kInput);
  }
}

void check_replaceable(const std::string& out, const std::string& option) {
  struct stat st {};
  const bool exists = ::lstat(out.c_str(), &st) == 0;
  if (!exists && errno != ENOENT)
    throw Error(option + " " + out + ": cannot use (" + std::strerror(errno) + ")", ErrorKind::kInput);
  if (exists) {
    if (const std::string why = not_regular(st.st_mode); !why.empty())
      throw Error(option + " " + out + ": " + why + "; only a regular file or a new name is replaced", ErrorKind::kInput);
  }
}

void check_output_path(const std::string& out, const std::string& option, const std::vector<std::string>& inputs) {
  if (out.empty()) throw Error(option + ": an empty file name", ErrorKind::kInput);
  check_output_not_input(out, option, inputs);
  check_replaceable(out, option);
  struct stat st {};
  const bool exists = ::lstat(out.c_str(), &st) == 0;
  if (exists) {
    // An existing file inside an input directory (a model folder, a --data-dir): refused.
    std::error_code ec;
    for (const auto& in : inputs) {
      if (in.empty() || !std::filesystem::is_directory(in, ec)) continue;
      for (auto dir = std::filesystem::absolute(out, ec).parent_path(); !dir.empty(); dir = dir.parent_path()) {
        if (same_file(dir.string(), in))
          throw Error(option + " " + out + ": is a file of the input directory " + in + "; name another file",
                      ErrorKind::kInput);
        if (dir == dir.parent_path()) break;
      }
    }
  }
  std::string parent = std::filesystem::path(out).parent_path().string();
  if (parent.empty()) parent = ".";
  struct stat ps {};
  if (::stat(parent.c_str(), &ps) != 0)
    throw Error(option + " " + out + ": folder " + parent + ": " + std::strerror(errno), ErrorKind::kInput);
  if (!S_ISDIR(ps.st_mode)) throw Error(option + " " + out + ": " + parent + " is not a directory", ErrorKind::kInput);
}

void write_output_file(const std::string& path, const std::string& text) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (const std::string why = not_regular(st.st_mode); !why.empty())
      throw Error(path + ": " + why + "; only a regular file or a new name is replaced", ErrorKind::kInput);
  }
  const std::string tmp = path + ".kvbench-tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot open for writing (" + std::strerror(errno) + ")", ErrorKind::kRuntime);
  size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (!err && ::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(tmp.c_str());
    throw Error(path + ": write failed (" + std::strerror(err) + ")", ErrorKind::kRuntime);
  }
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  uint64_t n = 0;
  const int fd = open_input(path, InputKind::kWeights, &n);
  size_ = static_cast<size_t>(n);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      fail("{}: cannot mmap: {}", path, std::strerror(errno));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(o.path_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace kvb
