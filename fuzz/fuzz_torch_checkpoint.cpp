// PyTorch .pth/.pt checkpoints (engine/formats/torch_checkpoint.h): the restricted unpickler on raw
// pickle bytes (first input byte 0) and the whole ZIP reader on a file (first byte 1). Seeds:
// tests/fixtures/pth/*.pth, *.pt (and their data.pkl members).
#include "engine/formats/torch_checkpoint.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] == 0) {
    const std::string_view pkl(reinterpret_cast<const char*>(data + 1), size - 1);
    return kvb::fuzz::expect_ok_or_error(
        [&] { (void)kvb::parse_torch_state_dict_pickle(pkl, "f.pth", "archive/data.pkl"); });
  }
  const std::string path = kvb::fuzz::scratch_file(data + 1, size - 1, "gates.pth");
  return kvb::fuzz::expect_ok_or_error([&] {
    for (const auto& [name, t] : kvb::read_torch_checkpoint(path).tensors)
      if (t.numel() > 0) (void)t.data()[t.numel() * kvb::torch_dtype_size(t.dtype) - 1];
  });
}
