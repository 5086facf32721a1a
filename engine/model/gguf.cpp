// GGUF parsing, dequantisation and model loading. See gguf.h for the references.
#include "engine/model/gguf.h"

// Dequantisation must round every float32 product and sum separately, as numpy does, to equal
// gguf-py bit for bit: never contract a*b+c into an FMA.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "engine/model/architecture.h"
#include "engine/util/error.h"
#include "engine/util/utf8.h"

namespace kvb {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// types
// ---------------------------------------------------------------------------------------------
const char* gguf_value_type_name(GgufValueType t) {
  static const char* names[] = {"UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
                                "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};
  auto i = static_cast<uint32_t>(t);
  return i < 13 ? names[i] : "?";
}

GgmlTypeTraits ggml_type_traits(uint32_t t) {
  switch (t) {
    case 0: return {"F32", 1, 4};
    case 1: return {"F16", 1, 2};
    case 2: return {"Q4_0", 32, 18};
    case 3: return {"Q4_1", 32, 20};
    case 6: return {"Q5_0", 32, 22};
    case 7: return {"Q5_1", 32, 24};
    case 8: return {"Q8_0", 32, 34};
    case 9: return {"Q8_1", 32, 40};
    case 10: return {"Q2_K", 256, 84};
    case 11: return {"Q3_K", 256, 110};
    case 12: return {"Q4_K", 256, 144};
    case 13: return {"Q5_K", 256, 176};
    case 14: return {"Q6_K", 256, 210};
    case 15: return {"Q8_K", 256, 292};
    case 16: return {"IQ2_XXS", 256, 66};
    case 17: return {"IQ2_XS", 256, 74};
    case 18: return {"IQ3_XXS", 256, 98};
    case 19: return {"IQ1_S", 256, 50};
    case 20: return {"IQ4_NL", 32, 18};
    case 21: return {"IQ3_S", 256, 110};
    case 22: return {"IQ2_S", 256, 82};
    case 23: return {"IQ4_XS", 256, 136};
    case 24: return {"I8", 1, 1};
    case 25: return {"I16", 1, 2};
    case 26: return {"I32", 1, 4};
    case 27: return {"I64", 1, 8};
    case 28: return {"F64", 1, 8};
    case 29: return {"IQ1_M", 256, 56};
    case 30: return {"BF16", 1, 2};
    case 34: return {"TQ1_0", 256, 54};
    case 35: return {"TQ2_0", 256, 66};
    case 39: return {"MXFP4", 32, 17};
    default: return {};
  }
}

bool gguf_type_supported(GgmlType t) { return dtype_traits(static_cast<DType>(t)).block != 0; }

// ---------------------------------------------------------------------------------------------
// dequantisation (engine/kernels/quants.cpp dequantize_row; gguf-py quants.py)
// ---------------------------------------------------------------------------------------------
void dequantize(GgmlType type, const void* data, int64_t n, float* out) {
  const GgmlTypeTraits tr = ggml_type_traits(static_cast<uint32_t>(type));
  if (!tr.name) fail("dequantize: unknown ggml type {}", static_cast<uint32_t>(type));
  if (!gguf_type_supported(type))
    fail(
        "dequantize: ggml type {} is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, "
        "Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)",
        tr.name);
  if (n < 0 || n % tr.block_size != 0)
    fail("dequantize: {} elements is not a multiple of the {} block size {}", n, tr.name, tr.block_size);
  dequantize_row(static_cast<DType>(type), data, n, out);
}

// ---------------------------------------------------------------------------------------------
// values
// ---------------------------------------------------------------------------------------------
bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::UINT64:
    case GgufValueType::INT64: return true;
    default: return false;
  }
}

size_t GgufValue::array_size() const {
  if (type != GgufValueType::ARRAY) return 0;
  return ints.size() + floats.size() + strings.size() + arrays.size();
}

