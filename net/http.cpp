// libcurl behind net/http.h.
#include "net/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <mutex>
#include <thread>

#include "engine/util/error.h"

namespace kvb::net {

namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

/// This thread's easy handle, reset before each request (keeps its connection cache).
CURL* thread_handle() {
  struct Handle {
    CURL* h = curl_easy_init();
    ~Handle() { curl_easy_cleanup(h); }
  };
  thread_local Handle handle;
  if (!handle.h) throw Error("http: curl_easy_init failed", ErrorKind::kRuntime);
  curl_easy_reset(handle.h);
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
  auto* t = static_cast<Transfer*>(ud);
  std::string line(buf, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    t->resp->headers.clear();  // a new response (after a redirect or 100-continue)
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string k = line.substr(0, colon);
    std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    t->resp->headers[k] = trim(line.substr(colon + 1));
  }
  return size * n;
}

size_t body_cb(char* buf, size_t size, size_t n, void* ud) {
  auto* t = static_cast<Transfer*>(ud);
  if (!t->req->on_body) {
    t->resp->body.append(buf, size * n);
    return size * n;
  }
  long status = 0;
  curl_easy_getinfo(t->h, CURLINFO_RESPONSE_CODE, &status);
  return t->req->on_body(status, std::string_view(buf, size * n)) ? size * n : 0;
}

int progress_cb(void* ud, curl_off_t total, curl_off_t now, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(ud);
  t->req->on_progress(static_cast<int64_t>(total), static_cast<int64_t>(now));
  return 0;
}

}  // namespace

std::string Response::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

Response perform(const Request& r) {
  global_init();
  Response resp;
  CURL* h = thread_handle();
  Transfer t{&r, &resp, h};
  curl_slist* hdrs = nullptr;
  for (const auto& line : r.headers) hdrs = curl_slist_append(hdrs, line.c_str());
  curl_easy_setopt(h, CURLOPT_URL, r.url.c_str());
  if (r.method == "HEAD") curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  if (r.method == "POST") {
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, r.body.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(r.body.size()));
  }
  if (hdrs) curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body_cb);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  if (r.on_progress) {
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, progress_cb);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &t);
  }
  if (r.follow_redirects) {
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
  }
  if (r.timeout_ms > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, r.timeout_ms);
  if (r.connect_timeout_ms > 0) curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, r.connect_timeout_ms);
  if (r.low_speed_time_s > 0) {
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, r.low_speed_time_s);
  }
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_USERAGENT, r.user_agent.c_str());
  const CURLcode rc = curl_easy_perform(h);
  resp.curl_code = static_cast<int>(rc);
  resp.timed_out = rc == CURLE_OPERATION_TIMEDOUT;
  if (rc != CURLE_OK) resp.error = curl_easy_strerror(rc);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
  curl_slist_free_all(hdrs);
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

double parse_retry_after(std::string_view value, int64_t now_unix) {
  std::string v(value);
  if (v.empty()) return -1;
  // delay-seconds; a decimal fraction is accepted too.
  const bool numeric = std::all_of(v.begin(), v.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; }) &&
                       std::count(v.begin(), v.end(), '.') <= 1 && v != ".";
  if (numeric) return std::strtod(v.c_str(), nullptr);
  const time_t t = curl_getdate(v.c_str(), nullptr);  // HTTP-date
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
