// Model directories as current transformers writes them (issue 17), through harness/model_source.h
// and the kvbench binary: the chat template from chat_template.jinja / chat_template.json /
// tokenizer_config.json with --chat-template NAME, generation_config.json's sampling defaults in
// `kvbench run` (applied when neither the suite nor the command line gives sampling, and stored in
// the run's config), and the pass@1 interval of the run summary (Wilson, inside [0, 1]).
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/util/error.h"
#include "harness/model_source.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kModel = kvb::test::test_data("models/stories260K-hf");
const std::string kData = kvb::test::test_data("datasets");

fs::path tmp_dir(const std::string& name) { return kvb::test::temp_dir("model_source_" + name); }

/// Runs `cmd` through the shell with stdout+stderr captured; returns the exit status.
int run_cmd(const std::string& cmd, std::string* out) {
  auto r = kvb::test::run_command(cmd);
  *out = std::move(r.out);
  return r.rc;
}

std::vector<std::string> column(const std::string& db, const std::string& sql) {
  std::vector<std::string> out;
  sqlite3* h = nullptr;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(h);
    ADD_FAILURE() << "cannot open " << db;
    return out;
  }
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(st, 0);
      out.push_back(t ? reinterpret_cast<const char*>(t) : "<null>");
    }
  } else {
    ADD_FAILURE() << sql << ": " << sqlite3_errmsg(h);
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
  return out;
}

/// A copy of stories260K-hf (files symlinked) with `extra` files written into it.
fs::path model_copy(const std::string& name, const std::map<std::string, std::string>& extra,
                    const std::vector<std::string>& skip = {}) {
  fs::path d = tmp_dir(name);
  for (const auto& e : fs::directory_iterator(kModel)) {
    const std::string f = e.path().filename().string();
    if (extra.count(f) || std::find(skip.begin(), skip.end(), f) != skip.end()) continue;
    fs::create_symlink(e.path(), d / f);
  }
  for (const auto& [f, text] : extra) std::ofstream(d / f) << text;
  return d;
}

#define REQUIRE_MODEL() KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors")

}  // namespace

TEST(ResolveSampling, SuiteThenGenerationConfigThenGreedyThenCli) {
  kvb::GenerationDefaults none;
  kvb::GenerationDefaults qwen;
  qwen.present = true;
  qwen.do_sample = true;
  qwen.temperature = 0.6;
  qwen.top_p = 0.95;
  qwen.top_k = 20;
  kvb::GenerationDefaults greedy_file;
  greedy_file.present = true;
  greedy_file.temperature = 0.9;  // do_sample absent: greedy, as transformers
  std::string src;
  const json suite = {{"temperature", 0.6}, {"top_p", 0.95}};
  // The suite's block is the benchmark protocol: the model's defaults do not add top_k to it.
  EXPECT_EQ(kvb::cli::resolve_sampling(suite, qwen, {}, {}, {}, &src), suite);
  EXPECT_EQ(src, "suite");
  EXPECT_EQ(kvb::cli::resolve_sampling(json::object(), qwen, {}, {}, {}, &src),
            json({{"temperature", 0.6}, {"top_p", 0.95}, {"top_k", 20}}));
  EXPECT_EQ(src, "generation_config");
  EXPECT_EQ(kvb::cli::resolve_sampling(json(), greedy_file, {}, {}, {}, &src), json({{"temperature", 0.0}}));
  EXPECT_EQ(src, "generation_config");
  EXPECT_EQ(kvb::cli::resolve_sampling(json::object(), none, {}, {}, {}, &src), json::object());
  EXPECT_EQ(src, "default");
  // Options on the command line replace their keys only.
  EXPECT_EQ(kvb::cli::resolve_sampling(json::object(), qwen, 0.0, {}, 5, &src),
            json({{"temperature", 0.0}, {"top_p", 0.95}, {"top_k", 5}}));
  EXPECT_EQ(src, "generation_config+cli");
  EXPECT_EQ(kvb::cli::resolve_sampling(suite, none, {}, 0.5, {}, &src), json({{"temperature", 0.6}, {"top_p", 0.5}}));
  EXPECT_EQ(src, "suite+cli");
}

