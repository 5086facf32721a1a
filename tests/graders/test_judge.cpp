// The LLM judge: LongMemEval's five templates and yes/no rule against goldens that
// tools/gen_longmemeval_judge_goldens.py reads out of docs/benchmarks.md (LongMemEval's judge prompts, from xiaowu0162/LongMemEval @9e0b455)
// and fills with Python's str.format; the OpenAI-compatible client against a fake
// chat-completions server (cpp-httplib on 127.0.0.1) answering yes/no, 429 with Retry-After,
// 500, too slowly (timeouts), malformed JSON, empty choices and 401; the verdict cache in the
// results DB; and `kvbench grade --judge ... [--retry-failed]` end to end.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/util/error.h"
#include "graders/grade.h"
#include "graders/judge.h"
#include "graders/judge_longmemeval.h"
#include "results/grid.h"
#include "results/store.h"
#include "tests/support/local_http_server.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;
using namespace kvb;
using namespace kvb::graders;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kKey = "sk-TEST-secret-key-0123456789";

nlohmann::json goldens() {
  std::ifstream f(std::string(KVB_SOURCE_DIR) + "/tests/fixtures/graders/longmemeval_judge_goldens.json");
  EXPECT_TRUE(f.good());
  return nlohmann::json::parse(f);
}

LmeTemplate by_name(const std::string& n) {
  for (auto t : {LmeTemplate::kDefault, LmeTemplate::kTemporalReasoning, LmeTemplate::kKnowledgeUpdate,
                 LmeTemplate::kPreference, LmeTemplate::kAbstention})
    if (n == lme_template_name(t)) return t;
  ADD_FAILURE() << "unknown template " << n;
  return LmeTemplate::kDefault;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A fake OpenAI chat-completions server. What it does for a request depends on a marker in the
// prompt (the judged model response carries it): ANSWER-YES / ANSWER-NO reply "Yes." / "no";
// RATE-LIMIT answers 429 (Retry-After: 1) once per prompt, then yes; FLAKY-500 answers 500
// once, then yes; DOWN answers 500 while `down` is set, else yes; SLOW sleeps 1 s (past the
// client's 0.3 s timeout) while `down` is set; MALFORMED / EMPTY answer a body that is not JSON /
// has no choices while `down` is set; anything else: yes. A request without the right bearer
// key gets 401 with the key echoed back (as some servers do).
class FakeOpenAI {
 public:
  FakeOpenAI() {
    http_.server().Post("/v1/chat/completions",
                        [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); });
    http_.start();
  }
  std::string base_url() const { return http_.url() + "/v1"; }
  int requests() {
    std::lock_guard<std::mutex> g(mu_);
    return requests_;
  }
  int requests_with(const std::string& marker) {
    std::lock_guard<std::mutex> g(mu_);
    int n = 0;
    for (const auto& p : prompts_) n += p.find(marker) != std::string::npos;
    return n;
  }
  std::vector<nlohmann::json> bodies() {
    std::lock_guard<std::mutex> g(mu_);
    return bodies_;
  }
  std::vector<std::string> auths() {
    std::lock_guard<std::mutex> g(mu_);
    return auths_;
  }
  int max_in_flight() const { return max_in_flight_; }
  std::atomic<bool> down{true};
  std::atomic<int> sleep_ms_for_all{0};

 private:
  static std::string completion(const std::string& content) {
    return nlohmann::json{
        {"id", "x"},
        {"object", "chat.completion"},
        {"choices",
         {{{"index", 0}, {"message", {{"role", "assistant"}, {"content", content}}}, {"finish_reason", "stop"}}}}}
        .dump();
  }

  void handle(const httplib::Request& req, httplib::Response& res) {
    int now = ++in_flight_;
    for (int m = max_in_flight_; now > m && !max_in_flight_.compare_exchange_weak(m, now);) {
    }
    struct Dec {
      std::atomic<int>& n;
      ~Dec() { --n; }
    } dec{in_flight_};
    auto body = nlohmann::json::parse(req.body, nullptr, false);
    std::string prompt = body.is_discarded() ? "" : body["messages"][0].value("content", "");
    int seen;
    {
      std::lock_guard<std::mutex> g(mu_);
      ++requests_;
      prompts_.push_back(prompt);
      bodies_.push_back(body);
      auths_.push_back(req.get_header_value("Authorization"));
      seen = ++per_prompt_[prompt];
    }
    if (sleep_ms_for_all > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_for_all.load()));
    if (req.get_header_value("Authorization") != "Bearer " + kKey) {
      res.status = 401;
      res.set_content(
          nlohmann::json{{"error",
                          {{"message", "Incorrect API key provided: " + req.get_header_value("Authorization")},
                           {"type", "invalid_request_error"}}}}
              .dump(),
          "application/json");
      return;
    }
    auto has = [&](const char* m) { return prompt.find(m) != std::string::npos; };
    if (has("RATE-LIMIT") && seen == 1) {
      res.status = 429;
      res.set_header("Retry-After", "1");
      res.set_content(R"({"error":{"message":"Rate limit reached"}})", "application/json");
      return;
    }
    if ((has("FLAKY-500") && seen == 1) || (has("DOWN") && down)) {
      res.status = 500;
      res.set_content("internal error", "text/plain");
      return;
    }
    if (has("SLOW") && down) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    if (has("MALFORMED") && down) {
      res.set_content("{\"choices\": [", "application/json");
      return;
    }
    if (has("EMPTY") && down) {
      res.set_content(R"({"id":"x","choices":[]})", "application/json");
      return;
    }
    if (has("ECHO-KEY")) {  // a reply quoting the request's credentials back
      res.set_content(completion("yes " + req.get_header_value("Authorization")), "application/json");
      return;
    }
    if (has("GZIP-REPLY")) {  // a gzip body (the completion "Yes.") whether or not it was asked for
      static const char kGz[] =
          "\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\x1d\x8c\xc1\x0a\x83\x40\x0c\x44\x7f\x45\x72\x2e\xd2\x73\xff\xa4\x94\x52\xd2\x98\x76\x23\x9a\x88\xc9\x41\x58\xf6\xdf\xcd\x7a\x9b\x99\xc7\xbc\x0a\x32\xc1\x63\x80\x03\x6e\x03\xd8\x77\x66\x8a\x5e\xa9\x60\x8c\x64\xeb\xb6\x70\x88\x69\x87\x54\x4c\x88\x3d\xe9\xab\x82\xe8\xc4\x47\xc6\x7b\x82\x95\xdd\xf1\xcf\xd9\x2a\xec\xb6\xf4\x00\xe8\x2e\x1e\xa8\x71\x3d\x4d\x83\xf5\xf2\x3e\xd9\x47\x68\xb9\xfd\x44\xc5\xcb\x67\x67\xf4\xd4\x27\xf1\xb0\x0d\xda\xbb\x9d\xfd\x79\xb4\x67\x91\x00\x00\x00";
      res.set_header("Content-Encoding", "gzip");
      res.set_content(std::string(kGz, sizeof kGz - 1), "application/json");
      return;
    }
    if (has("BINARY-REPLY")) {  // raw binary that is not JSON
      res.set_content(std::string("\x1f\x8b\x08\x00\xff\xfe\x01garbage", 14), "application/octet-stream");
      return;
    }
    res.set_content(completion(has("ANSWER-NO") ? "no" : "Yes."), "application/json");
  }

  std::mutex mu_;
  int requests_ = 0;
  std::vector<std::string> prompts_, auths_;
  std::vector<nlohmann::json> bodies_;
  std::map<std::string, int> per_prompt_;
  std::atomic<int> in_flight_{0}, max_in_flight_{0};
  test::LocalHttpServer http_;  // last: stopped before the state its handlers use is destroyed
};

