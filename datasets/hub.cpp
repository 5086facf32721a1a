#include "datasets/hub.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "datasets/hash.h"
#include "engine/util/error.h"
#include "engine/util/io.h"

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
  return rev.size() == 40 && std::all_of(rev.begin(), rev.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) && !std::isupper(static_cast<unsigned char>(c)); });
}

bool is_hex(const std::string& s, size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

// "scheme://host[:port]" of a URL.
std::string origin(const std::string& url) {
  size_t s = url.find("://");
  if (s == std::string::npos) return "";
  size_t e = url.find('/', s + 3);
  return url.substr(0, e);
}

const char* type_prefix(RepoType t) {
  switch (t) {
    case RepoType::kModel: return "";
    case RepoType::kDataset: return "datasets/";
    case RepoType::kSpace: return "spaces/";
  }
  return "";
}

const char* type_plural(RepoType t) {
  switch (t) {
    case RepoType::kModel: return "models";
    case RepoType::kDataset: return "datasets";
    case RepoType::kSpace: return "spaces";
  }
  return "";
}

void ensure_curl_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

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

std::string read_small(const fs::path& p) {
  std::ifstream i(p, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(i)), std::istreambuf_iterator<char>());
  return s;
}

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

struct Response {
  long status = 0;
  CURLcode curl = CURLE_OK;
  std::string curl_error;
  std::map<std::string, std::string> headers;  // lower-case names, last response only
  std::string body;                            // GET bodies that are not written to a file
};

size_t header_cb(char* buf, size_t size, size_t n, void* ud) {
  auto* r = static_cast<Response*>(ud);
  std::string line(buf, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    r->headers.clear();  // a new response (after a redirect or 100-continue)
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string k = line.substr(0, colon);
    std::transform(k.begin(), k.end(), k.begin(), ::tolower);
    r->headers[k] = strip(line.substr(colon + 1));
  }
  return size * n;
}

size_t body_cb(char* buf, size_t size, size_t n, void* ud) {
  static_cast<Response*>(ud)->body.append(buf, size * n);
  return size * n;
}

struct Curl {
  CURL* h;
  curl_slist* hdrs = nullptr;
  Curl() : h(curl_easy_init()) {}
  ~Curl() {
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
  }
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

bool retryable_status(long s) { return s == 429 || s >= 500; }

}  // namespace

