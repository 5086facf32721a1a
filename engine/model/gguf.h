// GGUF model files (llama.cpp's format): parsing, dequantisation, and loading into the engine's
// ModelConfig / WeightStore / tokenizer.json shapes.
//
// Format reference: ggml docs/gguf.md (header "GGUF", version 2 or 3, tensor_count, kv_count,
// metadata key/values, tensor infos, padding to `general.alignment` (default 32), tensor data).
// Dequantisation follows ggml's reference kernels as implemented by PyPI `gguf` (gguf/quants.py)
// and equals it bit for bit (tests/gguf). Conversion to Hugging Face names, the undoing of
// llama.cpp's Q/K row permutation and the tokenizer conversion follow transformers'
// GGUF loader (modeling_gguf_pytorch_utils.py, integrations/gguf/gguf_tokenizer_mapping.py).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/kernels/quants.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "engine/util/io.h"

namespace kvb {

// clang-format off
/// GGUF metadata value types (the numbering of the file format).
enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, UINT64 = 10, INT64 = 11,
  FLOAT32 = 6, FLOAT64 = 12, BOOL = 7, STRING = 8, ARRAY = 9,
};
// clang-format on
/// "UINT8", ..., "FLOAT64"; "?" for values outside the enum.
const char* gguf_value_type_name(GgufValueType t);

/// A ggml tensor element type id (the numbering of ggml.h enum ggml_type / gguf-py
/// GGMLQuantizationType): ggml_type_traits names every id ggml defines, and the ones
/// `gguf_type_supported` accepts are exactly the values of kvb::DType (engine/kernels/quants.h),
/// which converts with a cast. A file holding another type parses and fails with a clear message
/// only when such a tensor is loaded.
enum class GgmlType : uint32_t {};

/// Block geometry of a ggml type: `block_size` elements are stored in `type_size` bytes.
struct GgmlTypeTraits {
  const char* name = nullptr;  ///< "Q4_K", ...; nullptr for a type id ggml does not define
  int64_t block_size = 0;
  int64_t type_size = 0;
};
/// Traits of type id `t` (name == nullptr for an unknown id).
GgmlTypeTraits ggml_type_traits(uint32_t t);
/// True for the types `dequantize` implements (and the CPU backend multiplies in place): F32,
/// F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K — the members of kvb::DType.
bool gguf_type_supported(GgmlType t);

/// Dequantises `n` elements of type `type` stored at `data` into `out` (float32).
/// `n` must be a multiple of the type's block size. Bit-identical to gguf-py's
/// `gguf.quants.dequantize` (same float32 operation order: Q4_1/Q5_1 = d*q + m, K-quants =
/// (d*sc)*q - (dmin*m), Q6_K = (d*sc)*q); the work is kvb::dequantize_row
/// (engine/kernels/quants.h). Throws kvb::Error for an unsupported type or a bad `n`.
void dequantize(GgmlType type, const void* data, int64_t n, float* out);

/// One metadata value. Scalars: integers in `i` (signed types, BOOL) or `u` (unsigned types),
/// floats in `f`, strings in `s`. Arrays: `elem_type` plus one of `ints` (all integer types and
/// BOOL; UINT64 values are stored bit-cast), `floats`, `strings`, `arrays` (nested arrays).
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  GgufValueType elem_type = GgufValueType::UINT8;  ///< arrays only
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0.0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::vector<GgufValue> arrays;

  bool is_integer() const;  ///< scalar of an integer type (not BOOL)
  size_t array_size() const;
  /// The value as JSON, as gguf-py's `ReaderField.contents()` gives it (numbers, strings, bools,
  /// nested lists).
  nlohmann::json to_json() const;
};

/// One tensor's header entry.
struct GgufTensorInfo {
  std::string name;
  GgmlType type{0};           ///< F32
  std::vector<int64_t> dims;  ///< ggml order: dims[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;        ///< from the start of the tensor data section
  uint64_t nbytes = 0;
  int64_t numel = 0;
  /// Row-major shape, outermost first (the reverse of `dims`): the torch / safetensors order.
  std::vector<int64_t> shape() const { return {dims.rbegin(), dims.rend()}; }
};

/// A parsed GGUF file (memory-mapped; tensor data is read in place).
class GgufFile {
 public:
  /// Maps and parses `path`: header (magic, version 2 or 3), every metadata key/value, every
  /// tensor info; checks counts and lengths against the file size before allocating, types,
  /// dimensions, alignment and that every tensor's data lies inside the file. Throws one
  /// kvb::Error "<path>: <field>: <what>" on any violation.
  static GgufFile open(const std::string& path);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  /// Absolute file offset of the tensor data section.
  uint64_t data_offset() const { return data_offset_; }
  /// Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  /// The value of `key`, or nullptr.
  const GgufValue* find(const std::string& key) const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  /// Typed getters; throw kvb::Error naming the file and key when the key is missing (the
  /// `_or` forms return the default instead) or holds another type.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  int64_t get_int_or(const std::string& key, int64_t dflt) const;
  double get_float_or(const std::string& key, double dflt) const;
  bool get_bool_or(const std::string& key, bool dflt) const;

