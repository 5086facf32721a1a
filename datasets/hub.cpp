#include "datasets/hub.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/util/error.h"
#include "engine/util/hash.h"
#include "engine/util/io.h"
#include "net/http.h"

namespace kvb::datasets {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool env_true(const char* name) {
  std::string v = env(name);
  std::transform(v.begin(), v.end(), v.begin(), ::tolower);
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

std::string strip(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

bool is_commit(const std::string& rev) {
  return rev.size() == 40 &&
         std::all_of(rev.begin(), rev.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// `v` for an error line: at most 64 bytes, bytes outside printable ASCII (and the quote and
// backslash) as \xNN, the length added when cut.
std::string shown(std::string_view v) {
  std::string out;
  for (size_t i = 0; i < v.size() && i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(v[i]);
    if (c < 0x20 || c >= 0x7f || c == '\'' || c == '\\') out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  if (v.size() > 64) out += fmt::format("... ({} bytes)", v.size());
  return out;
}

bool lower_hex(std::string_view s, size_t n) {
  return s.size() == n &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// "scheme://host[:port]" of a URL.
std::string origin(const std::string& url) {
  size_t s = url.find("://");
  if (s == std::string::npos) return "";
  size_t e = url.find('/', s + 3);
  return url.substr(0, e);
}

// URL prefix and cache-folder plural of each RepoType (kModel, kDataset, kSpace), as huggingface_hub.
const char* type_prefix(RepoType t) { return std::array{"", "datasets/", "spaces/"}[static_cast<size_t>(t)]; }
const char* type_plural(RepoType t) { return std::array{"models", "datasets", "spaces"}[static_cast<size_t>(t)]; }

// Writes `content` to `path` atomically (tmp file + rename).
void write_atomic(const fs::path& path, const std::string& content) {
  fs::create_directories(path.parent_path());
  fs::path tmp = path;
  tmp += ".tmp" + std::to_string(::getpid());
  {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    if (!o) throw Error(fmt::format("{}: cannot write", tmp.string()), ErrorKind::kRuntime);
    o << content;
  }
  fs::rename(tmp, path);
}

// A token file or a cache ref: a regular file of at most 64 KiB (engine/util/io.h).
std::string read_small(const fs::path& p) { return read_file(p.string(), InputKind::kSmall); }

// An exclusive advisory lock on a file, released on destruction.
class FileLock {
 public:
  explicit FileLock(const fs::path& p) {
    fs::create_directories(p.parent_path());
    fd_ = ::open(p.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~FileLock() {
    if (fd_ >= 0) {
      ::flock(fd_, LOCK_UN);
      ::close(fd_);
    }
  }

 private:
  int fd_ = -1;
};

std::string human_status(long s) {
  switch (s) {
    case 401: return "401 Unauthorized";
    case 403: return "403 Forbidden";
    case 404: return "404 Not Found";
    case 416: return "416 Range Not Satisfiable";
    case 429: return "429 Too Many Requests";
    default: return std::to_string(s);
  }
}

// The Hub client's retry rule (as huggingface_hub): any transport failure but a malformed reply
// (the server would send it again), 429 or 5xx.
bool retryable(const net::Response& r) {
  return (!r.transport_ok() && !net::malformed_reply(r)) || r.status == 429 || r.status >= 500;
}

}  // namespace

std::string percent_encode(const std::string& s, const std::string& safe) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        safe.find(static_cast<char>(c)) != std::string::npos) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string hub_file_url(const std::string& endpoint, const HubFile& f) {
  return endpoint + "/" + type_prefix(f.type) + f.repo_id + "/resolve/" + percent_encode(f.revision, "") + "/" +
         percent_encode(f.path, "/");
}

HubConfig HubConfig::from_env() {
  HubConfig c;
  std::string ep = env("HF_ENDPOINT");
  if (!ep.empty()) c.endpoint = ep;
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  std::string home = env("HF_HOME");
  if (home.empty()) {
    std::string xdg = env("XDG_CACHE_HOME");
    home = xdg.empty() ? env("HOME") + "/.cache/huggingface" : xdg + "/huggingface";
  }
  c.cache_dir = env("HF_HUB_CACHE");
  if (c.cache_dir.empty()) c.cache_dir = env("HUGGINGFACE_HUB_CACHE");
  if (c.cache_dir.empty()) c.cache_dir = home + "/hub";
  c.token = env("HF_TOKEN");
  if (c.token.empty()) c.token = env("HUGGING_FACE_HUB_TOKEN");
  if (c.token.empty()) {
    std::string tp = env("HF_TOKEN_PATH");
    if (tp.empty()) tp = home + "/token";
    if (fs::exists(tp)) c.token = strip(read_small(tp));
  }
  c.offline = env_true("HF_HUB_OFFLINE") || env_true("TRANSFORMERS_OFFLINE");
  c.symlinks = !env_true("HF_HUB_DISABLE_SYMLINKS");
  std::string t = env("HF_HUB_ETAG_TIMEOUT");
  if (!t.empty()) c.etag_timeout_s = std::max(1L, std::atol(t.c_str()));
  return c;
}

std::string checked_commit(std::string_view value, const std::string& url, const std::string& header) {
  if (!lower_hex(value, 40))
    throw Error(fmt::format("{}: {}: '{}': not a commit id (40 lowercase hex digits); a broken or hostile "
                            "mirror? nothing was written",
                            url, header, shown(value)),
                ErrorKind::kRuntime);
  return std::string(value);
}

std::string normalize_etag(std::string_view value, const std::string& url, const std::string& header) {
  std::string_view v = value;
  if (v.substr(0, 2) == "W/") v.remove_prefix(2);
  std::string e;
  for (char c : v)
    if (c != '"') e += c;
  if (!lower_hex(e, 40) && !lower_hex(e, 64))
    throw Error(fmt::format("{}: {}: '{}': not a content hash (40 or 64 lowercase hex digits); a broken or "
                            "hostile mirror? nothing was written",
                            url, header, shown(value)),
                ErrorKind::kRuntime);
  return e;
}

namespace {
// A size header: 1 to 18 decimal digits (below 10^18 bytes); throws naming the header otherwise.
uint64_t checked_size(std::string_view value, const std::string& url, const std::string& header) {
  if (value.empty() || value.size() > 18 ||
      !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw Error(fmt::format("{}: {}: '{}': not a byte count", url, header, shown(value)), ErrorKind::kRuntime);
  return std::strtoull(std::string(value).c_str(), nullptr, 10);
}

// The reason a "/"-separated name is refused as a path below the cache, or "".
std::string bad_relative_path(const std::string& v) {
  if (v.empty()) return "is empty";
  if (v.size() > 1024) return "is longer than 1024 bytes";
  if (v[0] == '/') return "is an absolute path";
  for (unsigned char c : v)
    if (c < 0x20 || c == 0x7f || c == '\\') return "holds a control character or a backslash";
  size_t at = 0;
  while (at <= v.size()) {
    size_t e = v.find('/', at);
    if (e == std::string::npos) e = v.size();
    const std::string part = v.substr(at, e - at);
    if (part.empty()) return "has an empty path component";
    if (part == "." || part == "..") return "has a '" + part + "' path component";
    at = e + 1;
  }
  return "";
}
}  // namespace

void check_hub_names(const std::string& repo_id, const std::string& revision, const std::string& path,
                     const std::string& what) {
  const size_t slash = repo_id.find('/');
  auto part_ok = [](const std::string& p) {
    return !p.empty() && p.size() <= 96 && p != "." && p != ".." && std::all_of(p.begin(), p.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
  };
  const bool repo_ok = slash == std::string::npos
                           ? part_ok(repo_id)
                           : repo_id.find('/', slash + 1) == std::string::npos && part_ok(repo_id.substr(0, slash)) &&
                                 part_ok(repo_id.substr(slash + 1));
  if (!repo_ok)
    fail("{}: repository id '{}': expected org/name of letters, digits, '-', '_' and '.'", what, shown(repo_id));
  if (std::string why = bad_relative_path(revision); !why.empty())
    fail("{}: revision '{}' {}", what, shown(revision), why);
  if (std::string why = bad_relative_path(path); !why.empty()) fail("{}: path '{}' {}", what, shown(path), why);
}

FileMetadata parse_file_metadata(long status, const std::map<std::string, std::string>& headers, const std::string& url,
                                 const std::string& location) {
  FileMetadata m;
  m.status = status;
  m.location = location;
  auto hv = [&](const char* k) {
    auto it = headers.find(k);
    return it == headers.end() ? std::string() : it->second;
  };
  const std::string code = hv("x-error-code");
  const std::string code_shown = shown(code);
  if (status == 401 || status == 403) {
    m.input_error = true;
    m.error = fmt::format(
        "{}: {}{}: gated or private repository, or a bad token: set HF_TOKEN (and accept the "
        "repository's terms on the Hub)",
        url, human_status(status), code.empty() ? "" : " " + code_shown);
    return m;
  }
  if (status == 404) {
    m.input_error = true;
    const std::string commit = hv("x-repo-commit");
    if (!commit.empty()) m.commit = checked_commit(commit, url, "X-Repo-Commit");
    m.entry_missing = !m.commit.empty() || code == "EntryNotFound";
    m.error =
        fmt::format("{}: 404 {}", url, code.empty() ? (m.entry_missing ? "EntryNotFound" : "not found") : code_shown);
    return m;
  }
  if (status >= 400) {
    m.error = fmt::format("{}: HTTP {}", url, human_status(status));
    return m;
  }
  const std::string commit = hv("x-repo-commit");
  std::string etag_header = "X-Linked-Etag";
  std::string etag = hv("x-linked-etag");
  if (etag.empty()) {
    etag = hv("etag");
    etag_header = "ETag";
  }
  if (commit.empty() || etag.empty()) {
    m.error = fmt::format("{}: the server sent no X-Repo-Commit or ETag (not a Hub endpoint?)", url);
    return m;
  }
  m.commit = checked_commit(commit, url, "X-Repo-Commit");
  m.etag = normalize_etag(etag, url, etag_header);
  std::string size_header = "X-Linked-Size";
  std::string size = hv("x-linked-size");
  if (size.empty() && location.empty()) {
    size = hv("content-length");
    size_header = "Content-Length";
  }
  m.size = size.empty() ? 0 : checked_size(size, url, size_header);
  m.ok = true;
  return m;
}

HubClient::HubClient(HubConfig cfg) : cfg_(std::move(cfg)) {
  while (!cfg_.endpoint.empty() && cfg_.endpoint.back() == '/') cfg_.endpoint.pop_back();
  log_ = [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
}

HubClient::~HubClient() = default;

std::string HubClient::repo_folder(RepoType type, const std::string& repo_id) const {
  std::string name = std::string(type_plural(type)) + "--" + repo_id;
  size_t p;
  while ((p = name.find('/')) != std::string::npos) name.replace(p, 1, "--");
  return (fs::path(cfg_.cache_dir) / name).string();
}

net::Backoff HubClient::backoff() const {
  net::Backoff b;
  b.max_retries = cfg_.max_retries;
  b.base_s = static_cast<double>(cfg_.retry_base_ms) / 1000.0;
  return b;
}

FileMetadata HubClient::head(const std::string& first_url) {
  std::string location;
  std::string url = first_url;
  net::Response r;
  net::with_retries(
      backoff(),
      [&](int) -> net::Attempt {
        for (int hop = 0; hop < 10; ++hop) {
          net::Request q;
          q.method = "HEAD";
          q.url = url;
          q.timeout_ms = cfg_.etag_timeout_s * 1000;
          q.user_agent = cfg_.user_agent;
          q.headers = {"Accept-Encoding: identity"};
          if (!cfg_.token.empty() && origin(url) == origin(cfg_.endpoint))
            q.headers.push_back("authorization: Bearer " + cfg_.token);
          ++requests_;
          r = net::perform(q);
          if (!r.transport_ok()) break;
          if (r.status >= 300 && r.status < 400 && r.headers.count("location")) {
            const std::string loc = r.header("location");
            if (!loc.empty() && loc[0] == '/') {  // relative: a repo rename; follow it
              url = origin(url) + loc;
              continue;
            }
            location = loc;  // absolute: the CDN; download from there later
          }
          break;
        }
        return {retryable(r), "",
                fmt::format("HEAD {} failed ({})", url, !r.transport_ok() ? r.error : std::to_string(r.status))};
      },
      [&](int n, double delay_s, const std::string& why) {
        log_(fmt::format("hub: {}; retry {} in {} ms", why, n + 1, std::lround(delay_s * 1000)));
      });
  if (!r.transport_ok()) {
    FileMetadata m;
    m.error = fmt::format("{}: network error: {}", url, r.error);
    return m;
  }
  return parse_file_metadata(r.status, r.headers, url, location);
}

uint64_t download_cap(RepoType type, const std::string& path) {
  auto ends = [&](const char* suf) {
    const size_t n = std::strlen(suf);
    return path.size() >= n && path.compare(path.size() - n, n, suf) == 0;
  };
  if (ends(".safetensors") || ends(".gguf") || ends(".bin")) return input_cap(InputKind::kWeights);
  if (ends(".pth") || ends(".pt")) return input_cap(InputKind::kCheckpoint);
  if (type == RepoType::kDataset) return input_cap(InputKind::kDataFile);
  if (ends("tokenizer.json")) return input_cap(InputKind::kTokenizer);
  if (ends(".jinja")) return input_cap(InputKind::kChatTemplate);
  if (ends(".yaml") || ends(".yml")) return input_cap(InputKind::kYaml);
  return input_cap(InputKind::kMetadata);
}

void HubClient::get_to_file(const std::string& url, const std::string& part, uint64_t expected, bool send_auth,
                            uint64_t cap) {
  const std::string shown = url.substr(0, url.find('?'));
  const std::string name = fs::path(shown).filename().string();
  if (expected > cap)  // before any request: a file this large would be refused when read anyway
    throw Error(fmt::format("{}: announced {} bytes, over the {} limit for this kind of file; nothing downloaded",
                            shown, expected, cap_text(cap)),
                ErrorKind::kRuntime);
  net::with_retries(
      backoff(),
      [&](int attempt) -> net::Attempt {
        uint64_t have = fs::exists(part) ? fs::file_size(part) : 0;
        if (expected && have > expected) {
          fs::resize_file(part, 0);
          have = 0;
        }
        if (expected && have == expected) return {};
        std::FILE* f = std::fopen(part.c_str(), "ab");
        if (!f) throw Error(fmt::format("{}: cannot write", part), ErrorKind::kRuntime);
        bool checked = false, to_file = true, restarted = false, too_long = false;
        // Bounds (issue 46, item 4): never more bytes than announced (or than the cap when
        // nothing was announced), and one overall deadline that scales with that size.
        const uint64_t limit = expected ? expected : std::min(cfg_.max_unknown_bytes, cap);
        uint64_t in_file = have;
        net::Request q;
        q.url = url;
        q.follow_redirects = true;
        q.user_agent = cfg_.user_agent;
        q.connect_timeout_ms = 30000;
        q.low_speed_time_s = 60;
        q.timeout_ms =
            1000 * (cfg_.deadline_base_s + static_cast<long>(limit / std::max<uint64_t>(1, cfg_.min_rate_bps)));
        if (send_auth && !cfg_.token.empty()) q.headers.push_back("authorization: Bearer " + cfg_.token);
        if (have > 0) q.headers.push_back("Range: bytes=" + std::to_string(have) + "-");
        q.on_body = [&](long code, std::string_view chunk) {
          if (!checked) {
            checked = true;
            if (code >= 400) {
              to_file = false;  // an error response: its body is not the file
            } else if (code == 200 && have > 0) {
              // A 200 reply to a Range request: the server sends everything; start over.
              std::fflush(f);
              if (::ftruncate(::fileno(f), 0) != 0) return false;
              std::fseek(f, 0, SEEK_SET);
              restarted = true;
              in_file = 0;
            }
          }
          if (!to_file) return true;
          if (chunk.size() > limit - in_file) {  // one byte past the announced size: stop, write none of it
            too_long = true;
            return false;
          }
          in_file += chunk.size();
          return std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size();
        };
        auto last = std::chrono::steady_clock::time_point{};
        if (cfg_.progress)
          q.on_progress = [&](int64_t total, int64_t now) {
            if (total < (16 << 20)) return;
            const auto t = std::chrono::steady_clock::now();
            if (t - last < std::chrono::milliseconds(500) && now < total) return;
            last = t;
            const double base = static_cast<double>(restarted ? 0 : have);
            log_(fmt::format("hub: {}: {:.1f}/{:.1f} MiB ({:.0f}%)", name, (base + now) / 1048576.0,
                             (base + total) / 1048576.0, 100.0 * (base + now) / std::max(1.0, base + total)));
          };
        ++requests_;
        const net::Response r = net::perform(q);
        std::fclose(f);
        if (too_long) {
          fs::remove(part);
          throw Error(expected ? fmt::format("{}: the server sent more than the announced {} bytes; nothing kept",
                                             shown, expected)
                               : fmt::format("{}: larger than the {} limit for a download of unannounced size; "
                                             "nothing kept",
                                             shown, cap_text(limit)),
                      ErrorKind::kRuntime);
        }
        const long status = r.status;
        if (status == 416) {  // our partial file does not fit the remote file: start over
          fs::resize_file(part, 0);
          if (attempt < cfg_.max_retries) return {true, "", fmt::format("GET {}: 416, starting over", shown)};
        }
        bool retry = retryable(r);
        if (!retry && status >= 400) {
          if (status == 401 || status == 403)
            throw Error(fmt::format("{}: {}: gated or private repository: set HF_TOKEN", shown, human_status(status)));
          throw Error(fmt::format("{}: HTTP {}", shown, human_status(status)),
                      status == 404 ? ErrorKind::kInput : ErrorKind::kRuntime);
        }
        const uint64_t now = fs::file_size(part);
        if (!retry && expected && now != expected) retry = true;
        if (!retry) return {};
        const std::string cause = !r.transport_ok() ? r.error : "HTTP " + std::to_string(status);
        if (attempt >= cfg_.max_retries)
          throw Error(fmt::format("{}: download failed after {} attempts ({}; {} of {} bytes)", shown, attempt + 1,
                                  cause, now, expected),
                      ErrorKind::kRuntime);
        return {true, "", fmt::format("GET {} interrupted at {} bytes ({})", shown, now, cause)};
      },
      [&](int, double delay_s, const std::string& why) {
        log_(fmt::format("hub: {}; resuming in {} ms", why, std::lround(delay_s * 1000)));
      });
}

std::string HubClient::cached_path(const HubFile& f, const std::string& folder, std::string* commit_out) const {
  std::string commit = f.revision;
  if (!is_commit(commit)) {
    fs::path ref = fs::path(folder) / "refs" / f.revision;
    if (!fs::exists(ref)) return "";
    commit = strip(read_small(ref));
    if (!is_commit(commit)) return "";  // a damaged ref: not a usable cached copy
  }
  if (commit_out) *commit_out = commit;
  fs::path p = fs::path(folder) / "snapshots" / commit / f.path;
  return fs::exists(p) ? p.string() : "";
}

std::string HubClient::download(const HubFile& f) {
  try {
    return download_impl(f);
  } catch (const fs::filesystem_error& e) {
    throw Error(fmt::format("{}: cache {}: {}", f.repo_id, cfg_.cache_dir, e.what()), ErrorKind::kRuntime);
  }
}

std::string HubClient::download_impl(const HubFile& f) {
  check_hub_names(f.repo_id, f.revision, f.path, std::string(type_prefix(f.type)) + shown(f.repo_id));
  if (f.repo_id.find('/') == std::string::npos && f.type != RepoType::kModel)
    fail("{}: expected a repository id of the form org/name", f.repo_id);
  std::string folder = repo_folder(f.type, f.repo_id);
  std::string url = hub_file_url(cfg_.endpoint, f);
  std::string what = fmt::format("{}{}@{}:{}", type_prefix(f.type), f.repo_id, f.revision, f.path);
  if (is_commit(f.revision)) {
    fs::path p = fs::path(folder) / "snapshots" / f.revision / f.path;
    if (fs::exists(p)) return p.string();
  }
  if (cfg_.offline) {
    std::string p = cached_path(f, folder, nullptr);
    if (!p.empty()) return p;
    fail("{}: not in the cache {} and HF_HUB_OFFLINE is set (download it once online)", what, cfg_.cache_dir);
  }
  FileMetadata m = head(url);
  if (!m.ok) {
    if (m.entry_missing) {
      if (!m.commit.empty()) {
        fs::path ne = fs::path(folder) / ".no_exist" / m.commit / f.path;
        fs::create_directories(ne.parent_path());
        std::ofstream(ne).close();
      }
      fail("{}: {}", what, m.error);
    }
    if (m.status != 404) {  // 401/403/5xx/network: fall back to the cache as huggingface_hub does
      std::string p = cached_path(f, folder, nullptr);
      if (!p.empty()) {
        log_(fmt::format("hub: {}; using the cached copy", m.error));
        return p;
      }
    }
    throw Error(fmt::format("{}: {}", what, m.error), m.input_error ? ErrorKind::kInput : ErrorKind::kRuntime);
  }
  fs::create_directories(cfg_.cache_dir);
  fs::path tag = fs::path(cfg_.cache_dir) / "CACHEDIR.TAG";
  if (!fs::exists(tag))
    write_atomic(tag,
                 "Signature: 8a477f597d28d172789f06886806bc55\n"
                 "# This file is a cache directory tag created by huggingface_hub.\n"
                 "# For information about cache directory tags, see:\n"
                 "#\thttps://bford.info/cachedir/\n");
  if (f.revision != m.commit) write_atomic(fs::path(folder) / "refs" / f.revision, m.commit);
  fs::path snap = fs::path(folder) / "snapshots" / m.commit / f.path;
  if (fs::exists(snap)) return snap.string();
  fs::path blob = fs::path(folder) / "blobs" / m.etag;
  if (!fs::exists(blob)) {
    FileLock lock(fs::path(cfg_.cache_dir) / ".locks" / fs::path(folder).filename() / (m.etag + ".lock"));
    if (!fs::exists(blob)) {
      fs::create_directories(blob.parent_path());
      std::string part = blob.string() + ".incomplete";
      std::string dl = m.location.empty() ? url : m.location;
      get_to_file(dl, part, m.size, origin(dl) == origin(cfg_.endpoint), download_cap(f.type, f.path));
      const std::string got = m.etag.size() == 64 ? sha256_file(part) : git_blob_sha1_file(part);
      if (got != m.etag) {
        fs::remove(part);
        throw Error(fmt::format("{}: content hash {} does not match the ETag {}", what, got, m.etag),
                    ErrorKind::kRuntime);
      }
      fs::rename(part, blob);
    }
  }
  fs::create_directories(snap.parent_path());
  if (fs::is_symlink(snap)) fs::remove(snap);  // a dangling link left by an interrupted run
  if (cfg_.symlinks) {
    fs::path rel = fs::relative(blob, snap.parent_path());
    std::error_code ec;
    fs::create_symlink(rel, snap, ec);
    if (ec && !fs::exists(snap)) fs::copy_file(blob, snap);
  } else {
    fs::copy_file(blob, snap, fs::copy_options::overwrite_existing);
  }
  return snap.string();
}

void HubClient::download_url(const std::string& url, const std::string& dest, const std::string& sha256, uint64_t size) {
  if (cfg_.offline) fail("{}: cannot download {}: HF_HUB_OFFLINE is set", dest, url);
  fs::path d(dest);
  if (d.has_parent_path()) fs::create_directories(d.parent_path());
  std::string part = dest + ".incomplete";
  get_to_file(url, part, size, false, input_cap(InputKind::kDataFile));
  if (!sha256.empty()) {
    std::string got = sha256_file(part);
    if (got != sha256) {
      fs::remove(part);
      throw Error(fmt::format("{}: sha256 {} does not match the expected {}", url, got, sha256), ErrorKind::kRuntime);
    }
  }
  fs::rename(part, d);
}

std::string HubClient::api_get(const std::string& url) {
  net::Request q;
  q.url = url;
  q.follow_redirects = true;
  q.timeout_ms = 60000;
  q.user_agent = cfg_.user_agent;
  if (!cfg_.token.empty()) q.headers.push_back("authorization: Bearer " + cfg_.token);
  net::Response r;
  net::with_retries(backoff(), [&](int) -> net::Attempt {
    ++requests_;
    r = net::perform(q);
    return {retryable(r), "", ""};
  });
  if (!r.transport_ok()) throw Error(fmt::format("{}: network error: {}", url, r.error), ErrorKind::kRuntime);
  if (r.status == 401 || r.status == 403)
    fail("{}: {}: gated or private repository: set HF_TOKEN", url, human_status(r.status));
  if (r.status >= 400)
    throw Error(fmt::format("{}: HTTP {}", url, human_status(r.status)),
                r.status == 404 ? ErrorKind::kInput : ErrorKind::kRuntime);
  return r.body;
}

std::string HubClient::resolve_model(const std::string& spec) {
  if (fs::is_directory(spec)) return spec;
  std::string repo = spec, rev = "main";
  size_t at = spec.find('@');
  if (at != std::string::npos) {
    repo = spec.substr(0, at);
    rev = spec.substr(at + 1);
  }
  if (repo.empty() || rev.empty()) fail("--model '{}': expected org/name[@revision] or a local directory", spec);
  check_hub_names(repo, rev, "config.json", "--model " + shown(spec));
  std::string folder = repo_folder(RepoType::kModel, repo);
  // The cached snapshot of `rev` ("" when refs/<rev> is absent); a damaged ref is an error.
  auto cached_snapshot = [&]() -> std::string {
    std::string commit = rev;
    if (!is_commit(rev)) {
      fs::path ref = fs::path(folder) / "refs" / rev;
      if (!fs::exists(ref)) return "";
      commit = strip(read_small(ref));
      if (!is_commit(commit)) fail("--model {}: {}: not a commit id; delete the damaged ref", spec, ref.string());
    }
    return (fs::path(folder) / "snapshots" / commit).string();
  };
  if (cfg_.offline) {
    const std::string snap = cached_snapshot();
    if (snap.empty()) fail("--model {}: not in the cache {} and HF_HUB_OFFLINE is set", spec, cfg_.cache_dir);
    if (!fs::exists(fs::path(snap) / "config.json"))
      fail("--model {}: cached snapshot {} has no config.json", spec, snap);
    return snap;
  }
  // A commit id whose snapshot already holds the config and every weight file the loader reads
  // is used without a request, as huggingface_hub serves a commit hash from its cache.
  if (is_commit(rev)) {
    const fs::path snap = fs::path(folder) / "snapshots" / rev;
    bool complete = fs::exists(snap / "config.json");
    if (complete && fs::exists(snap / "model.safetensors.index.json")) {
      try {
        const nlohmann::json idx = parse_json_file((snap / "model.safetensors.index.json").string());
        for (const auto& [k, v] : idx.at("weight_map").items())
          complete = complete && v.is_string() && fs::exists(snap / v.get<std::string>());
      } catch (const std::exception&) {
        complete = false;  // a bad index: fetched again below, and refused there if still bad
      }
    } else {
      complete = complete && fs::exists(snap / "model.safetensors");
    }
    if (complete) return snap.string();
  }
  std::string body;
  try {
    body = api_get(cfg_.endpoint + "/api/models/" + repo + "/revision/" + percent_encode(rev, ""));
  } catch (const Error& e) {
    // The Hub unreachable (network, 5xx, 401): a cached snapshot is used, as transformers does;
    // a repository or revision the Hub says does not exist (404) is not.
    if (e.kind() == ErrorKind::kInput) fail("--model {}: {}", spec, e.what());
    const std::string snap = cached_snapshot();
    if (snap.empty() || !fs::exists(fs::path(snap) / "config.json"))
      throw Error(fmt::format("--model {}: {}", spec, e.what()), ErrorKind::kRuntime);
    log_(fmt::format("hub: {}; using the cached snapshot {}", e.what(), snap));
    return snap;
  }
  nlohmann::json info;
  try {
    info = parse_json(body, repo + ": model info");
  } catch (const Error& e) {
    throw Error(e.what(), ErrorKind::kRuntime);
  }
  if (!info.contains("sha") || !info["sha"].is_string() || !info.contains("siblings") || !info["siblings"].is_array())
    throw Error(fmt::format("{}: model info lacks sha/siblings", repo), ErrorKind::kRuntime);
  const std::string commit = checked_commit(info["sha"].get<std::string>(), cfg_.endpoint + "/api/models/" + repo, "sha");
  std::set<std::string> names;
  for (const auto& s : info["siblings"])
    if (s.is_object() && s.contains("rfilename") && s["rfilename"].is_string())
      names.insert(s["rfilename"].get<std::string>());
  if (!names.count("config.json")) {
    // A GGUF repository (e.g. Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF): name how to take one file.
    std::string gguf;
    for (const auto& n : names)
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".gguf") == 0 && n.find('/') == std::string::npos) {
        gguf = n;
        break;
      }
    if (!gguf.empty())
      fail("--model {}: the repository has no config.json but GGUF files; take one with --model {}:{}", spec, spec, gguf);
    fail("--model {}: the repository has no config.json", spec);
  }
  // What the engine reads, nothing else (README, other formats, a consolidated.safetensors
  // beside the shards): config, generation config, tokenizer, chat templates, then the weights
  // as WeightStore::from_safetensors_dir reads them: the shard index and the shards it names
  // when there is an index, else model.safetensors.
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                        "chat_template.jinja", "chat_template.json"})
    if (names.count(f)) download({RepoType::kModel, repo, commit, f});
  if (names.count("model.safetensors.index.json")) {
    const std::string index = download({RepoType::kModel, repo, commit, "model.safetensors.index.json"});
    const nlohmann::json idx = parse_json_file(index);
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      fail_at(index, "weight_map", "expected an object mapping tensor names to shard files");
    std::set<std::string> shards;
    for (const auto& [k, v] : idx["weight_map"].items()) {
      if (!v.is_string()) fail_at(index, "weight_map." + k, "expected a shard file name");
      shards.insert(v.get<std::string>());
    }
    for (const auto& sh : shards) download({RepoType::kModel, repo, commit, sh});
  } else if (names.count("model.safetensors")) {
    download({RepoType::kModel, repo, commit, "model.safetensors"});
  } else {
    fail(
        "--model {}: the repository has neither model.safetensors nor model.safetensors.index.json (for one "
        "GGUF file of it: --model {}:FILE.gguf)",
        spec, repo);
  }
  if (rev != commit) write_atomic(fs::path(folder) / "refs" / rev, commit);
  return (fs::path(folder) / "snapshots" / commit).string();
}

}  // namespace kvb::datasets
