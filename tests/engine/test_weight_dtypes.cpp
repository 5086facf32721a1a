// Safetensors stored as BF16 and F16 (each 2-D tensor converted by this test from the F32
// fixture; norms stay F32, as mixed files do). BF16: last-position logits within 1e-4 of
// transformers with every weight matrix rounded to bf16 (goldens.json "last_logits_bf16w", made
// by tools/gen_engine_goldens.py); F16: within 5e-3 of the f32 transformers logits (the f16
// rounding of the weights; a wrong decode is off by orders of magnitude).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/engine.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

// f32 -> bf16 bits, round to nearest even (as torch's .to(torch.bfloat16)); inputs are finite.
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

uint16_t to_f16(float f) {
  return kvb::test::float_to_binary16(f);  // IEEE binary16, round to nearest even
}

/// Copies a model dir, rewriting model.safetensors with every 2-D F32 tensor as `dtype`.
std::string convert(const std::string& src, const std::string& dtype) {
  fs::path d = fs::temp_directory_path() / ("kvb_dtype_" + std::to_string(getpid()) + "_" + dtype);
  fs::remove_all(d);
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().filename() != "model.safetensors") fs::copy_file(e.path(), d / e.path().filename());
  const std::string raw = read_file(src + "/model.safetensors");
  uint64_t hlen;
  std::memcpy(&hlen, raw.data(), 8);
  auto header = nlohmann::json::parse(raw.substr(8, hlen));
  const char* base = raw.data() + 8 + hlen;
  nlohmann::json out_header = nlohmann::json::object();
  std::string data;
  for (auto& [name, t] : header.items()) {
    if (name == "__metadata__") {
      out_header[name] = t;
      continue;
    }
    EXPECT_EQ(t["dtype"], "F32") << name;
    const size_t b = t["data_offsets"][0], e = t["data_offsets"][1];
    const float* f = reinterpret_cast<const float*>(base + b);
    const size_t n = (e - b) / 4;
    nlohmann::json nt = t;
    const size_t start = data.size();
    if (t["shape"].size() == 2) {
      nt["dtype"] = dtype;
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = dtype == "BF16" ? to_bf16(f[i]) : to_f16(f[i]);
        data.append(reinterpret_cast<const char*>(&h), 2);
      }
    } else {
      data.append(base + b, e - b);
    }
    nt["data_offsets"] = {start, data.size()};
    out_header[name] = nt;
  }
  std::string h = out_header.dump();
  while ((8 + h.size()) % 8) h += ' ';
  const uint64_t n = h.size();
  std::ofstream o(d / "model.safetensors", std::ios::binary);
  o.write(reinterpret_cast<const char*>(&n), 8);
  o << h << data;
  return d.string();
}

TEST(SafetensorsDtypes, Bf16AndF16FilesLoadAndMatchTheReference) {
  for (const char* name : {"tiny-llama3", "tiny-qwen3"}) {
    const std::string src = test::fixture(std::string("models/") + name);
    auto gold = parse_json_file(src + "/goldens.json");
    for (const std::string dtype : {"BF16", "F16"}) {
      const std::string dir = convert(src, dtype);
      auto model = Model::load_dir(dir);
      Engine e(model, {}, nullptr);
      for (size_t p = 0; p < gold["prompts"].size(); ++p) {
        auto logits = e.score(gold["prompts"][p].get<std::vector<int32_t>>(), {});
        if (dtype == "BF16")
          EXPECT_LE(test::rel_err(logits, gold["last_logits_bf16w"][p].get<std::vector<float>>()), 1e-4)
              << name << " " << p;
        else
          EXPECT_LE(test::rel_err(logits, gold["last_logits"][p].get<std::vector<float>>()), 5e-3) << name << " " << p;
      }
      fs::remove_all(dir);
    }
  }
}

}  // namespace
}  // namespace kvb