TEST(ModelSource, GenerationDefaultsOfDirsAndGguf) {
  REQUIRE_MODEL();
  const auto g = kvb::cli::generation_defaults(kModel);  // {"bos_token_id": 1, "eos_token_id": 2}
  EXPECT_TRUE(g.present);
  EXPECT_FALSE(g.do_sample.has_value());
  EXPECT_EQ(g.sampling(), json({{"temperature", 0.0}}));
  EXPECT_EQ(g.eos_token_ids, std::vector<int32_t>({2}));
  EXPECT_FALSE(kvb::cli::generation_defaults("x.gguf").present);
  EXPECT_FALSE(kvb::cli::generation_defaults(kvb::cli::kDefaultModelName).present);
}

TEST(ModelSource, ChatTemplateFromJinjaFileAndByName) {
  REQUIRE_MODEL();
  const std::string tmpl =
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";
  fs::path d = model_copy("jinja", {{"chat_template.jinja", tmpl},
                                    {"chat_template.json", R"({"chat_template": "JSON {{ messages[0].content }}"})"}});
  auto m = kvb::cli::load_model(d.string());
  ASSERT_TRUE(m.chat);
  std::string rendered;
  const auto ids = kvb::cli::build_prompt(m, "Once upon a time", true, "", std::nullopt, &rendered);
  EXPECT_EQ(rendered, "<user>Once upon a time<assistant>");
  EXPECT_EQ(ids, m.tokenizer->encode(rendered, false));
  // Named: additional_chat_templates/NAME.jinja; an unknown name is an error at load.
  fs::create_directories(d / "additional_chat_templates");
  std::ofstream(d / "additional_chat_templates" / "plain.jinja") << "{{ messages[-1].content }}";
  m = kvb::cli::load_model(d.string(), kvb::WeightFormat::kF32, "plain");
  kvb::cli::build_prompt(m, "hello", true, "", std::nullopt, &rendered);
  EXPECT_EQ(rendered, "hello");
  try {
    kvb::cli::load_model(d.string(), kvb::WeightFormat::kF32, "tool_use");
    ADD_FAILURE() << "expected an error";
  } catch (const kvb::Error& e) {
    EXPECT_EQ(std::string(e.what()), (d / "chat_template.jinja").string() +
                                         ": chat_template: no template named \"tool_use\" (there are: default, plain)");
    EXPECT_EQ(e.exit_code(), 2);
  }
  fs::remove_all(d);
  // Without any template: loading works, --chat is one error naming the file and field.
  d = model_copy("none", {{"tokenizer_config.json", "{}"}});
  m = kvb::cli::load_model(d.string());
  EXPECT_FALSE(m.chat);
  try {
    kvb::cli::build_prompt(m, "x", true, "", std::nullopt);
    ADD_FAILURE() << "expected an error";
  } catch (const kvb::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind((d / "tokenizer_config.json").string() + ": chat_template: missing", 0), 0u)
        << e.what();
  }
  fs::remove_all(d);
}