std::string percent_encode(const std::string& s, const std::string& safe) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || safe.find(static_cast<char>(c)) != std::string::npos) {
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

struct HubClient::Meta {
  bool ok = false;
  long status = 0;
  std::string error;        // why it failed (no token inside)
  bool input_error = false; // 401/403/404: the user's fault
  bool entry_missing = false;
  std::string commit, etag, location;
  uint64_t size = 0;
};

HubClient::HubClient(HubConfig cfg) : cfg_(std::move(cfg)) {
  ensure_curl_init();
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

HubClient::Meta HubClient::head(const std::string& first_url) {
  Meta m;
  std::string url = first_url;
  for (int attempt = 0;; ++attempt) {
    Response r;
    for (int hop = 0; hop < 10; ++hop) {
      r = Response{};
      Curl c;
      curl_easy_setopt(c.h, CURLOPT_URL, url.c_str());
      curl_easy_setopt(c.h, CURLOPT_NOBODY, 1L);
      curl_easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, 0L);
      curl_easy_setopt(c.h, CURLOPT_TIMEOUT, cfg_.etag_timeout_s);
      curl_easy_setopt(c.h, CURLOPT_HEADERFUNCTION, header_cb);
      curl_easy_setopt(c.h, CURLOPT_HEADERDATA, &r);
      curl_easy_setopt(c.h, CURLOPT_USERAGENT, cfg_.user_agent.c_str());
      c.hdrs = curl_slist_append(c.hdrs, "Accept-Encoding: identity");
      std::string auth;
      if (!cfg_.token.empty() && origin(url) == origin(cfg_.endpoint)) {
        auth = "authorization: Bearer " + cfg_.token;
        c.hdrs = curl_slist_append(c.hdrs, auth.c_str());
      }
      curl_easy_setopt(c.h, CURLOPT_HTTPHEADER, c.hdrs);
      ++requests_;
      r.curl = curl_easy_perform(c.h);
      if (r.curl != CURLE_OK) {
        r.curl_error = curl_easy_strerror(r.curl);
        break;
      }
      curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &r.status);
      if (r.status >= 300 && r.status < 400 && r.headers.count("location")) {
        const std::string& loc = r.headers["location"];
        if (!loc.empty() && loc[0] == '/') {  // relative: a repo rename; follow it
          url = origin(url) + loc;
          continue;
        }
        m.location = loc;  // absolute: the CDN; download from there later
      }
      break;
    }
    bool retry = r.curl != CURLE_OK || retryable_status(r.status);
    if (retry && attempt < cfg_.max_retries) {
      long delay = cfg_.retry_base_ms << attempt;
      log_(fmt::format("hub: HEAD {} failed ({}); retry {} in {} ms", url,
                       r.curl != CURLE_OK ? r.curl_error : std::to_string(r.status), attempt + 1, delay));
      std::this_thread::sleep_for(std::chrono::milliseconds(delay));
      continue;
    }
    m.status = r.status;
    if (r.curl != CURLE_OK) {
      m.error = fmt::format("{}: network error: {}", url, r.curl_error);
      return m;
    }
    auto hv = [&](const char* k) { auto it = r.headers.find(k); return it == r.headers.end() ? std::string() : it->second; };
    std::string code = hv("x-error-code");
    if (r.status == 401 || r.status == 403) {
      m.input_error = true;
      m.error = fmt::format("{}: {}{}: gated or private repository, or a bad token: set HF_TOKEN (and accept the "
                            "repository's terms on the Hub)", url, human_status(r.status), code.empty() ? "" : " " + code);
      return m;
    }
    if (r.status == 404) {
      m.input_error = true;
      m.commit = hv("x-repo-commit");
      m.entry_missing = !m.commit.empty() || code == "EntryNotFound";
      m.error = fmt::format("{}: 404 {}", url, code.empty() ? (m.entry_missing ? "EntryNotFound" : "not found") : code);
      return m;
    }
    if (r.status >= 400) {
      m.error = fmt::format("{}: HTTP {}", url, human_status(r.status));
      return m;
    }
    m.commit = hv("x-repo-commit");
    std::string etag = hv("x-linked-etag");
    if (etag.empty()) etag = hv("etag");
    if (etag.rfind("W/", 0) == 0) etag = etag.substr(2);
    etag.erase(std::remove(etag.begin(), etag.end(), '"'), etag.end());
    m.etag = etag;
    std::string size = hv("x-linked-size");
    if (size.empty() && m.location.empty()) size = hv("content-length");
    m.size = size.empty() ? 0 : std::strtoull(size.c_str(), nullptr, 10);
    if (m.commit.empty() || m.etag.empty()) {
      m.error = fmt::format("{}: the server sent no X-Repo-Commit or ETag (not a Hub endpoint?)", url);
      return m;
    }
    m.ok = true;
    return m;
  }
}

namespace {

struct GetState {
  std::FILE* f = nullptr;
  CURL* h = nullptr;
  uint64_t have = 0;        // bytes already in the part file when the request started
  bool checked = false;     // response code looked at
  bool to_file = true;      // false: error response, collect body
  bool restarted = false;   // server ignored Range: started over
  std::string err_body;
  std::string part;
  // progress
  HubLogFn* log = nullptr;
  bool progress = false;
  std::chrono::steady_clock::time_point last{};
  std::string name;
};

size_t get_body_cb(char* buf, size_t size, size_t n, void* ud) {
  auto* s = static_cast<GetState*>(ud);
  size_t len = size * n;
  if (!s->checked) {
    s->checked = true;
    long code = 0;
    curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code);
    if (code >= 400) {
      s->to_file = false;
    } else if (code == 200 && s->have > 0) {
      // A 200 reply to a Range request: the server sends everything; start over.
      std::fflush(s->f);
      if (::ftruncate(::fileno(s->f), 0) != 0) return 0;
      std::fseek(s->f, 0, SEEK_SET);
      s->restarted = true;
    }
  }
  if (!s->to_file) {
    if (s->err_body.size() < 4096) s->err_body.append(buf, len);
    return len;
  }
  return std::fwrite(buf, 1, len, s->f);
}

