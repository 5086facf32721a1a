// libcurl behind net/http.h, loaded at the first request (CurlApi).
#include "net/http.h"

#include <curl/curl.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <mutex>
#include <thread>

#include "engine/util/error.h"

namespace kvb::net {

namespace {

/// libcurl's entry points, resolved from the shared library at the first use (dlopen), not by
/// the dynamic linker at start-up: a command that never makes a request (every CPU engine run
/// without a judge or a Hub download) then does not map libcurl and the ~25 libraries it pulls
/// in (TLS, Kerberos, LDAP, SSH), 5.3 MB of resident memory and their start-up relocations
/// (docs/architecture.md, "Memory"). The types and constants still come from <curl/curl.h>;
/// libcurl's ABI has been soname 4 since 7.16 (2006). Loaded once, never unloaded.
/// Raises Error(kRuntime) naming the library when neither soname can be loaded.
struct CurlApi {
  decltype(&curl_easy_init) easy_init;
  decltype(&curl_easy_cleanup) easy_cleanup;
  decltype(&curl_easy_reset) easy_reset;
  decltype(&curl_easy_setopt) easy_setopt;
  decltype(&curl_easy_getinfo) easy_getinfo;
  decltype(&curl_easy_perform) easy_perform;
  decltype(&curl_easy_strerror) easy_strerror;
  decltype(&curl_slist_append) slist_append;
  decltype(&curl_slist_free_all) slist_free_all;
  decltype(&curl_getdate) getdate;
};

const CurlApi& curl() {
  static const CurlApi api = [] {
    void* lib = nullptr;
    std::string why;
    for (const char* name : {"libcurl.so.4", "libcurl-gnutls.so.4"}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
      if (const char* e = dlerror()) why += std::string(why.empty() ? "" : "; ") + e;
    }
    if (!lib) throw Error("http: libcurl cannot be loaded (" + why + "); install libcurl4", ErrorKind::kRuntime);
    auto sym = [lib](const char* name) {
      void* f = dlsym(lib, name);
      if (!f) throw Error(std::string("http: libcurl.so.4 has no ") + name, ErrorKind::kRuntime);
      return f;
    };
    CurlApi a{};
    a.easy_init = reinterpret_cast<decltype(a.easy_init)>(sym("curl_easy_init"));
    a.easy_cleanup = reinterpret_cast<decltype(a.easy_cleanup)>(sym("curl_easy_cleanup"));
    a.easy_reset = reinterpret_cast<decltype(a.easy_reset)>(sym("curl_easy_reset"));
    a.easy_setopt = reinterpret_cast<decltype(a.easy_setopt)>(sym("curl_easy_setopt"));
    a.easy_getinfo = reinterpret_cast<decltype(a.easy_getinfo)>(sym("curl_easy_getinfo"));
    a.easy_perform = reinterpret_cast<decltype(a.easy_perform)>(sym("curl_easy_perform"));
    a.easy_strerror = reinterpret_cast<decltype(a.easy_strerror)>(sym("curl_easy_strerror"));
    a.slist_append = reinterpret_cast<decltype(a.slist_append)>(sym("curl_slist_append"));
    a.slist_free_all = reinterpret_cast<decltype(a.slist_free_all)>(sym("curl_slist_free_all"));
    a.getdate = reinterpret_cast<decltype(a.getdate)>(sym("curl_getdate"));
    reinterpret_cast<decltype(&curl_global_init)>(sym("curl_global_init"))(CURL_GLOBAL_DEFAULT);
    return a;
  }();
  return api;
}

/// This thread's easy handle, reset before each request (keeps its connection cache).
CURL* thread_handle() {
  struct Handle {
    CURL* h = curl().easy_init();
    ~Handle() { curl().easy_cleanup(h); }
  };
  thread_local Handle handle;
  if (!handle.h) throw Error("http: curl_easy_init failed", ErrorKind::kRuntime);
  curl().easy_reset(handle.h);
  return handle.h;
}

std::string trim(std::string s) {
  auto b = s.find_first_not_of(" \t\r\n");
  auto e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

struct Transfer {
  const Request* req;
  Response* resp;
  CURL* h;
};

size_t header_cb(char* buf, size_t size, size_t n, void* ud) {
  add_header_line(std::string_view(buf, size * n), static_cast<Transfer*>(ud)->resp->headers);
  return size * n;
}

size_t body_cb(char* buf, size_t size, size_t n, void* ud) {
  auto* t = static_cast<Transfer*>(ud);
  if (!t->req->on_body) {
    t->resp->body.append(buf, size * n);
    return size * n;
  }
  long status = 0;
  curl().easy_getinfo(t->h, CURLINFO_RESPONSE_CODE, &status);
  return t->req->on_body(status, std::string_view(buf, size * n)) ? size * n : 0;
}

int progress_cb(void* ud, curl_off_t total, curl_off_t now, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(ud);
  t->req->on_progress(static_cast<int64_t>(total), static_cast<int64_t>(now));
  return 0;
}

}  // namespace

void add_header_line(std::string_view line, std::map<std::string, std::string>& headers) {
  if (line.substr(0, 5) == "HTTP/") {
    headers.clear();  // a new response (after a redirect or 100-continue)
    return;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return;
  std::string k(line.substr(0, colon));
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  headers[k] = trim(std::string(line.substr(colon + 1)));
}

std::string Response::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

Response perform(const Request& r) {
  const CurlApi& api = curl();
  Response resp;
  CURL* h = thread_handle();
  Transfer t{&r, &resp, h};
  curl_slist* hdrs = nullptr;
  for (const auto& line : r.headers) hdrs = api.slist_append(hdrs, line.c_str());
  api.easy_setopt(h, CURLOPT_URL, r.url.c_str());
  if (r.method == "HEAD") api.easy_setopt(h, CURLOPT_NOBODY, 1L);
  if (r.method == "POST") {
    api.easy_setopt(h, CURLOPT_POST, 1L);
    api.easy_setopt(h, CURLOPT_POSTFIELDS, r.body.c_str());
    api.easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(r.body.size()));
  }
  if (hdrs) api.easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  api.easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
  api.easy_setopt(h, CURLOPT_HEADERDATA, &t);
  api.easy_setopt(h, CURLOPT_WRITEFUNCTION, body_cb);
  api.easy_setopt(h, CURLOPT_WRITEDATA, &t);
  if (r.on_progress) {
    api.easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    api.easy_setopt(h, CURLOPT_XFERINFOFUNCTION, progress_cb);
    api.easy_setopt(h, CURLOPT_XFERINFODATA, &t);
  }
  if (r.follow_redirects) {
    api.easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    api.easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
  }
  if (r.timeout_ms > 0) api.easy_setopt(h, CURLOPT_TIMEOUT_MS, r.timeout_ms);
  if (r.connect_timeout_ms > 0) api.easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, r.connect_timeout_ms);
  if (r.low_speed_time_s > 0) {
    api.easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    api.easy_setopt(h, CURLOPT_LOW_SPEED_TIME, r.low_speed_time_s);
  }
  api.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  api.easy_setopt(h, CURLOPT_USERAGENT, r.user_agent.c_str());
  // Only HTTP(S), also after a redirect: a file://, ftp:// or gopher:// URL (from an environment
  // variable such as OPENAI_BASE_URL) must never read a local file or reach another service.
  api.easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  api.easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  // Advertise and decode the encodings this libcurl supports (gzip, deflate, ...): a compressed
  // reply is then given as the text it encodes, never as its raw bytes.
  if (r.decode_content) api.easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
  const CURLcode rc = api.easy_perform(h);
  resp.curl_code = static_cast<int>(rc);
  resp.timed_out = rc == CURLE_OPERATION_TIMEDOUT;
  if (rc != CURLE_OK) resp.error = api.easy_strerror(rc);
  api.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
  api.slist_free_all(hdrs);
  return resp;
}

bool transient(const Response& r) {
  if (!r.transport_ok()) {
    const auto rc = static_cast<CURLcode>(r.curl_code);
    return rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_COULDNT_CONNECT || rc == CURLE_RECV_ERROR ||
           rc == CURLE_SEND_ERROR || rc == CURLE_GOT_NOTHING || rc == CURLE_PARTIAL_FILE ||
           rc == CURLE_COULDNT_RESOLVE_HOST;
  }
  return r.status == 408 || r.status == 429 || r.status >= 500;
}

bool malformed_reply(const Response& r) { return r.curl_code == CURLE_WEIRD_SERVER_REPLY; }

double parse_retry_after(std::string_view value, int64_t now_unix) {
  std::string v(value);
  if (v.empty()) return -1;
  // delay-seconds; a decimal fraction is accepted too.
  const bool numeric = std::all_of(v.begin(), v.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; }) &&
                       std::count(v.begin(), v.end(), '.') <= 1 && v != ".";
  if (numeric) return std::strtod(v.c_str(), nullptr);
  const time_t t = curl().getdate(v.c_str(), nullptr);  // HTTP-date
  if (t == static_cast<time_t>(-1)) return -1;
  return std::max<double>(0.0, static_cast<double>(t - now_unix));
}

double Backoff::delay_s(int r, std::string_view retry_after, std::mt19937_64& rng) const {
  double d = std::min(max_s, base_s * std::ldexp(1.0, r));
  if (jitter) d *= std::uniform_real_distribution<double>(0.5, 1.0)(rng);
  if (retry_after_max_s > 0) {
    const double ra = parse_retry_after(retry_after, static_cast<int64_t>(std::time(nullptr)));
    if (ra >= 0) d = std::max(d, std::min(ra, retry_after_max_s));
  }
  return d;
}

int with_retries(const Backoff& b, const std::function<Attempt(int n)>& attempt,
                 const std::function<void(int n, double delay_s, const std::string& why)>& on_retry,
                 uint64_t jitter_seed) {
  std::mt19937_64 rng(jitter_seed);
  for (int n = 0;; ++n) {
    const Attempt a = attempt(n);
    if (!a.retry || n >= b.max_retries) return n + 1;
    const double d = b.delay_s(n, a.retry_after, rng);
    if (on_retry) on_retry(n, d, a.why);
    std::this_thread::sleep_for(std::chrono::duration<double>(d));
  }
}

}  // namespace kvb::net