JudgeOptions fast_opts() {
  JudgeOptions o;
  o.timeout_s = 0.3;
  o.connect_timeout_s = 0.3;
  o.max_retries = 2;
  o.backoff_base_s = 0.001;
  o.backoff_max_s = 0.01;
  o.concurrency = 4;
  o.jitter_seed = 7;
  return o;
}

OpenAIJudge make_client(const FakeOpenAI& srv, JudgeOptions o = fast_opts(), const std::string& key = kKey) {
  OpenAIEndpoint ep;
  ep.base_url = srv.base_url() + "/";  // a trailing slash is dropped
  ep.api_key = key;
  return OpenAIJudge("judge-model", ep, o);
}

LmeJob job(const std::string& type, bool abs, const std::string& prediction) {
  return LmeJob{type, abs, "Where did I go in May?", "Cafe Zurich", prediction};
}

fs::path temp_path(const std::string& tag) {
  fs::path p = fs::temp_directory_path() / ("kvb_judge_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

}  // namespace

// ---------------------------------------------------------------- templates and verdicts

TEST(JudgeTemplates, TemplateTextsEqualTheReferenceNote) {
  auto g = goldens();
  ASSERT_EQ(g["templates"].size(), 5u);
  for (auto& [name, text] : g["templates"].items())
    EXPECT_EQ(lme_template_text(by_name(name)), text.get<std::string>()) << name;
}

TEST(JudgeTemplates, RenderedPromptPerQuestionTypeEqualsPythonFormat) {
  auto g = goldens();
  ASSERT_GE(g["cases"].size(), 12u);
  for (const auto& c : g["cases"]) {
    const std::string qt = c["question_type"], tn = c["template"];
    const bool abs = c["abstention"];
    LmeTemplate t = lme_template_for(qt, abs);
    EXPECT_STREQ(lme_template_name(t), tn.c_str()) << qt << " abs=" << abs;
    EXPECT_EQ(lme_judge_prompt(t, c["question"].get<std::string>(), c["answer"].get<std::string>(),
                               c["response"].get<std::string>()),
              c["prompt"].get<std::string>())
        << qt << " abs=" << abs;
  }
}

TEST(JudgeTemplates, UnknownQuestionTypeAndBadMetadataAreClearErrors) {
  EXPECT_THROW(lme_template_for("multi-hop", false), Error);
  try {
    lme_template_for("multi-hop", false);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multi-hop"), std::string::npos);
  }
  EXPECT_EQ(lme_template_for("multi-hop", true), LmeTemplate::kAbstention);  // _abs overrides the type
  nlohmann::json meta = {{"question_type", "knowledge-update"}, {"question", "Q?"}, {"abstention", false}};
  auto j = lme_job("pred", {"gold"}, meta);
  EXPECT_EQ(j.answer, "gold");
  EXPECT_EQ(j.prediction, "pred");
  try {
    lme_job("pred", {"gold"}, {{"question_type", "knowledge-update"}});
    ADD_FAILURE() << "no error for a missing question";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'question'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lme_job("p", {"g"}, {{"question_type", "knowledge-update"}, {"question", "Q"}, {"abstention", "no"}}),
               Error);
  EXPECT_THROW(lme_job("p", {}, meta), Error);
}

TEST(JudgeTemplates, VerdictIsYesSubstringOfLowercasedReply) {
  auto g = goldens();
  ASSERT_GE(g["verdicts"].size(), 20u);
  for (const auto& v : g["verdicts"])
    EXPECT_EQ(lme_verdict(v["reply"].get<std::string>()), v["label"].get<bool>()) << v["reply"];
}

TEST(JudgeTemplates, RegistryGraderWithoutJudgeIsUngraded) {
  nlohmann::json meta = {{"question_type", "temporal-reasoning"}, {"question", "Q?"}, {"abstention", false}};
  Grade g = grade(kLongMemEvalJudgeGrader, "some answer", {"gold"}, meta);
  EXPECT_TRUE(g.ungraded);
  EXPECT_NE(g.reason.find("--judge"), std::string::npos);
  EXPECT_NE(g.reason.find("temporal-reasoning"), std::string::npos);
  EXPECT_TRUE(is_judge_grader("judge_longmemeval"));
  EXPECT_FALSE(is_judge_grader("math"));
}

TEST(JudgeSpecs, ParseAndReject) {
  auto s = JudgeSpec::parse("openai:gpt-4o-2024-08-06");
  EXPECT_EQ(s.kind, "openai");
  EXPECT_EQ(s.model, "gpt-4o-2024-08-06");
  EXPECT_EQ(JudgeSpec::parse("local:../models/x:y").model, "../models/x:y");
  EXPECT_THROW(JudgeSpec::parse("gpt-4o"), Error);
  EXPECT_THROW(JudgeSpec::parse("anthropic:claude"), Error);
  EXPECT_THROW(JudgeSpec::parse("openai:"), Error);
}

TEST(JudgeClient, RetryAfterParsing) {
  EXPECT_DOUBLE_EQ(parse_retry_after("1", 0), 1.0);
  EXPECT_DOUBLE_EQ(parse_retry_after("120", 0), 120.0);
  EXPECT_DOUBLE_EQ(parse_retry_after("0.25", 0), 0.25);
  // Sun, 06 Nov 1994 08:49:37 GMT = 784111777 (RFC 9110's example date).
  EXPECT_DOUBLE_EQ(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784111777 - 30), 30.0);
  EXPECT_DOUBLE_EQ(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784111777 + 30), 0.0);
  EXPECT_LT(parse_retry_after("soon", 0), 0);
  EXPECT_LT(parse_retry_after("", 0), 0);
}

