// kvb::WeightStore — named weight tensors of a model, in Hugging Face (transformers) names,
// e.g. "model.layers.0.self_attn.q_proj.weight" [out, in]. Tensors are either views into
// memory-mapped safetensors files (F32/F16/BF16) or owned f32 buffers (GGUF, dequantised at load).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/util/io.h"

namespace kvb {

/// Element type of a stored tensor.
enum class DType { F32, F16, BF16 };

/// Size of one element in bytes.
size_t dtype_size(DType t);
/// "F32", "F16" or "BF16".
const char* dtype_name(DType t);

/// bf16 bits -> f32 (exact).
inline float bf16_bits_to_f32(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
/// IEEE 754 binary16 (half) bits -> f32, exact for every input (as numpy's float16 -> float32
/// cast): zeros keep their sign, subnormals are normalised, inf/NaN keep sign and payload.
/// The one half -> float conversion of the project (safetensors F16 tensors and GGUF F16 data
/// and block scales both use it).
inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: shift the mantissa up to the implicit bit, lowering the exponent
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
/// f32 -> bf16 bits, round to nearest even (as torch's .to(torch.bfloat16)); NaN stays NaN.
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t bits;
  __builtin_memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

/// A read-only view of one named tensor. `data` stays valid while the WeightStore lives.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  ///< row-major, outermost first (safetensors / torch order)
  const void* data = nullptr;
  std::string origin;          ///< file it came from (for error messages)
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
};

/// All tensors of one model.
class WeightStore {
 public:
  /// Maps DIR/model.safetensors, or every shard listed in DIR/model.safetensors.index.json.
  /// Validates each header (JSON, dtypes, offsets within the file, sizes = shape × dtype).
  /// Throws kvb::Error naming the file and the tensor/field.
  static WeightStore from_safetensors_dir(const std::string& dir);
  /// Maps one .safetensors file and adds its tensors. Throws kvb::Error.
  void add_safetensors_file(const std::string& path);
  /// Adds an owned f32 tensor (used by GGUF loading and random-weight models).
  void add_owned(const std::string& name, std::vector<int64_t> shape, std::vector<float> data,
                 const std::string& origin);
  /// Adds an owned bf16 tensor (bits as uint16_t; random-weight models built directly in bf16,
  /// so that an 8B-parameter benchmark model holds 2 bytes per weight, not 4 + 2).
  void add_owned_bf16(const std::string& name, std::vector<int64_t> shape, std::vector<uint16_t> bits,
                      const std::string& origin);

  /// The tensor `name`, or nullptr.
  const TensorView* find(const std::string& name) const;
  /// The tensor `name` with exactly `shape`; throws kvb::Error("<origin>: tensor <name>: ...")
  /// when missing or shaped differently.
  const TensorView& require(const std::string& name, const std::vector<int64_t>& shape) const;
  /// Copies a tensor into f32 (converting F16/BF16).
  static std::vector<float> to_f32(const TensorView& t);

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  /// Where the tensors came from (a directory or file), for error messages.
  std::string origin;

 private:
  template <typename T>
  void add_owned_buffer(const std::string& name, std::vector<int64_t> shape, DType dtype, std::vector<T> data,
                        const std::string& origin);
  std::vector<std::shared_ptr<MappedFile>> files_;
  std::vector<std::shared_ptr<const void>> owned_;  // f32 or bf16 buffers of add_owned*
  std::map<std::string, TensorView> tensors_;
};

}  // namespace kvb
