// kvb::WeightStore — named weight tensors of a model, in Hugging Face (transformers) names,
// e.g. "model.layers.0.self_attn.q_proj.weight" [out, in]. Tensors are either views into
// memory-mapped files (safetensors F32/F16/BF16; GGUF tensors in their stored ggml type, block
// quantised included) or owned buffers (random-weight models).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/kernels/quants.h"
#include "engine/util/io.h"

namespace kvb {

/// Size of one element in bytes for F32 / F16 / BF16 (the safetensors types); the block size
/// in bytes over the block's elements is not an integer for the quantised types: use
/// dtype_row_bytes (engine/kernels/quants.h) for those.
size_t dtype_size(DType t);

/// A read-only view of one named tensor. `data` stays valid while the WeightStore lives.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  ///< row-major, outermost first (safetensors / torch order)
  const void* data = nullptr;
  std::string origin;  ///< file it came from (for error messages)
  /// When set, logical row r (of shape[0] rows) is stored at row (*row_index)[r]: a GGUF llama
  /// file's Q/K weights are in llama.cpp's rotary row order, undone by this index without a copy.
  std::shared_ptr<const std::vector<int32_t>> row_index;
  int64_t numel() const;
  size_t nbytes() const { return dtype_row_bytes(dtype, numel()); }
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
  /// Adds a tensor whose bytes live in `keepalive` (a MappedFile or a buffer, kept alive by the
  /// store): `data` points into it and holds shape × dtype bytes (the caller checked). Used by
  /// GGUF loading (views into the mapped file) and tests.
  void add_view(const std::string& name, std::vector<int64_t> shape, DType dtype, const void* data,
                std::shared_ptr<const void> keepalive, std::shared_ptr<const std::vector<int32_t>> row_index,
                const std::string& origin);
  /// Adds an owned f32 tensor (random-weight models, tests).
  void add_owned(const std::string& name, std::vector<int64_t> shape, std::vector<float> data, const std::string& origin);
  /// Adds an owned bf16 tensor (bits as uint16_t; random-weight models built directly in bf16,
  /// so that an 8B-parameter benchmark model holds 2 bytes per weight, not 4 + 2).
  void add_owned_bf16(const std::string& name, std::vector<int64_t> shape, std::vector<uint16_t> bits,
                      const std::string& origin);

  /// The tensor `name`, or nullptr.
  const TensorView* find(const std::string& name) const;
  /// The tensor `name` with exactly `shape`; throws kvb::Error("<origin>: tensor <name>: ...")
  /// when missing or shaped differently.
  const TensorView& require(const std::string& name, const std::vector<int64_t>& shape) const;
  /// Copies a tensor into f32 in logical row order (converting F16/BF16, dequantising block
  /// types with dequantize_row, applying row_index).
  static std::vector<float> to_f32(const TensorView& t);

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  /// Where the tensors came from (a directory or file), for error messages.
  std::string origin;

 private:
  template <typename T>
  void add_owned_buffer(const std::string& name, std::vector<int64_t> shape, DType dtype, std::vector<T> data,
                        const std::string& origin);
  std::vector<std::shared_ptr<MappedFile>> files_;
  std::vector<std::shared_ptr<const void>> owned_;  // buffers of add_owned*, mappings of add_view
  std::map<std::string, TensorView> tensors_;
};

}  // namespace kvb
