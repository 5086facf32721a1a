// LLM-judge replies (graders/judge.h, graders/judge_longmemeval.h): a chat-completions response
// body as the server sends it, its Retry-After header and the verdict read from the reply text.
// None of these throw: malformed bodies are reported through parse_chat_completion's error.
#include "fuzz/fuzz_support.h"
#include "graders/judge.h"
#include "graders/judge_longmemeval.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(kvb::fuzz::as_text(data, size));
  std::string content, error;
  if (kvb::graders::parse_chat_completion(body, content, error)) {
    (void)kvb::graders::lme_verdict(content);
  } else if (error.empty() || error.find('\n') != std::string::npos) {
    __builtin_trap();  // a failure must say why, on one line
  }
  (void)kvb::graders::parse_retry_after(kvb::fuzz::as_text(data, size < 64 ? size : 64), 1700000000);
  return 0;
}