// `kvbench run --task gsm8k` (no suite sampling block) on a model whose generation_config.json
// samples: the work items carry the model's temperature/top_p/top_k, the run's stored config
// names them and their source, and a command-line option replaces its key.
TEST(RunCliGenerationConfig, DefaultsAppliedAndRecorded) {
  KVB_REQUIRE_BINARY();
  REQUIRE_MODEL();
  KVB_REQUIRE_TEST_DATA("datasets/gsm8k");
  fs::path d = model_copy("gencfg", {{"generation_config.json",
                                      R"({"bos_token_id": 1, "eos_token_id": [2], "do_sample": true,
                                          "temperature": 0.7, "top_p": 0.9, "top_k": 5})"}});
  const std::string db = (d / "r.db").string();
  const std::string base = std::string(KVB_BINARY) + " run --task gsm8k --model " + d.string() + " --data-dir " +
                           kData + " --policies full --samples 2 --limit 3 --max-new-tokens 8 --quiet --db " + db;
  std::string out;
  ASSERT_EQ(run_cmd(base, &out), 0) << out;
  for (const auto& s : column(db, "SELECT DISTINCT sampling_json FROM work_items")) {
    const json j = json::parse(s);
    EXPECT_EQ(j["temperature"], 0.7) << s;
    EXPECT_EQ(j["top_p"], 0.9) << s;
    EXPECT_EQ(j["top_k"], 5) << s;
  }
  auto cfg = column(db, "SELECT config_json FROM runs ORDER BY run_id");
  ASSERT_EQ(cfg.size(), 1u);
  json c = json::parse(cfg[0]);
  EXPECT_EQ(c["generation_config"][d.string()]["temperature"], 0.7) << cfg[0];
  EXPECT_EQ(c["generation_config"][d.string()]["do_sample"], true) << cfg[0];
  const json& rec = c["sampling"]["gsm8k"][d.string()];
  EXPECT_EQ(rec["source"], "generation_config") << cfg[0];
  EXPECT_EQ(rec["top_k"], 5) << cfg[0];
  // The summary names the interval and keeps it inside [0, 1].
  EXPECT_NE(out.find("pass@1 [Wilson 95%]"), std::string::npos) << out;
  EXPECT_NE(out.find("95% Wilson score interval over examples"), std::string::npos) << out;
  std::smatch mt;
  ASSERT_TRUE(std::regex_search(out, mt, std::regex(R"((\d\.\d{3}) \[(-?\d\.\d{2}),(-?\d\.\d{2})\])"))) << out;
  EXPECT_GE(std::stod(mt[2]), 0.0) << out;
  EXPECT_LE(std::stod(mt[3]), 1.0) << out;

  // --temperature 0 on the command line: greedy, the other keys from generation_config.json.
  ASSERT_EQ(run_cmd(base + " --temperature 0", &out), 0) << out;
  cfg = column(db, "SELECT config_json FROM runs ORDER BY run_id");
  ASSERT_EQ(cfg.size(), 2u);
  c = json::parse(cfg[1]);
  EXPECT_EQ(c["sampling"]["gsm8k"][d.string()]["source"], "generation_config+cli") << cfg[1];
  EXPECT_EQ(c["sampling"]["gsm8k"][d.string()]["temperature"], 0.0) << cfg[1];
  EXPECT_EQ(c["sampling"]["gsm8k"][d.string()]["top_k"], 5) << cfg[1];
  fs::remove_all(d);
}

// GGUF files carry named templates as llama.cpp writes them (tokenizer.chat_template.NAME; fixture
// by tools/gen_gguf_named_templates.py with gguf-py): --chat-template NAME selects one.
TEST(ModelSource, GgufNamedChatTemplatesAreSelectable) {
  const std::string path = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/gguf/tiny_llama_named_templates.gguf";
  std::string rendered;
  auto m = kvb::cli::load_model(path);
  kvb::cli::build_prompt(m, "hi", true, "sys", std::nullopt, &rendered);
  EXPECT_EQ(rendered, "D:syshi");
  m = kvb::cli::load_model(path, kvb::WeightFormat::kF32, "tool_use");
  kvb::cli::build_prompt(m, "hi", true, "sys", std::nullopt, &rendered);
  EXPECT_EQ(rendered, "T:[system]sys[user]hi");
  m = kvb::cli::load_model(path, kvb::WeightFormat::kF32, "rag");
  kvb::cli::build_prompt(m, "hi", true, "", std::nullopt, &rendered);
  EXPECT_EQ(rendered, "R:hi");
  m = kvb::cli::load_model(path, kvb::WeightFormat::kF32, "default");
  kvb::cli::build_prompt(m, "hi", true, "", std::nullopt, &rendered);
  EXPECT_EQ(rendered, "D:hi");
  try {
    kvb::cli::load_model(path, kvb::WeightFormat::kF32, "chatml");
    ADD_FAILURE() << "expected an error";
  } catch (const kvb::Error& e) {
    EXPECT_EQ(std::string(e.what()), path +
                                         ": tokenizer.chat_template: no template named \"chatml\" (there are: default, "
                                         "rag, tool_use)");
    EXPECT_EQ(e.exit_code(), 2);
  }
}
