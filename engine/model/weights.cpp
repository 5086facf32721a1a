#include "engine/model/weights.h"

#include <algorithm>

#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/util/error.h"
#include "engine/util/io.h"

namespace kvb {

size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> WeightStore::to_f32(const TensorView& t) {
  const int64_t n = t.numel();
  std::vector<float> out(static_cast<size_t>(n));
  const int64_t rows = t.shape.size() >= 2 ? t.shape[0] : 1;
  const int64_t cols = rows > 0 ? n / rows : 0;
  const size_t rb = dtype_row_bytes(t.dtype, cols);
  const uint8_t* p = static_cast<const uint8_t*>(t.data);
  // dequantize_row reads unaligned data byte-wise (safetensors data need not be aligned).
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src = t.row_index ? (*t.row_index)[r] : r;
    dequantize_row(t.dtype, p + static_cast<size_t>(src) * rb, cols, out.data() + r * cols);
  }
  return out;
}

void WeightStore::add_view(const std::string& name, std::vector<int64_t> shape, DType dtype, const void* data,
                           std::shared_ptr<const void> keepalive, std::shared_ptr<const std::vector<int32_t>> row_index,
                           const std::string& origin) {
  TensorView t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = data;
  t.origin = origin;
  t.row_index = std::move(row_index);
  if (t.row_index && (t.shape.empty() || static_cast<int64_t>(t.row_index->size()) != t.shape[0]))
    fail_at(origin, "tensor '" + name + "'", "row index of {} rows for a tensor of another shape", t.row_index->size());
  if (std::find(owned_.begin(), owned_.end(), keepalive) == owned_.end()) owned_.push_back(std::move(keepalive));
  tensors_[name] = std::move(t);
}

void WeightStore::add_safetensors_file(const std::string& path) {
  auto file = std::make_shared<MappedFile>(path);
  const size_t size = file->size();
  if (size < 8) fail_at(path, "header", "file is {} bytes; too short for a safetensors header", size);
  uint64_t hlen;
  std::memcpy(&hlen, file->data(), 8);
  if (hlen > size - 8) fail_at(path, "header", "header length {} runs past the end of the file ({} bytes)", hlen, size);
  const nlohmann::json header =
      parse_json(std::string_view(reinterpret_cast<const char*>(file->data()) + 8, hlen), path + ": header");
  if (!header.is_object()) fail_at(path, "header", "expected a JSON object");
  const uint8_t* base = file->data() + 8 + hlen;
  const uint64_t data_size = size - 8 - hlen;
  struct Range {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string field = "tensor '" + name + "'";
    if (!info.is_object()) fail_at(path, field, "expected an object");
    if (!info.contains("dtype") || !info["dtype"].is_string()) fail_at(path, field + ".dtype", "missing");
    std::string dt = info["dtype"];
    TensorView t;
    t.name = name;
    t.origin = path;
    if (dt == "F32") t.dtype = DType::F32;
    else if (dt == "F16") t.dtype = DType::F16;
    else if (dt == "BF16") t.dtype = DType::BF16;
    else fail_at(path, field + ".dtype", "unsupported dtype '{}' (F32, F16, BF16)", dt);
    if (!info.contains("shape") || !info["shape"].is_array()) fail_at(path, field + ".shape", "missing");
    for (const auto& d : info["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        fail_at(path, field + ".shape", "dimensions must be non-negative integers, got {}", d.dump());
      int64_t v = d.get<int64_t>();
      if (v > (int64_t{1} << 40)) fail_at(path, field + ".shape", "dimension {} is absurd", v);
      t.shape.push_back(v);
    }
    const auto& off = info.value("data_offsets", nlohmann::json());
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail_at(path, field + ".data_offsets", "expected [begin, end]");
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e || e > data_size)
      fail_at(path, field + ".data_offsets", "[{}, {}] lies outside the data section ({} bytes)", b, e, data_size);
    uint64_t bytes = dtype_size(t.dtype);
    for (int64_t d : t.shape)
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
        fail_at(path, field + ".shape", "{} has more elements than 64 bits can count", info["shape"].dump());
    if (bytes != e - b)
      fail_at(path, field, "shape {} × {} needs {} bytes but data_offsets span {}", info["shape"].dump(), dt, bytes,
              e - b);
    ranges.push_back({b, e, name});
    t.data = base + b;
    if (tensors_.count(name)) fail_at(path, field, "tensor defined twice (also in {})", tensors_[name].origin);
    tensors_[name] = std::move(t);
  }
  // Tensors may not share bytes (the safetensors format lays them out back to back; a header
  // whose ranges overlap would alias one tensor's data into another).
  std::sort(ranges.begin(), ranges.end(), [](const Range& x, const Range& y) { return x.begin < y.begin; });
  const Range* reach = nullptr;  // the non-empty range ending furthest so far
  for (const Range& r : ranges) {
    if (r.begin == r.end) continue;
    if (reach && r.begin < reach->end)
      fail_at(path, "tensor '" + r.name + "'.data_offsets", "[{}, {}] overlaps tensor '{}' [{}, {}]", r.begin, r.end,
              reach->name, reach->begin, reach->end);
    if (!reach || r.end > reach->end) reach = &r;
  }
  files_.push_back(std::move(file));
}

