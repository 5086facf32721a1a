// Invalid tokenizer.json files give one clear kvb::Error naming the file and the field; the
// broken files are written into a temporary folder by each test.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.h"
#include "engine/util/error.h"
#include "tests/support/test_support.h"

namespace {

namespace fs = std::filesystem;
using ::kvb::test::contains_all;
using nlohmann::json;

class TokenizerErrors : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = kvb::test::temp_dir("tok_err"); }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  // A small valid byte-level BPE tokenizer.json to break one field at a time.
  static json valid() {
    return json::parse(R"({
      "version": "1.0", "added_tokens": [{"id": 5, "content": "<|end|>", "special": true,
        "lstrip": false, "rstrip": false, "normalized": false, "single_word": false}],
      "normalizer": null,
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
      "post_processor": null, "decoder": {"type": "ByteLevel"},
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4},
                "merges": ["a b", "Ġ ab"]}})");
  }
  // Loads `j` from a file and returns the error message (fails the test when none is thrown).
  std::string error_of(const std::string& text) {
    const std::string p = write("tokenizer.json", text);
    try {
      kvb::tok::Tokenizer::from_file(p);
    } catch (const kvb::Error& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "error does not name the file: " << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no kvb::Error for " << text.substr(0, 200);
    return {};
  }
  fs::path dir_;
};

TEST_F(TokenizerErrors, ValidFileLoadsAndEncodes) {
  const std::string p = write("tokenizer.json", valid().dump());
  const auto tok = kvb::tok::Tokenizer::from_file(p);
  EXPECT_EQ(tok.encode("ab ab<|end|>"), (std::vector<int32_t>{2, 4, 5}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{2, 4, 5}), "ab ab<|end|>");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{2, 4, 5}, true), "ab ab");
}

TEST_F(TokenizerErrors, BadJson) { EXPECT_TRUE(contains_all(error_of("{\"model\": {\"type\": \"BPE\", "), {"JSON"})); }

TEST_F(TokenizerErrors, UnknownModelType) {
  json j = valid();
  j["model"]["type"] = "Unigram";
  EXPECT_TRUE(contains_all(error_of(j.dump()), {"model.type", "Unigram"}));
}

TEST_F(TokenizerErrors, MergeNamesUnknownToken) {
  json j = valid();
  j["model"]["merges"] = {"a b", "Ġ zz"};
  EXPECT_TRUE(contains_all(error_of(j.dump()), {"model.merges[1]", "zz"}));
}

TEST_F(TokenizerErrors, MergeResultNotInVocab) {
  json j = valid();
  j["model"]["merges"] = {"a b", "b a"};
  EXPECT_TRUE(contains_all(error_of(j.dump()), {"model.merges[1]", "ba"}));
}

TEST_F(TokenizerErrors, MalformedMerge) {
  json j = valid();
  j["model"]["merges"] = {"a b", "ab"};
  EXPECT_TRUE(contains_all(error_of(j.dump()), {"model.merges[1]"}));
  j["model"]["merges"] = json::array({json::array({"a", "b"}), 7});
  EXPECT_TRUE(contains_all(error_of(j.dump()), {"model.merges[1]"}));
}

TEST_F(TokenizerErrors, MissingVocab) {
  json j = valid();
  j["model"].erase("vocab");
  EXPECT_TRUE(contains_all(error_of(j.dump()), {"model.vocab"}));
  j["model"]["vocab"] = json::array({"a"});
  EXPECT_TRUE(contains_all(error_of(j.dump()), {"model.vocab"}));
  j["model"]["vocab"] = {{"a", "zero"}};
  EXPECT_TRUE(contains_all(error_of(j.dump()), {"model.vocab"}));
}

TEST_F(TokenizerErrors, MissingModel) {
  json j = valid();
  j.erase("model");
  EXPECT_TRUE(contains_all(error_of(j.dump()), {"model"}));
  EXPECT_TRUE(contains_all(error_of("[1, 2]"), {"must be an object"}));
}

TEST_F(TokenizerErrors, UnknownComponentTypes) {
  json j = valid();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  EXPECT_TRUE(contains_all(error_of(j.dump()), {"normalizer.type"}));
  j = valid();
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Nope"}}}}};
  EXPECT_TRUE(contains_all(error_of(j.dump()), {"pre_tokenizer.pretokenizers[0].type"}));
  j = valid();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_TRUE(contains_all(error_of(j.dump()), {"decoder.type"}));
  j = valid();
  j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", {{{"SpecialToken", {{"id", "<s>"}}}}}}};
  EXPECT_TRUE(contains_all(error_of(j.dump()), {"post_processor"}));
  j = valid();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a(?=b)"}}}, {"behavior", "Isolated"}};
  EXPECT_TRUE(contains_all(error_of(j.dump()), {"pre_tokenizer.pattern.Regex"}));
  j = valid();
  j["model"]["unk_token"] = "<missing>";
  EXPECT_TRUE(contains_all(error_of(j.dump()), {"model.unk_token"}));
}

TEST_F(TokenizerErrors, FromDirWithoutTokenizerJson) {
  try {
    kvb::tok::Tokenizer::from_dir(dir_.string());
    ADD_FAILURE() << "no error";
  } catch (const kvb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
}

TEST_F(TokenizerErrors, GarbageInputNeverCrashes) {
  // Invalid UTF-8 and unknown ids must not crash encode/decode/stream.
  const std::string p = write("tokenizer.json", valid().dump());
  const auto tok = kvb::tok::Tokenizer::from_file(p);
  const std::string junk("\xff\xfe a\xc3 \xe4\xb8 b\x80", 12);
  (void)tok.encode(junk);
  EXPECT_EQ(tok.decode(std::vector<int32_t>{-5, 99999, 2}), "ab");
  kvb::tok::StreamDecoder s(tok);
  std::string out;
  for (int32_t id : {2, -1, 4, 1000000}) out += s.push(id);
  out += s.flush();
  EXPECT_EQ(out, "ab ab");
}

}  // namespace
