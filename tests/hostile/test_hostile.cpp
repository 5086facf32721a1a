// Hostile inputs, table-driven, through the kvbench binary (config.json, tokenizer.json,
// safetensors, YAML, JSON, options, databases): every case must end with exactly one
// `kvbench: error: <file or option>: ...` line and exit status 2 — never a crash, a hang, an
// "internal error", or a file created as a side effect. Each case writes its inputs into a fresh
// temporary directory. Cases that need a model directory take their config.json from the
// stories260K model in ../shared (present in CI).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <functional>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct Case {
  std::string name;
  std::map<std::string, std::string> files;  // relative path -> content ("@config" = stories260K's config.json)
  std::string args;                          // kvbench arguments; $D = the case's directory, $S = ../shared
  std::string expect;                        // substring of the error line (names the file/field)
  std::string must_not_exist;                // a path under $D the command must not create
};

std::string repeat(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * n);
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

/// A safetensors file: 8-byte little-endian header length, the header, `data_bytes` zero bytes.
std::string safetensors(const std::string& header, size_t data_bytes, uint64_t claimed_len = 0) {
  const uint64_t n = claimed_len ? claimed_len : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\0');
}

std::string billion_laughs() {
  std::string s = "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n";
  std::string prev = "a";
  for (char c = 'b'; c <= 'j'; ++c) {
    s += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 9; ++i) s += (i ? ",*" : "*") + prev;
    s += "]\n";
    prev = std::string(1, c);
  }
  return s;
}

/// Mutations of stories260K's tokenizer.json ("@tok:NAME" as a file's content).
const std::map<std::string, std::function<void(nlohmann::json&)>>& tokenizer_mutations() {
  static const std::map<std::string, std::function<void(nlohmann::json&)>> m = {
      {"model_missing", [](nlohmann::json& t) { t.erase("model"); }},
      {"model_type", [](nlohmann::json& t) { t["model"]["type"] = "Unigram2"; }},
      {"vocab_list", [](nlohmann::json& t) { t["model"]["vocab"] = {1, 2}; }},
      {"merges_int", [](nlohmann::json& t) { t["model"]["merges"] = {123}; }},
      {"added_negative", [](nlohmann::json& t) { t["added_tokens"] = {{{"id", -5}, {"content", "x"}, {"special", true}}}; }},
      {"added_huge", [](nlohmann::json& t) { t["added_tokens"] = {{{"id", 1000000000000LL}, {"content", "x"}, {"special", true}}}; }},
      {"bad_regex", [](nlohmann::json& t) {
         t["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
       }},
      {"bad_normalizer", [](nlohmann::json& t) { t["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Nope"}}}}}; }},
      {"decoder_string", [](nlohmann::json& t) { t["decoder"] = "x"; }},
      {"vocab_not_int", [](nlohmann::json& t) { t["model"]["vocab"]["<s>"] = "one"; }},
  };
  return m;
}