json GgufValue::to_json() const {
  switch (type) {
    case GgufValueType::UINT8:
    case GgufValueType::UINT16:
    case GgufValueType::UINT32:
    case GgufValueType::UINT64: return u;
    case GgufValueType::INT8:
    case GgufValueType::INT16:
    case GgufValueType::INT32:
    case GgufValueType::INT64: return i;
    case GgufValueType::BOOL: return i != 0;
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64: return f;
    case GgufValueType::STRING: return s;
    case GgufValueType::ARRAY: {
      json a = json::array();
      switch (elem_type) {
        case GgufValueType::STRING:
          for (const auto& x : strings) a.push_back(x);
          break;
        case GgufValueType::FLOAT32:
        case GgufValueType::FLOAT64:
          for (double x : floats) a.push_back(x);
          break;
        case GgufValueType::ARRAY:
          for (const auto& x : arrays) a.push_back(x.to_json());
          break;
        case GgufValueType::BOOL:
          for (int64_t x : ints) a.push_back(x != 0);
          break;
        case GgufValueType::UINT64:
          for (int64_t x : ints) a.push_back(static_cast<uint64_t>(x));
          break;
        default:
          for (int64_t x : ints) a.push_back(x);
          break;
      }
      return a;
    }
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// parsing
// ---------------------------------------------------------------------------------------------
namespace {

constexpr int kMaxArrayDepth = 8;

/// Bounds-checked little-endian reader over the mapped file.
struct Cursor {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
  const std::string& path;

  size_t left() const { return size - pos; }
  void need(uint64_t n, const std::string& field) const {
    if (n > left())
      fail_at(path, field, "needs {} bytes at offset {} but the file has {} left (truncated?)", n, pos, left());
  }
  template <typename T>
  T read(const std::string& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, data + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string read_string(const std::string& field) {
    const uint64_t n = read<uint64_t>(field + " (string length)");
    need(n, field + " (string of " + std::to_string(n) + " bytes)");
    std::string s(reinterpret_cast<const char*>(data + pos), static_cast<size_t>(n));
    // GGUF strings are UTF-8 (GGUF spec, "gguf_string_t"); anything else would reach the
    // tokenizer, the chat template and the JSON we store, so it is refused here, by field.
    if (!utf8::is_valid(s)) fail_at(path, field, "is not valid UTF-8");
    pos += static_cast<size_t>(n);
    return s;
  }
};

/// Smallest encoded size of one value of type t (for count sanity checks).
uint64_t min_value_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64:
    case GgufValueType::STRING: return 8;
    case GgufValueType::ARRAY: return 12;
  }
  return 1;
}

GgufValueType check_type(uint32_t t, const std::string& path, const std::string& field) {
  if (t > 12) fail_at(path, field, "unknown metadata value type {}", t);
  return static_cast<GgufValueType>(t);
}

void read_scalar(Cursor& c, GgufValueType t, GgufValue& v, const std::string& field) {
  switch (t) {
    case GgufValueType::UINT8: v.u = c.read<uint8_t>(field); break;
    case GgufValueType::INT8: v.i = c.read<int8_t>(field); break;
    case GgufValueType::UINT16: v.u = c.read<uint16_t>(field); break;
    case GgufValueType::INT16: v.i = c.read<int16_t>(field); break;
    case GgufValueType::UINT32: v.u = c.read<uint32_t>(field); break;
    case GgufValueType::INT32: v.i = c.read<int32_t>(field); break;
    case GgufValueType::UINT64: v.u = c.read<uint64_t>(field); break;
    case GgufValueType::INT64: v.i = c.read<int64_t>(field); break;
    case GgufValueType::FLOAT32: v.f = c.read<float>(field); break;
    case GgufValueType::FLOAT64: v.f = c.read<double>(field); break;
    case GgufValueType::BOOL: {
      const uint8_t b = c.read<uint8_t>(field);
      if (b > 1) fail_at(c.path, field, "bool value {} is neither 0 nor 1", b);
      v.i = b;
      break;
    }
    case GgufValueType::STRING: v.s = c.read_string(field); break;
    case GgufValueType::ARRAY: break;
  }
}

void read_value(Cursor& c, GgufValueType t, GgufValue& v, const std::string& field, int depth) {
  v.type = t;
  if (t != GgufValueType::ARRAY) {
    read_scalar(c, t, v, field);
    return;
  }
  if (depth >= kMaxArrayDepth) fail_at(c.path, field, "arrays nested deeper than {}", kMaxArrayDepth);
  v.elem_type = check_type(c.read<uint32_t>(field + " (array element type)"), c.path, field + " (array element type)");
  const uint64_t n = c.read<uint64_t>(field + " (array length)");
  if (n > c.left() / min_value_size(v.elem_type))
    fail_at(c.path, field, "array length {} cannot fit in the {} bytes left in the file", n, c.left());
  const size_t count = static_cast<size_t>(n);
  switch (v.elem_type) {
    case GgufValueType::STRING:
      v.strings.reserve(count);
      for (size_t k = 0; k < count; ++k) v.strings.push_back(c.read_string(field + "[" + std::to_string(k) + "]"));
      break;
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64: {
      v.floats.reserve(count);
      GgufValue tmp;
      for (size_t k = 0; k < count; ++k) {
        read_scalar(c, v.elem_type, tmp, field);
        v.floats.push_back(tmp.f);
      }
      break;
    }
    case GgufValueType::ARRAY:
      v.arrays.resize(count);
      for (size_t k = 0; k < count; ++k)
        read_value(c, GgufValueType::ARRAY, v.arrays[k], field + "[" + std::to_string(k) + "]", depth + 1);
      break;
    default: {
      v.ints.reserve(count);
      GgufValue tmp;
      const bool is_unsigned = v.elem_type == GgufValueType::UINT8 || v.elem_type == GgufValueType::UINT16 ||
                               v.elem_type == GgufValueType::UINT32 || v.elem_type == GgufValueType::UINT64;
      for (size_t k = 0; k < count; ++k) {
        read_scalar(c, v.elem_type, tmp, field);
        v.ints.push_back(is_unsigned ? static_cast<int64_t>(tmp.u) : tmp.i);
      }
      break;
    }
  }
}

}  // namespace

GgufFile GgufFile::open(const std::string& path) {
  GgufFile g;
  g.path_ = path;
  g.file_ = std::make_shared<MappedFile>(path);
  Cursor c{g.file_->data(), g.file_->size(), 0, g.path_};

  if (c.size < 4 || std::memcmp(c.data, "GGUF", 4) != 0)
    fail_at(path, "header.magic", "not a GGUF file (the first 4 bytes are not \"GGUF\")");
  c.pos = 4;
  g.version_ = c.read<uint32_t>("header.version");
  if (g.version_ != 2 && g.version_ != 3) {
    if (g.version_ == 1) fail_at(path, "header.version", "GGUF version 1 is not supported (only 2 and 3)");
    if ((g.version_ & 0xffffu) == 0)
      fail_at(path, "header.version", "version {:#x} looks byte-swapped (big-endian GGUF files are not supported)",
              g.version_);
    fail_at(path, "header.version", "unsupported GGUF version {} (expected 2 or 3)", g.version_);
  }
  const uint64_t n_tensors = c.read<uint64_t>("header.tensor_count");
  const uint64_t n_kv = c.read<uint64_t>("header.metadata_kv_count");
  // Each key/value needs >= 8 (key length) + 4 (type) + 1 bytes; each tensor info >= 8+4+8+4+8.
  if (n_kv > c.left() / 13)
    fail_at(path, "header.metadata_kv_count", "{} key/values cannot fit in a {}-byte file", n_kv, c.size);
  if (n_tensors > c.left() / 32)
    fail_at(path, "header.tensor_count", "{} tensors cannot fit in a {}-byte file", n_tensors, c.size);

  g.kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string where = "metadata[" + std::to_string(k) + "]";
    std::string key = c.read_string(where + ".key");
    const std::string field = "metadata '" + key + "'";
    const GgufValueType t = check_type(c.read<uint32_t>(field + " (type)"), path, field + " (type)");
    GgufValue v;
    read_value(c, t, v, field, 0);
    if (g.kv_index_.count(key)) fail_at(path, field, "duplicate metadata key");
    g.kv_index_[key] = g.kv_.size();
    g.kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = g.find("general.alignment")) {
    if (a->type != GgufValueType::UINT32)
      fail_at(path, "metadata 'general.alignment'", "expected UINT32, got {}", gguf_value_type_name(a->type));
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      fail_at(path, "metadata 'general.alignment'", "must be a non-zero power of two, got {}", a->u);
    g.alignment_ = a->u;
  }

  g.tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    t.name = c.read_string("tensor_info[" + std::to_string(k) + "].name");
    const std::string field = "tensor '" + t.name + "'";
    const uint32_t n_dims = c.read<uint32_t>(field + ".n_dims");
    if (n_dims == 0 || n_dims > 4) fail_at(path, field + ".n_dims", "must be 1..4, got {}", n_dims);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = c.read<uint64_t>(field + ".dims");
      if (dim > (uint64_t{1} << 40)) fail_at(path, field + ".dims", "dimension {} = {} is absurd", d, dim);
      if (dim != 0 && numel > (uint64_t{1} << 42) / dim) fail_at(path, field + ".dims", "element count overflows");
      numel *= dim;
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    const uint32_t type = c.read<uint32_t>(field + ".type");
    const GgmlTypeTraits tr = ggml_type_traits(type);
    if (!tr.name) fail_at(path, field + ".type", "unknown ggml tensor type {}", type);
    t.type = static_cast<GgmlType>(type);
    if (t.dims[0] % tr.block_size != 0)
      fail_at(path, field + ".dims", "innermost dimension {} is not a multiple of the {} block size {}", t.dims[0],
              tr.name, tr.block_size);
    t.numel = static_cast<int64_t>(numel);
    t.nbytes = numel / static_cast<uint64_t>(tr.block_size) * static_cast<uint64_t>(tr.type_size);
    t.offset = c.read<uint64_t>(field + ".offset");
    if (t.offset % g.alignment_ != 0)
      fail_at(path, field + ".offset", "{} is not a multiple of the alignment {}", t.offset, g.alignment_);
    if (g.tensor_index_.count(t.name)) fail_at(path, field, "duplicate tensor name");
    g.tensor_index_[t.name] = g.tensors_.size();
    g.tensors_.push_back(std::move(t));
  }

  const uint64_t data_off = (c.pos + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  if (!g.tensors_.empty() && data_off > c.size)
    fail_at(path, "tensor data", "the data section would start at {} but the file has {} bytes", data_off, c.size);
  g.data_offset_ = data_off;
  for (const auto& t : g.tensors_) {
    const uint64_t avail = c.size >= data_off ? c.size - data_off : 0;
    if (t.offset > avail || t.nbytes > avail - t.offset)
      fail_at(path, "tensor '" + t.name + "'.data",
              "{} bytes at data offset {} run past the end of the file ({} bytes of tensor data)", t.nbytes, t.offset,
              avail);
  }
  // Two tensors sharing bytes (one offset given twice, or overlapping ranges) would alias each
  // other's weights: refused, as safetensors headers are (empty tensors excepted).
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : g.tensors_)
    if (t.nbytes > 0) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    const GgufTensorInfo& t = *by_offset[i];
    if (t.offset < prev.offset + prev.nbytes)
      fail_at(path, "tensor '" + t.name + "'.offset", "{} overlaps tensor '{}' (bytes {}..{} of the data)", t.offset,
              prev.name, prev.offset, prev.offset + prev.nbytes);
  }
  return g;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail_at(path_, "metadata '" + key + "'", "missing");
  if (v->type != GgufValueType::STRING)
    fail_at(path_, "metadata '" + key + "'", "expected STRING, got {}", gguf_value_type_name(v->type));
  return v->s;
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail_at(path_, "metadata '" + key + "'", "missing");
  if (!v->is_integer())
    fail_at(path_, "metadata '" + key + "'", "expected an integer, got {}", gguf_value_type_name(v->type));
  switch (v->type) {
    case GgufValueType::UINT8:
    case GgufValueType::UINT16:
    case GgufValueType::UINT32:
    case GgufValueType::UINT64:
      if (v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail_at(path_, "metadata '" + key + "'", "value {} is too large", v->u);
      return static_cast<int64_t>(v->u);
    default: return v->i;
  }
}