int progress_cb(void* ud, curl_off_t total, curl_off_t now, curl_off_t, curl_off_t) {
  auto* s = static_cast<GetState*>(ud);
  if (!s->progress || total < (16 << 20)) return 0;
  auto t = std::chrono::steady_clock::now();
  if (t - s->last < std::chrono::milliseconds(500) && now < total) return 0;
  s->last = t;
  double have = static_cast<double>(s->restarted ? 0 : s->have);
  (*s->log)(fmt::format("hub: {}: {:.1f}/{:.1f} MiB ({:.0f}%)", s->name, (have + now) / 1048576.0,
                        (have + total) / 1048576.0, 100.0 * (have + now) / std::max(1.0, have + total)));
  return 0;
}

}  // namespace

void HubClient::get_to_file(const std::string& url, const std::string& part, uint64_t expected, bool send_auth) {
  for (int attempt = 0;; ++attempt) {
    uint64_t have = fs::exists(part) ? fs::file_size(part) : 0;
    if (expected && have > expected) {
      fs::resize_file(part, 0);
      have = 0;
    }
    if (expected && have == expected) return;
    std::FILE* f = std::fopen(part.c_str(), "ab");
    if (!f) throw Error(fmt::format("{}: cannot write", part), ErrorKind::kRuntime);
    Curl c;
    GetState st;
    st.f = f;
    st.h = c.h;
    st.have = have;
    st.part = part;
    st.log = &log_;
    st.progress = cfg_.progress;
    st.name = fs::path(url.substr(0, url.find('?'))).filename().string();
    curl_easy_setopt(c.h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c.h, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c.h, CURLOPT_USERAGENT, cfg_.user_agent.c_str());
    curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, get_body_cb);
    curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &st);
    curl_easy_setopt(c.h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c.h, CURLOPT_XFERINFOFUNCTION, progress_cb);
    curl_easy_setopt(c.h, CURLOPT_XFERINFODATA, &st);
    curl_easy_setopt(c.h, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c.h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c.h, CURLOPT_LOW_SPEED_TIME, 60L);
    std::string auth, range;
    if (send_auth && !cfg_.token.empty()) {
      auth = "authorization: Bearer " + cfg_.token;
      c.hdrs = curl_slist_append(c.hdrs, auth.c_str());
    }
    if (have > 0) {
      range = "Range: bytes=" + std::to_string(have) + "-";
      c.hdrs = curl_slist_append(c.hdrs, range.c_str());
    }
    curl_easy_setopt(c.h, CURLOPT_HTTPHEADER, c.hdrs);
    ++requests_;
    CURLcode rc = curl_easy_perform(c.h);
    long status = 0;
    curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &status);
    std::fclose(f);
    if (status == 416) {  // our partial file does not fit the remote file: start over
      fs::resize_file(part, 0);
      if (attempt < cfg_.max_retries) continue;
    }
    bool retry = rc != CURLE_OK || retryable_status(status);
    if (!retry && status >= 400) {
      if (status == 401 || status == 403)
        throw Error(fmt::format("{}: {}: gated or private repository: set HF_TOKEN", url.substr(0, url.find('?')), human_status(status)));
      throw Error(fmt::format("{}: HTTP {}", url.substr(0, url.find('?')), human_status(status)),
                  status == 404 ? ErrorKind::kInput : ErrorKind::kRuntime);
    }
    uint64_t now = fs::file_size(part);
    if (!retry && expected && now != expected) retry = true;
    if (!retry) return;
    if (attempt >= cfg_.max_retries)
      throw Error(fmt::format("{}: download failed after {} attempts ({}; {} of {} bytes)", url.substr(0, url.find('?')),
                              attempt + 1, rc != CURLE_OK ? curl_easy_strerror(rc) : "HTTP " + std::to_string(status),
                              now, expected),
                  ErrorKind::kRuntime);
    long delay = cfg_.retry_base_ms << attempt;
    log_(fmt::format("hub: GET {} interrupted at {} bytes ({}); resuming in {} ms", url.substr(0, url.find('?')), now,
                     rc != CURLE_OK ? curl_easy_strerror(rc) : "HTTP " + std::to_string(status), delay));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
  }
}

