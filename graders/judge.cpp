// The OpenAI-compatible chat-completions judge client (libcurl) and `--judge` parsing.
// See graders/judge.h.
#include "graders/judge.h"

#include <curl/curl.h>

#include <algorithm>
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

namespace kvb::graders {

namespace {

void curl_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t write_cb(char* p, size_t sz, size_t n, void* ud) {
  static_cast<std::string*>(ud)->append(p, sz * n);
  return sz * n;
}

// Keeps the value of a Retry-After header (case-insensitive name), if any.
size_t header_cb(char* p, size_t sz, size_t n, void* ud) {
  std::string line(p, sz * n);
  auto colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    if (name == "retry-after") {
      std::string v = line.substr(colon + 1);
      auto b = v.find_first_not_of(" \t"), e = v.find_last_not_of(" \t\r\n");
      *static_cast<std::string*>(ud) = b == std::string::npos ? "" : v.substr(b, e - b + 1);
    }
  }
  return sz * n;
}

// One line, at most `max` bytes, for error messages quoting a response body.
std::string snippet(const std::string& s, size_t max = 200) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
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
    if (e.is_object() && e.contains("message") && e["message"].is_string()) return snippet(e["message"].get<std::string>());
    if (e.is_string()) return snippet(e.get<std::string>());
  }
  return snippet(body);
}

}  // namespace

JudgeSpec JudgeSpec::parse(const std::string& text) {
  auto c = text.find(':');
  if (c == std::string::npos)
    fail("--judge: '{}': expected openai:MODEL or local:MODEL", text);
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

double parse_retry_after(std::string_view value, int64_t now_unix) {
  std::string v(value);
  if (v.empty()) return -1;
  // delay-seconds (RFC 9110 §10.2.3); a decimal fraction is accepted too.
  bool numeric = std::all_of(v.begin(), v.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; }) &&
                 std::count(v.begin(), v.end(), '.') <= 1 && v != ".";
  if (numeric) return std::strtod(v.c_str(), nullptr);
  // HTTP-date.
  time_t t = curl_getdate(v.c_str(), nullptr);
  if (t == static_cast<time_t>(-1)) return -1;
  return std::max<double>(0.0, static_cast<double>(t - now_unix));
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
  if (!c0.is_object() || !c0.contains("message") || !c0["message"].is_object() ||
      !c0["message"].contains("content") || !c0["message"]["content"].is_string()) {
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
  curl_init_once();
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
  const std::string url = ep_.base_url + "/chat/completions";
  const std::string body = request_json(prompt);
  std::mt19937_64 rng(jitter_state);
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  CURL* h = curl_easy_init();
  if (!h) {
    r.error = "judge " + id() + ": curl_easy_init failed";
    return r;
  }
  curl_slist* hdrs = nullptr;
  hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
  std::string auth = "Authorization: Bearer " + ep_.api_key;
  if (!ep_.api_key.empty()) hdrs = curl_slist_append(hdrs, auth.c_str());
  std::string last_error;
  for (int attempt = 0; attempt <= opts_.max_retries; ++attempt) {
    std::string resp, retry_after;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &retry_after);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(std::ceil(opts_.timeout_s * 1000)));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::ceil(opts_.connect_timeout_s * 1000)));
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "kvbench-judge");
    ++requests_;
    r.attempts = attempt + 1;
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    if (rc == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    r.http_status = status;
    bool retryable = false;
    if (rc == CURLE_OPERATION_TIMEDOUT) {
      last_error = fmt::format("timeout after {:g} s", opts_.timeout_s);
      retryable = true;
    } else if (rc != CURLE_OK) {
      last_error = fmt::format("request failed: {}", curl_easy_strerror(rc));
      retryable = rc == CURLE_COULDNT_CONNECT || rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR ||
                  rc == CURLE_GOT_NOTHING || rc == CURLE_PARTIAL_FILE || rc == CURLE_COULDNT_RESOLVE_HOST;
    } else if (status == 429 || status == 408 || status >= 500) {
      last_error = fmt::format("HTTP {}: {}", status, body_message(resp));
      retryable = true;
    } else if (status < 200 || status >= 300) {
      last_error = fmt::format("HTTP {} (not retried): {}", status, body_message(resp));
    } else {
      std::string content, perr;
      if (parse_chat_completion(resp, content, perr)) {
        r.ok = true;
        r.text = std::move(content);
        r.error.clear();
        break;
      }
      last_error = perr;
    }
    if (!retryable || attempt == opts_.max_retries) {
      if (retryable) last_error += fmt::format(" (gave up after {} attempts)", attempt + 1);
      break;
    }
    double delay = std::min(opts_.backoff_max_s, opts_.backoff_base_s * std::ldexp(1.0, attempt)) * jitter(rng);
    double ra = parse_retry_after(retry_after, static_cast<int64_t>(std::time(nullptr)));
    if (ra >= 0) delay = std::max(delay, std::min(ra, opts_.retry_after_max_s));
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
  }
  curl_slist_free_all(hdrs);
  curl_easy_cleanup(h);
  if (!r.ok) r.error = redact("judge " + id() + ": " + last_error);
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
    for (size_t i; (i = next.fetch_add(1)) < prompts.size();) out[i] = ask_one(prompts[i], seed ^ (i * 0xBF58476D1CE4E5B9ull));
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