int64_t GgufFile::get_int_or(const std::string& key, int64_t dflt) const { return find(key) ? get_int(key) : dflt; }

double GgufFile::get_float_or(const std::string& key, double dflt) const {
  const GgufValue* v = find(key);
  if (!v) return dflt;
  if (v->type == GgufValueType::FLOAT32 || v->type == GgufValueType::FLOAT64) {
    if (!std::isfinite(v->f)) fail_at(path_, "metadata '" + key + "'", "must be a finite number, got {}", v->f);
    return v->f;
  }
  if (v->is_integer()) return static_cast<double>(get_int(key));
  fail_at(path_, "metadata '" + key + "'", "expected a number, got {}", gguf_value_type_name(v->type));
}

bool GgufFile::get_bool_or(const std::string& key, bool dflt) const {
  const GgufValue* v = find(key);
  if (!v) return dflt;
  if (v->type != GgufValueType::BOOL)
    fail_at(path_, "metadata '" + key + "'", "expected BOOL, got {}", gguf_value_type_name(v->type));
  return v->i != 0;
}

const uint8_t* GgufFile::tensor_data(const GgufTensorInfo& t) const { return file_->data() + data_offset_ + t.offset; }

std::vector<float> GgufFile::read_f32(const GgufTensorInfo& t) const {
  if (!gguf_type_supported(t.type))
    fail_at(path_, "tensor '" + t.name + "'.type",
            "ggml type {} is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)",
            ggml_type_traits(static_cast<uint32_t>(t.type)).name);
  std::vector<float> out(static_cast<size_t>(t.numel));
  dequantize(t.type, tensor_data(t), t.numel, out.data());
  return out;
}

