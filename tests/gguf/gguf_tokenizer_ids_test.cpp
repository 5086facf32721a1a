// Token ids of the tokenizer converted from GGUF metadata (kvb::gguf_tokenizer_json ->
// kvb::tok::Tokenizer) against transformers' AutoTokenizer.from_pretrained(gguf_file=...) on
// >= 500 strings per model (goldens from tools/gen_gguf_goldens.py).
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/model/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/io.h"
#include "tests/support/test_support.h"

namespace {

using json = nlohmann::json;

std::string fixture(const std::string& name) { return std::string(KVB_SOURCE_DIR) + "/tests/fixtures/gguf/" + name; }

void check_ids(const std::string& gguf, const std::string& golden) {
  const auto f = kvb::GgufFile::open(gguf);
  const auto tok = kvb::tok::Tokenizer::from_json(kvb::gguf_tokenizer_json(f), gguf, kvb::gguf_tokenizer_config(f));
  const json g = kvb::parse_json_file(golden);
  const json& cases = g["cases"];
  ASSERT_GE(cases.size(), 500u);
  size_t bad = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const auto ids = tok.encode(text, true);
    const auto plain = tok.encode(text, false);
    const bool ok =
        ids == c["ids"].get<std::vector<int32_t>>() && plain == c["ids_no_special"].get<std::vector<int32_t>>();
    if (!ok && ++bad <= 10) ADD_FAILURE() << "ids differ for " << json(text).dump();
  }
  EXPECT_EQ(bad, 0u) << "of " << cases.size();
}

TEST(GgufTokenizer, TinyLlamaByteLevelBpeIds) { check_ids(fixture("tiny_llama.gguf"), fixture("tiny_llama.ids.json")); }

TEST(GgufTokenizer, Stories260KSentencePieceIds) {
  check_ids(fixture("stories260K.gguf"), fixture("stories260K.ids.json"));
}

TEST(GgufTokenizer, SmolLM2FromCacheIds) {
  KVB_REQUIRE_DEFAULT_MODEL();
  const std::string p = kvb::test::default_model_path();
  check_ids(p, fixture("smollm2.ids.json"));
}

}  // namespace