TEST(JudgeClient, ParseChatCompletionErrors) {
  std::string c, e;
  EXPECT_TRUE(parse_chat_completion(R"({"choices":[{"message":{"role":"assistant","content":"yes"}}]})", c, e));
  EXPECT_EQ(c, "yes");
  EXPECT_FALSE(parse_chat_completion("<html>", c, e));
  EXPECT_NE(e.find("malformed JSON"), std::string::npos);
  EXPECT_FALSE(parse_chat_completion(R"({"choices":[]})", c, e));
  EXPECT_EQ(e, "empty choices in response");
  EXPECT_FALSE(parse_chat_completion(R"({"id":"x"})", c, e));
  EXPECT_EQ(e, "empty choices in response");
  EXPECT_FALSE(parse_chat_completion(R"({"choices":[{"message":{"content":null}}]})", c, e));
  EXPECT_NE(e.find("content"), std::string::npos);
  EXPECT_FALSE(parse_chat_completion(R"({"error":{"message":"overloaded"}})", c, e));
  EXPECT_NE(e.find("overloaded"), std::string::npos);
}

// ---------------------------------------------------------------- the HTTP client

TEST(JudgeClient, YesNoRepliesAndTheRequestSent) {
  FakeOpenAI srv;
  auto cl = make_client(srv);
  auto r = cl.ask({"judge this: ANSWER-YES", "judge this: ANSWER-NO"});
  ASSERT_EQ(r.size(), 2u);
  ASSERT_TRUE(r[0].ok) << r[0].error;
  ASSERT_TRUE(r[1].ok) << r[1].error;
  EXPECT_EQ(r[0].text, "Yes.");
  EXPECT_EQ(r[1].text, "no");
  EXPECT_TRUE(lme_verdict(r[0].text));
  EXPECT_FALSE(lme_verdict(r[1].text));
  EXPECT_EQ(r[0].attempts, 1);
  EXPECT_EQ(r[0].http_status, 200);
  EXPECT_EQ(srv.requests(), 2);
  // The body is LongMemEval's call: one user message, temperature 0, max_tokens 10, n 1.
  for (const auto& b : srv.bodies()) {
    EXPECT_EQ(b["model"], "judge-model");
    ASSERT_EQ(b["messages"].size(), 1u);
    EXPECT_EQ(b["messages"][0]["role"], "user");
    EXPECT_EQ(b["temperature"], 0.0);
    EXPECT_EQ(b["max_tokens"], 10);
    EXPECT_EQ(b["n"], 1);
  }
  for (const auto& a : srv.auths()) EXPECT_EQ(a, "Bearer " + kKey);
  EXPECT_EQ(cl.request_json("p").find(kKey), std::string::npos);
}