std::vector<Case> cases() {
  const std::string deep_json = repeat("[", 100000) + repeat("]", 100000);
  const std::string msgs = "tokenize --model $S/models/stories260K-hf --messages $D/m.json";
  const std::string cfg = "run --config $D/c.yaml --db $D/r.db --limit 1";
  const std::string gen = "generate --model $D/model --prompt hi";
  std::vector<Case> v = {
      // YAML (run --config; the same reader serves suite files and datasets' prompts.yaml).
      {"yaml_self_alias", {{"c.yaml", "a: &a [*a]\n"}}, cfg, "c.yaml: line 1: YAML nested deeper", "r.db"},
      {"yaml_self_alias_map", {{"c.yaml", "a: &a {b: *a}\n"}}, cfg, "c.yaml: line 1: YAML nested deeper", "r.db"},
      {"yaml_billion_laughs", {{"c.yaml", billion_laughs()}}, cfg, "c.yaml: line 1: YAML expands to too many nodes", "r.db"},
      {"yaml_number_overflow", {{"c.yaml", "limit: 1e999999\n"}}, cfg, "c.yaml: line 1: number out of range: 1e999999", "r.db"},
      {"yaml_negative_overflow", {{"c.yaml", "x:\n  y: -4e400\n"}}, cfg, "c.yaml: line 2: number out of range", "r.db"},
      {"yaml_deep_flow", {{"c.yaml", "a: " + repeat("[", 400) + repeat("]", 400) + "\n"}}, cfg, "c.yaml", "r.db"},
      {"yaml_syntax", {{"c.yaml", "a: [1, 2\nb: }\n"}}, cfg, "c.yaml: line", "r.db"},
      {"yaml_invalid_utf8", {{"c.yaml", "name: \"caf\xe9\"\n"}}, cfg, "c.yaml: line 1: a string is not valid UTF-8", "r.db"},
      {"yaml_complex_key", {{"c.yaml", "? [1, 2]\n: 3\n"}}, cfg, "c.yaml: line 1: a mapping key must be a scalar", "r.db"},
      // JSON chat messages.
      {"json_deep_messages", {{"m.json", deep_json}}, msgs, "m.json: JSON nested deeper than 256 levels", ""},
      {"json_overflow_messages", {{"m.json", "[{\"role\": \"user\", \"content\": \"x\", \"n\": 1e999999}]"}}, msgs, "m.json: number out of range: 1e999999", ""},
      {"json_truncated_messages", {{"m.json", "[{\"role\": \"us"}}, msgs, "m.json: invalid JSON at byte", ""},
      {"json_negative_overflow", {{"m.json", "[-1e400]"}}, msgs, "m.json: number out of range: -1e400", ""},
      // check-answer --meta.
      {"meta_deep", {}, "check-answer --grader math --gold 1 --pred 1 --meta '" + repeat("[", 300) + repeat("]", 300) + "'", "--meta: JSON nested deeper", ""},
      {"meta_overflow", {}, "check-answer --grader math --gold 1 --pred 1 --meta '{\"a\": 1e999999}'", "--meta: number out of range", ""},
      {"meta_invalid", {}, "check-answer --grader math --gold 1 --pred 1 --meta '{a}'", "--meta: invalid JSON at byte", ""},
      // config.json.
      {"config_deep", {{"model/config.json", deep_json}}, gen, "model/config.json: JSON nested deeper", ""},
      {"config_overflow", {{"model/config.json", "{\"hidden_size\": 1e999999}"}}, gen, "model/config.json: number out of range", ""},
      {"config_truncated", {{"model/config.json", "{\"hidden_size\": "}}, gen, "model/config.json: invalid JSON", ""},
      // safetensors headers.
      {"st_overlap",
       {{"model/config.json", "@config"},
        {"model/model.safetensors",
         safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 24)}},
       gen, "model.safetensors: tensor 'b'.data_offsets: [8, 24] overlaps tensor 'a'", ""},
      {"st_shape_overflow",
       {{"model/config.json", "@config"},
        {"model/model.safetensors",
         safetensors(R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776,16],"data_offsets":[0,0]}})", 0)}},
       gen, "model.safetensors: tensor 'a'.shape", ""},
      {"st_header_past_end", {{"model/config.json", "@config"}, {"model/model.safetensors", safetensors("{}", 0, 1000000)}}, gen, "model.safetensors: header", ""},
      {"st_header_deep", {{"model/config.json", "@config"}, {"model/model.safetensors", safetensors(repeat("[", 5000) + repeat("]", 5000), 0)}}, gen, "model.safetensors: header: JSON nested deeper", ""},
      {"st_header_overflow", {{"model/config.json", "@config"}, {"model/model.safetensors", safetensors(R"({"a":{"dtype":"F32","shape":[1e999],"data_offsets":[0,0]}})", 0)}}, gen, "model.safetensors: header: number out of range", ""},
      {"st_offsets_outside", {{"model/config.json", "@config"}, {"model/model.safetensors", safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8)}}, gen, "tensor 'a'.data_offsets", ""},
      {"st_bad_dtype", {{"model/config.json", "@config"}, {"model/model.safetensors", safetensors(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8)}}, gen, "tensor 'a'.dtype", ""},
      // Command-line usage errors: one line, exit 2 (CLI11's own errors included).
      {"cli_unknown_command", {}, "frobnicate", "kvbench: error:", ""},
      {"cli_samples_zero", {}, "run --samples 0 --db $D/r.db", "--samples", "r.db"},
      {"cli_batch_zero", {}, "bench --batch 0 --model-shape stories260k", "--batch", ""},
      {"cli_unknown_option", {}, "bench --no-such-option 3", "--no-such-option", ""},
      {"cli_non_numeric", {}, "bench --context abc --model-shape stories260k", "--context", ""},
      {"cli_temperature_nan", {}, "run --temperature nan --db $D/r.db", "--temperature: must be a finite number", "r.db"},
      {"cli_temperature_negative", {}, "run --temperature -1 --db $D/r.db", "--temperature: must be >= 0", "r.db"},
      {"cli_limit_negative", {}, "run --limit -1 --db $D/r.db", "--limit: must be >= 0", "r.db"},
      {"cli_budgets_empty", {}, "run --budgets '' --db $D/r.db", "--budgets: must list at least one budget", "r.db"},
      {"cli_top_p_range", {}, "run --top-p 1.5 --db $D/r.db", "--top-p: must be in [0, 1]", "r.db"},
      {"cli_generate_temperature_inf", {}, "generate --prompt x --temperature inf", "--temperature: must be a finite number", ""},
      {"cli_generate_top_p_nan", {}, "generate --prompt x --top-p nan", "--top-p: must be a finite number", ""},
      {"cli_bench_context_negative", {}, "bench --context -5 --model-shape stories260k", "--context: must be > 0", ""},
      {"policy_param_nan", {}, "generate --model $S/models/stories260K-hf --prompt x --policy rkv:lambda=nan --budget 64", "lambda", ""},
      {"policy_param_inf", {}, "generate --model $S/models/stories260K-hf --prompt x --policy snapkv:ratio=inf --budget 8", "ratio", ""},
      // Results databases that do not exist are not created by readers.
      {"grade_missing_db", {}, "grade --db $D/typo.db", "typo.db: no such results database", "typo.db"},
      // merge: inputs are validated before the output is created; self-merges refused at once.
      {"merge_corrupt_input", {{"c.db", std::string(200, 'x')}}, "merge $D/out.db $D/c.db", "c.db: not a SQLite database", "out.db"},
      {"merge_output_is_input", {{"c.db", std::string(200, 'x')}}, "merge $D/c.db $D/c.db", "c.db: merge: the output database is also an input", ""},
      {"merge_input_twice", {{"c.db", std::string(200, 'x')}}, "merge $D/out.db $D/c.db $D/./c.db", "merge: given twice as an input", "out.db"},
  };
  // config.json fields with values of the wrong sign, type or size: each names the file and field.
  const std::string base =
      R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,"intermediate_size":172,)"
      R"("num_hidden_layers":5,"num_attention_heads":8,"num_key_value_heads":4,"head_dim":8,"vocab_size":512,)"
      R"("max_position_embeddings":512,"rms_norm_eps":1e-05,"rope_theta":10000.0,"tie_word_embeddings":true})";
  const std::vector<std::string> int_fields = {"hidden_size", "intermediate_size", "num_hidden_layers",
                                               "num_attention_heads", "num_key_value_heads", "head_dim",
                                               "vocab_size", "max_position_embeddings"};
  const std::vector<std::pair<std::string, std::string>> int_values = {
      {"neg", "-1"}, {"str", "\"abc\""}, {"frac", "2.5"}, {"huge", "1e12"}, {"bool", "true"}};
  auto with = [&](const std::string& field, const std::string& value) {
    std::string c = base;
    const std::string key = "\"" + field + "\":";
    const size_t at = c.find(key) + key.size();
    const size_t end = c.find_first_of(",}", at);
    return c.replace(at, end - at, value);
  };
  for (const auto& f : int_fields)
    for (const auto& [tag, val] : int_values)
      v.push_back({"config_" + f + "_" + tag, {{"model/config.json", with(f, val)}}, gen, "config.json: " + f, ""});
  for (const std::string f : {"rms_norm_eps", "rope_theta"})
    for (const auto& [tag, val] : std::vector<std::pair<std::string, std::string>>{{"neg", "-1"}, {"zero", "0"}, {"str", "\"abc\""}})
      v.push_back({"config_" + f + "_" + tag, {{"model/config.json", with(f, val)}}, gen, "config.json: " + f, ""});
  for (const std::string f : {"hidden_size", "num_hidden_layers", "vocab_size"})
    v.push_back({"config_" + f + "_zero", {{"model/config.json", with(f, "0")}}, gen, "config.json: " + f, ""});
  v.push_back({"config_model_type", {{"model/config.json", with("model_type", "\"mamba\"")}}, gen, "config.json: model_type", ""});
  v.push_back({"config_not_object", {{"model/config.json", "[1, 2, 3]"}}, gen, "config.json", ""});
  for (const auto& [name, fn] : tokenizer_mutations()) {
    (void)fn;
    v.push_back({"tokenizer_" + name, {{"tk/tokenizer.json", "@tok:" + name}}, "tokenize --model $D/tk --text hello",
                 "tk/tokenizer.json: ", ""});
  }
  v.push_back({"config_empty", {{"model/config.json", ""}}, gen, "config.json: invalid JSON", ""});
  return v;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class Hostile : public ::testing::TestWithParam<Case> {};

