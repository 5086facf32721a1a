// `kvbench tokenize` end to end (runs KVB_BINARY): the ids of a plain text equal the PyPI
// `tokenizers` goldens, and with --messages the rendered prompt between the delimiters and its
// ids equal transformers' apply_chat_template (tools/gen_tokenizer_goldens.py, meta.json "chat").
#include <sys/wait.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/util/io.h"
#include "tests/support/test_support.h"

namespace {

using nlohmann::json;
const std::string kData = KVB_TEST_DATA_DIR;  // tests/data, unpacked
const std::string kFix = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/tokenizer/";

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

// Runs the command; returns stdout and stores the exit status.
std::string run(const std::string& cmd, int* status) {
  auto r = kvb::test::run_command(cmd);
  *status = r.rc;
  return r.out;
}

std::vector<int32_t> ids_line(const std::string& out) {
  const size_t pos = out.rfind("\nids: ");
  if (pos == std::string::npos) return {};
  const size_t end = out.find('\n', pos + 1);
  return json::parse(out.substr(pos + 6, end - pos - 6)).get<std::vector<int32_t>>();
}

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    KVB_REQUIRE_BINARY();
    KVB_REQUIRE_TEST_DATA("tokenizers/qwen3/tokenizer.json");
  }
};

TEST_F(TokenizeCli, TextIdsMatchGoldens) {
  std::ifstream texts(kFix + "texts.jsonl"), rows(kFix + "llama3_1.jsonl");
  std::string t, r;
  std::getline(texts, t);
  std::getline(rows, r);
  const std::string text = json::parse(t)["t"];
  std::vector<int32_t> want = {128000};  // meta.json prefix of llama3_1 (BOS)
  const json row = json::parse(r);
  for (int32_t id : row["ids"].get<std::vector<int32_t>>()) want.push_back(id);
  int st = -1;
  const std::string out = run(
      std::string(KVB_BINARY) + " tokenize --model " + kData + "/tokenizers/llama3_1 --text " + shell_quote(text), &st);
  ASSERT_EQ(st, 0) << out;
  EXPECT_EQ(ids_line(out), want) << out;
  EXPECT_EQ(out.find("BEGIN PROMPT"), std::string::npos);
  EXPECT_NE(out.find("0\t128000\t\"<|begin_of_text|>\"\t\"<|begin_of_text|>\"\tspecial\n"), std::string::npos) << out;
  EXPECT_NE(out.find(fmt::format("===== TOKENS ({}) =====", want.size())), std::string::npos);
}

TEST_F(TokenizeCli, ChatPromptAndIdsMatchTransformers) {
  const json meta = kvb::parse_json_file(kFix + "meta.json");
  for (const auto& [key, flag] :
       {std::pair<std::string, std::string>{"qwen3", ""}, {"qwen3_no_thinking", " --no-thinking"}}) {
    const json& want = meta["chat"][key];
    int st = -1;
    const std::string out = run(std::string(KVB_BINARY) + " tokenize --model " + kData +
                                    "/tokenizers/qwen3 --chat --messages " + kFix + "messages.json" + flag,
                                &st);
    ASSERT_EQ(st, 0) << out;
    const std::string begin =
        fmt::format("===== BEGIN PROMPT ({} bytes) =====\n", want["prompt"].get<std::string>().size());
    const size_t a = out.find(begin);
    const size_t b = out.find("\n===== END PROMPT =====\n");
    ASSERT_NE(a, std::string::npos) << key << "\n" << out;
    ASSERT_NE(b, std::string::npos) << key << "\n" << out;
    EXPECT_EQ(out.substr(a + begin.size(), b - a - begin.size()), want["prompt"].get<std::string>()) << key;
    EXPECT_EQ(ids_line(out), want["ids"].get<std::vector<int32_t>>()) << key;
  }
}

TEST_F(TokenizeCli, ErrorsAreReported) {
  int st = -1;
  std::string out = run(std::string(KVB_BINARY) + " tokenize --model /nonexistent-kvb --text hi", &st);
  EXPECT_EQ(st, 2) << out;
  EXPECT_NE(out.find("tokenizer.json"), std::string::npos) << out;
  out = run(std::string(KVB_BINARY) + " tokenize --model " + kData + "/tokenizers/qwen3", &st);
  EXPECT_NE(st, 0) << out;
}

TEST_F(TokenizeCli, EmptyTextGivesTheSpecialTokensAlone) {
  int st = -1;
  std::string out = run(std::string(KVB_BINARY) + " tokenize --model " + kData + "/tokenizers/llama3_1 --text ''", &st);
  ASSERT_EQ(st, 0) << out;
  EXPECT_EQ(ids_line(out), std::vector<int32_t>({128000})) << out;  // BOS alone, as tokenizers' encode("")
  EXPECT_NE(out.find("===== TOKENS (1) =====\n0\t128000\t\"<|begin_of_text|>\""), std::string::npos) << out;
  out = run(std::string(KVB_BINARY) + " tokenize --model " + kData + "/tokenizers/llama3_1 --text '' --no-add-special",
            &st);
  ASSERT_EQ(st, 0) << out;
  EXPECT_NE(out.find("===== TOKENS (0) =====\nids: []"), std::string::npos) << out;
}

// A tokenizer folder as transformers >= 4.50 saves it: the template in chat_template.jinja, none
// in tokenizer_config.json. The rendered prompt and ids equal the apply_chat_template goldens.
TEST_F(TokenizeCli, ChatTemplateJinjaFileAndNamedTemplates) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvb_tok_jinja_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  json cfg = kvb::parse_json_file(kData + "/tokenizers/qwen3/tokenizer_config.json");
  const std::string source = cfg["chat_template"].get<std::string>();
  cfg.erase("chat_template");
  std::ofstream(dir / "tokenizer_config.json") << cfg.dump();
  std::ofstream(dir / "chat_template.jinja") << source;
  std::filesystem::copy_file(kData + "/tokenizers/qwen3/tokenizer.json", dir / "tokenizer.json");
  const json want = kvb::parse_json_file(kFix + "meta.json")["chat"]["qwen3"];
  int st = -1;
  const std::string base =
      std::string(KVB_BINARY) + " tokenize --model " + dir.string() + " --messages " + kFix + "messages.json";
  std::string out = run(base, &st);
  ASSERT_EQ(st, 0) << out;
  EXPECT_NE(out.find(want["prompt"].get<std::string>() + "\n===== END PROMPT ====="), std::string::npos) << out;
  EXPECT_EQ(ids_line(out), want["ids"].get<std::vector<int32_t>>());
  out = run(base + " --chat-template default", &st);
  ASSERT_EQ(st, 0) << out;
  EXPECT_EQ(ids_line(out), want["ids"].get<std::vector<int32_t>>());
  out = run(base + " --chat-template tool_use", &st);
  EXPECT_EQ(st, 2) << out;
  EXPECT_NE(out.find("kvbench: error: " + (dir / "chat_template.jinja").string() +
                     ": chat_template: no template named \"tool_use\""),
            std::string::npos)
      << out;
  // No template anywhere: one error naming the file and the field.
  std::filesystem::remove(dir / "chat_template.jinja");
  out = run(base, &st);
  EXPECT_EQ(st, 2) << out;
  EXPECT_NE(out.find("kvbench: error: " + (dir / "tokenizer_config.json").string() + ": chat_template: missing"),
            std::string::npos)
      << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