TEST(JudgeClient, RateLimitIsRetriedAfterRetryAfter) {
  FakeOpenAI srv;
  auto cl = make_client(srv);
  auto t0 = Clock::now();
  auto r = cl.ask({"RATE-LIMIT please"});
  const double dt = seconds_since(t0);
  ASSERT_TRUE(r[0].ok) << r[0].error;
  EXPECT_EQ(r[0].attempts, 2);
  EXPECT_EQ(srv.requests(), 2);
  EXPECT_GE(dt, 0.95);  // Retry-After: 1 honoured although the backoff base is 1 ms
  EXPECT_LT(dt, 5.0);
}

TEST(JudgeClient, ServerErrorsAreRetriedThenReported) {
  FakeOpenAI srv;
  auto cl = make_client(srv);
  auto r = cl.ask({"FLAKY-500 once", "DOWN for good"});
  ASSERT_TRUE(r[0].ok) << r[0].error;
  EXPECT_EQ(r[0].attempts, 2);
  EXPECT_FALSE(r[1].ok);
  EXPECT_EQ(r[1].attempts, 3);  // 1 + max_retries
  EXPECT_EQ(r[1].http_status, 500);
  EXPECT_NE(r[1].error.find("HTTP 500"), std::string::npos) << r[1].error;
  EXPECT_NE(r[1].error.find("gave up after 3 attempts"), std::string::npos) << r[1].error;
  EXPECT_EQ(srv.requests(), 5);
}

TEST(JudgeClient, TimeoutIsRetriedThenReported) {
  FakeOpenAI srv;
  auto o = fast_opts();
  o.max_retries = 1;
  auto cl = make_client(srv, o);
  auto t0 = Clock::now();
  auto r = cl.ask({"SLOW server"});
  const double dt = seconds_since(t0);
  EXPECT_FALSE(r[0].ok);
  EXPECT_EQ(r[0].attempts, 2);
  EXPECT_EQ(r[0].http_status, 0);
  EXPECT_NE(r[0].error.find("timeout after 0.3 s"), std::string::npos) << r[0].error;
  EXPECT_GE(dt, 0.55);
  EXPECT_LT(dt, 1.9);  // two 0.3 s timeouts, not two 1 s server sleeps
}

TEST(JudgeClient, MalformedEmptyAndUnauthorizedFailAtOnce) {
  FakeOpenAI srv;
  auto cl = make_client(srv);
  auto r = cl.ask({"MALFORMED body", "EMPTY choices"});
  EXPECT_FALSE(r[0].ok);
  EXPECT_EQ(r[0].attempts, 1);
  EXPECT_NE(r[0].error.find("malformed JSON response"), std::string::npos) << r[0].error;
  EXPECT_NE(r[0].error.find("judge openai:judge-model"), std::string::npos) << r[0].error;
  EXPECT_FALSE(r[1].ok);
  EXPECT_EQ(r[1].attempts, 1);
  EXPECT_NE(r[1].error.find("empty choices"), std::string::npos) << r[1].error;

  const std::string wrong = "sk-WRONG-key-that-must-not-leak";
  auto bad = make_client(srv, fast_opts(), wrong);
  auto u = bad.ask({"ANSWER-YES"});
  EXPECT_FALSE(u[0].ok);
  EXPECT_EQ(u[0].attempts, 1);  // 4xx other than 408/429: not retried
  EXPECT_EQ(u[0].http_status, 401);
  EXPECT_NE(u[0].error.find("HTTP 401"), std::string::npos) << u[0].error;
  EXPECT_NE(u[0].error.find("Incorrect API key"), std::string::npos) << u[0].error;
  EXPECT_EQ(u[0].error.find(wrong), std::string::npos) << "the key leaked: " << u[0].error;
  EXPECT_EQ(srv.requests(), 3);
}

TEST(JudgeClient, EchoedKeyIsRedactedGzipDecodedBinaryEscaped) {
  FakeOpenAI srv;
  auto cl = make_client(srv);
  auto r = cl.ask({"ECHO-KEY please", "GZIP-REPLY please", "BINARY-REPLY please"});
  ASSERT_TRUE(r[0].ok) << r[0].error;
  EXPECT_EQ(r[0].text.find(kKey), std::string::npos) << "the key is in the stored reply: " << r[0].text;
  EXPECT_NE(r[0].text.find("yes Bearer ***"), std::string::npos) << r[0].text;
  ASSERT_TRUE(r[1].ok) << r[1].error;
  EXPECT_EQ(r[1].text, "Yes.");  // decoded, not the gzip bytes
  EXPECT_FALSE(r[2].ok);
  for (char c : r[2].error) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "non-printable byte in: " << r[2].error;
  EXPECT_NE(r[2].error.find("\\x8b"), std::string::npos) << r[2].error;
}