std::string HubClient::cached_path(const HubFile& f, const std::string& folder, std::string* commit_out) const {
  std::string commit = f.revision;
  if (!is_commit(commit)) {
    fs::path ref = fs::path(folder) / "refs" / f.revision;
    if (!fs::exists(ref)) return "";
    commit = strip(read_small(ref));
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
  Meta m = head(url);
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
    write_atomic(tag, "Signature: 8a477f597d28d172789f06886806bc55\n"
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
      get_to_file(dl, part, m.size, origin(dl) == origin(cfg_.endpoint));
      std::string got;
      if (is_hex(m.etag, 64)) got = sha256_file(part);
      else if (is_hex(m.etag, 40)) got = git_blob_sha1_file(part);
      if (!got.empty() && got != m.etag) {
        fs::remove(part);
        throw Error(fmt::format("{}: content hash {} does not match the ETag {}", what, got, m.etag), ErrorKind::kRuntime);
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

void HubClient::download_url(const std::string& url, const std::string& dest, const std::string& sha256,
                             uint64_t size) {
  if (cfg_.offline) fail("{}: cannot download {}: HF_HUB_OFFLINE is set", dest, url);
  fs::path d(dest);
  if (d.has_parent_path()) fs::create_directories(d.parent_path());
  std::string part = dest + ".incomplete";
  get_to_file(url, part, size, false);
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
  for (int attempt = 0;; ++attempt) {
    Response r;
    Curl c;
    curl_easy_setopt(c.h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c.h, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(c.h, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(c.h, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, body_cb);
    curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c.h, CURLOPT_USERAGENT, cfg_.user_agent.c_str());
    std::string auth;
    if (!cfg_.token.empty()) {
      auth = "authorization: Bearer " + cfg_.token;
      c.hdrs = curl_slist_append(c.hdrs, auth.c_str());
      curl_easy_setopt(c.h, CURLOPT_HTTPHEADER, c.hdrs);
    }
    ++requests_;
    r.curl = curl_easy_perform(c.h);
    curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &r.status);
    bool retry = r.curl != CURLE_OK || retryable_status(r.status);
    if (retry && attempt < cfg_.max_retries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(cfg_.retry_base_ms << attempt));
      continue;
    }
    if (r.curl != CURLE_OK)
      throw Error(fmt::format("{}: network error: {}", url, curl_easy_strerror(r.curl)), ErrorKind::kRuntime);
    if (r.status == 401 || r.status == 403) fail("{}: {}: gated or private repository: set HF_TOKEN", url, human_status(r.status));
    if (r.status >= 400)
      throw Error(fmt::format("{}: HTTP {}", url, human_status(r.status)), r.status == 404 ? ErrorKind::kInput : ErrorKind::kRuntime);
    return r.body;
  }
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
  std::string folder = repo_folder(RepoType::kModel, repo);
  auto wanted = [](const std::string& name) {
    static const char* exact[] = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                  "special_tokens_map.json", "model.safetensors.index.json"};
    for (const char* e : exact)
      if (name == e) return true;
    return name.find('/') == std::string::npos && name.size() > 12 && name.substr(name.size() - 12) == ".safetensors";
  };
  if (cfg_.offline) {
    std::string commit = rev;
    if (!is_commit(rev)) {
      fs::path ref = fs::path(folder) / "refs" / rev;
      if (!fs::exists(ref)) fail("--model {}: not in the cache {} and HF_HUB_OFFLINE is set", spec, cfg_.cache_dir);
      commit = strip(read_small(ref));
    }
    fs::path snap = fs::path(folder) / "snapshots" / commit;
    if (!fs::exists(snap / "config.json")) fail("--model {}: cached snapshot {} has no config.json", spec, snap.string());
    return snap.string();
  }
  std::string body = api_get(cfg_.endpoint + "/api/models/" + repo + "/revision/" + percent_encode(rev, ""));
  nlohmann::json info;
  try {
    info = parse_json(body, repo + ": model info");
  } catch (const Error& e) {
    throw Error(e.what(), ErrorKind::kRuntime);
  }
  if (!info.contains("sha") || !info["sha"].is_string() || !info.contains("siblings"))
    throw Error(fmt::format("{}: model info lacks sha/siblings", repo), ErrorKind::kRuntime);
  std::string commit = info["sha"].get<std::string>();
  std::string last;
  for (const auto& s : info["siblings"]) {
    std::string name = s.value("rfilename", "");
    if (!wanted(name)) continue;
    last = download({RepoType::kModel, repo, rev, name});
  }
  if (last.empty()) fail("--model {}: the repository has no config.json / safetensors files", spec);
  return (fs::path(folder) / "snapshots" / commit).string();
}

}  // namespace kvb::datasets
