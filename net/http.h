// The project's one HTTP client (libcurl): a request/response call, the transient-failure rule
// and the retry loop with exponential backoff (optionally with jitter and Retry-After) that the
// Hugging Face Hub client (datasets/hub.*) and the LLM judge client (graders/judge.*) share.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace kvb::net {

/// One HTTP request. Times are milliseconds; 0 means no limit.
struct Request {
  std::string method = "GET";  ///< "GET", "HEAD" or "POST"
  std::string url;
  std::vector<std::string> headers;  ///< "Name: value" lines (credentials included: never logged)
  std::string body;                  ///< POST body
  long timeout_ms = 0;               ///< whole transfer
  long connect_timeout_ms = 0;
  bool follow_redirects = false;  ///< up to 10 hops
  long low_speed_time_s = 0;      ///< abort a transfer slower than 1 byte/s for this long (0: off)
  std::string user_agent = "kvbench";
  /// Ask for and decode compressed replies (Accept-Encoding: every encoding libcurl supports);
  /// off for downloads whose bytes are checked against a hash as served.
  bool decode_content = false;
  /// When set, body bytes are passed here (with the status of the response they belong to)
  /// instead of being collected in Response::body; returning false aborts the transfer.
  std::function<bool(long status, std::string_view chunk)> on_body;
  /// When set, called as bytes arrive with (bytes expected, bytes received) of this transfer.
  std::function<void(int64_t total, int64_t now)> on_progress;
};

/// What came back. A transport failure (no HTTP status) has !transport_ok() and `error` set.
struct Response {
  int curl_code = 0;                           ///< CURLcode of the transfer (0 = CURLE_OK)
  bool timed_out = false;                      ///< the transfer hit timeout_ms (CURLE_OPERATION_TIMEDOUT)
  std::string error;                           ///< curl's one-line description when curl_code != 0
  long status = 0;                             ///< HTTP status of the last response (0: none)
  std::map<std::string, std::string> headers;  ///< lower-case names, last response only
  std::string body;                            ///< unless Request::on_body consumed it

  bool transport_ok() const { return curl_code == 0; }
  /// The value of header `lower_name`, or "".
  std::string header(const std::string& lower_name) const;
};

/// Adds one raw response header line ("Name: value\r\n", as received) to `headers`: the name
/// lower-cased, the value with surrounding blanks trimmed; a status line ("HTTP/...") clears
/// `headers` (a new response after a redirect or 100-continue); a line without ':' is ignored.
/// Bytes are kept as sent (a value may hold any byte but CR/LF at its ends): callers validate
/// what they use (datasets/hub.cpp's parse_file_metadata).
void add_header_line(std::string_view line, std::map<std::string, std::string>& headers);

/// Performs `r` on this thread's reusable libcurl handle (connections are kept alive between
/// calls). Only http:// and https:// URLs are followed (any other scheme is a transport error).
/// Never throws for network or HTTP errors: they are in the Response.
Response perform(const Request& r);

/// Whether a failed exchange is worth retrying: a connection, resolution, send/receive, partial
/// transfer or timeout failure, or HTTP 408, 429 or 5xx.
bool transient(const Response& r);

/// Whether the transfer failed because the server's reply is not valid HTTP (curl's
/// CURLE_WEIRD_SERVER_REPLY: e.g. a NUL byte in a header): the same server will answer the same
/// way, so such a failure is never retried.
bool malformed_reply(const Response& r);

/// Parses a Retry-After header value (RFC 9110 §10.2.3): delay in seconds (non-negative
/// integer or decimal), or an HTTP-date relative to `now_unix`. Returns a negative number when
/// `value` is neither.
double parse_retry_after(std::string_view value, int64_t now_unix);

/// Exponential backoff: the delay before retry r (r = 0, 1, ...) is
/// min(max_s, base_s * 2^r), times a uniform factor in [0.5, 1) with `jitter`; a Retry-After
/// value (retry_after_max_s > 0) raises it to at least that many seconds, capped at
/// retry_after_max_s.
struct Backoff {
  int max_retries = 4;  ///< retries after the first attempt
  double base_s = 1.0;
  double max_s = 1e9;
  bool jitter = false;
  double retry_after_max_s = 0;  ///< 0: Retry-After is ignored
  /// The delay before retry `r` given the Retry-After header of the failed response ("" if
  /// none); `rng` is used for the jitter.
  double delay_s(int r, std::string_view retry_after, std::mt19937_64& rng) const;
};

/// One attempt's verdict for with_retries.
struct Attempt {
  bool retry = false;       ///< the attempt failed transiently: try again if retries remain
  std::string retry_after;  ///< the failed response's Retry-After header, if any
  std::string why;          ///< one line for the retry log (no credentials)
};

/// The retry loop: calls attempt(n) for n = 0, 1, ... until it says not to retry or
/// b.max_retries retries were made; before retry n+1 calls on_retry(n, delay_s, why) (may be
/// empty) and sleeps b.delay_s. `jitter_seed` seeds the jitter. Returns the attempts made.
int with_retries(const Backoff& b, const std::function<Attempt(int n)>& attempt,
                 const std::function<void(int n, double delay_s, const std::string& why)>& on_retry = {},
                 uint64_t jitter_seed = 0);

}  // namespace kvb::net