TEST(JudgeClient, EndpointIsCheckedBeforeAnyRequest) {
  auto refused = [](const std::string& url, const std::string& key, const std::string& what) {
    OpenAIEndpoint ep;
    ep.base_url = url;
    ep.api_key = key;
    try {
      OpenAIJudge j("m", ep, fast_opts());
      ADD_FAILURE() << url << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("sk-secret"), std::string::npos) << e.what();
    }
  };
  refused("file:///etc/passwd", "", "OPENAI_BASE_URL: 'file:///etc/passwd': must be an http:// or https:// URL");
  refused("ftp://example.com/v1", "", "must be an http:// or https://");
  refused("http://", "", "no host name");
  refused("https://:443/v1", "", "no host name");
  refused("http://host:99999/v1", "", "bad port");
  refused("http://ho st/v1", "", "space or control character");
  refused("http://localhost/v1", "sk-secret\r\nX-Injected: 1", "OPENAI_API_KEY: contains a control character");
  OpenAIEndpoint ok;
  ok.base_url = "HTTPS://user@example.com:8443/v1";
  ok.api_key = "sk-secret";
  EXPECT_NO_THROW(OpenAIJudge("m", ok, fast_opts()));
}

TEST(JudgeClient, ConnectionRefusedIsAFailedReplyNotAThrow) {
  // A port that was bound and closed without listen(): connecting there is refused.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  ::close(fd);
  OpenAIEndpoint ep;
  ep.base_url = "http://127.0.0.1:" + std::to_string(port) + "/v1";
  ep.api_key = kKey;
  OpenAIJudge cl("m", ep, fast_opts());
  auto r = cl.ask({"x"});
  EXPECT_FALSE(r[0].ok);
  EXPECT_EQ(r[0].attempts, 3);
  EXPECT_NE(r[0].error.find("request failed"), std::string::npos) << r[0].error;
}

TEST(JudgeClient, RequestsRunConcurrently) {
  FakeOpenAI srv;
  srv.sleep_ms_for_all = 100;
  auto o = fast_opts();
  o.concurrency = 4;
  o.timeout_s = 2;
  auto cl = make_client(srv, o);
  std::vector<std::string> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back("ANSWER-YES #" + std::to_string(i));
  auto t0 = Clock::now();
  auto r = cl.ask(prompts);
  const double dt = seconds_since(t0);
  for (const auto& x : r) EXPECT_TRUE(x.ok) << x.error;
  EXPECT_GE(srv.max_in_flight(), 2);
  EXPECT_LE(srv.max_in_flight(), 4);
  EXPECT_LT(dt, 0.75);  // serial would take >= 0.8 s
  EXPECT_THROW(OpenAIJudge("m", OpenAIEndpoint{},
                           [] {
                             JudgeOptions b;
                             b.concurrency = 0;
                             return b;
                           }()),
               Error);
  EXPECT_THROW(OpenAIJudge("", OpenAIEndpoint{}, JudgeOptions{}), Error);
}

// ---------------------------------------------------------------- judging with the cache

