// safetensors headers and tensor ranges (engine/model/weights.h WeightStore::add_safetensors_file).
#include "engine/model/weights.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kvb::fuzz::scratch_file(data, size, "model.safetensors");
  return kvb::fuzz::expect_ok_or_error([&] {
    kvb::WeightStore ws;
    ws.add_safetensors_file(path);
    for (const char* n : {"a", "model.embed_tokens.weight"})
      if (const auto* t = ws.find(n)) (void)kvb::WeightStore::to_f32(*t);
  });
}
