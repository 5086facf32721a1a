// GGUF metadata, tensor table, config and tokenizer conversion (engine/model/gguf.h).
#include "engine/model/gguf.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kvb::fuzz::scratch_file(data, size, "model.gguf");
  return kvb::fuzz::expect_ok_or_error([&] {
    const kvb::GgufFile f = kvb::GgufFile::open(path);
    try {
      (void)kvb::gguf_model_config(f);
    } catch (const kvb::Error&) {
    }
    (void)kvb::gguf_tokenizer_json(f).dump();
    (void)kvb::gguf_tokenizer_config(f).dump();
  });
}
