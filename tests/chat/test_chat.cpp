// Tests of kvb::chat::ChatTemplate against transformers' apply_chat_template.
//
// Goldens: tests/fixtures/chat/chat_goldens.json, made by tools/gen_chat_goldens.py with
// transformers 5 + jinja2 3.1.6: 13 conversations (system or not, multi-turn, <think> history,
// reasoning_content, unicode, whitespace, template-looking text, empty content, None-valued keys)
// x add_generation_prompt on/off x per-template options (Qwen3: enable_thinking unset/true/false;
// Llama-3.1 tools template: fixed date_string) for Qwen3 and Llama-3.1 from tests/data/tokenizers
// and the DeepSeek-R1-Distill, Phi-3 and SmolLM2 fixtures in tests/fixtures/chat/. Every render
// must be byte-equal.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/chat/chat_template.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "tests/support/test_support.h"

using kvb::chat::ChatTemplate;
using kvb::chat::RenderOptions;
using ojson = nlohmann::ordered_json;

namespace {

const std::string kFixtures = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/chat";

ojson goldens() { return ojson::parse(kvb::read_file(kFixtures + "/chat_goldens.json")); }

std::string config_path(const ojson& spec) {
  std::string loc = spec["location"].get<std::string>();
  // "shared": a tokenizer of tests/data/tokenizers (the golden script's name for them).
  if (spec["kind"] == "shared") return kvb::test::test_data(loc + "/tokenizer_config.json");
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
  KVB_REQUIRE_TEST_DATA("tokenizers/qwen3/tokenizer_config.json");
  int n = check_template("qwen3");
  EXPECT_GE(n, 10 * 3 * 2);
}

TEST(ChatTemplate, Llama31FromTestData) {
  KVB_REQUIRE_TEST_DATA("tokenizers/llama3_1/tokenizer_config.json");
  int n = check_template("llama3_1");
  EXPECT_GE(n, 20);
}

TEST(ChatTemplate, Llama31OfficialWithDateString) { EXPECT_GE(check_template("llama3_1_tools"), 40); }
TEST(ChatTemplate, DeepSeekR1DistillQwen) { EXPECT_GE(check_template("deepseek_r1_distill_qwen"), 20); }
TEST(ChatTemplate, DeepSeekR1DistillQwenThinkPrompt) {
  EXPECT_GE(check_template("deepseek_r1_distill_qwen_think"), 20);
}
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
  std::string p4 =
      write("bos_obj.json",
            R"({"chat_template": "{{ bos_token }}|{{ eos_token }}", "bos_token": {"content": "<B>"}, "eos_token": 3})");
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

// ---- Model directories as transformers 4.4x+ writes them (issue 17) ----

namespace {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() / ("kvb_chat_dir_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    const auto p = path / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  std::string dir() const { return path.string(); }
};

const std::vector<kvb::chat::Message> kOneUser = {{"user", "hi"}};

using ::kvb::test::input_error_of;

}  // namespace

TEST(ChatTemplateDir, PrecedenceJinjaThenJsonThenTokenizerConfig) {
  TempDir d("prec");
  d.write("tokenizer_config.json",
          R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template": "CFG{{ bos_token }}{{ messages[0].content }}"})");
  EXPECT_TRUE(ChatTemplate::model_dir_has_template(d.dir()));
  EXPECT_EQ(ChatTemplate::from_model_dir(d.dir()).render(kOneUser), "CFG<s>hi");
  d.write("chat_template.json", R"({"chat_template": "JSON{{ eos_token }}{{ messages[0].content }}"})");
  EXPECT_EQ(ChatTemplate::from_model_dir(d.dir()).render(kOneUser), "JSON</s>hi");
  d.write("chat_template.jinja",
          "JINJA{{ bos_token }}{{ messages[0].content }}{% if add_generation_prompt %}>{% endif %}");
  const ChatTemplate t = ChatTemplate::from_model_dir(d.dir());
  EXPECT_EQ(t.render(kOneUser), "JINJA<s>hi>");
  EXPECT_EQ(t.origin(), d.dir() + "/chat_template.jinja");
  // The same directory without tokenizer_config.json: the .jinja alone is enough (no special tokens).
  std::filesystem::remove(d.path / "tokenizer_config.json");
  EXPECT_EQ(ChatTemplate::from_model_dir(d.dir()).render(kOneUser), "JINJAhi>");
}

TEST(ChatTemplateDir, JinjaFileMatchesSameTemplateInTokenizerConfig) {
  // A real template (SmolLM2's, from the goldens' fixture) moved from tokenizer_config.json to
  // chat_template.jinja renders byte-identically.
  const std::string src_cfg = kFixtures + "/smollm2_instruct/tokenizer_config.json";
  nlohmann::json cfg = kvb::parse_json_file(src_cfg);
  const std::string source = cfg["chat_template"].get<std::string>();
  TempDir d("move");
  cfg.erase("chat_template");
  d.write("tokenizer_config.json", cfg.dump());
  d.write("chat_template.jinja", source);
  const std::vector<kvb::chat::Message> msgs = {{"system", "Be brief."}, {"user", "What is 7 times 8?"}};
  EXPECT_EQ(ChatTemplate::from_model_dir(d.dir()).render(msgs),
            ChatTemplate::from_tokenizer_config(src_cfg).render(msgs));
}

TEST(ChatTemplateDir, NamedTemplatesInTokenizerConfigList) {
  TempDir d("named");
  const std::string tc = d.write("tokenizer_config.json", R"({"chat_template": [
      {"name": "default", "template": "D:{{ messages[0].content }}"},
      {"name": "tool_use", "template": "T:{{ messages[0].content }}"},
      {"name": "rag", "template": "R:{{ messages[0].content }}"}]})");
  EXPECT_EQ(ChatTemplate::from_model_dir(d.dir()).render(kOneUser), "D:hi");
  EXPECT_EQ(ChatTemplate::from_model_dir(d.dir(), "default").render(kOneUser), "D:hi");
  EXPECT_EQ(ChatTemplate::from_model_dir(d.dir(), "tool_use").render(kOneUser), "T:hi");
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(tc, "rag").render(kOneUser), "R:hi");
  const std::string e = input_error_of([&] { ChatTemplate::from_model_dir(d.dir(), "nope"); });
  EXPECT_EQ(e, tc + ": chat_template: no template named \"nope\" (the list has: default, tool_use, rag)");
}

