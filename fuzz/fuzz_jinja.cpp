// Chat templates: the Jinja lexer, parser and interpreter (engine/chat/jinja/jinja.h) rendering
// a fixed conversation under tight resource limits.
#include "engine/chat/jinja/jinja.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kvb::fuzz::expect_ok_or_error([&] {
    const kvb::jinja::Template t(std::string(kvb::fuzz::as_text(data, size)), "fuzz.jinja");
    nlohmann::ordered_json vars = {
        {"messages",
         {{{"role", "system"}, {"content", "Be brief."}},
          {{"role", "user"}, {"content", "What is 7 times 8?"}},
          {{"role", "assistant"}, {"content", "56"}}}},
        {"add_generation_prompt", true},
        {"bos_token", "<s>"},
        {"eos_token", "</s>"}};
    kvb::jinja::RenderLimits lim;
    lim.max_output_bytes = 1 << 20;
    lim.max_loop_iterations = 100000;
    lim.max_range = 10000;
    (void)t.render(vars, lim);
  });
}
