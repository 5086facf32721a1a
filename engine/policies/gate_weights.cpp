#include "engine/policies/gate_weights.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/util/error.h"
#include "engine/util/io.h"

namespace kvb {

namespace {

float bf16_to_f32(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

GateWeights GateWeights::load(const std::string& path, const std::string& policy) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("policy '{}': gate weights file '{}' not found or unreadable", policy, path);
  in.seekg(0, std::ios::end);
  const int64_t size = in.tellg();
  in.seekg(0);
  std::vector<char> bytes(static_cast<size_t>(std::max<int64_t>(size, 0)));
  in.read(bytes.data(), size);
  if (!in || size < 8) fail_at(path, "header", "file too short for safetensors ({} bytes)", size);
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  if (hlen > static_cast<uint64_t>(size - 8)) fail_at(path, "header", "header length {} exceeds the file", hlen);
  const nlohmann::json header = parse_json(std::string_view(bytes.data() + 8, hlen), path + ": header");
  if (!header.is_object()) fail_at(path, "header", "expected a JSON object");
  const char* data = bytes.data() + 8 + hlen;
  const uint64_t data_size = static_cast<uint64_t>(size) - 8 - hlen;
  GateWeights w;
  w.path = path;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& t = it.value();
    const std::string field = "tensor " + it.key();
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets"))
      fail_at(path, field, "expected dtype, shape and data_offsets");
    const std::string dtype = t["dtype"].get<std::string>();
    size_t esize = dtype == "F32" ? 4 : (dtype == "F16" || dtype == "BF16") ? 2 : 0;
    if (!esize) fail_at(path, field, "unsupported dtype {} (F32, F16, BF16)", dtype);
    GateTensor g;
    int64_t n = 1;
    for (const auto& d : t["shape"]) {
      int64_t v = d.get<int64_t>();
      if (v < 0) fail_at(path, field, "negative dimension");
      g.shape.push_back(v);
      n *= v;
    }
    const uint64_t b = t["data_offsets"][0].get<uint64_t>(), e = t["data_offsets"][1].get<uint64_t>();
    if (b > e || e > data_size || e - b != static_cast<uint64_t>(n) * esize)
      fail_at(path, field, "data_offsets [{}, {}] do not match shape x dtype or exceed the file", b, e);
    g.data.resize(n);
    const char* p = data + b;
    for (int64_t i = 0; i < n; ++i) {
      if (esize == 4) {
        std::memcpy(&g.data[i], p + 4 * i, 4);
      } else {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        g.data[i] = dtype == "BF16" ? bf16_to_f32(v) : f16_to_f32(v);
      }
    }
    w.tensors.emplace(it.key(), std::move(g));
  }
  return w;
}

const GateTensor* GateWeights::find(const std::string& name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

const GateTensor& GateWeights::require(const std::string& name, const std::vector<int64_t>& shape) const {
  const GateTensor* t = find(name);
  if (!t) fail_at(path, "tensor " + name, "missing");
  std::vector<int64_t> s = t->shape;
  while (s.size() > shape.size() && s.back() == 1) s.pop_back();
  if (s != shape) {
    auto str = [](const std::vector<int64_t>& v) {
      std::string r = "[";
      for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
      return r + "]";
    };
    fail_at(path, "tensor " + name, "shape {} but the model needs {}", str(t->shape), str(shape));
  }
  return *t;
}

void GateWeights::add(const std::string& name, std::vector<int64_t> shape, std::vector<float> data) {
  tensors[name] = GateTensor{std::move(shape), std::move(data)};
}

void save_gate_weights(const GateWeights& w, const std::string& path) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& [name, t] : w.tensors) {
    const uint64_t n = t.data.size() * 4;
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  std::ofstream out(path, std::ios::binary);
  if (!out) fail_at(path, "", "cannot open for writing");
  uint64_t hl = h.size();
  out.write(reinterpret_cast<const char*>(&hl), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& [name, t] : w.tensors)
    out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size() * 4));
  if (!out) fail_at(path, "", "write failed");
}

}  // namespace kvb