TEST_P(Hostile, OneErrorLineExitTwoNoSideEffects) {
  const Case& c = GetParam();
  const fs::path dir = fs::temp_directory_path() / ("kvb_hostile_" + c.name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [rel, content] : c.files) {
    const fs::path p = dir / rel;
    fs::create_directories(p.parent_path());
    if (content == "@config") {
      const fs::path src = fs::path(KVB_SHARED_DIR) / "models/stories260K-hf/config.json";
      ASSERT_TRUE(fs::exists(src)) << "the stories260K model is part of ../shared: " << src;
      fs::copy_file(src, p);
    } else if (content.rfind("@tok:", 0) == 0) {
      const fs::path src = fs::path(KVB_SHARED_DIR) / "models/stories260K-hf/tokenizer.json";
      ASSERT_TRUE(fs::exists(src)) << src;
      nlohmann::json t = nlohmann::json::parse(std::ifstream(src));
      tokenizer_mutations().at(content.substr(5))(t);
      std::ofstream(p, std::ios::binary) << t.dump();
    } else {
      std::ofstream(p, std::ios::binary) << content;
    }
  }
  std::string args = c.args;
  for (size_t at; (at = args.find("$D")) != std::string::npos;) args.replace(at, 2, dir.string());
  for (size_t at; (at = args.find("$S")) != std::string::npos;) args.replace(at, 2, KVB_SHARED_DIR);
  const std::string out_file = (dir / "stderr.txt").string();
  // Under the sanitizer build LeakSanitizer would append its "Suppressions used" table (CLN's
  // static allocations) to stderr; the one-line contract is about kvbench's own output.
  const std::string cmd = "LSAN_OPTIONS=print_suppressions=0 timeout 60 " + std::string(KVB_BINARY) + " " + args + " > " + out_file + " 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << cmd;
  const int rc = WEXITSTATUS(status);
  std::ifstream in(out_file);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_EQ(rc, 2) << cmd << "\n" << all;
  ASSERT_EQ(lines.size(), 1u) << all;
  EXPECT_EQ(lines[0].rfind("kvbench: error: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(c.expect), std::string::npos) << "expected '" << c.expect << "' in: " << lines[0];
  EXPECT_EQ(lines[0].find("internal error"), std::string::npos) << lines[0];
  if (!c.must_not_exist.empty()) EXPECT_FALSE(fs::exists(dir / c.must_not_exist)) << c.must_not_exist << " was created";
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Inputs, Hostile, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
