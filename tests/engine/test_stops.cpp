// Stop rules against the stories260K greedy oracle (expected_greedy_200.txt, from the reference
// implementation): a stop string cuts the text right before its first occurrence; an EOS id ends
// generation right after the token is emitted; max_new_tokens caps; EOS ids come from
// config.json and generation_config.json (merged).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/engine.h"
#include "tests/support/stories.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

class Stops : public test::StoriesTest {
 protected:
  void SetUp() override {
    StoriesTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    tok_ = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_dir(dir_));
    oracle_ = read_file(dir_ + "/expected_greedy_200.txt");
  }
  GenerationResult run(GenerationRequest r) {
    r.prompt = {1};
    Engine e(model_, {}, nullptr);
    return e.generate({r}, tok_.get())[0];
  }
  std::string oracle_;
  std::unique_ptr<tok::Tokenizer> tok_;
};

TEST_F(Stops, StopStringCutsBeforeItsFirstOccurrence) {
  for (const std::string stop : {"park", "\"Lily,", "red ball", "\n"}) {
    GenerationRequest r;
    r.max_new_tokens = 200;
    r.stop_strings = {stop, "string that never occurs"};
    auto res = run(r);
    const size_t at = oracle_.find(stop);
    ASSERT_NE(at, std::string::npos) << stop;
    EXPECT_EQ(res.finish, FinishReason::kStopString) << stop;
    EXPECT_EQ(res.text, oracle_.substr(0, at)) << stop;
    EXPECT_LT(res.tokens.size(), 200u);
    // The generated tokens decode to the oracle's prefix that contains the stop string.
    const std::string all = tok_->decode(res.tokens, true);
    EXPECT_EQ(oracle_.compare(0, all.size(), all), 0) << stop;
    EXPECT_NE(all.find(stop), std::string::npos) << stop;
  }
}

TEST_F(Stops, EosIdEndsRightAfterTheTokenAndTheCapHolds) {
  GenerationRequest full;
  full.max_new_tokens = 200;
  auto ref = run(full);
  ASSERT_EQ(ref.text, oracle_);
  const int32_t eos = ref.tokens[17];
  size_t first = 0;
  while (ref.tokens[first] != eos) ++first;
  GenerationRequest r = full;
  r.stop_ids = {999, eos};  // 999 never appears (vocab 512)
  auto res = run(r);
  EXPECT_EQ(res.finish, FinishReason::kEos);
  EXPECT_EQ(res.tokens, std::vector<int32_t>(ref.tokens.begin(), ref.tokens.begin() + first + 1));
  GenerationRequest cap = full;
  cap.max_new_tokens = 7;
  auto capped = run(cap);
  EXPECT_EQ(capped.finish, FinishReason::kLength);
  EXPECT_EQ(capped.tokens, std::vector<int32_t>(ref.tokens.begin(), ref.tokens.begin() + 7));
}

TEST_F(Stops, EosIdsMergeConfigAndGenerationConfig) {
  EXPECT_EQ(model_->config().eos_token_ids, std::vector<int32_t>{2});
  fs::path d = fs::temp_directory_path() / ("kvb_stops_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(dir_ + "/" + f, d / f);
  std::ofstream(d / "generation_config.json") << R"({"bos_token_id": 1, "eos_token_id": [7, 2, 300]})";
  auto m = Model::load_dir(d.string());
  auto ids = m->config().eos_token_ids;
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 7, 300}));
  fs::remove_all(d);
}

}  // namespace
}  // namespace kvb