TEST(JudgeCache, VerdictsAreCachedFailuresAreNot) {
  FakeOpenAI srv;
  auto cl = make_client(srv);
  auto db = temp_path("cache.db");
  results::Store store(db.string());
  std::vector<LmeJob> jobs = {job("single-session-user", false, "ANSWER-YES: Cafe Zurich"),
                              job("temporal-reasoning", false, "ANSWER-NO: Paris"),
                              job("knowledge-update", true, "ANSWER-YES I don't know"),
                              job("single-session-user", false, "ANSWER-YES: Cafe Zurich"),  // duplicate of 0
                              job("multi-session", false, "DOWN"),
                              job("single-session-preference", false, "MALFORMED")};
  auto out = judge_longmemeval(cl, &store, jobs);
  ASSERT_EQ(out.size(), jobs.size());
  EXPECT_EQ(out[0].grade.score, 1.0);
  EXPECT_FALSE(out[0].grade.ungraded);
  EXPECT_EQ(out[0].grade.extracted, "Yes.");
  EXPECT_NE(out[0].grade.reason.find("judge openai:judge-model (default): yes"), std::string::npos)
      << out[0].grade.reason;
  EXPECT_EQ(out[1].grade.score, 0.0);
  EXPECT_FALSE(out[1].grade.ungraded);
  EXPECT_NE(out[1].grade.reason.find("temporal-reasoning"), std::string::npos);
  EXPECT_EQ(out[2].grade.score, 1.0);
  EXPECT_NE(out[2].grade.reason.find("abstention"), std::string::npos);
  EXPECT_EQ(out[3].grade.score, 1.0);
  EXPECT_EQ(out[3].judge_key, out[0].judge_key);
  EXPECT_TRUE(out[4].grade.ungraded);
  EXPECT_FALSE(out[4].judge_key);
  EXPECT_NE(out[4].grade.reason.find("HTTP 500"), std::string::npos);
  EXPECT_TRUE(out[5].grade.ungraded);
  EXPECT_NE(out[5].grade.reason.find("malformed JSON"), std::string::npos);
  // 3 distinct verdicts asked once each, DOWN 3 attempts, MALFORMED 1; the duplicate not asked.
  EXPECT_EQ(srv.requests(), 3 + 3 + 1);
  EXPECT_EQ(srv.requests_with("ANSWER-YES: Cafe Zurich"), 1);
  // The judge saw exactly the rendered template.
  EXPECT_EQ(srv.bodies()[0]["messages"][0]["content"].get<std::string>().find("I will give you"), 0u);
  auto rows = store.query("SELECT judge_model, template, score, response, request FROM judge_cache ORDER BY template");
  ASSERT_EQ(rows.size(), 3u);  // verdicts only
  EXPECT_EQ(rows[0][0], "openai:judge-model");
  EXPECT_EQ(rows[0][1], "abstention");
  EXPECT_EQ(rows[1][1], "default");
  EXPECT_EQ(rows[2][1], "temporal-reasoning");
  EXPECT_EQ(rows[2][2], "0.0");
  for (const auto& r : rows) EXPECT_EQ(r[4].find(kKey), std::string::npos);
  auto e = store.judge_get(*out[0].judge_key);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->response, "Yes.");
  EXPECT_EQ(e->template_name, "default");

  // Second pass: the verdicts come from the cache (no request); only failures are asked again.
  srv.down = false;
  const int before = srv.requests();
  auto again = judge_longmemeval(cl, &store, jobs);
  EXPECT_EQ(srv.requests() - before, 2);
  for (size_t i : {0, 1, 2, 3}) {
    EXPECT_TRUE(again[i].cache_hit) << i;
    EXPECT_EQ(again[i].attempts, 0);
    EXPECT_EQ(again[i].grade.score, out[i].grade.score);
    EXPECT_NE(again[i].grade.reason.find("(cached)"), std::string::npos);
  }
  EXPECT_FALSE(again[4].grade.ungraded);
  EXPECT_FALSE(again[5].grade.ungraded);
  EXPECT_EQ(store.query("SELECT COUNT(*) FROM judge_cache")[0][0], "5");

  // A different judge model, template or prediction is a different key.
  auto k = lme_judge_key("openai:judge-model", jobs[0]);
  EXPECT_EQ(k, *out[0].judge_key);
  EXPECT_NE(lme_judge_key("openai:other", jobs[0]), k);
  LmeJob t = jobs[0];
  t.question_type = "knowledge-update";
  EXPECT_NE(lme_judge_key("openai:judge-model", t), k);
  t = jobs[0];
  t.prediction += " ";
  EXPECT_NE(lme_judge_key("openai:judge-model", t), k);
  fs::remove(db);
  fs::remove(db.string() + "-wal");
  fs::remove(db.string() + "-shm");
}

// ---------------------------------------------------------------- kvbench grade end to end

namespace {

// Runs the kvbench binary with OPENAI_BASE_URL / OPENAI_API_KEY set; stdout (and stderr unless
// `stdout_only`) captured.
kvb::test::CommandResult run_kvbench(const std::string& args, const std::string& base_url, bool stdout_only = false) {
  std::string cmd = "OPENAI_BASE_URL='" + base_url + "' OPENAI_API_KEY='" + kKey + "' " + KVB_BINARY + " " + args;
  return kvb::test::run_command(stdout_only ? cmd + " 2>/dev/null" : cmd, !stdout_only);
}

}  // namespace

