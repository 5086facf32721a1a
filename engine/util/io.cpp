#include "engine/util/io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "engine/util/error.h"

namespace kvb {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail("{}: read error", path);
  return ss.str();
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

nlohmann::json parse_json_file(const std::string& path) { return parse_json(read_file(path), path); }

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void check_output_not_input(const std::string& out, const std::string& option, const std::vector<std::string>& inputs) {
  for (const auto& in : inputs) {
    if (in.empty()) continue;
    if (in == out || same_file(in, out))
      throw Error(option + " " + out + ": is also an input (" + in + "); name another file", ErrorKind::kInput);
  }
}

void write_output_file(const std::string& path, const std::string& text) {
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
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(errno));
  }
  size_ = static_cast<size_t>(st.st_size);
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
