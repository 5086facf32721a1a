// kvb::graders — LLM judges: an OpenAI-compatible chat-completions client on libcurl, and the
// interface every judge implements (the local judge on kvbench's own engine lives in
// harness/judge_local.cpp because it needs the model loader).
//
// A judge turns prompts into short replies. It never throws for one failed request: each reply
// says whether it succeeded and, if not, one line why (HTTP status, timeout, malformed JSON,
// empty choices). The caller stores a failed judgment as *ungraded* — never as a verdict — and
// retries it later (`kvbench grade --retry-failed`). LongMemEval's protocol (one user message,
// temperature 0, max_tokens 10, n = 1) is the default: docs/benchmarks.md#longmemeval.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "net/http.h"

namespace kvb::graders {

/// How a judge is called. Seconds are wall-clock.
struct JudgeOptions {
  int concurrency = 8;      ///< requests in flight at once (worker threads; >= 1)
  double timeout_s = 60.0;  ///< limit of one HTTP request (connect + transfer)
  double connect_timeout_s = 10.0;
  int max_retries = 5;  ///< extra attempts after the first on 429 / 5xx / timeout / connection failure
  /// Delay before retry r (r = 0, 1, ...): min(backoff_max_s, backoff_base_s * 2^r) scaled by a
  /// uniform jitter factor in [0.5, 1). A Retry-After header (seconds or HTTP-date) raises the
  /// delay to at least its value, capped at retry_after_max_s.
  double backoff_base_s = 1.0;
  double backoff_max_s = 30.0;
  double retry_after_max_s = 120.0;
  int max_tokens = 10;       ///< reply cap (LongMemEval: 10)
  double temperature = 0.0;  ///< LongMemEval: 0
  uint64_t jitter_seed = 0;  ///< 0: seeded from the clock
};

/// The outcome of one judge request.
struct JudgeReply {
  bool ok = false;       ///< true when `text` holds the judge's reply
  std::string text;      ///< choices[0].message.content (ok only)
  std::string error;     ///< one line why not (not ok only); never contains the API key
  int attempts = 0;      ///< requests made for this prompt (1 + retries)
  long http_status = 0;  ///< status of the last response (0: none, e.g. a timeout)
};

/// An LLM judge. Implementations are used from one thread at a time (ask() may use threads
/// inside).
class Judge {
 public:
  virtual ~Judge() = default;
  /// "openai:<model>" or "local:<model>": recorded with every verdict and part of its cache key.
  virtual std::string id() const = 0;
  /// The request the judge would send for `prompt`, as compact JSON without credentials (stored
  /// with the cached verdict so it can be audited).
  virtual std::string request_json(const std::string& prompt) const = 0;
  /// Asks every prompt (each as one user message) and returns the replies in input order.
  /// Failures are reported per reply, not thrown.
  virtual std::vector<JudgeReply> ask(const std::vector<std::string>& prompts) = 0;
};

/// A parsed `--judge` value: "openai:MODEL" or "local:MODEL".
struct JudgeSpec {
  std::string kind;   ///< "openai" | "local"
  std::string model;  ///< the model name (openai) or what harness/model_source accepts (local)
  /// Parses `text`. Throws kvb::Error("--judge: ...") on an unknown kind or an empty model.
  static JudgeSpec parse(const std::string& text);
  std::string str() const { return kind + ":" + model; }
};

/// Where and as whom the OpenAI-compatible client connects.
struct OpenAIEndpoint {
  std::string base_url = "https://api.openai.com/v1";  ///< requests go to <base_url>/chat/completions
  std::string api_key;                                 ///< sent as "Authorization: Bearer <key>"; may be empty
  /// OPENAI_BASE_URL (default https://api.openai.com/v1; a trailing '/' is dropped) and
  /// OPENAI_API_KEY from the environment.
  static OpenAIEndpoint from_env();
};

/// Checks an endpoint before any request (OpenAIJudge's constructor calls it): the base URL
/// must be http:// or https:// with a host (and a port in 1..65535 when given), without spaces
/// or control characters; the API key must hold no control character (a CR/LF would inject HTTP
/// headers). Throws kvb::Error naming OPENAI_BASE_URL or OPENAI_API_KEY (never quoting the key).
void check_endpoint(const OpenAIEndpoint& ep);

/// Chat-completions client (POST <base>/chat/completions with {"model", "messages":[{"role":
/// "user","content":prompt}], "temperature", "max_tokens", "n":1}) on libcurl, `concurrency`
/// worker threads (net/http.h: one connection-keeping handle per thread). Retries 408, 429,
/// 5xx, timeouts and connection failures (net::transient) with exponential backoff and jitter
/// (Retry-After honoured; net::with_retries); any other 4xx, a body that is not
/// JSON, a JSON error object, no `choices` or a choice without string `message.content` fails
/// that request at once with a message saying which.
class OpenAIJudge : public Judge {
 public:
  /// Throws kvb::Error when `model` is empty, an option is out of range or the endpoint is
  /// refused by check_endpoint. Replies are redacted: the API key never appears in
  /// JudgeReply::text or JudgeReply::error (so never in judge_cache or grades).
  OpenAIJudge(std::string model, OpenAIEndpoint endpoint, JudgeOptions opts = {});
  std::string id() const override { return "openai:" + model_; }
  std::string request_json(const std::string& prompt) const override;
  std::vector<JudgeReply> ask(const std::vector<std::string>& prompts) override;

  /// Total HTTP requests made by this client so far (tests count retries and cache hits).
  int64_t requests_made() const { return requests_.load(); }

 private:
  JudgeReply ask_one(const std::string& prompt, uint64_t jitter_state);
  std::string redact(std::string s) const;

  std::string model_;
  OpenAIEndpoint ep_;
  JudgeOptions opts_;
  std::atomic<int64_t> requests_{0};
  uint64_t ask_calls_ = 0;
};

/// Parses a Retry-After header value (net/http.h): delay in seconds, or an HTTP-date relative
/// to `now_unix`; negative when `value` is neither.
using net::parse_retry_after;

/// Extracts choices[0].message.content from a chat-completions response body. On failure
/// returns false and sets `error` to one line: "malformed JSON response (...)", "error object
/// in response: ...", "empty choices in response", "choices[0].message.content missing or not
/// a string".
bool parse_chat_completion(const std::string& body, std::string& content, std::string& error);

}  // namespace kvb::graders
