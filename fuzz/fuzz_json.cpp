// JSON with the project's limits (engine/util/io.h parse_json): config.json, tokenizer.json,
// safetensors headers, dataset records, --messages, judge replies.
#include "engine/util/io.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kvb::fuzz::expect_ok_or_error([&] {
    const auto j = kvb::parse_json(kvb::fuzz::as_text(data, size), "fuzz.json");
    (void)j.dump();
  });
}