// ---------------------------------------------------------------------------------------------
// config and names
// ---------------------------------------------------------------------------------------------
ModelConfig gguf_model_config(const GgufFile& f) {
  ModelConfig c;
  const std::string arch = f.get_string("general.architecture");
  const Architecture* a = find_gguf_architecture(arch);
  if (!a)
    fail_at(f.path(), "metadata 'general.architecture'", "architecture '{}' is not supported (supported: {})", arch,
            architecture_names(true));
  c.model_type = a->model_type;
  const std::string p = arch + ".";
  c.num_layers = f.get_int(p + "block_count");
  // Every block has tensors of its own: a count beyond the file's tensors is corrupt (and would
  // size per-layer tables before any tensor is looked up).
  if (c.num_layers > static_cast<int64_t>(f.tensors().size()))
    fail_at(f.path(), "metadata '" + p + "block_count'", "{} blocks but the file has {} tensors", c.num_layers,
            f.tensors().size());
  c.hidden_size = f.get_int(p + "embedding_length");
  c.intermediate_size = f.get_int(p + "feed_forward_length");
  c.num_heads = f.get_int(p + "attention.head_count");
  c.num_kv_heads = f.get_int_or(p + "attention.head_count_kv", c.num_heads);
  c.max_position_embeddings = f.get_int_or(p + "context_length", 0);
  c.rms_norm_eps = f.get_float_or(p + "attention.layer_norm_rms_epsilon", 1e-6);
  c.rope_theta = f.get_float_or(p + "rope.freq_base", 10000.0);
  if (f.find(p + "attention.key_length")) c.head_dim = f.get_int(p + "attention.key_length");
  else if (a->gguf_permuted_qk && f.find(p + "rope.dimension_count"))
    c.head_dim = f.get_int(p + "rope.dimension_count");
  else if (c.num_heads > 0) c.head_dim = c.hidden_size / c.num_heads;
  if (f.find(p + "vocab_size")) {
    c.vocab_size = f.get_int(p + "vocab_size");
  } else if (const GgufValue* toks = f.find("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<int64_t>(toks->strings.size());
  } else if (const GgufTensorInfo* emb = f.find_tensor("token_embd.weight")) {
    c.vocab_size = emb->dims.size() == 2 ? emb->dims[1] : 0;
  }
  // rope scaling (llama.cpp keys); llama3-style factors live in a `rope_freqs.weight` tensor.
  if (f.find(p + "rope.scaling.type")) {
    const std::string t = f.get_string(p + "rope.scaling.type");
    if (t == "linear" || t == "yarn") {
      c.rope_scaling.type = t;
      c.rope_scaling.factor = f.get_float_or(p + "rope.scaling.factor", 1.0);
      c.rope_scaling.original_max_position_embeddings = f.get_int_or(p + "rope.scaling.original_context_length", 0);
      c.rope_scaling.attention_factor = f.get_float_or(p + "rope.scaling.attn_factor", 0.0);
      c.rope_scaling.beta_fast = f.get_float_or(p + "rope.scaling.yarn_beta_fast", 32.0);
      c.rope_scaling.beta_slow = f.get_float_or(p + "rope.scaling.yarn_beta_slow", 1.0);
    } else if (t != "none") {
      fail_at(f.path(), "metadata '" + p + "rope.scaling.type'", "unsupported rope scaling '{}'", t);
    }
  }
  // Metadata that changes the model and that kvbench does not implement is refused, never
  // ignored (tensors the model does not bind are refused by Model; docs/robustness.md).
  if (f.find(p + "expert_count") && f.get_int(p + "expert_count") > 0)
    fail_at(f.path(), "metadata '" + p + "expert_count'", "mixture-of-experts models ({} experts) are not supported",
            f.get_int(p + "expert_count"));
  if (f.find(p + "rope.dimension_count") && f.get_int(p + "rope.dimension_count") != c.head_dim)
    fail_at(f.path(), "metadata '" + p + "rope.dimension_count'",
            "RoPE over {} of the head's {} dims is not supported (kvbench rotates the whole head)",
            f.get_int(p + "rope.dimension_count"), c.head_dim);
  // Tied embeddings, q/k/v bias and q/k norm: by the presence of the tensors.
  auto has = [&](TensorRole r) {
    for (const TensorName& t : a->tensors)
      if (t.role == r && t.gguf) {
        std::string n = t.gguf;
        if (const size_t at = n.find("{}"); at != std::string::npos) n.replace(at, 2, "0");
        return f.find_tensor(n) != nullptr;
      }
    return false;
  };
  c.tie_word_embeddings = !has(TensorRole::kLmHead);
  c.attention_bias = a->qkv_bias != QkvBias::kNever && has(TensorRole::kBq);
  c.qk_norm = a->qk_norm && has(TensorRole::kQNorm);
  if (f.find("tokenizer.ggml.bos_token_id"))
    c.bos_token_id = static_cast<int32_t>(f.get_int("tokenizer.ggml.bos_token_id"));
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (!f.find(k)) continue;
    const auto id = static_cast<int32_t>(f.get_int(k));
    if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
      c.eos_token_ids.push_back(id);
  }
  c.validate(f.path());
  return c;
}

