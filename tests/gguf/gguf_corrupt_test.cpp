// Corrupt GGUF files: each must give one kvb::Error naming the file and the field, never a crash
// (run under ASan/UBSan in CI). Files are built byte by byte here from the format description
// (ggml docs/gguf.md), then broken one field at a time.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/util/error.h"
#include "engine/util/io.h"

namespace {

namespace fs = std::filesystem;

/// A minimal valid GGUF: 3 key/values and one F32 tensor of 8 elements; every field overridable.
struct Spec {
  std::string magic = "GGUF";
  uint32_t version = 3;
  int64_t tensor_count = -1;  // -1: the real count
  int64_t kv_count = -1;
  uint32_t arch_value_type = 8;  // STRING
  uint64_t array_len = 2;        // of the string array below
  uint32_t array_elem_type = 8;
  uint32_t alignment = 32;
  uint8_t bool_value = 1;
  uint32_t n_dims = 1;
  uint64_t dim0 = 8;
  uint32_t tensor_type = 0;  // F32
  uint64_t tensor_offset = 0;
  size_t data_bytes = 32;
  bool duplicate_key = false;
};

struct Bytes {
  std::vector<uint8_t> b;
  void u8(uint8_t v) { b.push_back(v); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
};

std::vector<uint8_t> build(const Spec& s) {
  Bytes o;
  o.b.insert(o.b.end(), s.magic.begin(), s.magic.end());
  o.u32(s.version);
  o.u64(s.tensor_count < 0 ? 1 : static_cast<uint64_t>(s.tensor_count));
  const uint64_t nkv = s.duplicate_key ? 5 : 4;
  o.u64(s.kv_count < 0 ? nkv : static_cast<uint64_t>(s.kv_count));
  o.str("general.architecture");
  o.u32(s.arch_value_type);
  o.str("llama");
  o.str("general.alignment");
  o.u32(4);
  o.u32(s.alignment);
  o.str("test.flag");
  o.u32(7);
  o.u8(s.bool_value);
  o.str("test.names");
  o.u32(9);
  o.u32(s.array_elem_type);
  o.u64(s.array_len);
  o.str("a");
  o.str("bc");
  if (s.duplicate_key) {
    o.str("test.flag");
    o.u32(7);
    o.u8(0);
  }
  o.str("t");
  o.u32(s.n_dims);
  for (uint32_t d = 0; d < std::min<uint32_t>(s.n_dims, 6); ++d) o.u64(d == 0 ? s.dim0 : 1);
  o.u32(s.tensor_type);
  o.u64(s.tensor_offset);
  while (o.b.size() % 32) o.u8(0);
  for (size_t i = 0; i < s.data_bytes; ++i) o.u8(static_cast<uint8_t>(i));
  return o.b;
}

class GgufCorrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvb_gguf_corrupt_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::vector<uint8_t>& bytes, const std::string& name = "bad.gguf") {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  /// Expects open+load to fail with one kvb::Error mentioning the path and `field`.
  void expect_error(const std::vector<uint8_t>& bytes, const std::string& field) {
    const std::string p = write(bytes);
    try {
      kvb::GgufFile::open(p);
      FAIL() << "no error; expected one about " << field;
    } catch (const kvb::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(p), std::string::npos) << msg;
      EXPECT_NE(msg.find(field), std::string::npos) << "expected '" << field << "' in: " << msg;
    }
  }
  fs::path dir_;
};

TEST_F(GgufCorrupt, ValidBaselineParses) {
  const auto f = kvb::GgufFile::open(write(build(Spec{})));
  EXPECT_EQ(f.tensors().size(), 1u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.find("test.names")->strings, (std::vector<std::string>{"a", "bc"}));
  const auto v = f.read_f32(f.tensors()[0]);
  EXPECT_EQ(v.size(), 8u);
  Spec v2;
  v2.version = 2;  // same layout as v3 for little-endian files
  EXPECT_NO_THROW(kvb::GgufFile::open(write(build(v2), "v2.gguf")));
}

/// One corruption of the baseline file: what `edit` breaks, and the text the error must contain
/// besides the path ("" = any kvb::Error).
struct Corruption {
  const char* what;
  void (*edit)(Spec&);
  const char* field;
};

