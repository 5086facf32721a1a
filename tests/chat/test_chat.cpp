// Tests of kvb::chat::ChatTemplate against transformers' apply_chat_template.
//
// Goldens: tests/fixtures/chat/chat_goldens.json, made by tools/gen_chat_goldens.py with
// transformers 5 + jinja2 3.1.6: 13 conversations (system or not, multi-turn, <think> history,
// reasoning_content, unicode, whitespace, template-looking text, empty content, None-valued keys)
// x add_generation_prompt on/off x per-template options (Qwen3: enable_thinking unset/true/false;
// Llama-3.1 tools template: fixed date_string) for Qwen3 and Llama-3.1 from ../shared/tokenizers
// and the DeepSeek-R1-Distill, Phi-3 and SmolLM2 fixtures in tests/fixtures/chat/. Every render
// must be byte-equal.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/chat/chat_template.h"
#include "engine/util/error.h"
#include "engine/util/io.h"

using kvb::chat::ChatTemplate;
using kvb::chat::RenderOptions;
using ojson = nlohmann::ordered_json;

namespace {

const std::string kFixtures = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/chat";

ojson goldens() { return ojson::parse(kvb::read_file(kFixtures + "/chat_goldens.json")); }

std::string config_path(const ojson& spec) {
  std::string loc = spec["location"].get<std::string>();
  if (spec["kind"] == "shared") return std::string(KVB_SHARED_DIR) + "/" + loc + "/tokenizer_config.json";
  return kFixtures + "/" + loc + "/tokenizer_config.json";
}

// Runs every golden case of one template; returns the number checked (0 when skipped).
int check_template(const std::string& name) {
  ojson g = goldens();
  const ojson& spec = g["templates"][name];
  std::string path = config_path(spec);
  if (!kvb::file_exists(path)) return 0;
  ChatTemplate t = ChatTemplate::from_tokenizer_config(path);
  int n = 0;
  for (const auto& c : g["cases"]) {
    if (c["template"] != name) continue;
    const ojson& conv = g["conversations"][c["conversation"].get<size_t>()];
    RenderOptions opts;
    opts.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    if (!c["enable_thinking"].is_null()) opts.enable_thinking = c["enable_thinking"].get<bool>();
    opts.extra = nlohmann::json::parse(c["extra"].dump());
    SCOPED_TRACE(name + " conversation " + std::to_string(c["conversation"].get<int>()) +
                 " gen=" + std::to_string(opts.add_generation_prompt) + " thinking=" + c["enable_thinking"].dump() +
                 " extra=" + c["extra"].dump());
    if (c.contains("error")) {
      EXPECT_THROW(t.render_ordered(conv, opts), kvb::Error);
    } else {
      std::string got;
      try {
        got = t.render_ordered(conv, opts);
      } catch (const kvb::Error& e) {
        ADD_FAILURE() << e.what();
        continue;
      }
      EXPECT_EQ(got, c["expected"].get<std::string>());
    }
    ++n;
  }
  return n;
}

}  // namespace

TEST(ChatTemplate, Qwen3ThinkingOnOffAndHistory) {
  int n = check_template("qwen3");
  if (n == 0) GTEST_SKIP() << "../shared/tokenizers/qwen3 not present";
  EXPECT_GE(n, 10 * 3 * 2);
}

TEST(ChatTemplate, Llama31FromShared) {
  int n = check_template("llama3_1");
  if (n == 0) GTEST_SKIP() << "../shared/tokenizers/llama3_1 not present";
  EXPECT_GE(n, 20);
}

TEST(ChatTemplate, Llama31OfficialWithDateString) { EXPECT_GE(check_template("llama3_1_tools"), 40); }
TEST(ChatTemplate, DeepSeekR1DistillQwen) { EXPECT_GE(check_template("deepseek_r1_distill_qwen"), 20); }
TEST(ChatTemplate, DeepSeekR1DistillQwenThinkPrompt) { EXPECT_GE(check_template("deepseek_r1_distill_qwen_think"), 20); }
TEST(ChatTemplate, Phi3Mini4k) { EXPECT_GE(check_template("phi3_mini_4k"), 20); }
TEST(ChatTemplate, Phi3MiniWithSystem) { EXPECT_GE(check_template("phi3_mini_system"), 20); }
TEST(ChatTemplate, SmolLM2Instruct) { EXPECT_GE(check_template("smollm2_instruct"), 20); }

TEST(ChatTemplate, MessageStructApiMatchesJsonApi) {
  ChatTemplate t = ChatTemplate::from_tokenizer_config(kFixtures + "/smollm2_instruct/tokenizer_config.json");
  std::vector<kvb::chat::Message> msgs = {{"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& m : msgs) arr.push_back({{"role", m.role}, {"content", m.content}});
  EXPECT_EQ(t.render(msgs), t.render_json(arr));
  RenderOptions off;
  off.add_generation_prompt = false;
  EXPECT_NE(t.render(msgs), t.render(msgs, off));
}

TEST(ChatTemplate, ConfigErrorsNameFileAndField) {
  auto dir = std::filesystem::temp_directory_path() / ("kvb_chat_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::string p = (dir / name).string();
    std::ofstream(p) << text;
    return p;
  };
  std::string p1 = write("no_template.json", R"({"bos_token": "<s>"})");
  try {
    ChatTemplate::from_tokenizer_config(p1);
    ADD_FAILURE() << "expected an error";
  } catch (const kvb::Error& e) {
    EXPECT_NE(std::string(e.what()).find(p1 + ": chat_template"), std::string::npos) << e.what();
  }
  std::string p2 = write("bad.json", R"({"chat_template": "{% for m in messages %}")");
  EXPECT_THROW(ChatTemplate::from_tokenizer_config(p2), kvb::Error);
  std::string p3 = write("syntax.json", R"({"chat_template": "line1\n{% for m in messages %}\n{{ m.content }}"})");
  try {
    ChatTemplate::from_tokenizer_config(p3);
    ADD_FAILURE() << "expected an error";
  } catch (const kvb::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(p3 + ": chat_template:2: unexpected end of template", 0), 0u) << e.what();
  }
  std::string p4 = write("bos_obj.json", R"({"chat_template": "{{ bos_token }}|{{ eos_token }}", "bos_token": {"content": "<B>"}, "eos_token": 3})");
  EXPECT_THROW(ChatTemplate::from_tokenizer_config(p4), kvb::Error);
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplate, RaiseExceptionFromTemplateNamesLine) {
  ChatTemplate t(
      "{% for m in messages %}\n"
      "{% if m.role not in ['user', 'assistant'] %}\n"
      "{{ raise_exception('Only user and assistant roles are supported!') }}\n"
      "{% endif %}{{ m.content }}{% endfor %}",
      "inline");
  std::vector<kvb::chat::Message> ok = {{"user", "x"}};
  EXPECT_EQ(t.render(ok), "x");
  std::vector<kvb::chat::Message> bad = {{"system", "x"}};
  try {
    t.render(bad);
    ADD_FAILURE() << "expected an error";
  } catch (const kvb::Error& e) {
    EXPECT_EQ(std::string(e.what()), "inline:3: raise_exception: Only user and assistant roles are supported!");
  }
  EXPECT_THROW(t.render({}), kvb::Error);  // empty conversation, as transformers refuses
}
