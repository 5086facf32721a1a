// The OpenAI-compatible chat-completions judge client (over net/http.h) and `--judge` parsing.
// See graders/judge.h.
#include "graders/judge.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/util/error.h"
#include "engine/util/io.h"
#include "net/http.h"

namespace kvb::graders {

namespace {

// One line, at most `max` bytes, for error messages quoting a response body. Bytes outside
// printable ASCII (a compressed or binary body, control characters) are written as \xNN, so
// what is stored in grades.reason or printed is always text.
std::string snippet(const std::string& s, size_t max = 200) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n' || c == '\r' || c == '\t') out += ' ';
    else if (u < 0x20 || u >= 0x7f) out += fmt::format("\\x{:02x}", u);
    else out += c;
  }
  return out;
}

// What an error body says: error.message of an OpenAI-style error object, else the raw text.
std::string body_message(const std::string& body) {
  nlohmann::json j;
  try {
    j = parse_json(body, "judge reply");
  } catch (const Error&) {
    return snippet(body);
  }
  if (j.is_object() && j.contains("error")) {
    const auto& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string())
      return snippet(e["message"].get<std::string>());
    if (e.is_string()) return snippet(e.get<std::string>());
  }
  return snippet(body);
}

}  // namespace

JudgeSpec JudgeSpec::parse(const std::string& text) {
  auto c = text.find(':');
  if (c == std::string::npos) fail("--judge: '{}': expected openai:MODEL or local:MODEL", text);
  JudgeSpec s{text.substr(0, c), text.substr(c + 1)};
  if (s.kind != "openai" && s.kind != "local")
    fail("--judge: '{}': unknown judge kind '{}' (expected openai or local)", text, s.kind);
  if (s.model.empty()) fail("--judge: '{}': empty model name", text);
  return s;
}

OpenAIEndpoint OpenAIEndpoint::from_env() {
  OpenAIEndpoint ep;
  if (const char* b = std::getenv("OPENAI_BASE_URL"); b && *b) ep.base_url = b;
  while (!ep.base_url.empty() && ep.base_url.back() == '/') ep.base_url.pop_back();
  if (const char* k = std::getenv("OPENAI_API_KEY"); k) ep.api_key = k;
  return ep;
}

bool parse_chat_completion(const std::string& body, std::string& content, std::string& error) {
  nlohmann::json j;
  try {
    j = parse_json(body, "judge reply");
  } catch (const Error& e) {
    error = "malformed JSON response (" + snippet(body, 80) + ")";
    return false;
  }
  if (!j.is_object()) {
    error = "malformed JSON response (" + snippet(body, 80) + ")";
    return false;
  }
  if (j.contains("error") && !j["error"].is_null()) {
    error = "error object in response: " + body_message(body);
    return false;
  }
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) {
    error = "empty choices in response";
    return false;
  }
  const auto& c0 = j["choices"][0];
  if (!c0.is_object() || !c0.contains("message") || !c0["message"].is_object() || !c0["message"].contains("content") ||
      !c0["message"]["content"].is_string()) {
    error = "choices[0].message.content missing or not a string";
    return false;
  }
  content = c0["message"]["content"].get<std::string>();
  return true;
}

OpenAIJudge::OpenAIJudge(std::string model, OpenAIEndpoint endpoint, JudgeOptions opts)
    : model_(std::move(model)), ep_(std::move(endpoint)), opts_(opts) {
  if (model_.empty()) fail("--judge openai:MODEL: empty model name");
  if (opts_.concurrency < 1) fail("--judge-concurrency: must be >= 1 (got {})", opts_.concurrency);
  if (!(opts_.timeout_s > 0)) fail("--judge-timeout: must be > 0 seconds (got {})", opts_.timeout_s);
  if (opts_.max_retries < 0) fail("--judge-retries: must be >= 0 (got {})", opts_.max_retries);
  if (!(opts_.backoff_base_s >= 0) || !(opts_.backoff_max_s >= 0))
    fail("--judge-backoff: must be >= 0 seconds (got {})", opts_.backoff_base_s);
  if (opts_.max_tokens < 1) fail("judge max_tokens: must be >= 1 (got {})", opts_.max_tokens);
  while (!ep_.base_url.empty() && ep_.base_url.back() == '/') ep_.base_url.pop_back();
  if (ep_.base_url.empty()) fail("OPENAI_BASE_URL: empty URL");
  check_endpoint(ep_);
}

