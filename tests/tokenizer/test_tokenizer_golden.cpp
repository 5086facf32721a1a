// Golden parity of kvb::tok::Tokenizer with PyPI `tokenizers` (goldens made by
// tools/gen_tokenizer_goldens.py): for every string of tests/fixtures/tokenizer/texts.jsonl and
// each tokenizer (qwen3, llama3_1, llama2 from tests/data/tokenizers, stories260K), encode equals
// the reference ids exactly, decode equals the reference decode (with and without special
// tokens), and StreamDecoder's pieces concatenate to decode and are each valid UTF-8.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"
#include "engine/util/io.h"
#include "tests/support/test_support.h"

namespace {

using nlohmann::json;
const std::string kFix = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/tokenizer/";

std::vector<json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> rows;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

std::string show(const std::vector<int32_t>& v) { return json(v).dump(); }

/// A test of the tokenizer named by the parameter: its reference facts in meta.json and the path
/// of its tokenizer file under the test data (the test fails when that file is absent).
class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    name_ = GetParam();
    info_ = kvb::parse_json_file(kFix + "meta.json")["tokenizers"][name_];
    const std::string rel = info_["source"].get<std::string>();  // under the test data
    path_ = kvb::test::test_data(rel);
    KVB_REQUIRE_TEST_DATA(rel);
  }
  std::string name_, path_;
  json info_;
};

TEST_P(GoldenTest, EncodeDecodeStreamMatchReference) {
  const kvb::tok::Tokenizer tok = kvb::tok::Tokenizer::from_file(path_);
  const auto texts = read_jsonl(kFix + "texts.jsonl");
  const auto rows = read_jsonl(kFix + name_ + ".jsonl");
  ASSERT_EQ(texts.size(), rows.size());
  ASSERT_GE(texts.size(), 2000u);
  const std::vector<int32_t> prefix = info_["prefix"].get<std::vector<int32_t>>();

  int enc_fail = 0, dec_fail = 0, stream_fail = 0, shown = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string text = texts[i]["t"].get<std::string>();
    const json& row = rows[i];
    const auto want = row["ids"].get<std::vector<int32_t>>();
    const auto got = tok.encode(text, /*add_special_tokens=*/false);
    if (got != want) {
      ++enc_fail;
      if (shown++ < 5)
        ADD_FAILURE() << name_ << " text #" << i << " " << json(text).dump() << "\n want " << show(want) << "\n got  "
                      << show(got);
    }
    if (row.contains("full")) {
      const auto full_want = row["full"].get<std::vector<int32_t>>();
      EXPECT_EQ(tok.encode(text, true), full_want) << name_ << " #" << i;
      EXPECT_EQ(tok.decode(full_want, false), row["fdec"].get<std::string>()) << name_ << " #" << i;
      EXPECT_EQ(tok.decode(full_want, true), row["fdsk"].get<std::string>()) << name_ << " #" << i;
      std::vector<int32_t> joined = prefix;
      joined.insert(joined.end(), want.begin(), want.end());
      EXPECT_EQ(joined, full_want);
    }
    const std::string dec_want = row.contains("dec") ? row["dec"].get<std::string>() : text;
    const std::string dsk_want = row.contains("dsk") ? row["dsk"].get<std::string>() : dec_want;
    const std::string dec = tok.decode(want, false);
    if (dec != dec_want || tok.decode(want, true) != dsk_want) {
      ++dec_fail;
      if (shown++ < 5)
        ADD_FAILURE() << name_ << " decode #" << i << "\n want " << json(dec_want).dump() << "\n got  "
                      << json(dec).dump();
    }
    // Streaming: pieces are valid UTF-8 and concatenate to decode(ids).
    kvb::tok::StreamDecoder stream(tok);
    std::string cat;
    bool valid = true;
    for (int32_t id : want) {
      const std::string piece = stream.push(id);
      valid &= kvb::tok::uni::is_valid_utf8(piece);
      cat += piece;
    }
    cat += stream.flush();
    if (cat != dec_want || !valid) {
      ++stream_fail;
      if (shown++ < 5)
        ADD_FAILURE() << name_ << " stream #" << i << " valid=" << valid << "\n want " << json(dec_want).dump()
                      << "\n got  " << json(cat).dump();
    }
  }
  EXPECT_EQ(enc_fail, 0) << name_ << ": encode mismatches of " << rows.size();
  EXPECT_EQ(dec_fail, 0) << name_ << ": decode mismatches";
  EXPECT_EQ(stream_fail, 0) << name_ << ": stream mismatches";
  std::printf("[ golden ] %s: %zu strings\n", name_.c_str(), rows.size());
}

TEST_P(GoldenTest, VocabularyFactsMatchReference) {
  const std::string dir = path_.substr(0, path_.rfind('/'));
  const kvb::tok::Tokenizer tok = kvb::tok::Tokenizer::from_dir(dir);
  EXPECT_EQ(tok.vocab_size(), info_["vocab_size"].get<size_t>());
  const auto prefix = info_["prefix"].get<std::vector<int32_t>>();
  if (!prefix.empty()) {
    EXPECT_EQ(tok.bos_id(), prefix[0]);
  } else if (info_["bos_id"].is_null()) {
    EXPECT_FALSE(tok.bos_id().has_value());
  } else {
    EXPECT_EQ(tok.bos_id(), info_["bos_id"].get<int32_t>());
  }
  if (info_["eos_id"].is_null()) EXPECT_FALSE(tok.eos_id().has_value());
  else EXPECT_EQ(tok.eos_id(), info_["eos_id"].get<int32_t>());
  std::vector<int32_t> special;
  for (int32_t id = 0; id < static_cast<int32_t>(tok.vocab_size()); ++id)
    if (tok.is_special(id)) special.push_back(id);
  EXPECT_EQ(special, info_["special_ids"].get<std::vector<int32_t>>());
  for (const auto& [id_str, piece] : info_["pieces"].items()) {
    const int32_t id = std::stoi(id_str);
    if (piece.is_null()) continue;
    EXPECT_EQ(tok.id_to_piece(id), piece.get<std::string>()) << id;
    EXPECT_EQ(tok.piece_to_id(piece.get<std::string>()), id) << piece;
  }
  EXPECT_EQ(tok.id_to_piece(-1), "");
  EXPECT_EQ(tok.id_to_piece(static_cast<int32_t>(tok.vocab_size())), "");
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenTest, ::testing::Values("qwen3", "llama3_1", "llama2", "stories260k"));

}  // namespace
