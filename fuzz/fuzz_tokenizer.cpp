// tokenizer.json → a Tokenizer, then encode/decode of a fixed multilingual text
// (engine/tokenizer/tokenizer.h).
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/io.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kvb::fuzz::expect_ok_or_error([&] {
    const auto j = kvb::parse_json(kvb::fuzz::as_text(data, size), "tokenizer.json");
    const auto tok = kvb::tok::Tokenizer::from_json(j, "tokenizer.json");
    const auto ids = tok.encode("Hello, wörld! 123 你好 <s>\n\t  x", true);
    (void)tok.decode(ids, false);
  });
}
