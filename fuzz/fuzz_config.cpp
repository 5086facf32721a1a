// config.json (+ generation_config.json) of a model directory (engine/model/config.h).
#include <filesystem>

#include "engine/model/config.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kvb::fuzz::scratch_file(data, size, "config.json");
  return kvb::fuzz::expect_ok_or_error([&] {
    const kvb::ModelConfig c = kvb::ModelConfig::from_dir(std::filesystem::path(path).parent_path().string());
    c.validate("fuzz");
  });
}