std::string gguf_to_hf_name(const std::string& g) { return gguf_to_hf_tensor_name(architecture("llama"), g); }

std::vector<int32_t> gguf_unpermute_index(int64_t rows, int64_t n_head, const std::string& origin) {
  if (n_head <= 0 || rows % (2 * n_head) != 0)
    fail("{}: cannot undo the rotary permutation: {} rows are not {} heads of an even size", origin, rows, n_head);
  const int64_t dim = rows / n_head / 2;
  std::vector<int32_t> index(static_cast<size_t>(rows));
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t d = 0; d < dim; ++d)
        index[h * 2 * dim + a * dim + d] = static_cast<int32_t>(h * 2 * dim + d * 2 + a);
  return index;
}

// ---------------------------------------------------------------------------------------------
// tokenizer
// ---------------------------------------------------------------------------------------------
namespace {

/// True when every character of `token` is in GPT-2's byte-level alphabet (engine/util/utf8.h).
bool in_byte_alphabet(const std::string& token) {
  for (size_t i = 0, len = 0; i < token.size(); i += len)
    if (utf8::unicode_to_byte(utf8::decode_utf8(token, i, &len)) < 0) return false;
  return true;
}

std::string byte_respell(const std::string& token) {
  std::string out;
  for (unsigned char b : token) out += utf8::byte_to_unicode(b);
  return out;
}

const char* pre_tokenizer_split(const std::string& pre) {
  static const char* kLlama3 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const char* kTekken =
      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const char* kQwen2 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const char* kQwen35 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const char* kGpt4o =
      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const std::map<std::string, const char*> table = {{"llama3", kLlama3},       {"llama-v3", kLlama3},
                                                           {"llama-bpe", kLlama3},    {"falcon3", kLlama3},
                                                           {"falcon-h1", kLlama3},    {"pixtral", kLlama3},
                                                           {"midm-2.0", kLlama3},     {"lfm2", kLlama3},
                                                           {"jina-v5-nano", kLlama3}, {"dbrx", kLlama3},
                                                           {"smaug-bpe", kLlama3},    {"tekken", kTekken},
                                                           {"qwen2", kQwen2},         {"deepseek-r1-qwen", kQwen2},
                                                           {"kormo", kQwen2},         {"f2llmv2", kQwen2},
                                                           {"megrez", kQwen2},        {"qwen35", kQwen35},
                                                           {"gpt-4o", kGpt4o},        {"llama4", kGpt4o},
                                                           {"kanana2", kGpt4o},       {"talkie", kGpt4o},
                                                           {"minimax-m2", kGpt4o}};
  auto it = table.find(pre);
  return it == table.end() ? nullptr : it->second;
}

struct TokMeta {
  std::string model;  // "gpt2" | "llama"
  std::string pre;
  const std::vector<std::string>* tokens = nullptr;
  std::vector<int64_t> types;
  std::vector<double> scores;
  const std::vector<std::string>* merges = nullptr;
};

TokMeta tok_meta(const GgufFile& f) {
  TokMeta m;
  m.model = f.get_string("tokenizer.ggml.model");
  if (f.find("tokenizer.ggml.pre")) m.pre = f.get_string("tokenizer.ggml.pre");
  const GgufValue* toks = f.find("tokenizer.ggml.tokens");
  if (!toks) fail_at(f.path(), "metadata 'tokenizer.ggml.tokens'", "missing");
  if (toks->type != GgufValueType::ARRAY || toks->elem_type != GgufValueType::STRING)
    fail_at(f.path(), "metadata 'tokenizer.ggml.tokens'", "expected an array of strings");
  m.tokens = &toks->strings;
  if (const GgufValue* t = f.find("tokenizer.ggml.token_type")) {
    if (t->type != GgufValueType::ARRAY || t->ints.size() != t->array_size())
      fail_at(f.path(), "metadata 'tokenizer.ggml.token_type'", "expected an array of integers");
    m.types = t->ints;
  }
  if (const GgufValue* s = f.find("tokenizer.ggml.scores")) {
    if (s->type != GgufValueType::ARRAY || s->floats.size() != s->array_size())
      fail_at(f.path(), "metadata 'tokenizer.ggml.scores'", "expected an array of floats");
    m.scores = s->floats;
  }
  if (const GgufValue* mg = f.find("tokenizer.ggml.merges")) {
    if (mg->type != GgufValueType::ARRAY || mg->elem_type != GgufValueType::STRING)
      fail_at(f.path(), "metadata 'tokenizer.ggml.merges'", "expected an array of strings");
    m.merges = &mg->strings;
  }
  return m;
}

/// transformers' generate_merges(vocab, vocab_scores): every split of every token into two
/// vocabulary pieces, sorted by the token's score (descending), then piece lengths (descending);
/// within one token by the pieces' ids. Stable, like Python's sorted(..., reverse=True).
json derive_merges(const std::vector<std::string>& tokens, const std::vector<double>& scores, const std::string& origin) {
  if (scores.size() != tokens.size())
    fail_at(origin, "metadata 'tokenizer.ggml.scores'", "has {} entries for {} tokens (needed to derive merges)",
            scores.size(), tokens.size());
  std::unordered_map<std::string, int64_t> vocab;  // last index wins, as a Python dict
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = static_cast<int64_t>(i);
  // dict(zip(tokens, scores)): first position, last value
  std::vector<size_t> order;
  std::unordered_map<std::string, double> score_of;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!score_of.count(tokens[i])) order.push_back(i);
    score_of[tokens[i]] = scores[i];
  }
  struct M {
    std::string l, r;
    double score;
    size_t ll, lr;
    int64_t il, ir;
  };
  std::vector<M> merges;
  for (size_t idx : order) {
    const std::string& tok = tokens[idx];
    const auto chars = utf8::split_chars(tok);
    std::vector<M> local;
    std::string left;
    for (size_t k = 1; k < chars.size(); ++k) {
      left += chars[k - 1];
      std::string right = tok.substr(left.size());
      auto il = vocab.find(left), ir = vocab.find(right);
      if (il != vocab.end() && ir != vocab.end())
        local.push_back({left, right, score_of[tok], k, chars.size() - k, il->second, ir->second});
    }
    std::stable_sort(local.begin(), local.end(),
                     [](const M& a, const M& b) { return a.il != b.il ? a.il < b.il : a.ir < b.ir; });
    for (auto& x : local) merges.push_back(std::move(x));
  }
  std::stable_sort(merges.begin(), merges.end(), [](const M& a, const M& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.ll != b.ll) return a.ll > b.ll;
    return a.lr > b.lr;
  });
  json out = json::array();
  for (const auto& x : merges) out.push_back(json::array({x.l, x.r}));
  return out;
}