TEST(JudgeCli, GradeJudgesStoresFailuresUngradedAndRetryFailedRegrades) {
  KVB_REQUIRE_BINARY();
  FakeOpenAI srv;
  auto dir = temp_path("cli");
  fs::create_directories(dir);
  const std::string db = (dir / "r.db").string();
  const std::string data = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/datasets";
  // A stored LongMemEval run (fixture: q1 single-session-user, q2_abs abstention), 3 samples
  // each, with generations whose text tells the fake judge what to answer.
  std::map<std::string, std::string> text_of;
  {
    results::Store s(db);
    results::RunInfo info;
    info.kvbench_version = "test";
    info.git_sha = "test";
    info.host = info.backend = info.device = "cpu";
    info.config = {{"tasks", {{{"spec", "longmemeval_oracle"}, {"limit", 0}}}}, {"data_dirs", {data}}};
    info.run_key = results::default_run_key(info);
    int64_t run = s.begin_run(info);
    results::GridSpec g;
    g.models = {{"m", "rev"}};
    g.policies = {{"full", nlohmann::json::object(), false}};
    g.budgets = {64};
    g.examples = {{"longmemeval_oracle", "longmemeval_oracle/q1", "p1"},
                  {"longmemeval_oracle", "longmemeval_oracle/q2_abs", "p2"}};
    g.samples = 3;
    auto items = results::expand_grid(g);
    ASSERT_EQ(items.size(), 6u);
    s.add_work_items(items);
    const std::map<std::pair<std::string, int>, std::string> texts = {
        {{"q1", 0}, "ANSWER-YES It was Café Zürich."}, {{"q1", 1}, "ANSWER-NO Paris."}, {{"q1", 2}, "DOWN"},
        {{"q2_abs", 0}, "ANSWER-YES Unknown."},        {{"q2_abs", 1}, "MALFORMED"},    {{"q2_abs", 2}, "SLOW"}};
    std::vector<results::GenerationRecord> gens;
    for (const auto& it : items) {
      results::GenerationRecord r;
      r.item_key = it.key;
      r.text = texts.at({it.example_id.substr(it.example_id.find('/') + 1), it.sample_index});
      r.finish_reason = "stop";
      text_of[it.key] = r.text;
      gens.push_back(r);
    }
    s.write_batch(run, gens);
  }
  const std::string judge = " --judge openai:judge-model --judge-timeout 0.3 --judge-backoff 0.001 --judge-retries 1";
  auto grades = [&] {
    results::Store s(db);
    std::map<std::string, std::vector<std::string>> m;  // text -> [score, ungraded, reason, grader]
    for (auto& r : s.query("SELECT item_key, score, ungraded, reason, grader FROM grades"))
      m[text_of.at(r[0])] = {r[1], r[2], r[3], r[4]};
    return m;
  };

  // 1. No judge: every sample is stored ungraded and says what is missing; a warning says so,
  // and --strict turns it into exit status 1 (what a nightly job checks).
  auto r = run_kvbench("grade --db " + db + " --strict", srv.base_url());
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("kvbench: warning: 6 of 6 samples are ungraded"), std::string::npos) << r.out;
  r = run_kvbench("grade --db " + db, srv.base_url());
  ASSERT_EQ(r.rc, 0) << r.out;
  auto g = grades();
  ASSERT_EQ(g.size(), 6u);
  for (auto& [t, row] : g) {
    EXPECT_EQ(row[1], "1") << t;
    EXPECT_NE(row[2].find("needs an LLM judge"), std::string::npos) << row[2];
  }
  EXPECT_EQ(srv.requests(), 0);

  // 2. --retry-failed with the judge: verdicts for 3, the failures stay ungraded with a reason.
  r = run_kvbench("grade --db " + db + " --retry-failed" + judge, srv.base_url());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("graded 6 generations"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(3 ungraded)"), std::string::npos) << r.out;
  // Failures are announced, and --strict makes them an exit status (what a nightly job checks).
  EXPECT_NE(r.out.find("kvbench: warning: 3 of 6 samples are ungraded"), std::string::npos) << r.out;
  g = grades();
  EXPECT_EQ(g["ANSWER-YES It was Café Zürich."][0], "1.0");
  EXPECT_EQ(g["ANSWER-YES It was Café Zürich."][1], "0");
  EXPECT_EQ(g["ANSWER-YES It was Café Zürich."][3], "judge_longmemeval:openai:judge-model");
  EXPECT_EQ(g["ANSWER-NO Paris."][0], "0.0");
  EXPECT_EQ(g["ANSWER-YES Unknown."][0], "1.0");
  EXPECT_NE(g["ANSWER-YES Unknown."][2].find("(abstention)"), std::string::npos);
  for (const char* t : {"DOWN", "MALFORMED", "SLOW"}) {
    EXPECT_EQ(g[t][0], "NULL") << t;
    EXPECT_EQ(g[t][1], "1") << t;
  }
  EXPECT_NE(g["DOWN"][2].find("HTTP 500"), std::string::npos) << g["DOWN"][2];
  EXPECT_NE(g["MALFORMED"][2].find("malformed JSON"), std::string::npos) << g["MALFORMED"][2];
  EXPECT_NE(g["SLOW"][2].find("timeout"), std::string::npos) << g["SLOW"][2];
  EXPECT_EQ(srv.requests(), 3 + 2 + 1 + 2);  // verdicts, DOWN x2, MALFORMED x1, SLOW x2

  // 3. The judge recovers: --retry-failed asks for the 3 failed ones only.
  srv.down = false;
  int before = srv.requests();
  r = run_kvbench("grade --db " + db + " --retry-failed" + judge, srv.base_url());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("graded 3 generations"), std::string::npos) << r.out;
  EXPECT_EQ(srv.requests() - before, 3);
  EXPECT_EQ(srv.requests_with("DOWN"), 3);
  g = grades();
  for (auto& [t, row] : g) EXPECT_EQ(row[1], "0") << t << ": " << row[2];
  EXPECT_EQ(g["DOWN"][0], "1.0");

  // 4. A full re-grade makes no request: every verdict is in the cache.
  before = srv.requests();
  r = run_kvbench("grade --db " + db + " --regrade" + judge, srv.base_url());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(srv.requests(), before);
  auto g2 = grades();
  for (auto& [t, row] : g2) {
    EXPECT_EQ(row[0], g[t][0]) << t;
    EXPECT_NE(row[2].find("(cached)"), std::string::npos) << row[2];
  }

  // The key is in no log line and nowhere in the database.
  EXPECT_EQ(r.out.find(kKey), std::string::npos);
  {
    results::Store s(db);
    s.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  }
  std::ifstream f(db, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_GT(bytes.size(), 0u);
  EXPECT_EQ(bytes.find(kKey), std::string::npos);
  EXPECT_EQ(bytes.find("sk-TEST"), std::string::npos);

  // Bad flags: one clear error.
  r = run_kvbench("grade --db " + db + " --regrade --retry-failed", srv.base_url());
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("exclude each other"), std::string::npos) << r.out;
  r = run_kvbench("grade --db " + db + " --judge gpt4", srv.base_url());
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("--judge: 'gpt4'"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

TEST(JudgeCli, RunJudgesWithOpenAIAndLocalJudges) {
  KVB_REQUIRE_BINARY();
  const std::string model = std::string(KVB_TEST_DATA_DIR) + "/models/stories260K-hf";
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  FakeOpenAI srv;
  auto dir = temp_path("run");
  fs::create_directories(dir);
  // The direct, plain-text reading prompt keeps the fixture under stories260K's 512 positions.
  const std::string run = "run --task 'longmemeval_oracle:cot=0,format=nl' --data-dir " + std::string(KVB_SOURCE_DIR) +
                          "/tests/fixtures/datasets --model " + model +
                          " --policies full --max-new-tokens 8 --quiet --db ";
  auto rows = [](const std::string& db) {
    results::Store s(db);
    return s.query(
        "SELECT g.text, gr.score, gr.ungraded, gr.extracted, gr.reason, gr.grader, w.example_id "
        "FROM generations g JOIN grades gr USING (run_id, item_key) JOIN work_items w USING (item_key) "
        "ORDER BY w.example_id");
  };

  // 1. `run --judge openai:...`: every generation judged by the (fake) API while the run goes on.
  const std::string db1 = (dir / "openai.db").string();
  auto r = run_kvbench(run + db1 + " --judge openai:judge-model --judge-timeout 2 --judge-backoff 0.001", srv.base_url());
  ASSERT_EQ(r.rc, 0) << r.out;
  auto g = rows(db1);
  ASSERT_EQ(g.size(), 2u);
  for (const auto& row : g) {
    EXPECT_EQ(row[1], "1.0") << row[4];  // the fake judge says "Yes." to anything without a marker
    EXPECT_EQ(row[2], "0");
    EXPECT_EQ(row[5], "judge_longmemeval:openai:judge-model");
  }
  EXPECT_NE(g[0][4].find("(default)"), std::string::npos) << g[0][4];     // q1: single-session-user
  EXPECT_NE(g[1][4].find("(abstention)"), std::string::npos) << g[1][4];  // q2_abs
  EXPECT_EQ(srv.requests(), 2);
  // The judge was asked LongMemEval's template filled with the fixture's question and answer.
  const std::string q = "Where did I go in {May}?", a = "Café Zürich";
  std::set<std::string> asked;
  for (const auto& b : srv.bodies()) asked.insert(b["messages"][0]["content"].get<std::string>());
  EXPECT_TRUE(asked.count(lme_judge_prompt(LmeTemplate::kDefault, q, a, g[0][0])));
  EXPECT_TRUE(asked.count(lme_judge_prompt(LmeTemplate::kAbstention, q, a, g[1][0])));

  // 2. `run --judge local:MODEL`: the same prompt through kvbench's engine; its reply equals what
  // `kvbench generate` (greedy, 10 new tokens) prints for that prompt, and the verdict is 'yes' in it.
  const std::string db2 = (dir / "local.db").string();
  r = run_kvbench(run + db2 + " --judge local:" + model, srv.base_url());
  ASSERT_EQ(r.rc, 0) << r.out;
  g = rows(db2);
  ASSERT_EQ(g.size(), 2u);
  for (size_t i = 0; i < g.size(); ++i) {
    const auto& row = g[i];
    EXPECT_EQ(row[2], "0") << row[4];
    EXPECT_EQ(row[5], "judge_longmemeval:local:" + model);
    const std::string prompt = lme_judge_prompt(i == 0 ? LmeTemplate::kDefault : LmeTemplate::kAbstention, q, a, row[0]);
    const std::string pf = (dir / ("prompt" + std::to_string(i) + ".txt")).string();
    std::ofstream(pf) << prompt;
    auto gen =
        run_kvbench("generate --model " + model + " --max-new-tokens 10 --prompt \"$(cat " + pf + ")\"", srv.base_url(),
                    /*stdout_only=*/true);
    ASSERT_EQ(gen.rc, 0) << gen.out;
    std::string expect = gen.out;
    while (!expect.empty() && (expect.back() == '\n' || expect.back() == ' ')) expect.pop_back();
    while (!expect.empty() && expect.front() == ' ') expect.erase(expect.begin());
    EXPECT_EQ(row[3], expect);
    EXPECT_FALSE(row[3].empty());
    EXPECT_EQ(row[1], lme_verdict(row[3]) ? "1.0" : "0.0");
  }
  EXPECT_EQ(srv.requests(), 2);  // the local judge made no HTTP request
  fs::remove_all(dir);
}