  /// The mapping of the whole file (tensor views keep it alive).
  const std::shared_ptr<MappedFile>& file() const { return file_; }
  /// Pointer to the raw bytes of a tensor (valid while this GgufFile, or file(), lives).
  const uint8_t* tensor_data(const GgufTensorInfo& t) const;
  /// The tensor dequantised to float32, in the stored element order. Throws kvb::Error naming
  /// the tensor for an unsupported type.
  std::vector<float> read_f32(const GgufTensorInfo& t) const;

 private:
  std::string path_;
  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

/// Everything a GGUF model file provides to the engine.
struct GgufModel {
  ModelConfig config;
  WeightStore weights;              ///< views into the mapped file in the stored ggml types, Hugging
                                    ///< Face names and shapes (llama Q/K with a row_index)
  nlohmann::json tokenizer_json;    ///< a tokenizer.json document (for Tokenizer::from_json)
  nlohmann::json tokenizer_config;  ///< bos/eos/unk/pad tokens, add_bos/eos_token, chat_template
  std::string chat_template;        ///< `tokenizer.chat_template`, empty when absent
  /// Named templates, `tokenizer.chat_template.<NAME>` (llama.cpp / gguf-py
  /// Keys.Tokenizer.CHAT_TEMPLATE_N; their names are also listed in `tokenizer.chat_templates`).
  std::map<std::string, std::string> named_chat_templates;
};

/// ModelConfig from GGUF metadata (`general.architecture` one of the architectures' gguf_arch
/// names in engine/model/architecture.h; keys
/// `<arch>.block_count`, `.embedding_length`, `.feed_forward_length`, `.attention.head_count`,
/// `.attention.head_count_kv`, `.attention.key_length` or `.rope.dimension_count` (head_dim),
/// `.context_length`, `.attention.layer_norm_rms_epsilon`, `.rope.freq_base`,
/// `.rope.scaling.{type,factor,original_context_length,attn_factor,yarn_beta_fast,yarn_beta_slow}`,
/// `.vocab_size` (else the token count); `tokenizer.ggml.bos_token_id`; eos ids =
/// `tokenizer.ggml.eos_token_id` then `eot_token_id` / `eom_token_id` when present). Tied
/// embeddings = no `output.weight` tensor (as transformers decides); q/k/v bias and q/k norm by
/// the presence of their layer-0 tensors. Throws kvb::Error.
ModelConfig gguf_model_config(const GgufFile& f);

/// The Hugging Face name of a GGUF tensor name under the Llama family's table
/// (architecture.h gguf_to_hf_tensor_name; blk.N.attn_q.weight ->
/// model.layers.N.self_attn.q_proj.weight, token_embd -> model.embed_tokens, output -> lm_head,
/// output_norm -> model.norm, attn_norm -> input_layernorm, ffn_norm -> post_attention_layernorm,
/// ffn_gate/up/down -> mlp.gate_proj/up_proj/down_proj, attn_q_norm/attn_k_norm ->
/// self_attn.q_norm/k_norm). Names it does not know are returned unchanged.
std::string gguf_to_hf_name(const std::string& gguf_name);

/// The row index that undoes llama.cpp's rotary row permutation of a Q or K weight: `rows` rows,
/// `n_head` heads (use the KV head count for K). Logical row (h, a, d) is stored row (h, d, a)
/// for a head of 2*dim rows, as transformers' LlamaTensorProcessor._reverse_permute_weights
/// moves them. Throws kvb::Error ("<origin>: ...") when rows is not a multiple of 2*n_head.
std::vector<int32_t> gguf_unpermute_index(int64_t rows, int64_t n_head, const std::string& origin);

/// The tokenizer.json document transformers builds from this file's tokenizer metadata
/// (`tokenizer.ggml.model` "gpt2": byte-level BPE with the file's merges; "llama": SentencePiece
/// BPE with byte fallback, merges derived from `tokenizer.ggml.scores`), with the same added
/// tokens, pre-tokenizer (per `tokenizer.ggml.pre`), post-processor (BOS/EOS per
/// add_bos/add_eos_token) and decoder. Throws kvb::Error for other tokenizer models.
nlohmann::json gguf_tokenizer_json(const GgufFile& f);
/// tokenizer_config as transformers' get_gguf_tokenizer makes it: chat_template, add_bos_token
/// (llama default true), add_eos_token when stated, and bos/eos/unk/pad token strings (or null).
nlohmann::json gguf_tokenizer_config(const GgufFile& f);

/// Loads a whole GGUF model: config, every tensor as a view into the mapped file in its stored
/// type (no copy; llama Q/K rows un-permuted through a row index; WeightStore::to_f32 gives the
/// dequantised f32), tokenizer.json + tokenizer_config and the chat template. Throws kvb::Error
/// for a tensor type outside kvb::DType or a quantised tensor whose rows are not whole blocks.
GgufModel load_gguf(const std::string& path);

}  // namespace kvb
