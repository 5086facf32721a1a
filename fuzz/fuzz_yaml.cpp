// YAML → JSON (datasets/records.h parse_yaml): suites, run --config, LongProc's prompts.yaml.
#include "datasets/records.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kvb::fuzz::expect_ok_or_error([&] {
    const auto j = kvb::datasets::parse_yaml(std::string(kvb::fuzz::as_text(data, size)), "fuzz.yaml");
    (void)j.dump();
  });
}