TEST(ChatTemplateDir, ListWithoutDefaultNeedsAName) {
  TempDir d("nodefault");
  const std::string tc =
      d.write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  EXPECT_EQ(input_error_of([&] { ChatTemplate::from_model_dir(d.dir()); }),
            tc + ": chat_template: no template named \"default\" (the list has: tool_use)");
  EXPECT_EQ(ChatTemplate::from_model_dir(d.dir(), "tool_use").render(kOneUser), "T");
  d.write("tokenizer_config.json", R"({"chat_template": [{"name": "x"}]})");
  EXPECT_EQ(input_error_of([&] { ChatTemplate::from_model_dir(d.dir()); }),
            tc + ": chat_template[0]: expected an object with string \"name\" and \"template\"");
}

TEST(ChatTemplateDir, NamedTemplatesInChatTemplateJsonAndAdditionalJinja) {
  TempDir d("json_named");
  const std::string js =
      d.write("chat_template.json",
              R"({"chat_template": [{"name": "default", "template": "JD"}, {"name": "x", "template": "JX"}]})");
  EXPECT_EQ(ChatTemplate::from_model_dir(d.dir()).render(kOneUser), "JD");
  EXPECT_EQ(ChatTemplate::from_model_dir(d.dir(), "x").render(kOneUser), "JX");
  EXPECT_EQ(input_error_of([&] { ChatTemplate::from_model_dir(d.dir(), "y"); }),
            js + ": chat_template: no template named \"y\" (the list has: default, x)");
  // transformers >= 4.50 layout: chat_template.jinja + additional_chat_templates/NAME.jinja.
  const std::string jinja = d.write("chat_template.jinja", "DEF");
  d.write("additional_chat_templates/tool_use.jinja", "TOOL");
  EXPECT_EQ(ChatTemplate::from_model_dir(d.dir()).render(kOneUser), "DEF");
  EXPECT_EQ(ChatTemplate::from_model_dir(d.dir(), "tool_use").render(kOneUser), "TOOL");
  EXPECT_EQ(input_error_of([&] { ChatTemplate::from_model_dir(d.dir(), "x"); }),
            jinja + ": chat_template: no template named \"x\" (there are: default, tool_use)");
}

TEST(ChatTemplateDir, SingleTemplateRefusesOtherNames) {
  TempDir d("single");
  const std::string tc = d.write("tokenizer_config.json", R"({"chat_template": "S"})");
  EXPECT_EQ(ChatTemplate::from_model_dir(d.dir(), "default").render(kOneUser), "S");
  EXPECT_EQ(input_error_of([&] { ChatTemplate::from_model_dir(d.dir(), "tool_use"); }),
            tc + ": chat_template: no template named \"tool_use\": this model has a single (default) template");
}

TEST(ChatTemplateDir, NoTemplateAnywhereIsOneClearError) {
  TempDir d("none");
  const std::string tc = d.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_FALSE(ChatTemplate::model_dir_has_template(d.dir()));
  EXPECT_EQ(input_error_of([&] { ChatTemplate::from_model_dir(d.dir()); }),
            tc + ": chat_template: missing: the model has no chat template (none in chat_template.jinja, "
                 "chat_template.json or tokenizer_config.json)");
  const std::string js = d.write("chat_template.json", R"({"other": 1})");
  EXPECT_EQ(input_error_of([&] { ChatTemplate::from_model_dir(d.dir()); }),
            js + ": chat_template: missing: expected {\"chat_template\": ...}");
}