json added_token(int64_t id, const std::string& content, bool special) {
  return json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
              {"rstrip", false}, {"normalized", false}, {"special", special}};
}

json token_or_null(const GgufFile& f, const std::vector<std::string>& tokens, const char* key) {
  if (!f.find(key)) return nullptr;
  const int64_t id = f.get_int(key);
  if (id < 0 || id >= static_cast<int64_t>(tokens.size()))
    fail_at(f.path(), std::string("metadata '") + key + "'", "token id {} is outside the vocabulary of {}", id,
            tokens.size());
  return tokens[static_cast<size_t>(id)];
}

}  // namespace

json gguf_tokenizer_config(const GgufFile& f) {
  TokMeta m = tok_meta(f);
  json tc = json::object();
  if (f.find("tokenizer.chat_template")) tc["chat_template"] = f.get_string("tokenizer.chat_template");
  if (f.find("tokenizer.ggml.add_bos_token"))
    tc["add_bos_token"] = f.get_bool_or("tokenizer.ggml.add_bos_token", false);
  if (f.find("tokenizer.ggml.add_eos_token"))
    tc["add_eos_token"] = f.get_bool_or("tokenizer.ggml.add_eos_token", false);
  if (m.model == "llama" && !tc.contains("add_bos_token")) tc["add_bos_token"] = true;
  tc["bos_token"] = token_or_null(f, *m.tokens, "tokenizer.ggml.bos_token_id");
  tc["eos_token"] = token_or_null(f, *m.tokens, "tokenizer.ggml.eos_token_id");
  tc["unk_token"] = token_or_null(f, *m.tokens, "tokenizer.ggml.unknown_token_id");
  tc["pad_token"] = token_or_null(f, *m.tokens, "tokenizer.ggml.padding_token_id");
  return tc;
}