const Corruption kCorruptions[] = {
    {"magic", [](Spec& s) { s.magic = "GGML"; }, "header.magic"},
    {"version 1", [](Spec& s) { s.version = 1; }, "header.version"},
    {"version 99", [](Spec& s) { s.version = 99; }, "header.version"},
    {"big-endian file", [](Spec& s) { s.version = 0x03000000; }, "byte-swapped"},
    {"kv count 2^60", [](Spec& s) { s.kv_count = int64_t{1} << 60; }, "header.metadata_kv_count"},
    {"tensor count 2^60", [](Spec& s) { s.tensor_count = int64_t{1} << 60; }, "header.tensor_count"},
    {"array length 2^61", [](Spec& s) { s.array_len = uint64_t{1} << 61; }, "metadata 'test.names'"},
    // more key/values than written: the tensor infos are misread; any clear error
    {"kv count 6", [](Spec& s) { s.kv_count = 6; }, ""},
    {"value type 13", [](Spec& s) { s.arch_value_type = 13; }, "metadata 'general.architecture' (type)"},
    {"array element type 200", [](Spec& s) { s.array_elem_type = 200; }, "metadata 'test.names' (array element type)"},
    {"retired ggml type Q4_2", [](Spec& s) { s.tensor_type = 5; }, "tensor 't'.type"},
    {"tensor type 1000", [](Spec& s) { s.tensor_type = 1000; }, "tensor 't'.type"},
    {"bool 7", [](Spec& s) { s.bool_value = 7; }, "metadata 'test.flag'"},
    {"alignment 24", [](Spec& s) { s.alignment = 24; }, "general.alignment"},
    {"duplicate key", [](Spec& s) { s.duplicate_key = true; }, "duplicate"},
    {"5 dimensions", [](Spec& s) { s.n_dims = 5; }, "tensor 't'.n_dims"},
    {"dim 2^62", [](Spec& s) { s.dim0 = uint64_t{1} << 62; }, "tensor 't'.dims"},
    // Q8_0 needs a multiple of 32 elements per row
    {"Q8_0 row of 8", [](Spec& s) { s.tensor_type = 8; }, "tensor 't'.dims"},
    {"unaligned offset", [](Spec& s) { s.tensor_offset = 8; }, "tensor 't'.offset"},
    {"aligned offset past the end", [](Spec& s) { s.tensor_offset = 1 << 20; }, "tensor 't'.data"},
    {"tensor data past the end", [](Spec& s) { s.data_bytes = 31; }, "tensor 't'.data"},
};

TEST_F(GgufCorrupt, EachBrokenFieldIsNamed) {
  for (const Corruption& c : kCorruptions) {
    SCOPED_TRACE(c.what);
    Spec s;
    c.edit(s);
    expect_error(build(s), c.field);
  }
  expect_error({'G', 'G'}, "header.magic");
}

TEST_F(GgufCorrupt, UndequantisableTypeIsNamedWhenRead) {
  Spec s;
  s.tensor_type = 10;  // Q2_K: parses, but cannot be dequantised
  s.dim0 = 256;
  s.data_bytes = 96;
  const auto f = kvb::GgufFile::open(write(build(s), "q2k.gguf"));
  try {
    f.read_f32(f.tensors()[0]);
    FAIL() << "Q2_K dequantised";
  } catch (const kvb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 't'.type"), std::string::npos) << e.what();
  }
}

TEST_F(GgufCorrupt, EveryTruncationOfASmallFile) {
  const auto full = build(Spec{});
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string p = write({full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)});
    EXPECT_THROW(kvb::GgufFile::open(p), kvb::Error) << "truncated to " << n << " bytes";
  }
}

TEST_F(GgufCorrupt, TruncatedRealModelFile) {
  const std::string src = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/gguf/tiny_llama.gguf";
  const std::string s = kvb::read_file(src);
  const std::vector<uint8_t> full(s.begin(), s.end());
  // 150 cut points spread over the header, the metadata (tokenizer arrays) and the tensor data
  for (size_t k = 0; k < 150; ++k) {
    const size_t n = k * (full.size() - 1) / 149 + (k % 7);
    if (n >= full.size()) continue;
    const std::string p = write({full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)});
    EXPECT_THROW(kvb::load_gguf(p), kvb::Error) << "truncated to " << n << " bytes";
  }
}

TEST_F(GgufCorrupt, LoadGgufNeedsAnArchitectureItKnows) {
  // the baseline file is a llama without hyperparameters: a clear error naming the key
  try {
    kvb::load_gguf(write(build(Spec{})));
    FAIL();
  } catch (const kvb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama.block_count"), std::string::npos) << e.what();
  }
}

}  // namespace
