// Chat templates: the Jinja lexer, parser and interpreter (engine/chat/jinja/jinja.h) rendering
// a fixed conversation under tight resource limits. fuzz/regressions/fuzz_jinja/ holds templates
// that grow lists without bound (issue 31); tools/fuzz.sh replays them and seeds the corpus.
#include "engine/chat/jinja/jinja.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kvb::fuzz::expect_ok_or_error([&] {
    const kvb::jinja::Template t(std::string(kvb::fuzz::as_text(data, size)), "fuzz.jinja");
    nlohmann::ordered_json vars = {{"messages",
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
    // Lists may grow by concatenation, repetition and nesting (`l + l`, `[l] * n`, `[l, l]`) as
    // well as strings: the bound on a value's weight (elements, shared parts counted each time)
    // must stop every such growth; a lower bound than kvbench's keeps each input fast. Memory
    // beyond -rss_limit_mb (tools/fuzz.sh) or a timeout is a finding.
    lim.max_value_weight = 1u << 16;
    (void)t.render(vars, lim);
  });
}