void check_endpoint(const OpenAIEndpoint& ep) {
  // The key goes into an HTTP header line: CR/LF (or any control character) would let it add
  // headers of its own.
  for (char c : ep.api_key)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      fail("OPENAI_API_KEY: contains a control character (CR, LF, ...): refused (it would inject HTTP headers)");
  const std::string& u = ep.base_url;
  std::string lower;
  for (char c : u) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // ("http://" arrives as "http:": trailing slashes are dropped before.)
  if (lower == "http:" || lower == "https:") fail("OPENAI_BASE_URL: '{}//': no host name", u);
  const size_t scheme_end = lower.rfind("https://", 0) == 0 ? 8 : lower.rfind("http://", 0) == 0 ? 7 : 0;
  if (!scheme_end) fail("OPENAI_BASE_URL: '{}': must be an http:// or https:// URL", snippet(u, 100));
  for (char c : u)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      fail("OPENAI_BASE_URL: '{}': contains a space or control character", snippet(u, 100));
  const size_t host_end = u.find_first_of("/?#", scheme_end);
  const std::string authority =
      u.substr(scheme_end, host_end == std::string::npos ? std::string::npos : host_end - scheme_end);
  const std::string host = authority.substr(authority.rfind('@') == std::string::npos ? 0 : authority.rfind('@') + 1);
  if (host.empty() || host[0] == ':') fail("OPENAI_BASE_URL: '{}': no host name", snippet(u, 100));
  if (const size_t colon = host.rfind(':'); colon != std::string::npos && host.back() != ']') {
    const std::string port = host.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stol(port) < 1 || std::stol(port) > 65535)
      fail("OPENAI_BASE_URL: '{}': bad port '{}'", snippet(u, 100), port);
  }
}

std::string OpenAIJudge::request_json(const std::string& prompt) const {
  nlohmann::json body = {{"model", model_},
                         {"messages", nlohmann::json::array({{{"role", "user"}, {"content", prompt}}})},
                         {"temperature", opts_.temperature},
                         {"max_tokens", opts_.max_tokens},
                         {"n", 1}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string OpenAIJudge::redact(std::string s) const {
  if (ep_.api_key.size() < 4) return s;
  for (size_t p; (p = s.find(ep_.api_key)) != std::string::npos;) s.replace(p, ep_.api_key.size(), "***");
  return s;
}

JudgeReply OpenAIJudge::ask_one(const std::string& prompt, uint64_t jitter_state) {
  JudgeReply r;
  net::Request req;
  req.method = "POST";
  req.url = ep_.base_url + "/chat/completions";
  req.body = request_json(prompt);
  req.headers = {"Content-Type: application/json"};
  if (!ep_.api_key.empty()) req.headers.push_back("Authorization: Bearer " + ep_.api_key);
  req.timeout_ms = static_cast<long>(std::ceil(opts_.timeout_s * 1000));
  req.connect_timeout_ms = static_cast<long>(std::ceil(opts_.connect_timeout_s * 1000));
  req.user_agent = "kvbench-judge";
  req.decode_content = true;
  net::Backoff backoff;
  backoff.max_retries = opts_.max_retries;
  backoff.base_s = opts_.backoff_base_s;
  backoff.max_s = opts_.backoff_max_s;
  backoff.jitter = true;
  backoff.retry_after_max_s = opts_.retry_after_max_s;
  std::string last_error;
  bool retryable = false;
  try {
    r.attempts = net::with_retries(
        backoff,
        [&](int) -> net::Attempt {
          ++requests_;
          const net::Response resp = net::perform(req);
          r.http_status = resp.status;
          retryable = net::transient(resp);
          if (resp.timed_out) {
            last_error = fmt::format("timeout after {:g} s", opts_.timeout_s);
          } else if (!resp.transport_ok()) {
            last_error = fmt::format("request failed: {}", resp.error);
          } else if (retryable) {
            last_error = fmt::format("HTTP {}: {}", resp.status, body_message(resp.body));
          } else if (resp.status < 200 || resp.status >= 300) {
            last_error = fmt::format("HTTP {} (not retried): {}", resp.status, body_message(resp.body));
          } else {
            std::string content, perr;
            if (parse_chat_completion(resp.body, content, perr)) {
              r.ok = true;
              r.text = redact(std::move(content));  // a reply echoing the key is stored without it
              return {};
            }
            last_error = perr;
          }
          return {retryable, resp.header("retry-after"), last_error};
        },
        {}, jitter_state);
  } catch (const Error& e) {  // no curl handle: reported per request, never thrown from a worker
    last_error = e.what();
  }
  if (!r.ok) {
    if (retryable) last_error += fmt::format(" (gave up after {} attempts)", r.attempts);
    r.error = redact("judge " + id() + ": " + last_error);
  }
  return r;
}

std::vector<JudgeReply> OpenAIJudge::ask(const std::vector<std::string>& prompts) {
  std::vector<JudgeReply> out(prompts.size());
  if (prompts.empty()) return out;
  uint64_t seed = opts_.jitter_seed ? opts_.jitter_seed
                                    : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  seed += 0x9E3779B97F4A7C15ull * ++ask_calls_;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < prompts.size();)
      out[i] = ask_one(prompts[i], seed ^ (i * 0xBF58476D1CE4E5B9ull));
  };
  const size_t n_threads = std::min(prompts.size(), static_cast<size_t>(opts_.concurrency));
  if (n_threads <= 1) {
    work();
    return out;
  }
  std::vector<std::thread> pool;
  for (size_t t = 0; t < n_threads; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  return out;
}

}  // namespace kvb::graders