WeightStore WeightStore::from_safetensors_dir(const std::string& dir) {
  WeightStore ws;
  ws.origin = dir;
  const std::string index = dir + "/model.safetensors.index.json";
  if (file_exists(index)) {
    auto j = parse_json_file(index);
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      fail_at(index, "weight_map", "missing or not an object");
    std::set<std::string> shards;
    for (auto& [name, shard] : j["weight_map"].items()) {
      if (!shard.is_string()) fail_at(index, "weight_map." + name, "expected a file name");
      std::string s = shard.get<std::string>();
      if (s.find('/') != std::string::npos || s.find("..") != std::string::npos)
        fail_at(index, "weight_map." + name, "shard name '{}' must be a plain file name", s);
      shards.insert(s);
    }
    for (const auto& s : shards) ws.add_safetensors_file(dir + "/" + s);
    for (auto& [name, shard] : j["weight_map"].items())
      if (!ws.find(name)) fail_at(index, "weight_map." + name, "tensor not found in {}", shard.get<std::string>());
  } else if (file_exists(dir + "/model.safetensors")) {
    ws.add_safetensors_file(dir + "/model.safetensors");
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", dir);
  }
  return ws;
}

template <typename T>
void WeightStore::add_owned_buffer(const std::string& name, std::vector<int64_t> shape, DType dtype,
                                   std::vector<T> data, const std::string& origin) {
  auto buf = std::make_shared<std::vector<T>>(std::move(data));
  TensorView t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.origin = origin;
  if (static_cast<size_t>(t.numel()) != buf->size())
    fail_at(origin, "tensor '" + name + "'", "shape has {} elements but {} values were given", t.numel(), buf->size());
  t.data = buf->data();
  owned_.push_back(std::move(buf));
  tensors_[name] = std::move(t);
}

void WeightStore::add_owned(const std::string& name, std::vector<int64_t> shape, std::vector<float> data,
                            const std::string& origin) {
  add_owned_buffer(name, std::move(shape), DType::F32, std::move(data), origin);
}

void WeightStore::add_owned_bf16(const std::string& name, std::vector<int64_t> shape, std::vector<uint16_t> bits,
                                 const std::string& origin) {
  add_owned_buffer(name, std::move(shape), DType::BF16, std::move(bits), origin);
}

const TensorView* WeightStore::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorView& WeightStore::require(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorView* t = find(name);
  if (!t) fail_at(origin, "tensor '" + name + "'", "missing from the weights");
  if (t->shape != shape) {
    auto str = [](const std::vector<int64_t>& s) {
      std::string o = "[";
      for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
      return o + "]";
    };
    fail_at(t->origin, "tensor '" + name + "'", "shape {} but the config implies {}", str(t->shape), str(shape));
  }
  return *t;
}

}  // namespace kvb