json gguf_tokenizer_json(const GgufFile& f) {
  TokMeta m = tok_meta(f);
  const auto& tokens = *m.tokens;
  const std::string field = "metadata 'tokenizer.ggml.model'";
  const bool byte_level = m.model == "gpt2";
  if (!byte_level && m.model != "llama")
    fail_at(f.path(), field, "tokenizer model '{}' is not supported (supported: gpt2, llama)", m.model);
  if (!m.types.empty() && m.types.size() != tokens.size())
    fail_at(f.path(), "metadata 'tokenizer.ggml.token_type'", "has {} entries for {} tokens", m.types.size(),
            tokens.size());

  // model
  json vocab = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    vocab[byte_level && !in_byte_alphabet(t) ? byte_respell(t) : t] = static_cast<int64_t>(i);
  }
  json merges = json::array();
  if (m.merges) {
    for (size_t i = 0; i < m.merges->size(); ++i) {
      const std::string& s = (*m.merges)[i];
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail_at(f.path(), "metadata 'tokenizer.ggml.merges'[" + std::to_string(i) + "]",
                "'{}' is not two pieces separated by one space", s);
      merges.push_back(json::array({s.substr(0, sp), s.substr(sp + 1)}));
    }
  } else if (byte_level) {
    fail_at(f.path(), "metadata 'tokenizer.ggml.merges'", "missing (needed for a gpt2 tokenizer)");
  } else {
    merges = derive_merges(tokens, m.scores, f.path());
  }
  json model = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}};
  if (byte_level) {
    model["continuing_subword_prefix"] = "";
    model["end_of_word_suffix"] = "";
    model["fuse_unk"] = false;
    model["byte_fallback"] = false;
  } else {
    model["continuing_subword_prefix"] = nullptr;
    model["end_of_word_suffix"] = nullptr;
    model["fuse_unk"] = true;
    model["byte_fallback"] = true;
  }
  model["ignore_merges"] = false;

  // added tokens, in the order transformers adds them (new ones get the next free id)
  std::map<std::string, std::pair<int64_t, bool>> added;  // content -> (id, special)
  int64_t next_id = static_cast<int64_t>(tokens.size());
  auto id_of = [&](const std::string& s) -> int64_t {
    auto a = added.find(s);
    if (a != added.end()) return a->second.first;
    auto v = vocab.find(s);
    return v != vocab.end() ? v->get<int64_t>() : -1;
  };
  auto add = [&](const std::string& s, bool special) {
    if (added.count(s)) return;
    int64_t id = id_of(s);
    if (id < 0) id = next_id++;
    added[s] = {id, special};
  };
  // 1. the builder class's default special tokens (GPT2Tokenizer / LlamaTokenizer)
  if (byte_level) {
    add("<|endoftext|>", true);
  } else {
    for (const char* s : {"<s>", "</s>", "<unk>"}) add(s, true);
  }
  // 2. CONTROL (3) tokens as special; in a byte-level vocabulary only those spelled in its alphabet
  for (size_t i = 0; i < m.types.size(); ++i)
    if (m.types[i] == 3 && (!byte_level || in_byte_alphabet(tokens[i]))) add(tokens[i], true);
  // 3. USER_DEFINED (4) tokens present in the vocabulary, as non-special added tokens
  for (size_t i = 0; i < m.types.size(); ++i)
    if (m.types[i] == 4 && id_of(tokens[i]) >= 0) add(tokens[i], false);
  // 4. the tokenizer_config special tokens
  const json tc = gguf_tokenizer_config(f);
  for (const char* k : {"bos_token", "eos_token", "unk_token", "pad_token"})
    if (tc[k].is_string()) add(tc[k].get<std::string>(), true);
  std::vector<std::pair<int64_t, json>> at;
  for (const auto& [content, v] : added) at.emplace_back(v.first, added_token(v.first, content, v.second));
  std::stable_sort(at.begin(), at.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  json added_tokens = json::array();
  for (auto& [id, j] : at) added_tokens.push_back(std::move(j));

  // post-processor: TokenizersBackend.update_post_processor
  const bool add_bos = tc.value("add_bos_token", false) && tc["bos_token"].is_string();
  const bool add_eos = tc.value("add_eos_token", false) && tc["eos_token"].is_string();
  auto special = [](const std::string& id, int type_id) {
    return json{{"SpecialToken", {{"id", id}, {"type_id", type_id}}}};
  };
  auto seq = [](const char* id, int type_id) { return json{{"Sequence", {{"id", id}, {"type_id", type_id}}}}; };
  json single = json::array(), pair = json::array(), specials = json::object();
  const std::string bos = add_bos ? tc["bos_token"].get<std::string>() : "";
  const std::string eos = add_eos ? tc["eos_token"].get<std::string>() : "";
  if (add_bos) single.push_back(special(bos, 0));
  single.push_back(seq("A", 0));
  if (add_eos) single.push_back(special(eos, 0));
  pair = single;
  if (add_bos) pair.push_back(special(bos, 1));
  pair.push_back(seq("B", 1));
  if (add_eos) pair.push_back(special(eos, 1));
  if (add_bos) specials[bos] = {{"id", bos}, {"ids", {id_of(bos)}}, {"tokens", {bos}}};
  if (add_eos) specials[eos] = {{"id", eos}, {"ids", {id_of(eos)}}, {"tokens", {eos}}};
  json post = {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};

  json pre, decoder;
  if (byte_level) {
    if (const char* split = pre_tokenizer_split(m.pre)) {
      pre = {{"type", "Sequence"},
             {"pretokenizers",
              {{{"type", "Split"}, {"pattern", {{"Regex", split}}}, {"behavior", "Isolated"}, {"invert", false}},
               {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
    } else {
      pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    }
    decoder = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  } else {
    pre = {{"type", "Metaspace"}, {"replacement", "\xe2\x96\x81"}, {"prepend_scheme", "first"}, {"split", false}};
    decoder = {{"type", "Sequence"},
               {"decoders",
                {{{"type", "Replace"}, {"pattern", {{"String", "\xe2\x96\x81"}}}, {"content", " "}},
                 {{"type", "ByteFallback"}},
                 {{"type", "Fuse"}},
                 {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  }
  model["vocab"] = std::move(vocab);
  model["merges"] = std::move(merges);
  return json{
      {"version", "1.0"},      {"truncation", nullptr}, {"padding", nullptr},     {"added_tokens", added_tokens},
      {"normalizer", nullptr}, {"pre_tokenizer", pre},  {"post_processor", post}, {"decoder", decoder},
      {"model", model}};
}

// ---------------------------------------------------------------------------------------------
// whole model
// ---------------------------------------------------------------------------------------------
GgufModel load_gguf(const std::string& path) {
  const GgufFile f = GgufFile::open(path);
  GgufModel m;
  m.config = gguf_model_config(f);
  m.tokenizer_json = gguf_tokenizer_json(f);
  m.tokenizer_config = gguf_tokenizer_config(f);
  if (f.find("tokenizer.chat_template")) m.chat_template = f.get_string("tokenizer.chat_template");
  static const std::string kNamed = "tokenizer.chat_template.";
  for (const auto& [key, v] : f.metadata())
    if (key.size() > kNamed.size() && key.compare(0, kNamed.size(), kNamed) == 0)
      m.named_chat_templates[key.substr(kNamed.size())] = f.get_string(key);
  m.weights.origin = path;
  const Architecture& arch = *find_gguf_architecture(f.get_string("general.architecture"));
  for (const auto& t : f.tensors()) {
    const std::string field = "tensor '" + t.name + "'";
    if (!gguf_type_supported(t.type))
      fail_at(path, field + ".type",
              "ggml type {} is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
              "Q5_1, Q4_K, Q5_K, Q6_K)",
              ggml_type_traits(static_cast<uint32_t>(t.type)).name);
    if (t.dims.empty() || t.dims[0] % ggml_type_traits(static_cast<uint32_t>(t.type)).block_size != 0)
      fail_at(path, field, "rows of {} elements are not whole {} blocks", t.dims.empty() ? 0 : t.dims[0],
              ggml_type_traits(static_cast<uint32_t>(t.type)).name);
    std::vector<int64_t> shape = t.shape();
    std::shared_ptr<const std::vector<int32_t>> index;
    const std::string hf = gguf_to_hf_tensor_name(arch, t.name);
    if (arch.gguf_permuted_qk) {
      // Q and K weights and biases (layer index = the name's first number).
      const size_t d0 = hf.find_first_of("0123456789");
      const int64_t layer = d0 == std::string::npos ? -1 : std::atoll(hf.c_str() + d0);
      for (TensorRole r : {TensorRole::kWq, TensorRole::kBq, TensorRole::kWk, TensorRole::kBk}) {
        if (layer < 0 || hf != hf_tensor_name(arch, r, layer)) continue;
        const bool is_q = r == TensorRole::kWq || r == TensorRole::kBq;
        index = std::make_shared<const std::vector<int32_t>>(
            gguf_unpermute_index(shape[0], is_q ? m.config.num_heads : m.config.num_kv_heads, path + ": " + field));
      }
    }
    m.weights.add_view(hf, std::move(shape), static_cast<DType>(t.type), f.tensor_data(t), f.file(), std::move(index),
                       path);
  }
  return m;
}

}  // namespace kvb
