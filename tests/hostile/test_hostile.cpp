// Hostile inputs, table-driven, through the kvbench binary (safetensors and GGUF weights,
// config.json, tokenizer.json, chat templates, YAML suites and run configs, dataset records,
// results databases, judge and policy specs, numeric options): every case must end with exactly
// one `kvbench: error: <file or option>: ...` line and exit status 2 — never a crash, a hang, an
// "internal error", a file created as a side effect, or an input changed: every file a case
// gives (a results database beside a bad input above all) must be byte-for-byte unchanged
// afterwards. Each case writes its inputs into a fresh temporary directory. Cases that need a
// model take it from the stories260K model in tests/data or the GGUF fixtures.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "tests/results/synth.h"
#include "tests/support/test_support.h"

// Cases omit the trailing fields (prefix, exit_code) that most of them leave at their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace fs = std::filesystem;

namespace {

struct Case {
  std::string name;
  // Relative path -> content, or a generator: "@config" (stories260K's config.json), "@shared:REL"
  // (a copy of the test data's REL, tests/data), "@st+:NAME" (stories260K's weights plus
  // extra_tensors() NAME), "@tok:NAME" (a mutated stories260K tokenizer.json), "@gguf:NAME"
  // (a mutated GGUF fixture), "@db:NAME" (a results database: see make_db). Every file must be
  // byte-for-byte unchanged after the command.
  std::map<std::string, std::string> files;
  std::string args;            // kvbench arguments; $D = the case's directory, $S = the test data
  std::string expect;          // substring of the error line (names the file/field)
  std::string must_not_exist;  // a path under $D the command must not create
  std::string prefix;          // shell words before the command (env settings, ulimit)
  int exit_code = 2;           // 2 for bad input, 1 for a runtime failure
  double max_seconds = 0;      // > 0: the command must end within this many seconds (× time_scale)
};

/// "layer03_head07": TriAttention's per-head statistics prefix.
std::string fmt_layer_head(int l, int h) {
  char b[32];
  std::snprintf(b, sizeof b, "layer%02d_head%02d", l, h);
  return b;
}

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

/// An F32 safetensors file holding `tensors` (name -> shape, in name order), every element
/// `value` (NaN, an infinity, a negative mean: the learned-policy cases of issue 46).
std::string f32_safetensors(const std::map<std::string, std::vector<int64_t>>& tensors, float value) {
  nlohmann::json h = nlohmann::json::object();
  std::string data;
  for (const auto& [name, shape] : tensors) {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    h[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + 4 * n}}};
    for (uint64_t i = 0; i < n; ++i) data.append(reinterpret_cast<const char*>(&value), 4);
  }
  return safetensors(h.dump(), 0) + data;
}

/// TriAttention statistics for a model of `layers` layers, 8 query heads and head_dim 8
/// (stories260K: 5 layers), each q_abs_mean element `abs_mean`, the means 0.5.
std::string tri_stats(int layers, float abs_mean) {
  std::map<std::string, std::vector<int64_t>> t;
  for (int l = 0; l < layers; ++l)
    for (int h = 0; h < 8; ++h)
      for (const char* f : {"q_mean_real", "q_mean_imag", "q_abs_mean"}) t[fmt_layer_head(l, h) + "." + f] = {4};
  std::string out = f32_safetensors(t, 0.5f);
  if (abs_mean != 0.5f) {  // rewrite the q_abs_mean elements in place
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(out[i]);
    const nlohmann::json h = nlohmann::json::parse(out.substr(8, n));
    for (const auto& [name, v] : h.items())
      if (name.size() > 10 && name.compare(name.size() - 10, 10, "q_abs_mean") == 0)
        for (uint64_t b = v["data_offsets"][0].get<uint64_t>(); b < v["data_offsets"][1].get<uint64_t>(); b += 4)
          std::memcpy(&out[8 + n + b], &abs_mean, 4);
  }
  return out;
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
      {"vocab_list",
       [](nlohmann::json& t) {
         t["model"]["vocab"] = {1, 2};
       }},
      {"merges_int", [](nlohmann::json& t) { t["model"]["merges"] = {123}; }},
      {"added_negative",
       [](nlohmann::json& t) {
         t["added_tokens"] = {{{"id", -5}, {"content", "x"}, {"special", true}}};
       }},
      {"added_huge",
       [](nlohmann::json& t) {
         t["added_tokens"] = {{{"id", 1000000000000LL}, {"content", "x"}, {"special", true}}};
       }},
      {"bad_regex",
       [](nlohmann::json& t) {
         t["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
       }},
      {"bad_normalizer",
       [](nlohmann::json& t) {
         t["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Nope"}}}}};
       }},
      {"decoder_string", [](nlohmann::json& t) { t["decoder"] = "x"; }},
      {"vocab_not_int", [](nlohmann::json& t) { t["model"]["vocab"]["<s>"] = "one"; }},
      {"added_content_number", [](nlohmann::json& t) { t["added_tokens"][0]["content"] = 7; }},
      {"pre_tokenizer_unknown",
       [](nlohmann::json& t) {
         t["pre_tokenizer"] = {{"type", "Nope"}};
       }},
      {"vocab_id_negative", [](nlohmann::json& t) { t["model"]["vocab"]["<s>"] = -3; }},
      {"vocab_empty", [](nlohmann::json& t) { t["model"]["vocab"] = nlohmann::json::object(); }},
      {"merges_unknown_token", [](nlohmann::json& t) { t["model"]["merges"].push_back("qqq zzz"); }},
      {"not_object",
       [](nlohmann::json& t) {
         t = nlohmann::json::array({1, 2});
       }},
      // Ids that would size the id -> token tables far beyond the file (issue 31).
      {"vocab_id_int_max", [](nlohmann::json& t) { t["model"]["vocab"]["<s>"] = 2147483647; }},
      {"vocab_id_300m", [](nlohmann::json& t) { t["model"]["vocab"]["<s>"] = 300000000; }},
      {"vocab_id_1e9", [](nlohmann::json& t) { t["model"]["vocab"]["<s>"] = 1000000000; }},
  };
  return m;
}

/// Where the value of GGUF metadata key `key` starts: after its name and its u32 value type (the
/// first occurrence of the name's bytes; the fixture's names are unique). For a tensor name the
/// same position is past the name and its u32 n_dims.
size_t value_at(const std::string& b, const std::string& key) {
  const size_t at = b.find(key);
  if (at == std::string::npos) throw std::runtime_error("fixture has no " + key);
  return at + key.size() + 4;
}

/// Mutations of tests/fixtures/gguf/stories260K.gguf ("@gguf:NAME"). Its layout: magic (4 bytes),
/// version (u32), tensor_count (u64), metadata_kv_count (u64), then the first key/value
/// ("general.architecture": key length u64 at byte 24, key, value type u32 at byte 52, value).
const std::map<std::string, std::function<void(std::string&)>>& gguf_mutations() {
  auto put_u32 = [](std::string& b, size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  auto put_u64 = [](std::string& b, size_t at, uint64_t v) {
    for (int i = 0; i < 8; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  static const std::map<std::string, std::function<void(std::string&)>> m = {
      {"empty", [](std::string& b) { b.clear(); }},
      {"cut_10", [](std::string& b) { b.resize(10); }},
      {"cut_40", [](std::string& b) { b.resize(40); }},
      {"cut_2000", [](std::string& b) { b.resize(2000); }},
      {"cut_half", [](std::string& b) { b.resize(b.size() / 2); }},
      {"cut_last_byte", [](std::string& b) { b.pop_back(); }},
      {"magic", [](std::string& b) { b[0] = 'X'; }},
      {"version_1", [=](std::string& b) { put_u32(b, 4, 1); }},
      {"version_99", [=](std::string& b) { put_u32(b, 4, 99); }},
      {"version_swapped", [=](std::string& b) { put_u32(b, 4, 0x03000000); }},
      {"tensor_count_huge", [=](std::string& b) { put_u64(b, 8, 1ull << 62); }},
      {"kv_count_huge", [=](std::string& b) { put_u64(b, 16, ~0ull); }},
      {"key_length_huge", [=](std::string& b) { put_u64(b, 24, 1ull << 61); }},
      {"value_type_99", [=](std::string& b) { put_u32(b, 52, 99); }},
      {"value_type_array", [=](std::string& b) { put_u32(b, 52, 9); }},
      {"arch_length_huge", [=](std::string& b) { put_u64(b, 56, 1ull << 60); }},
      // Metadata values (issue 31): a key's value follows its name and a u32 type.
      {"freq_base_nan", [=](std::string& b) { put_u32(b, value_at(b, "llama.rope.freq_base"), 0x7fc00000u); }},
      {"rms_epsilon_nan",
       [=](std::string& b) { put_u32(b, value_at(b, "llama.attention.layer_norm_rms_epsilon"), 0x7fc00000u); }},
      {"freq_base_inf", [=](std::string& b) { put_u32(b, value_at(b, "llama.rope.freq_base"), 0x7f800000u); }},
      {"block_count_huge", [=](std::string& b) { put_u32(b, value_at(b, "llama.block_count"), 0xffffffffu); }},
      // blk.0.attn_q.weight (2 dims) moved to token_embd.weight's offset 0: after the name come
      // n_dims (u32), two u64 dims, the type (u32), then the offset (u64).
      {"tensors_same_offset", [=](std::string& b) { put_u64(b, value_at(b, "blk.0.attn_q.weight") + 16 + 4, 0); }},
      // Four blocks declared, five in the file: blk.4's tensors are bound by nothing (issue 38).
      {"block_count_4", [=](std::string& b) { put_u32(b, value_at(b, "llama.block_count"), 4); }},
  };
  return m;
}

/// stories260K's model.safetensors with extra F32 tensors appended ("@st+:NAME" as a file's
/// content): NAME -> (tensor name, shape) list. No layer or config option of the model reads them.
const std::map<std::string, std::vector<std::pair<std::string, std::vector<int64_t>>>>& extra_tensors() {
  static const std::map<std::string, std::vector<std::pair<std::string, std::vector<int64_t>>>> m = {
      {"mlp_bias", {{"model.layers.0.mlp.gate_proj.bias", {172}}}},
      {"o_proj_bias", {{"model.layers.2.self_attn.o_proj.bias", {64}}}},
      {"unknown", {{"model.layers.3.self_attn.sinks", {8}}}},
      {"layer_beyond", {{"model.layers.5.input_layernorm.weight", {64}}}},
      {"inv_freq_beyond", {{"model.layers.5.self_attn.rotary_emb.inv_freq", {4}}}},
  };
  return m;
}

/// The bytes of `src` (a safetensors file) with extra_tensors().at(name) appended, zero-filled.
std::string with_extra_tensors(const fs::path& src, const std::string& name) {
  std::ifstream in(src, std::ios::binary);
  const std::string b{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(b[i]);
  nlohmann::json header = nlohmann::json::parse(b.substr(8, n));
  std::string data = b.substr(8 + n);
  for (const auto& [tensor, shape] : extra_tensors().at(name)) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    header[tensor] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + 4 * numel}}};
    data.append(static_cast<size_t>(4 * numel), '\0');
  }
  const std::string h = header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  return out + h + data;
}

/// A SQLite file for "@db:NAME": "results" (a kvbench results DB with one finished run of 8
/// graded samples), "newer" (the same with a schema version from the future), "uv_negative" /
/// "uv_zero" (the same with user_version -1 / 0), "truncated" (its first 3000 bytes), "foreign"
/// (a SQLite DB of another program), "other_app" (a different application_id), "empty_sqlite"
/// (a SQLite header and no tables), "results_rollback" (the results DB in rollback-journal mode).
void make_db(const fs::path& p, const std::string& kind) {
  using namespace kvb::results;
  using namespace kvb::results::testing;
  auto sql = [&](const std::string& q) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(p.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, q.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  };
  if (kind == "foreign")
    return sql("CREATE TABLE songs (title TEXT, year INTEGER); INSERT INTO songs VALUES ('x', 1999)");
  if (kind == "other_app") return sql("PRAGMA application_id = 1234; CREATE TABLE t (a)");
  // A SQLite file with a header and no tables: application_id 0, user_version 0.
  if (kind == "empty_sqlite") return sql("CREATE TABLE t (a); DROP TABLE t");
  // Issue 40: a kvbench application_id and schema version but no tables (a `grade` switched it to
  // WAL before failing).
  if (kind == "no_tables_app")
    return sql("PRAGMA application_id = " + std::to_string(Store::kApplicationId) +
               "; PRAGMA user_version = " + std::to_string(Store::kSchemaVersion) + "; CREATE TABLE t (a); DROP TABLE t");
  {
    Store s(p.string());
    fill(s, expand_grid(small_grid(2, 1)), run_info(kind.rfind("two_nightly", 0) == 0 ? "nightly" : "hostile"));
  }
  if (kind == "two_nightly" || kind == "two_nightly_inf" || kind == "two_nightly_text") {
    // A second finished run also named "nightly" (another config, so another run key).
    RunInfo other = run_info("nightly");
    other.config["suite"] = "math2";
    other.run_key = default_run_key(other);
    Store s(p.string());
    fill(s, expand_grid(small_grid(2, 1)), other);
  }
  // grades.score has a CHECK (0 <= score <= 1), which another program may switch off.
  if (kind == "two_nightly_inf")
    return sql("PRAGMA ignore_check_constraints = 1; UPDATE grades SET score = 9e999 WHERE rowid = 1");
  if (kind == "two_nightly_text")
    return sql("PRAGMA ignore_check_constraints = 1; UPDATE grades SET score = 'high' WHERE rowid = 1");
  if (kind == "two_nightly") return;
  if (kind == "grades_dropped") return sql("DROP TABLE grades");
  if (kind == "column_renamed") return sql("ALTER TABLE grades RENAME COLUMN score TO score_was");
  if (kind == "view_dropped") return sql("DROP VIEW v_samples");
  if (kind == "newer") return sql("PRAGMA user_version = 99");
  if (kind == "results_rollback") return sql("PRAGMA journal_mode = DELETE");  // opened without -wal/-shm
  if (kind == "uv_negative") return sql("PRAGMA user_version = -1");
  if (kind == "uv_zero") return sql("PRAGMA user_version = 0");
  if (kind == "truncated") return fs::resize_file(p, 3000);
  ASSERT_EQ(kind, "results");
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Probes of one kind of input file: (tag, file content, expected error), as the case builders list them.
using Probes = std::vector<std::tuple<std::string, std::string, std::string>>;

/// The cases of run config files `configs`: `run --config $D/c.yaml` for each, named `prefix` + tag.
void add_run_config_cases(std::vector<Case>& v, const std::string& prefix, const Probes& configs) {
  for (const auto& [tag, text, err] : configs)
    v.push_back({prefix + tag,
                 {{"c.yaml", text}, {"r.db", "@db:results"}},
                 "run --config $D/c.yaml --model $S/models/stories260K-hf --quiet --db $D/r.db",
                 err,
                 ""});
}

/// The cases of suite files `suites`: `run --suite` and `tasks --suite` for each, named
/// `prefix` + "run_" / "tasks_" + tag.
void add_suite_cases(std::vector<Case>& v, const std::string& prefix, const Probes& suites) {
  for (const auto& [tag, text, err] : suites) {
    v.push_back({prefix + "run_" + tag,
                 {{"s.yaml", text}, {"r.db", "@db:results"}},
                 "run --suite $D/s.yaml --model $S/models/stories260K-hf --quiet --db $D/r.db",
                 err,
                 ""});
    v.push_back({prefix + "tasks_" + tag, {{"s.yaml", text}}, "tasks --suite $D/s.yaml", err, ""});
  }
}

/// The cases of a results database x.db holding `content` that the readers (grade, report,
/// compare) and the writer (`run_smoke --db`) refuse with `err`, named `prefix` + command + "_" + tag;
/// merge's cases differ between the callers and stay theirs.
void add_bad_db_cases(std::vector<Case>& v, const std::string& prefix, const std::string& tag,
                      const std::string& content, const std::string& err, const std::string& run_smoke) {
  v.push_back({prefix + "grade_" + tag, {{"x.db", content}}, "grade --db $D/x.db", err, ""});
  v.push_back({prefix + "report_" + tag, {{"x.db", content}}, "report --db $D/x.db --out $D/rep", err, "rep"});
  v.push_back(
      {prefix + "compare_" + tag, {{"x.db", content}}, "compare --db $D/x.db --baseline latest --candidate latest", err, ""});
  v.push_back({prefix + "run_" + tag, {{"x.db", content}}, run_smoke + " --db $D/x.db", err, ""});
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
      {"json_overflow_messages",
       {{"m.json", "[{\"role\": \"user\", \"content\": \"x\", \"n\": 1e999999}]"}},
       msgs,
       "m.json: number out of range: 1e999999",
       ""},
      {"json_truncated_messages", {{"m.json", "[{\"role\": \"us"}}, msgs, "m.json: invalid JSON at byte", ""},
      {"json_negative_overflow", {{"m.json", "[-1e400]"}}, msgs, "m.json: number out of range: -1e400", ""},
      // check-answer --meta.
      {"meta_deep",
       {},
       "check-answer --grader math --gold 1 --pred 1 --meta '" + repeat("[", 300) + repeat("]", 300) + "'",
       "--meta: JSON nested deeper",
       ""},
      {"meta_overflow",
       {},
       "check-answer --grader math --gold 1 --pred 1 --meta '{\"a\": 1e999999}'",
       "--meta: number out of range",
       ""},
      {"meta_invalid", {}, "check-answer --grader math --gold 1 --pred 1 --meta '{a}'", "--meta: invalid JSON at byte", ""},
      // config.json.
      {"config_deep", {{"model/config.json", deep_json}}, gen, "model/config.json: JSON nested deeper", ""},
      {"config_overflow",
       {{"model/config.json", "{\"hidden_size\": 1e999999}"}},
       gen,
       "model/config.json: number out of range",
       ""},
      {"config_truncated", {{"model/config.json", "{\"hidden_size\": "}}, gen, "model/config.json: invalid JSON", ""},
      // safetensors headers.
      {"st_overlap",
       {{"model/config.json", "@config"},
        {"model/model.safetensors",
         safetensors(
             R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
             24)}},
       gen,
       "model.safetensors: tensor 'b'.data_offsets: [8, 24] overlaps tensor 'a'",
       ""},
      {"st_shape_overflow",
       {{"model/config.json", "@config"},
        {"model/model.safetensors",
         safetensors(R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776,16],"data_offsets":[0,0]}})", 0)}},
       gen,
       "model.safetensors: tensor 'a'.shape",
       ""},
      {"st_header_past_end",
       {{"model/config.json", "@config"}, {"model/model.safetensors", safetensors("{}", 0, 1000000)}},
       gen,
       "model.safetensors: header",
       ""},
      {"st_header_deep",
       {{"model/config.json", "@config"},
        {"model/model.safetensors", safetensors(repeat("[", 5000) + repeat("]", 5000), 0)}},
       gen,
       "model.safetensors: header: JSON nested deeper",
       ""},
      {"st_header_overflow",
       {{"model/config.json", "@config"},
        {"model/model.safetensors", safetensors(R"({"a":{"dtype":"F32","shape":[1e999],"data_offsets":[0,0]}})", 0)}},
       gen,
       "model.safetensors: header: number out of range",
       ""},
      {"st_offsets_outside",
       {{"model/config.json", "@config"},
        {"model/model.safetensors", safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8)}},
       gen,
       "tensor 'a'.data_offsets",
       ""},
      {"st_bad_dtype",
       {{"model/config.json", "@config"},
        {"model/model.safetensors", safetensors(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8)}},
       gen,
       "tensor 'a'.dtype",
       ""},
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
      {"cli_generate_temperature_inf",
       {},
       "generate --prompt x --temperature inf",
       "--temperature: must be a finite number",
       ""},
      {"cli_generate_top_p_nan", {}, "generate --prompt x --top-p nan", "--top-p: must be a finite number", ""},
      {"cli_bench_context_negative", {}, "bench --context -5 --model-shape stories260k", "--context: must be > 0", ""},
      {"policy_param_nan",
       {},
       "generate --model $S/models/stories260K-hf --prompt x --policy rkv:lambda=nan --budget 64",
       "lambda",
       ""},
      {"policy_param_inf",
       {},
       "generate --model $S/models/stories260K-hf --prompt x --policy snapkv:ratio=inf --budget 8",
       "ratio",
       ""},
      {"policy_threshold_nan",
       {},
       "generate --model $S/models/stories260K-hf --prompt x --policy snapkv:budget_kind=threshold,threshold=nan",
       "threshold",
       ""},
      {"policy_threshold_without_kind",
       {},
       "generate --model $S/models/stories260K-hf --prompt x --policy knorm:threshold=0.5 --budget 8",
       "'threshold': is only used with budget_kind=threshold",
       ""},
      // Results databases that do not exist are not created by readers.
      {"grade_missing_db", {}, "grade --db $D/typo.db", "typo.db: no such results database", "typo.db"},
      // merge: inputs are validated before the output is created; self-merges refused at once.
      {"merge_corrupt_input",
       {{"c.db", std::string(200, 'x')}},
       "merge $D/out.db $D/c.db",
       "c.db: not a SQLite database",
       "out.db"},
      {"merge_output_is_input", {{"c.db", std::string(200, 'x')}}, "merge $D/c.db $D/c.db", "c.db: is also an input", ""},
      {"merge_input_twice",
       {{"c.db", std::string(200, 'x')}},
       "merge $D/out.db $D/c.db $D/./c.db",
       "merge: given twice as an input",
       "out.db"},
  };
  // config.json fields with values of the wrong sign, type or size: each names the file and field.
  const std::string base =
      R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,"intermediate_size":172,)"
      R"("num_hidden_layers":5,"num_attention_heads":8,"num_key_value_heads":4,"head_dim":8,"vocab_size":512,)"
      R"("max_position_embeddings":512,"rms_norm_eps":1e-05,"rope_theta":10000.0,"tie_word_embeddings":true})";
  const std::vector<std::string> int_fields = {"hidden_size",         "intermediate_size",      "num_hidden_layers",
                                               "num_attention_heads", "num_key_value_heads",    "head_dim",
                                               "vocab_size",          "max_position_embeddings"};
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
    for (const auto& [tag, val] :
         std::vector<std::pair<std::string, std::string>>{{"neg", "-1"}, {"zero", "0"}, {"str", "\"abc\""}})
      v.push_back({"config_" + f + "_" + tag, {{"model/config.json", with(f, val)}}, gen, "config.json: " + f, ""});
  for (const std::string f : {"hidden_size", "num_hidden_layers", "vocab_size"})
    v.push_back({"config_" + f + "_zero", {{"model/config.json", with(f, "0")}}, gen, "config.json: " + f, ""});
  v.push_back(
      {"config_model_type", {{"model/config.json", with("model_type", "\"mamba\"")}}, gen, "config.json: model_type", ""});
  v.push_back({"config_not_object", {{"model/config.json", "[1, 2, 3]"}}, gen, "config.json", ""});
  for (const auto& [name, fn] : tokenizer_mutations()) {
    (void)fn;
    v.push_back({"tokenizer_" + name,
                 {{"tk/tokenizer.json", "@tok:" + name}},
                 "tokenize --model $D/tk --text hello",
                 "tk/tokenizer.json: ",
                 ""});
  }
  v.push_back({"config_empty", {{"model/config.json", ""}}, gen, "config.json: invalid JSON", ""});

  // --- Results databases: corrupt, truncated, foreign, from a newer kvbench, missing. Readers
  // (grade, report, compare, merge's inputs) and the writer (run) refuse them without writing.
  const std::map<std::string, std::pair<std::string, std::string>> bad_dbs = {
      // tag -> (file content or generator, expected error)
      {"garbage", {std::string(4096, 'x'), "x.db: not a SQLite database"}},
      {"truncated", {"@db:truncated", "x.db: not a SQLite database"}},
      {"foreign", {"@db:foreign", "x.db: is a SQLite database but not a kvbench results database"}},
      {"other_app", {"@db:other_app", "x.db: is a SQLite database but not a kvbench results database"}},
      {"newer", {"@db:newer", "x.db: written by a newer kvbench (schema version 99"}},
  };
  const std::string run_smoke = "run --task smoke --model $S/models/stories260K-hf --limit 1 --max-new-tokens 4 --quiet";
  for (const auto& [tag, db] : bad_dbs) {
    const auto& [content, err] = db;
    add_bad_db_cases(v, "db_", tag, content, err, run_smoke);
    // merge: the input is refused before the (existing, valid) output is touched.
    v.push_back({"db_merge_" + tag, {{"x.db", content}, {"out.db", "@db:results"}}, "merge $D/out.db $D/x.db", err, ""});
  }
  v.push_back({"db_grade_directory", {{"d/keep", ""}}, "grade --db $D/d", "d: ", ""});
  v.push_back(
      {"db_report_missing", {}, "report --db $D/typo.db --out $D/rep", "typo.db: no such results database", "typo.db"});
  v.push_back({"db_compare_missing",
               {},
               "compare --db $D/typo.db --baseline latest --candidate previous",
               "typo.db: no such results database",
               "typo.db"});
  v.push_back({"db_merge_missing_input", {}, "merge $D/out.db $D/typo.db", "typo.db", "out.db"});
  v.push_back({"db_merge_into_corrupt",
               {{"x.db", std::string(4096, 'x')}, {"r.db", "@db:results"}},
               "merge $D/x.db $D/r.db",
               "x.db: not a SQLite database",
               ""});
  // A valid database with bad references or options: nothing written.
  const std::map<std::string, std::string> ok_db = {{"r.db", "@db:results"}};
  v.push_back({"db_grade_unknown_run", ok_db, "grade --db $D/r.db --run nosuch", "r.db: no run 'nosuch'", ""});
  v.push_back({"db_report_unknown_run", ok_db, "report --db $D/r.db --run nosuch --out $D/rep", "r.db: no run 'nosuch'",
               "rep"});
  v.push_back({"db_compare_unknown_run", ok_db, "compare --db $D/r.db --baseline nosuch --candidate latest",
               "r.db: no run 'nosuch'", ""});
  v.push_back({"db_compare_huge_run_id", ok_db,
               "compare --db $D/r.db --baseline 99999999999999999999999 --candidate latest", "r.db: ", ""});
  v.push_back({"db_compare_alpha_nan", ok_db, "compare --db $D/r.db --baseline latest --candidate latest --alpha nan",
               "--alpha: must be in (0, 1), got nan", ""});
  v.push_back({"db_compare_alpha_range", ok_db, "compare --db $D/r.db --baseline latest --candidate latest --alpha 1.5",
               "--alpha: must be in (0, 1), got 1.5", ""});
  v.push_back({"db_compare_min_drop_inf", ok_db,
               "compare --db $D/r.db --baseline latest --candidate latest --min-drop inf",
               "--min-drop: must be a finite number", ""});
  v.push_back({"db_compare_config_alpha",
               {{"r.db", "@db:results"}, {"c.yaml", "thresholds: {alpha: .nan}\n"}},
               "compare --db $D/r.db --baseline latest --candidate latest --config $D/c.yaml",
               "c.yaml: thresholds.alpha",
               ""});
  v.push_back({"db_grade_judge_spec", ok_db, "grade --db $D/r.db --judge nosuch:model", "--judge", ""});
  v.push_back({"db_grade_judge_empty_model", ok_db, "grade --db $D/r.db --judge openai:", "--judge", ""});

  // --- run with a valid database beside bad options, policy specs, suites, configs, datasets
  // and models: everything is validated before the database is opened.
  const std::string run_db = run_smoke + " --db $D/r.db";
  const std::vector<std::tuple<std::string, std::string, std::string>> run_bad = {
      {"policy_unknown", "--policies bogus", "bogus"},
      {"policy_unknown_key", "--policies snapkv:nokey=1", "nokey"},
      {"policy_no_value", "--policies snapkv:window", "window"},
      {"policy_non_numeric", "--policies snapkv:window=abc", "window"},
      {"policy_negative_window", "--policies snapkv:window=-1", "window"},
      {"policy_overflow", "--policies snapkv:window=1e999", "window"},
      {"policy_nan", "--policies rkv:lambda=nan", "lambda"},
      {"policy_empty_item", "--policies full,,snapkv", "--policies"},
      {"policy_empty", "--policies ''", "--policies"},
      {"policy_duplicate_key", "--policies snapkv:window=4,window=8", "window"},
      {"budget_zero", "--budgets 0", "--budgets"},
      {"budget_negative", "--budgets -5", "--budgets"},
      {"budget_text", "--budgets abc", "--budgets"},
      {"budget_overflow", "--budgets 99999999999999999999999", "--budgets"},
      {"budget_empty_item", "--budgets 32,,64", "--budgets"},
      {"samples_nan", "--samples nan", "--samples"},
      {"samples_negative", "--samples -1", "--samples"},
      {"max_new_tokens_zero", "--max-new-tokens 0", "--max-new-tokens"},
      {"max_new_tokens_negative", "--max-new-tokens -1", "--max-new-tokens"},
      {"batch_zero", "--batch 0", "--batch"},
      {"top_p_nan", "--top-p nan", "--top-p"},
      {"top_k_negative", "--top-k -1", "--top-k"},
      {"min_p_range", "--min-p 2", "--min-p"},
      {"temperature_huge", "--temperature 1e999", "--temperature"},
      {"shard_out_of_range", "--shard 2/2", "--shard"},
      {"shard_zero_count", "--shard 0/0", "--shard"},
      {"shard_text", "--shard x", "--shard"},
      {"truncate_unknown", "--truncate sideways", "--truncate"},
      {"on_bad_example_unknown", "--on-bad-example maybe", "--on-bad-example"},
      {"backend_unknown", "--backend tpu", "--backend"},
      {"task_unknown", "--task nosuch", "nosuch"},
      {"task_unknown_option", "--task smoke:nokey=1", "nokey"},
      {"model_missing", "--model $D/nomodel", "nomodel"},
      {"judge_unknown", "--judge nosuch:model", "--judge"},
      {"judge_local_missing", "--judge local:$D/nomodel", "--judge local:"},
      {"seed_negative", "--seed -1", "--seed: must be >= 0"},
      {"limit_text", "--limit some", "--limit"},
  };
  for (const auto& [tag, opt, err] : run_bad) v.push_back({"run_" + tag, ok_db, run_db + " " + opt, err, ""});

  // Suite files (run --suite, tasks --suite).
  const Probes suites = {
      {"not_mapping", "- a\n- b\n", "s.yaml: a suite is a YAML mapping"},
      {"no_tasks", "name: x\n", "s.yaml: tasks"},
      {"tasks_empty", "tasks: []\n", "s.yaml: tasks"},
      {"budget_negative", "budgets: [-1]\ntasks: [smoke]\n", "s.yaml: budgets"},
      {"budget_text", "budgets: [abc]\ntasks: [smoke]\n", "s.yaml: budgets"},
      {"samples_zero", "tasks: [{task: smoke, samples: 0}]\n", "samples"},
      {"limit_negative", "tasks: [{task: smoke, limit: -2}]\n", "limit"},
      {"max_new_tokens_huge", "tasks: [{task: smoke, max_new_tokens: 1e999}]\n", "s.yaml: line 1: number out of range"},
      {"unknown_key", "tasks: [{task: smoke, frobnicate: 1}]\n", "frobnicate"},
      {"unknown_task", "tasks: [nosuch]\n", "nosuch"},
      {"sampling_not_mapping", "sampling: 3\ntasks: [smoke]\n", "s.yaml: sampling"},
      {"temperature_nan", "sampling: {temperature: .nan}\ntasks: [smoke]\n", "temperature"},
      {"temperature_negative", "sampling: {temperature: -1}\ntasks: [smoke]\n", "temperature"},
      {"top_p_range", "tasks: [{task: smoke, sampling: {top_p: 3}}]\n", "top_p"},
      {"self_alias", "tasks: &a [*a]\n", "s.yaml: line 1: YAML nested deeper"},
      {"billion_laughs", billion_laughs() + "tasks: [smoke]\n", "s.yaml: line 1: YAML expands to too many nodes"},
  };
  add_suite_cases(v, "suite_", suites);
  // run --config files.
  const Probes configs = {
      {"temperature_nan", "run: {temperature: .nan}\n", "temperature"},
      {"samples_negative", "run: {samples: -3}\n", "samples"},
      {"budgets_text", "run: {budgets: x}\n", "budgets"},
      {"policies_number", "run: {policies: 5}\n", "policies"},
      {"unknown_key", "run: {frobnicate: 1}\n", "frobnicate"},
      {"limit_huge", "run: {limit: 1e30}\n", "limit"},
      {"run_not_mapping", "run: [1, 2]\n", "run"},
      {"not_mapping", "just a string\n", "c.yaml"},
  };
  add_run_config_cases(v, "runconfig_", configs);
  v.push_back({"runconfig_profile_missing",
               {{"c.yaml", "run: {limit: 1}\n"}, {"r.db", "@db:results"}},
               "run --config $D/c.yaml --config-profile nosuch --quiet --db $D/r.db",
               "nosuch",
               ""});

  // --- Dataset records (gsm8k's JSON Lines in a local mirror), read with --on-bad-example fail.
  const std::vector<std::tuple<std::string, std::string, std::string>> records = {
      {"not_json", "{not json\n", "test.jsonl: line 1"},
      {"deep", repeat("[", 100000) + repeat("]", 100000) + "\n", "test.jsonl: element 0: JSON nested deeper"},
      {"number_overflow", "{\"question\": \"q\", \"answer\": \"#### 4\", \"n\": 1e999999}\n",
       "test.jsonl: line 1: number out of range"},
      {"missing_field", "{\"answer\": \"#### 4\"}\n", "test.jsonl: line 1"},
      {"field_not_string", "{\"question\": 5, \"answer\": \"#### 4\"}\n", "test.jsonl: line 1"},
      {"not_object", "[1, 2]\n", "test.jsonl: element 0: expected a JSON object"},
      {"invalid_utf8", "{\"question\": \"caf\xe9\", \"answer\": \"#### 4\"}\n", "test.jsonl: line 1"},
      {"second_line_bad", "{\"question\": \"q\", \"answer\": \"#### 4\"}\n{\"question\": \n", "test.jsonl: line 2"},
      {"empty", "\n\n", "test.jsonl: no records"},
      {"no_gold", "{\"question\": \"q\", \"answer\": \"no marker\"}\n", "test.jsonl: line 1"},
  };
  for (const auto& [tag, text, err] : records) {
    v.push_back(
        {"records_run_" + tag,
         {{"data/gsm8k/test.jsonl", text}, {"r.db", "@db:results"}},
         "run --task gsm8k --data-dir $D/data --model $S/models/stories260K-hf --limit 2 --on-bad-example fail --quiet --db $D/r.db",
         err,
         ""});
    v.push_back(
        {"records_count_" + tag, {{"data/gsm8k/test.jsonl", text}}, "tasks gsm8k --data-dir $D/data --count", err, ""});
  }

  // --- GGUF models.
  for (const auto& [name, fn] : gguf_mutations()) {
    (void)fn;
    v.push_back({"gguf_" + name,
                 {{"m.gguf", "@gguf:" + name}},
                 "generate --model $D/m.gguf --prompt hi --max-new-tokens 2",
                 "m.gguf",
                 ""});
  }
  v.push_back({"gguf_run_truncated",
               {{"m.gguf", "@gguf:cut_half"}, {"r.db", "@db:results"}},
               "run --task smoke --model $D/m.gguf --limit 1 --quiet --db $D/r.db",
               "m.gguf",
               ""});

  // --- Chat templates (tokenizer_config.json's chat_template, rendered by generate --chat).
  const std::map<std::string, std::string> model_files = {
      {"model/config.json", "@config"},
      {"model/model.safetensors", "@shared:models/stories260K-hf/model.safetensors"},
      {"model/tokenizer.json", "@shared:models/stories260K-hf/tokenizer.json"}};
  const std::vector<std::tuple<std::string, std::string, std::string>> templates = {
      {"unclosed_for", "{% for m in messages %}{{ m.content }}", "chat_template"},
      {"unknown_tag", "{% frobnicate %}", "chat_template"},
      {"unknown_filter", "{{ messages | frobnicate }}", "chat_template"},
      {"raise_exception", "{{ raise_exception('no system messages') }}", "no system messages"},
      {"undefined_call", "{{ nosuch() }}", "chat_template"},
      {"deep_parens", repeat("{{ ", 1) + repeat("(", 5000) + "1" + repeat(")", 5000) + " }}", "chat_template"},
      {"huge_range", "{% for i in range(1000000000) %}x{% endfor %}", "chat_template"},
      {"output_bomb", "{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxx{% endfor %}{% endfor %}",
       "chat_template"},
      {"string_repeat", "{{ 'x' * 1000000000 }}", "chat_template"},
      {"recursive_macro", "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "chat_template"},
      {"unterminated_string", "{{ 'abc }}", "chat_template"},
  };
  for (const auto& [tag, tmpl, err] : templates) {
    auto files = model_files;
    files["model/tokenizer_config.json"] =
        nlohmann::json{{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"chat_template", tmpl}}.dump();
    v.push_back({"chat_" + tag, files, "generate --model $D/model --chat --prompt hi --max-new-tokens 2", err, ""});
  }
  {
    auto files = model_files;
    files["model/tokenizer_config.json"] = R"({"chat_template": 5})";
    v.push_back({"chat_template_number", files, "generate --model $D/model --chat --prompt hi",
                 "tokenizer_config.json: chat_template", ""});
    files["model/tokenizer_config.json"] = R"({"chat_template": [{"name": 1, "template": "x"}]})";
    v.push_back({"chat_template_list_bad", files, "generate --model $D/model --chat --prompt hi",
                 "tokenizer_config.json: chat_template", ""});
    files["model/tokenizer_config.json"] = repeat("[", 100000) + repeat("]", 100000);
    v.push_back({"chat_tokenizer_config_deep", files, "generate --model $D/model --chat --prompt hi",
                 "tokenizer_config.json: JSON nested deeper", ""});
    files["model/tokenizer_config.json"] = R"({"chat_template": "{{ messages[0].content }}"})";
    v.push_back({"chat_template_unknown_name", files,
                 "generate --model $D/model --chat --chat-template nosuch --prompt hi", "nosuch", ""});
  }

  // --- More safetensors headers.
  auto st = [&](const std::string& name, const std::string& file, const std::string& err) {
    v.push_back({"st_" + name, {{"model/config.json", "@config"}, {"model/model.safetensors", file}}, gen, err, ""});
  };
  st("tiny_file", "abcd", "model.safetensors");
  st("header_len_huge", safetensors("{}", 0, 1ull << 63), "model.safetensors: header");
  st("header_not_object", safetensors("[1, 2]", 0), "model.safetensors: header");
  st("entry_not_object", safetensors(R"({"a": 5})", 0), "model.safetensors: tensor 'a'");
  st("offsets_reversed", safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", 16),
     "tensor 'a'.data_offsets");
  st("shape_negative", safetensors(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", 16),
     "tensor 'a'.shape");
  st("size_mismatch", safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}})", 8), "tensor 'a'");
  st("dtype_missing", safetensors(R"({"a":{"shape":[4],"data_offsets":[0,16]}})", 16), "tensor 'a'.dtype");
  st("offsets_text", safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":["0","16"]}})", 16),
     "tensor 'a'.data_offsets");
  st("header_invalid_utf8", safetensors("{\"caf\xe9\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
     "model.safetensors: header");

  // --- Numeric options and policy specs of the other commands.
  const std::vector<std::tuple<std::string, std::string, std::string>> opts = {
      {"generate_max_new_tokens_negative", "generate --model $S/models/stories260K-hf --prompt x --max-new-tokens -1",
       "--max-new-tokens"},
      {"generate_top_k_text", "generate --model $S/models/stories260K-hf --prompt x --top-k many", "--top-k"},
      {"generate_min_p_nan", "generate --model $S/models/stories260K-hf --prompt x --min-p nan", "--min-p"},
      {"generate_seed_text", "generate --model $S/models/stories260K-hf --prompt x --seed abc",
       "--seed: must be a finite number"},
      {"generate_policy_unknown", "generate --model $S/models/stories260K-hf --prompt x --policy bogus --budget 8",
       "bogus"},
      {"generate_policy_no_budget", "generate --model $S/models/stories260K-hf --prompt x --policy snapkv", "--budget"},
      {"generate_budget_negative", "generate --model $S/models/stories260K-hf --prompt x --policy snapkv --budget -8",
       "--budget"},
      {"generate_messages_missing", "tokenize --model $S/models/stories260K-hf --messages $D/nosuch.json", "nosuch.json"},
      {"bench_batch_negative", "bench --batch -1 --model-shape stories260k", "--batch"},
      {"bench_context_overflow", "bench --context 1e999 --model-shape stories260k", "--context"},
      {"bench_shape_unknown", "bench --model-shape nosuch", "nosuch"},
      {"policies_resolve_unknown", "policies --resolve bogus", "bogus"},
      {"policies_resolve_bad_value", "policies --resolve snapkv:window=abc --budget 64", "window"},
      {"policies_resolve_budget_nan", "policies --resolve snapkv --budget nan", "--budget"},
      {"policies_resolve_trailing_comma", "policies --resolve 'snapkv:window=4,' --budget 64",
       "policy spec 'snapkv:window=4,': empty parameter"},
      {"policies_resolve_budget_negative", "policies --resolve snapkv --budget -64", "--budget: must be > 0"},
      {"generate_seed_negative", "generate --model $S/models/stories260K-hf --prompt x --seed -1", "--seed: must be >= 0"},
      {"bench_seed_negative", "bench --model-shape stories260k --seed -3", "--seed: must be >= 0"},
      {"check_answer_unknown_grader", "check-answer --grader nosuch --gold 1 --pred 1", "nosuch"},
      {"check_answer_meta_not_object", "check-answer --grader longbench.qa_f1 --gold 1 --pred 1 --meta '[1]'", "--meta"},
      {"tasks_show_negative", "tasks smoke --show -1", "--show"},
      {"tasks_unknown", "tasks nosuch", "nosuch"},
      {"fidelity_limit_negative", "fidelity --model $S/models/stories260K-hf --limit -1 --text $D/nosuch.txt", "--limit"},
      {"fidelity_budgets_zero",
       "fidelity --model $S/models/stories260K-hf --policies snapkv --budgets 0 --text $D/nosuch.txt", "--budgets"},
      {"fidelity_text_missing",
       "fidelity --model $S/models/stories260K-hf --policies full --budgets 8 --text $D/nosuch.txt", "nosuch.txt"},
  };
  for (const auto& [tag, args, err] : opts) v.push_back({"opt_" + tag, {}, args, err, ""});

  // --- Issue 31: a second probe. Results databases that are not (or no longer) kvbench's.
  for (const auto& [tag, content, err] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"uv_negative", "@db:uv_negative", "x.db: schema version -1 is not one kvbench writes"},
           {"uv_zero", "@db:uv_zero", "x.db: schema version 0 is not one kvbench writes"},
           {"empty_file", "", "x.db: an empty file, not a kvbench results database"},
           {"empty_sqlite", "@db:empty_sqlite", "x.db: is a SQLite database but not a kvbench results database"}}) {
    add_bad_db_cases(v, "db31_", tag, content, err, run_smoke);
    v.push_back(
        {"db31_merge_in_" + tag, {{"x.db", content}, {"out.db", "@db:results"}}, "merge $D/out.db $D/x.db", err, ""});
    v.push_back({"db31_merge_out_" + tag, {{"x.db", content}, {"r.db", "@db:results"}}, "merge $D/x.db $D/r.db", err, ""});
  }
  // Database names SQLite would take as a private temporary / in-memory database or a URI.
  v.push_back({"db31_run_empty_name", {}, run_smoke + " --db ''", "--db: empty path", ""});
  v.push_back({"db31_run_memory_uri", {}, run_smoke + " --db 'file:$D/m.db?mode=memory'", "not a file path", "m.db"});
  v.push_back({"db31_run_memory", {}, run_smoke + " --db :memory:", ":memory:: not a file path", ""});
  v.push_back({"db31_grade_uri", {}, "grade --db 'file:$D/x.db'", "x.db: no such results database", "x.db"});
  v.push_back(
      {"db31_merge_memory_out", {{"r.db", "@db:results"}}, "merge :memory: $D/r.db", ":memory:: not a file path", ""});
  // Outputs that are inputs; writes through a symlink out of --out.
  v.push_back({"out31_fidelity_json_is_prompts",
               {{"p.txt", "Once upon a time\n"}},
               "fidelity --model $S/models/stories260K-hf --prompts $D/p.txt --json $D/p.txt --policies full",
               "--json ",
               ""});
  v.push_back({"out31_fidelity_json_is_prompts_other_spelling",
               {{"p.txt", "Once upon a time\n"}},
               "fidelity --model $S/models/stories260K-hf --prompts $D/p.txt --json $D/./p.txt --policies full",
               "is also an input",
               ""});
  v.push_back({"out31_fidelity_json_is_model_config",
               {{"model/config.json", "@config"},
                {"model/model.safetensors", "@shared:models/stories260K-hf/model.safetensors"},
                {"model/tokenizer.json", "@shared:models/stories260K-hf/tokenizer.json"},
                {"p.txt", "Once upon a time\n"}},
               "fidelity --model $D/model --prompts $D/p.txt --json $D/model/config.json --policies full",
               "is a file of the model directory",
               ""});
  v.push_back({"out31_report_db_is_output",
               {{"rep/cells.csv", "@db:results"}},
               "report --db $D/rep/cells.csv --out $D/rep",
               "--out ",
               "rep/index.html"});
  v.push_back({"out31_report_symlink_out_of_out",
               {{"outside.txt", "keep me\n"}, {"rep/index.html", "@symlink:../outside.txt"}, {"r.db", "@db:results"}},
               "report --db $D/r.db --out $D/rep",
               "rep/index.html: a symbolic link",
               "rep/report.md"});
  v.push_back({"out31_report_out_is_db", {{"r.db", "@db:results"}}, "report --db $D/r.db --out $D/r.db", "--out ", ""});
  // A file-size limit: the write fails with EFBIG (a runtime failure, exit 1), never SIGXFSZ.
  // (A database in rollback-journal mode: opening a WAL one needs a 32 KiB -shm file first.)
  v.push_back({"xfsz31_report",
               {{"r.db", "@db:results_rollback"}},
               "report --db $D/r.db --out $D/rep",
               "rep/index.html: write failed (File too large)",
               "rep/index.html",
               "ulimit -f 4;",
               1});
  v.push_back({"xfsz31_run_new_db", {}, run_smoke + " --db $D/new.db", "new.db: ", "new.db", "ulimit -f 8;", 1});
  // Run configs: values out of range, empty lists, unknown keys in profiles.
  const Probes configs31 = {
      {"max_new_tokens_huge", "run: {max_new_tokens: 99999999999}\n", "c.yaml: run.max_new_tokens: must be <= 2147483647"},
      {"top_k_huge", "run: {top_k: 1099511627776}\n", "c.yaml: run.top_k: must be <= 2147483647"},
      {"samples_huge", "run: {samples: 4294967297}\n", "c.yaml: run.samples: must be <= 2147483647"},
      {"seed_huge", "run: {seed: 18446744073709551616}\n", "c.yaml: run.seed"},
      {"seed_negative", "run: {seed: -1}\n", "c.yaml: run.seed"},
      {"top_p_range", "run: {top_p: 1.5}\n", "c.yaml: run.top_p: must be in [0, 1]"},
      {"min_p_nan", "run: {min_p: .nan}\n", "c.yaml: run.min_p"},
      {"temperature_inf", "run: {temperature: .inf}\n", "c.yaml: run.temperature"},
      {"models_empty", "run: {models: []}\n", "c.yaml: run.models: empty list"},
      {"policies_empty", "run: {policies: []}\n", "c.yaml: run.policies: empty list"},
      {"budgets_empty", "run: {budgets: []}\n", "c.yaml: run.budgets: empty list"},
      {"budget_huge", "run: {budgets: [99999999999]}\n", "c.yaml: run.budgets[0]: must be <= 2147483647"},
      {"data_dirs_empty", "data_dirs: []\nrun: {limit: 1}\n", "c.yaml: data_dirs: empty list"},
      {"policy_empty_string", "run: {policies: ['']}\n", "c.yaml: run.policies[0]: empty string"},
      {"profile_typo_key", "run: {limit: 1}\ngpu_run: {budget: [8]}\n", "c.yaml: gpu_run.budget: unknown key"},
      {"report_typo_key", "run: {limit: 1}\nreport: {outdir: x}\n", "c.yaml: report.outdir: unknown key"},
      {"second_document", "run: {limit: 1}\n---\nrun: {limit: 2}\n", "c.yaml: line 2: a second YAML document"},
      {"duplicate_key", "run: {limit: 1}\nrun: {limit: 2}\n", "c.yaml: line 2: duplicate key 'run'"},
      {"duplicate_inner_key", "run: {limit: 1, limit: 2}\n", "duplicate key 'limit'"},
  };
  add_run_config_cases(v, "runconfig31_", configs31);
  // Suites: wrong types, unknown or misplaced top-level keys, a second document.
  const Probes suites31 = {
      {"name_number", "name: 5\ntasks: [smoke]\n", "s.yaml: name: expected a string, got 5"},
      {"description_list", "description: [a]\ntasks: [smoke]\n", "s.yaml: description: expected a string"},
      {"limit_top_level", "limit: 1\ntasks: [smoke]\n", "s.yaml: limit: unknown key"},
      {"budget_typo", "budget: [8]\ntasks: [smoke]\n", "s.yaml: budget: unknown key"},
      {"budgets_empty", "budgets: []\ntasks: [smoke]\n", "s.yaml: budgets: expected at least one budget"},
      {"budgets_huge", "budgets: [99999999999]\ntasks: [smoke]\n",
       "s.yaml: budgets: expected integers in [1, 2147483647]"},
      {"second_document", "tasks: [smoke]\n---\ntasks: [gsm8k]\n", "s.yaml: line 2: a second YAML document"},
      {"duplicate_tasks", "tasks: [smoke]\ntasks: [gsm8k]\n", "s.yaml: line 2: duplicate key 'tasks'"},
      {"task_samples_huge", "tasks: [{task: smoke, samples: 99999999999}]\n", "s.yaml: tasks[0]: samples"},
      {"task_limit_huge", "tasks: [{task: smoke, limit: 99999999999999999999}]\n", "s.yaml: tasks[0]: limit"},
      // A task's own models, budgets and policies (tasks/suite.h).
      {"task_models_empty", "tasks: [{task: smoke, models: []}]\n", "s.yaml: tasks[0]: models: empty list"},
      {"task_models_mapping", "tasks: [{task: smoke, models: {a: 1}}]\n",
       "s.yaml: tasks[0]: models: expected a list of strings"},
      {"task_policies_number", "tasks: [{task: smoke, policies: [7]}]\n",
       "s.yaml: tasks[0]: policies[0]: expected a non-empty string"},
      {"task_budgets_huge", "tasks: [{task: smoke, budgets: [99999999999]}]\n",
       "s.yaml: tasks[0]: budgets: expected integers in [1, 2147483647]"},
      {"task_budgets_text", "tasks: [{task: smoke, budgets: [lots]}]\n", "s.yaml: tasks[0]: budgets: expected integers"},
  };
  add_suite_cases(v, "suite31_", suites31);
  // Numbers on the command line beyond 64 bits are refused, not saturated.
  for (const auto& [tag, args, err] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"run_seed_2_64", run_smoke + " --db $D/r.db --seed 18446744073709551616", "--seed: out of range"},
           {"generate_seed_2_64", "generate --model $S/models/stories260K-hf --prompt x --seed 18446744073709551616",
            "--seed: out of range"},
           {"run_max_new_tokens_huge", run_smoke + " --db $D/r.db --max-new-tokens 99999999999", "--max-new-tokens"},
           {"run_top_k_huge", run_smoke + " --db $D/r.db --top-k 1099511627776", "--top-k"},
           {"run_limit_2_64", run_smoke + " --db $D/r.db --limit 18446744073709551616", "--limit: out of range"},
           {"bench_batch_huge", "bench --model-shape stories260k --batch 2000000000", "--batch 2000000000: "},
           {"judge_concurrency_huge", "grade --db $D/r.db --judge openai:m --judge-concurrency 1000000",
            "--judge-concurrency"},
           {"judge_timeout_huge", "grade --db $D/r.db --judge openai:m --judge-timeout 1e300", "--judge-timeout"},
           {"judge_backoff_huge", "grade --db $D/r.db --judge openai:m --judge-backoff 1e300", "--judge-backoff"},
           {"judge_retries_huge", "grade --db $D/r.db --judge openai:m --judge-retries 2000000000", "--judge-retries"},
           {"bench_context_huge", "bench --model-shape stories260k --context 2147483647 --gen 2147483647",
            "max_position_embeddings"}})
    v.push_back({"cli31_" + tag, {{"r.db", "@db:results"}}, args, err, ""});
  // config.json: RoPE settings that are not mappings, token ids out of range.
  auto cfg_with = [&](const std::string& extra) { return base.substr(0, base.size() - 1) + "," + extra + "}"; };
  for (const auto& [tag, extra, err] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"rope_scaling_number", R"("rope_scaling": 5)", "config.json: rope_scaling: expected a mapping or null, got 5"},
           {"rope_parameters_list", R"("rope_parameters": [1])",
            "config.json: rope_parameters: expected a mapping or null"},
           {"rope_type_number", R"("rope_scaling": {"rope_type": 3})",
            "config.json: rope_scaling.rope_type: expected a string"},
           {"eos_huge", R"("eos_token_id": 4294967296)", "config.json: eos_token_id"},
           {"eos_negative", R"("eos_token_id": [2, -1])", "config.json: eos_token_id"},
           {"bos_huge", R"("bos_token_id": 99999999999)", "config.json: bos_token_id"},
           {"bos_string", R"("bos_token_id": "1")", "config.json: bos_token_id"},
           {"layers_huge_int", R"("num_hidden_layers": 1099511627776)", "config.json: num_hidden_layers"}}) {
    std::string c = cfg_with(extra);
    if (tag == "layers_huge_int") c = with("num_hidden_layers", "1099511627776");
    v.push_back({"config31_" + tag, {{"model/config.json", c}}, gen, err, ""});
  }
  // Issue 38: every tensor of the file is bound or the load fails naming it; every config.json
  // flag that changes the model and that kvbench does not implement is refused.
  for (const auto& [tag, tensors] : extra_tensors()) {
    v.push_back({"bind38_" + tag,
                 {{"model/config.json", "@config"},
                  {"model/model.safetensors", "@st+:" + tag},
                  {"model/tokenizer.json", "@shared:models/stories260K-hf/tokenizer.json"}},
                 gen,
                 "model.safetensors: tensor '" + tensors[0].first + "': not used by the llama architecture",
                 ""});
  }
  v.push_back({"bind38_gguf_block_count_4",
               {{"m.gguf", "@gguf:block_count_4"}},
               "generate --model $D/m.gguf --prompt hi --max-new-tokens 2",
               "m.gguf: tensor 'blk.4.attn_norm.weight' (as 'model.layers.4.input_layernorm.weight'): not used by the "
               "llama architecture",
               ""});
  for (const auto& [tag, extra, err] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"mlp_bias", R"("mlp_bias": true)", "config.json: mlp_bias: true is not supported"},
           {"attention_bias", R"("attention_bias": true)", "config.json: attention_bias: true is not supported for llama"},
           {"quantization_config", R"("quantization_config": {"quant_method": "gptq", "bits": 4})",
            "config.json: quantization_config: quantised checkpoints (\"gptq\") are not supported"},
           {"partial_rotary", R"("partial_rotary_factor": 0.5)", "config.json: partial_rotary_factor: 0.5"},
           {"partial_rotary_rope_parameters",
            R"("rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})",
            "config.json: rope_parameters.partial_rotary_factor: 0.25"},
           {"rope_dynamic", R"("rope_scaling": {"rope_type": "dynamic", "factor": 2.0})",
            "config.json: rope_scaling.rope_type: unsupported RoPE scaling 'dynamic'"}}) {
    // The weights are stories260K's own: only the flag is wrong.
    v.push_back({"flag38_" + tag,
                 {{"model/config.json", cfg_with(extra)},
                  {"model/model.safetensors", "@shared:models/stories260K-hf/model.safetensors"}},
                 gen,
                 err,
                 ""});
  }
  // generation_config.json beside a model: token ids out of range are named, not truncated.
  for (const auto& [tag, text] :
       std::vector<std::pair<std::string, std::string>>{{"bos_huge", R"({"bos_token_id": 99999999999})"},
                                                        {"eos_huge", R"({"eos_token_id": [2, 4294967298]})"},
                                                        {"top_k_huge", R"({"top_k": 1099511627776})"}}) {
    auto files = std::map<std::string, std::string>{
        {"model/config.json", "@config"},
        {"model/model.safetensors", "@shared:models/stories260K-hf/model.safetensors"},
        {"model/tokenizer.json", "@shared:models/stories260K-hf/tokenizer.json"},
        {"model/generation_config.json", text}};
    v.push_back({"genconfig31_" + tag, files, gen, "generation_config.json: ", ""});
  }
  // Dataset golds that can never be matched (every sample would score 0).
  for (const auto& [tag, gold] : std::vector<std::pair<std::string, std::string>>{
           {"gold_empty", "#### "}, {"gold_nan", "#### nan"}, {"gold_inf", "#### inf"}, {"gold_word", "#### four"}}) {
    const std::string rec = "{\"question\": \"q\", \"answer\": \"" + gold + "\"}\n";
    v.push_back(
        {"records31_run_" + tag,
         {{"data/gsm8k/test.jsonl", rec}, {"r.db", "@db:results"}},
         "run --task gsm8k --data-dir $D/data --model $S/models/stories260K-hf --limit 2 --on-bad-example fail --quiet --db $D/r.db",
         "test.jsonl: line 1: field 'answer': the final answer after '####'",
         ""});
    v.push_back({"records31_count_" + tag,
                 {{"data/gsm8k/test.jsonl", rec}},
                 "tasks gsm8k --data-dir $D/data --count",
                 "not a number",
                 ""});
  }
  // Chat templates that grow a list without bound (string growth is capped already).
  for (const auto& [tag, tmpl] : std::vector<std::pair<std::string, std::string>>{
           {"list_doubling_ns",
            "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}"},
           {"list_nesting_ns",
            "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l|tojson }}"},
           {"list_doubling_macro",
            "{% macro f(l, n) %}{% if n > 0 %}{{ f(l + l, n - 1) }}{% else %}{{ l|length }}{% endif %}{% endmacro %}{{ f([1], 60) }}"},
           {"list_repeat_chain", "{% set a = [1] * 100000 %}{% set b = [a] * 100000 %}{{ b|tojson }}"},
           {"list_doubling_unrolled", [] {
              std::string t = "{% set a = [1, 2, 3, 4] %}";
              for (int i = 0; i < 64; ++i) t += "{% set a = a + a %}";
              return t + "{{ a|length }}";
            }()}}) {
    auto files = model_files;
    files["model/tokenizer_config.json"] =
        nlohmann::json{{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"chat_template", tmpl}}.dump();
    v.push_back({"chat31_" + tag, files, "generate --model $D/model --chat --prompt hi --max-new-tokens 2",
                 "value too large", ""});
  }
  // A legacy (pickle, non-ZIP) .pth checkpoint: named as such, not as a bad safetensors header.
  v.push_back({"pth31_legacy",
               {{"g.pth", std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15)}},
               "generate --model $S/models/stories260K-hf --prompt x --policy trimkv:gates=$D/g.pth --budget 8",
               "g.pth: a legacy (non-ZIP) PyTorch checkpoint",
               ""});
  // The judge's endpoint and key, checked before anything is read or written.
  const std::string grade_judge = "grade --db $D/r.db --judge openai:m";
  for (const auto& [tag, env, err] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"base_url_file", "OPENAI_BASE_URL=file:///etc/passwd",
            "OPENAI_BASE_URL: 'file:///etc/passwd': must be an http:// or https:// URL"},
           {"base_url_no_host", "OPENAI_BASE_URL=http://", "OPENAI_BASE_URL: 'http://': no host name"},
           {"base_url_garbage", "OPENAI_BASE_URL=not-a-url", "must be an http:// or https:// URL"},
           {"base_url_bad_port", "OPENAI_BASE_URL=http://localhost:0/v1", "bad port"},
           {"key_crlf", "OPENAI_API_KEY=\"$(printf 'sk-x\\r\\nX-Injected: 1')\"",
            "OPENAI_API_KEY: contains a control character"}}) {
    v.push_back({"judge31_grade_" + tag, {{"r.db", "@db:results"}}, grade_judge, err, "", "env " + env});
    v.push_back({"judge31_run_" + tag,
                 {{"r.db", "@db:results"}},
                 run_smoke + " --db $D/r.db --judge openai:m",
                 err,
                 "",
                 "env " + env});
  }
  // --- Issue 40.
  // 6. Work without bounds: refused at once, naming the option or the template's call.
  for (const auto& [tag, value] : std::vector<std::pair<std::string, std::string>>{
           {"1e11", "1e11"}, {"2e10", "2e10"}, {"1e300", "1e300"}, {"dbl_max", "1.7976931348623157e308"}}) {
    v.push_back({"i40_bench_memory_" + tag,
                 {},
                 "bench --model-shape stories260k --plan-only --memory " + value,
                 "--memory: must be in [0, 1048576]",
                 ""});
    v.push_back({"i40_bench_memory_run_" + tag,
                 {},
                 "bench --model-shape stories260k --memory " + value,
                 "--memory: must be in [0, 1048576]",
                 ""});
  }
  v.push_back({"i40_report_resamples_int_max",
               {{"r.db", "@db:results"}},
               "report --db $D/r.db --out $D/rep --resamples 2147483647",
               "--resamples: must be in [1, 100000]",
               "rep"});
  {
    std::string call = "{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1";
    for (int i = 0; i < 100000; ++i) call += ", k" + std::to_string(i) + "=1";
    call += ") }}";
    auto files = model_files;
    files["model/tokenizer_config.json"] =
        nlohmann::json{{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"chat_template", call}}.dump();
    v.push_back({"i40_macro_100k_unknown_kwargs", files, "tokenize --model $D/model --chat --text hi",
                 "macro 'f' takes no keyword argument 'k0'", ""});
    files["model/tokenizer_config.json"] =
        nlohmann::json{{"chat_template", "{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}"}}.dump();
    v.push_back({"i40_macro_extra_positional", files, "tokenize --model $D/model --chat --text hi",
                 "macro 'f' takes not more than 1 argument(s)", ""});
  }
  // 7. Ambiguous or empty selections.
  for (const auto& [tag, args, err] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"compare_name_twice", "compare --db $D/r.db --baseline nightly --candidate 2",
            "run 'nightly': the name matches 2 runs (ids 1, 2); give a run id"},
           {"compare_latest_latest", "compare --db $D/r.db --baseline latest --candidate latest",
            "--baseline 'latest' and --candidate 'latest' are the same run (2)"},
           {"compare_2_2", "compare --db $D/r.db --baseline 2 --candidate 2", "are the same run (2)"},
           {"compare_previous_1", "compare --db $D/r.db --baseline previous --candidate 1", "are the same run (1)"},
           {"report_name_twice", "report --db $D/r.db --out $D/rep --run nightly", "the name matches 2 runs"}})
    v.push_back({"i40_" + tag, {{"r.db", "@db:two_nightly"}}, args, err, "rep"});
  for (const auto& [tag, args, err] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"verify_named_empty_dir", "datasets verify gsm8k --data-dir $D/empty",
            "datasets verify: gsm8k: no file of it in the data dirs"},
           {"verify_name_after_dir", "datasets verify --data-dir $D/empty gsm8k",
            "datasets verify: gsm8k: no file of it in the data dirs"},
           {"verify_all_empty_dir", "datasets verify --data-dir $D/empty",
            "datasets verify: no registered file in the data dirs"},
           {"verify_dir_missing", "datasets verify gsm8k --data-dir $D/nothere", "nothere: not a directory"},
           {"plan_only_backend", "bench --model-shape stories260k --plan-only --memory 1 --backend foo",
            "--backend foo: no such backend"},
           {"config_profile_empty", "run --config $D/c.yaml --config-profile '' --db $D/r.db",
            "--config-profile: empty name"},
           {"weights_stored_bf16",
            "run --task smoke --model $S/models/stories260K-hf --weights stored --bf16-weights "
            "--db $D/r.db",
            "--bf16-weights contradicts --weights stored"},
           {"weights_f32_bf16",
            "run --task smoke --model $S/models/stories260K-hf --weights f32 --bf16-weights "
            "--db $D/r.db",
            "--bf16-weights contradicts --weights f32"},
           {"task_template_empty", "tasks 'gsm8k:template='",
            "task spec 'gsm8k:template=': parameter 'template' has "
            "an empty value"},
           {"fidelity_text_empty", "fidelity --model $S/models/stories260K-hf --text $D/empty.txt",
            "empty.txt: empty file (no prompt"},
           {"fidelity_text_dir", "fidelity --model $S/models/stories260K-hf --text $D/empty",
            "empty: is a directory, not a file"}}) {
    std::string e = err;
    v.push_back({"i40_" + tag,
                 {{"empty/.keep", ""}, {"empty.txt", ""}, {"c.yaml", "run: {limit: 1}\ngpu_run: {limit: 2}\n"}},
                 args,
                 e,
                 "r.db",
                 "env -u KVB_DATA_DIR"});  // only the data dirs given count
  }
  // 8. Chat templates: not UTF-8; raise_exception with a newline (one line, escaped).
  {
    auto files = model_files;
    files["model/tokenizer_config.json"] = R"({"bos_token": "<s>", "eos_token": "</s>"})";
    files["model/chat_template.jinja"] = "{{ messages[0].content }}caf\xe9";
    v.push_back({"i40_chat_template_jinja_not_utf8", files, "tokenize --model $D/model --chat --text hi",
                 "model/chat_template.jinja: not valid UTF-8 (byte 28 of the template)", ""});
    files.erase("model/chat_template.jinja");
    files["model/tokenizer_config.json"] =
        nlohmann::json{{"chat_template", "{{ raise_exception('first line\\nsecond line') }}"}}.dump();
    v.push_back({"i40_raise_exception_newline", files, "tokenize --model $D/model --chat --text hi",
                 "raise_exception: first line\\nsecond line", ""});
  }
  // 8. Dataset records that could only give wrong prompts or wrong scores.
  const std::string lme =
      R"([{"question_id": "q1", "question_type": "t", "question": "q", "question_date": "2023/01/01", )"
      R"("answer": "a", "haystack_dates": ["2023/01/01"], "haystack_sessions": [[{"role": "user", "content": "hi"}, 5]]}])";
  v.push_back({"i40_longmemeval_turn_number",
               {{"data/longmemeval/longmemeval_oracle.json", lme}},
               "tasks longmemeval_oracle --data-dir $D/data --count",
               "haystack_sessions[0][1]: expected a turn {\"role\": string, \"content\": string}, got number",
               ""});
  v.push_back(
      {"i40_repoqa_turn_without_name",
       {{"data/scbench/scbench_repoqa.jsonl",
         R"({"id": 1, "context": "c", "lang": "python", "repo": "x/y", "multi_turns": [{"input": "q", "answer": "def f(): pass"}]})"
         "\n"}},
       "tasks scbench_repoqa --data-dir $D/data --count",
       "multi_turns[0]: field 'name': a repoqa turn needs the name of the function",
       ""});
  // 8. Results databases damaged outside kvbench: one line, nothing written, no report folder.
  for (const auto& [kind, err] : std::vector<std::pair<std::string, std::string>>{
           {"grades_dropped", "r.db: table 'grades' is missing"},
           {"column_renamed", "r.db: table 'grades': column 'score' is missing"},
           {"no_tables_app", "r.db: table '"}}) {
    v.push_back({"i40_db_report_" + kind, {{"r.db", "@db:" + kind}}, "report --db $D/r.db --out $D/rep", err, "rep"});
    v.push_back({"i40_db_grade_" + kind, {{"r.db", "@db:" + kind}}, "grade --db $D/r.db", err, ""});
    v.push_back(
        {"i40_db_compare_" + kind, {{"r.db", "@db:" + kind}}, "compare --db $D/r.db --baseline 1 --candidate 2", err, ""});
  }
  v.push_back({"i40_db_report_view_dropped",
               {{"r.db", "@db:view_dropped"}},
               "report --db $D/r.db --out $D/rep",
               "r.db: view 'v_samples' is missing",
               "rep"});
  v.push_back({"i40_db_compare_score_inf",
               {{"r.db", "@db:two_nightly_inf"}},
               "compare --db $D/r.db --baseline 1 --candidate 2",
               "score inf is not in [0, 1]",
               ""});
  v.push_back({"i40_db_compare_score_text",
               {{"r.db", "@db:two_nightly_text"}},
               "compare --db $D/r.db --baseline 1 --candidate 2",
               "column 'score': expected a number, found 'high'",
               ""});
  // Issue 40, item 5: every file input is a regular file within its kind's cap
  // (engine/util/io.h open_input; docs/robustness.md "Input caps"): devices, FIFOs (never waited
  // on), symlink loops and sparse multi-gigabyte files are refused by type or size before a read.
  const std::string model = "$S/models/stories260K-hf";
  const std::string fid = "fidelity --model " + model + " --policies full --max-new-tokens 2";
  const std::string tok = "tokenize --model " + model + " --messages ";
  const std::string loop = "@symlink:loop_b";
  struct In40 {
    std::string name, file, content, args, expect;
    int exit_code = 2;
  };
  for (const In40& c : std::vector<In40>{
           {"suite_dev_zero", "", "", "tasks --suite /dev/zero", "/dev/zero: is a character device, not a regular file"},
           {"suite_fifo", "s.yaml", "@fifo", "tasks --suite $D/s.yaml", "s.yaml: is a FIFO, not a regular file"},
           {"suite_sparse", "s.yaml", "@sparse:3000000000", "tasks --suite $D/s.yaml",
            "s.yaml: 3000000000 bytes is over the 16 MiB limit for YAML files"},
           {"suite_symlink_loop", "s.yaml", loop, "tasks --suite $D/s.yaml", "Too many levels of symbolic links"},
           {"messages_dev_urandom", "", "", tok + "/dev/urandom", "/dev/urandom: is a character device"},
           {"messages_fifo", "m.json", "@fifo", tok + "$D/m.json", "m.json: is a FIFO"},
           {"messages_sparse", "m.json", "@sparse:2200000000", tok + "$D/m.json", "over the 64 MiB limit"},
           {"messages_dir", "m.json", "@dir", tok + "$D/m.json", "m.json: is a directory"},
           {"prompts_dev_zero", "", "", fid + " --prompts /dev/zero", "/dev/zero: is a character device"},
           {"prompts_fifo", "p.txt", "@fifo", fid + " --prompts $D/p.txt", "p.txt: is a FIFO"},
           {"text_sparse", "t.txt", "@sparse:2500000000", fid + " --text $D/t.txt", "over the 64 MiB limit"},
           {"text_symlink_loop", "t.txt", loop, fid + " --text $D/t.txt", "Too many levels of symbolic links"},
           {"verify_fifo", "data/gsm8k/test.jsonl", "@fifo", "datasets verify gsm8k --data-dir $D/data",
            "test.jsonl: is a FIFO"},
           {"verify_symlink_loop", "data/gsm8k/test.jsonl", "@symlink:test.jsonl",
            "datasets verify gsm8k --data-dir $D/data", "Too many levels of symbolic links"},
           {"verify_sparse", "data/gsm8k/test.jsonl", "@sparse:3000000000", "datasets verify gsm8k --data-dir $D/data",
            "datasets verify: hash mismatch", 1},
           {"data_jsonl_sparse_line", "data/gsm8k/test.jsonl", "@sparse:3000000000",
            "tasks gsm8k --data-dir $D/data --show 1", "line 1: longer than the 256 MiB limit for data records"},
           {"data_fifo", "data/gsm8k/test.jsonl", "@fifo", "tasks gsm8k --data-dir $D/data --show 1",
            "gsm8k/test.jsonl: not found in data directories"},  // a FIFO is not a data file
       }) {
    std::map<std::string, std::string> files;
    if (!c.file.empty()) files[c.file] = c.content;
    if (c.content == loop) files["loop_b"] = "@symlink:" + c.file;  // s.yaml -> loop_b -> s.yaml
    v.push_back({"in40_" + c.name, files, c.args, c.expect, "", "", c.exit_code});
  }
  // Issue 46, item 5: a FIFO named as a learned policy's weights is refused by type, never read
  // (GateWeights::load's first look at the file went through a blocking ifstream).
  for (const auto& [tag, spec, file] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"dms_alpha", "dms:alpha=$D/w.safetensors", "w.safetensors"},
           {"trimkv_pth", "trimkv:gates=$D/g.pth", "g.pth"},
           {"trimkv_safetensors", "trimkv:gates=$D/g.safetensors", "g.safetensors"},
           {"kvzap_scorer", "kvzap:scorer=$D/s.safetensors", "s.safetensors"},
           {"triattention_stats", "triattention:stats=$D/s.safetensors", "s.safetensors"},
           {"locret_heads", "locret:heads=$D/h.pth", "h.pth"},
           {"wgkv_gates", "wgkv:gates=$D/g.pt", "g.pt"}})
    v.push_back({"in46_policy_weights_fifo_" + tag,
                 {{file, "@fifo"}},
                 "generate --model $S/models/stories260K-hf --prompt hi --max-new-tokens 2 --budget 16 --policy " + spec,
                 file + ": is a FIFO, not a regular file",
                 "",
                 "",
                 2,
                 5});  // refused at once, never waited on
  // Issue 46, item 3: a path a dataset record supplies (LongProc's html_path) stays inside its
  // data directory after symlinks are resolved: absolute, climbing and linked-out paths are refused.
  for (const auto& [tag, html_path, expect] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"absolute", "/etc/hostname", "'/etc/hostname' must be a relative path inside the data directory"},
           {"dotdot", "../../../secret.html", "'../../../secret.html' resolves outside the data directory"},
           {"symlink_out", "webpage/link.html", "'webpage/link.html' resolves outside the data directory"}}) {
    const std::string rec = R"([{"output_length_group": "0.5k", "task_id": "t", "website_id": "w", "html_path": ")" +
                            html_path +
                            R"(", "task_topic": "a", "task_description": "b", "filtering_instruction": "c",
                               "tsv_header": "h", "gt": "x"}])";
    v.push_back({"in46_longproc_html_path_" + tag,
                 {{"secret.html", "secret\n"},
                  {"data/longproc/html_to_tsv/prompts.yaml", "@shared:datasets/longproc/html_to_tsv/prompts.yaml"},
                  {"data/longproc/html_to_tsv/webpage/link.html", "@symlink:../../../../secret.html"},
                  {"data/longproc/html_to_tsv/html_to_tsv_0.5k.json", rec}},
                 "tasks longproc_html_to_tsv_0.5k --data-dir $D/data --show 1",
                 "field 'html_path': " + expect,
                 ""});
  }
  // Issue 46, item 7: weights and statistics that are not numbers, or made for another model.
  const float kNan = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();
  const std::string gen46 = "generate --model $S/models/stories260K-hf --prompt hi --max-new-tokens 2 ";
  const std::string dms_alpha = "model.layers.0.self_attn.dms_proj_alpha.weight";  // what dms reads
  for (const auto& [tag, spec, tensor, value, expect] :
       std::vector<std::tuple<std::string, std::string, std::string, float, std::string>>{
           {"dms_nan", "--policy dms:alpha=$D/w.safetensors", dms_alpha, kNan, "element 0 is NaN"},
           {"kvzap_inf", "--policy kvzap:scorer=$D/w.safetensors", "layers.0.bias", kInf, "element 0 is inf"},
           {"trimkv_minus_inf", "--budget 16 --policy trimkv:gates=$D/w.safetensors", "layers.0.bias", -kInf,
            "element 0 is -inf"},
           {"triattention_nan", "--budget 16 --policy triattention:stats=$D/w.safetensors", "layers.0.bias", kNan,
            "element 0 is NaN"}})
    v.push_back({"in46_weights_" + tag,
                 {{"w.safetensors", f32_safetensors({{tensor, {4, 64}}}, value)}},
                 gen46 + spec,
                 "w.safetensors: tensor " + tensor + ": " + expect,
                 ""});
  // Issue 45: RestoreKV's PEFT adapter folder: what kvbench does not apply is refused, naming the file.
  {
    const std::string lora_a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
                      lora_b = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight";
    const nlohmann::json lora_cfg = {
        {"peft_type", "LORA"}, {"r", 4}, {"lora_alpha", 8}, {"target_modules", {"q_proj"}}, {"bias", "none"}};
    nlohmann::json dora = lora_cfg;
    dora["use_dora"] = true;
    const std::string emb = f32_safetensors({{"restore_embeddings", {8, 64}}}, 0.5f);
    v.push_back({"in45_restorekv_dora",
                 {{"a/adapter_config.json", dora.dump()},
                  {"a/adapter_model.safetensors", f32_safetensors({{lora_a, {4, 64}}, {lora_b, {64, 4}}}, 0.5f)},
                  {"a/restore_embeddings.safetensors", emb}},
                 gen46 + "--policy restorekv:ratio=0.5,adapter=$D/a",
                 "adapter_config.json: use_dora: set: not supported",
                 ""});
    v.push_back(
        {"in45_restorekv_not_lora",
         {{"a/adapter_config.json", lora_cfg.dump()},
          {"a/adapter_model.safetensors",
           f32_safetensors({{lora_a, {4, 64}}, {lora_b, {64, 4}}, {"base_model.model.lm_head.weight", {4, 64}}}, 0.5f)},
          {"a/restore_embeddings.safetensors", emb}},
         gen46 + "--policy restorekv:ratio=0.5,adapter=$D/a",
         "adapter_model.safetensors: base_model.model.lm_head.weight: not a LoRA weight",
         ""});
  }
  v.push_back({"in46_triattention_negative_abs_mean",
               {{"s.safetensors", tri_stats(5, -1.0f)}},
               gen46 + "--budget 16 --policy triattention:stats=$D/s.safetensors",
               "s.safetensors: tensor layer00_head00.q_abs_mean: element 0 is -1: a mean modulus cannot be negative",
               ""});
  v.push_back({"in46_triattention_other_layer_count",
               {{"s.safetensors", tri_stats(2, 0.5f)}},
               gen46 + "--budget 16 --policy triattention:stats=$D/s.safetensors",
               "s.safetensors: tensors: the statistics cover 2 decoder layers; this model has 5",
               ""});
  v.push_back(
      {"in46_kvzap_other_layer_count",
       {{"s.safetensors",
         f32_safetensors(
             {{"layers.0.bias", {4}}, {"layers.0.weight", {4, 64}}, {"layers.1.bias", {4}}, {"layers.1.weight", {4, 64}}},
             0.0f)}},
       gen46 + "--policy kvzap:scorer=$D/s.safetensors",
       "s.safetensors: tensors: the scorers cover 2 decoder layers; this model has 5",
       ""});
  // A budget the policy would not read is said, not ignored.
  v.push_back({"in46_generate_budget_dms",
               {},
               gen46 + "--policy dms:random_alpha=1 --budget 8",
               "--budget: policy 'dms' takes no budget",
               ""});
  v.push_back({"in46_generate_budget_threshold",
               {},
               gen46 + "--policy snapkv:budget_kind=threshold,threshold=0.5 --budget 8",
               "--budget: policy 'snapkv' with budget_kind=threshold",
               ""});
  // A template file's invalid UTF-8 is blamed on the template, not on the data it renders.
  v.push_back({"in46_template_invalid_utf8",
               {{"t.txt", "Solve \xff\xfe {question}\n"}},
               "tasks gsm8k:template=file:$D/t.txt --data-dir $S/datasets --show 1",
               "t.txt: math prompt template is not valid UTF-8",
               ""});
  // A pool that holds no page is refused before the database is opened (no run row left).
  v.push_back({"in46_memory_below_one_page",
               {},
               "run --task gsm8k --data-dir $S/datasets --model $S/models/stories260K-hf --limit 1 --memory 0.0000001 "
               "--db $D/r.db",
               "--memory: 107 bytes hold no KV page of 1088 bytes",
               "r.db"});
  // Issue 46, item 7: an option that would be ignored is an error.
  v.push_back({"in46_admission_without_memory",
               {},
               "run --task gsm8k --data-dir $S/datasets --model $S/models/stories260K-hf --limit 1 --admission "
               "optimistic --db $D/r.db",
               "--admission: applies only with --memory",
               "r.db"});
  // A step bound below one prompt chunk is refused before the database is opened.
  v.push_back({"in46_max_step_tokens_below_chunk",
               {},
               "run --task gsm8k --data-dir $S/datasets --model $S/models/stories260K-hf --limit 1 --max-step-tokens 10 "
               "--db $D/r.db",
               "--max-step-tokens 10 is smaller than --prefill-chunk 512",
               "r.db"});
  // Model files: config.json, tokenizer.json, the chat template and the weights.
  const std::map<std::string, std::string> model_dir = {
      {"model/config.json", "@config"},
      {"model/model.safetensors", "@shared:models/stories260K-hf/model.safetensors"},
      {"model/tokenizer.json", "@shared:models/stories260K-hf/tokenizer.json"}};
  for (const auto& [tag, file, content, expect] :
       std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
           // A FIFO is not a regular file: the model directory has no config.json to read.
           {"config_fifo", "model/config.json", "@fifo", "not a model directory (no config.json)"},
           {"tokenizer_sparse", "model/tokenizer.json", "@sparse:600000000", "over the 256 MiB limit for tokenizer.json"},
           {"tokenizer_fifo", "model/tokenizer.json", "@fifo", "no tokenizer.json, cannot tokenize"},
           {"weights_fifo", "model/model.safetensors", "@fifo", "no model.safetensors"},
           {"template_fifo", "model/chat_template.jinja", "@fifo", "chat_template: missing"},
           {"template_sparse", "model/chat_template.jinja", "@sparse:100000000", "over the 4 MiB limit for template"}}) {
    auto files = model_dir;
    files[file] = content;
    v.push_back(
        {"in40_model_" + tag, files, "generate --model $D/model --chat --prompt hi --max-new-tokens 2", expect, ""});
  }
  // Issue 40, item 2: the output policy (engine/util/io.h check_output_path, write_output_file).
  const std::string bench = "bench --context 8 --gen 2 --warmup 0";
  auto with_model = [&](std::map<std::string, std::string> f) {
    for (const auto& kv : model_dir) f.insert(kv);
    return f;
  };
  v.push_back({"out40_bench_json_is_model_config", with_model({}),
               bench + " --model $D/model --json $D/model/config.json", "is a file of the input directory", ""});
  v.push_back({"out40_bench_json_is_weights", with_model({}),
               bench + " --model $D/model --json $D/model/model.safetensors", "is a file of the input directory", ""});
  v.push_back({"out40_bench_json_is_gguf",
               {{"m.gguf", "GGUF? not read before the check"}},
               bench + " --model $D/m.gguf --json $D/./m.gguf",
               "is also an input",
               ""});
  v.push_back({"out40_bench_json_dev_null",
               {},
               bench + " --model-shape stories260k --json /dev/null",
               "--json /dev/null: is a character device, not a regular file",
               ""});
  v.push_back({"out40_bench_json_fifo",
               {{"o.json", "@fifo"}},
               bench + " --model-shape stories260k --json $D/o.json",
               "o.json: is a FIFO",
               ""});
  v.push_back({"out40_bench_json_symlink_to_device",
               {{"null", "@symlink:/dev/null"}},
               bench + " --model-shape stories260k --json $D/null",
               "is a symbolic link",
               ""});
  v.push_back({"out40_bench_json_dir",
               {{"o.json", "@dir"}},
               bench + " --model-shape stories260k --json $D/o.json",
               "o.json: is a directory",
               ""});
  v.push_back(
      {"out40_bench_json_no_folder", {}, bench + " --model-shape stories260k --json $D/nope/o.json", "folder", "nope"});
  // /bin/sh's `ulimit -f` counts 512-byte blocks. The limit is 2 blocks, not 1: the sanitizer build's
  // OpenMP runtime (clang's libomp) sizes a 1,024-byte shared-memory registration file at start-up
  // and aborts below that, before kvbench runs. A row with its --memory plan (about 1.1 KB of
  // JSON) is past the 1,024 bytes.
  v.push_back({"out40_bench_json_ulimit",
               {},
               bench + " --model-shape stories260k --memory 0.001 --json $D/o.json",
               "o.json: write failed (File too large)",
               "o.json",
               "ulimit -f 2;",
               1});
  v.push_back({"out40_fidelity_json_is_dataset",
               {{"data/gsm8k/test.jsonl", "@shared:datasets/gsm8k/test.jsonl"}, {"p.txt", "Once upon a time\n"}},
               fid + " --prompts $D/p.txt --data-dir $D/data --json $D/data/gsm8k/test.jsonl",
               "is a file of the input directory",
               ""});
  v.push_back({"out40_fidelity_json_dev_null",
               {{"p.txt", "Once upon a time\n"}},
               fid + " --prompts $D/p.txt --json /dev/null",
               "is a character device",
               ""});
  v.push_back({"out40_run_db_is_config",
               {{"c.yaml", "run: {limit: 1}\n"}},
               run_smoke + " --config $D/c.yaml --db $D/c.yaml",
               "--db ",
               ""});
  v.push_back({"out40_run_db_dev_null", {}, run_smoke + " --db /dev/null", "is a character device", ""});
  v.push_back({"out40_run_db_fifo", {{"r.db", "@fifo"}}, run_smoke + " --db $D/r.db", "r.db: is a FIFO", ""});
  v.push_back({"out40_merge_out_is_input", {{"r.db", "@db:results"}}, "merge $D/r.db $D/r.db", "is also an input", ""});
  v.push_back({"out40_datasets_fetch_fifo",
               {{"data/gsm8k/test.jsonl", "@fifo"}},
               "datasets fetch gsm8k --data-dir $D/data",
               "test.jsonl: is a FIFO",
               ""});
  return v;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class Hostile : public ::testing::TestWithParam<Case> {};

TEST_P(Hostile, OneErrorLineExitTwoNoSideEffects) {
  const Case& c = GetParam();
  const fs::path dir = kvb::test::temp_dir("hostile");  // kvb_hostile_<pid>_<test>_<case>
  for (const auto& [rel, content] : c.files) {
    const fs::path p = dir / rel;
    fs::create_directories(p.parent_path());
    if (content == "@config" || content.rfind("@shared:", 0) == 0) {
      const std::string from = content == "@config" ? "models/stories260K-hf/config.json" : content.substr(8);
      const fs::path src = fs::path(KVB_TEST_DATA_DIR) / from;
      ASSERT_TRUE(fs::exists(src)) << "the stories260K model is part of tests/data (cmake unpacks it): " << src;
      fs::copy_file(src, p);
    } else if (content.rfind("@st+:", 0) == 0) {
      const fs::path src = fs::path(KVB_TEST_DATA_DIR) / "models/stories260K-hf/model.safetensors";
      ASSERT_TRUE(fs::exists(src)) << src;
      std::ofstream(p, std::ios::binary) << with_extra_tensors(src, content.substr(5));
    } else if (content.rfind("@tok:", 0) == 0) {
      const fs::path src = fs::path(KVB_TEST_DATA_DIR) / "models/stories260K-hf/tokenizer.json";
      ASSERT_TRUE(fs::exists(src)) << src;
      nlohmann::json t = nlohmann::json::parse(std::ifstream(src));
      tokenizer_mutations().at(content.substr(5))(t);
      std::ofstream(p, std::ios::binary) << t.dump();
    } else if (content.rfind("@gguf:", 0) == 0) {
      std::string b = slurp(fs::path(KVB_SOURCE_DIR) / "tests/fixtures/gguf/stories260K.gguf");
      ASSERT_GT(b.size(), 100000u);
      gguf_mutations().at(content.substr(6))(b);
      std::ofstream(p, std::ios::binary) << b;
    } else if (content.rfind("@symlink:", 0) == 0) {  // a symbolic link to the given target
      fs::create_symlink(content.substr(9), p);
    } else if (content == "@fifo") {  // a named pipe nobody writes to
      ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0) << p;
    } else if (content == "@dir") {
      fs::create_directories(p);
    } else if (content.rfind("@sparse:", 0) == 0) {  // a sparse file of that many bytes (zeros)
      std::ofstream(p, std::ios::binary).close();
      fs::resize_file(p, std::stoull(content.substr(8)));
    } else if (content.rfind("@db:", 0) == 0) {
      make_db(p, content.substr(4));
      if (HasFatalFailure()) return;
    } else {
      std::ofstream(p, std::ios::binary) << content;
    }
  }
  // Inputs are never written to: every file is compared byte for byte after the command (a FIFO,
  // directory, link or sparse file by its type and size, without reading it).
  std::map<fs::path, std::string> before;
  auto shape = [](const fs::path& p) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) return std::string("missing");
    return std::to_string(st.st_mode) + " " + std::to_string(st.st_size);
  };
  auto special = [](const std::string& c) {
    for (const char* g : {"@fifo", "@dir", "@sparse:", "@symlink:"})
      if (c.rfind(g, 0) == 0) return true;
    return false;
  };
  for (const auto& [rel, content] : c.files)
    before[dir / rel] = special(content) ? "shape:" + shape(dir / rel) : slurp(dir / rel);
  std::string args = c.args;
  for (size_t at; (at = args.find("$D")) != std::string::npos;) args.replace(at, 2, dir.string());
  for (size_t at; (at = args.find("$S")) != std::string::npos;) args.replace(at, 2, KVB_TEST_DATA_DIR);
  const std::string out_file = (dir / "stderr.txt").string();  // stdout may hold a table; not checked
  // Under the sanitizer build LeakSanitizer would append its "Suppressions used" table (CLN's
  // static allocations) to stderr; the one-line contract is about kvbench's own output.
  std::string prefix = c.prefix;
  for (size_t at; (at = prefix.find("$D")) != std::string::npos;) prefix.replace(at, 2, dir.string());
  const std::string cmd = prefix + (prefix.empty() ? "" : " ") + "LSAN_OPTIONS=print_suppressions=0 timeout " +
                          std::to_string(static_cast<int>(60 * kvb::test::time_scale())) + " " +
                          std::string(KVB_BINARY) + " " + args + " > /dev/null 2> " + out_file;
  const auto t0 = std::chrono::steady_clock::now();
  const int status = std::system(cmd.c_str());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status)) << cmd;
  const int rc = WEXITSTATUS(status);
  if (c.max_seconds > 0) EXPECT_LT(seconds, c.max_seconds * kvb::test::time_scale()) << cmd;
  std::ifstream in(out_file);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_EQ(rc, c.exit_code) << cmd << "\n" << all;
  ASSERT_EQ(lines.size(), 1u) << all;
  if (std::getenv("KVB_HOSTILE_SHOW")) std::printf("%-40s %s\n", c.name.c_str(), lines[0].c_str());  // for review
  EXPECT_EQ(lines[0].rfind("kvbench: error: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(c.expect), std::string::npos) << "expected '" << c.expect << "' in: " << lines[0];
  EXPECT_EQ(lines[0].find("internal error"), std::string::npos) << lines[0];
  if (!c.must_not_exist.empty()) EXPECT_FALSE(fs::exists(dir / c.must_not_exist)) << c.must_not_exist << " was created";
  for (const auto& [path, bytes] : before) {
    if (bytes.rfind("shape:", 0) == 0) {
      EXPECT_EQ("shape:" + shape(path), bytes) << path << " was replaced by the command";
      continue;
    }
    EXPECT_TRUE(slurp(path) == bytes) << path << " was changed by the command";
    EXPECT_FALSE(fs::exists(path.string() + "-wal")) << path << "-wal was left behind";
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Inputs, Hostile, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// Hostile inputs that are not errors: the command must succeed (exit 0) within `max_seconds`
// and its stdout must contain `expect` (check-answer's verdict is its last line) — a non-finite
// or huge number graded as wrong, work bounded in time and memory (issue 40).
struct Verdict {
  std::string name;
  std::map<std::string, std::string> files;  // relative path -> content, written under $D
  std::vector<std::string> argv;             // kvbench arguments, passed without a shell ($D, $S expanded)
  std::string expect;                        // substring of stdout
  double max_seconds = 20;
};

void PrintTo(const Verdict& c, std::ostream* os) { *os << c.name; }

std::vector<Verdict> verdicts() {
  auto ca = [](const std::string& grader, const std::string& gold, const std::string& pred) {
    return std::vector<std::string>{"check-answer", "--grader", grader, "--gold", gold, "--pred", pred};
  };
  std::string thousands = "1,000";  // "1,000,1,000,..." (100 KB): one number of 80,000 digits
  while (thousands.size() < 100000) thousands += ",1,000";
  std::string words_a, words_b;  // 26,000 words a side, no period: one sentence each
  for (int i = 0; i < 26000; ++i) {
    words_a += i ? " a" : "a";
    words_b += i ? " b" : "b";
  }
  std::string zh;  // 40,000 Chinese characters (120 KB)
  for (int i = 0; i < 40000; ++i) zh += "\xe4\xb8\xad";
  const std::string line_a(115000, 'x'), line_b(115000, 'y');
  std::vector<Verdict> v = {
      // 4. Infinity is no answer: "1e400" parses beyond double range.
      {"gsm8k_1e400", {}, ca("gsm8k", "#### 18", "The answer is 1e400"), "\n0\n"},
      {"gsm8k_minus_1e400", {}, ca("gsm8k", "#### -18", "The answer is -1e400"), "\n0\n"},
      {"math_boxed_1e400", {}, ca("math", "18", "so \\boxed{1e400}"), "\n0\n"},
      {"math_boxed_1e400_vs_huge", {}, ca("math", "1e300", "so \\boxed{1e400}"), "\n0\n"},
      {"gsm8k_thousands_100kb", {}, ca("gsm8k", "#### 1000", "The answer is " + thousands), "\n0\n"},
      {"math_thousands_100kb", {}, ca("math", "1000", thousands), "\n0\n"},
      // Huge integers compare exactly (a double cannot tell 10^20 + 1 from 10^20) ...
      {"gsm8k_int_2_pow_64_plus_1", {}, ca("gsm8k", "#### 18446744073709551617", "18446744073709551616"), "\n0\n"},
      {"math_int_1e20_plus_1", {}, ca("math", "100000000000000000000", "\\boxed{100000000000000000001}"), "\n0\n"},
      // ... and equal ones still match.
      {"gsm8k_int_2_pow_64_same", {}, ca("gsm8k", "#### 18446744073709551617", "18446744073709551617"), "\n1\n"},
      {"math_int_1e20_same", {}, ca("math", "100000000000000000000", "\\boxed{0100000000000000000000}"), "\n1\n"},
      // 6. Work without bounds: a cap (score 0) or linear time.
      {"rouge_26000_words", {}, ca("longbench.rouge", words_a, words_b), "\n0\n"},
      {"rouge_26000_same_words", {}, ca("longbench.rouge", words_a, words_a), "\n0\n"},
      // Below the cap (8,192 words a side) the score is computed: one sentence of 8,000 words each.
      {"rouge_8000_words",
       {},
       ca("longbench.rouge", words_a.substr(0, 16000 - 1), words_a.substr(0, 16000 - 1)),
       "\n1.0000\n"},
      {"rouge_zh_40000_chars", {}, ca("longbench.rouge_zh", zh, zh), "\n0\n"},
      {"code_sim_115kb_lines", {}, ca("longbench.code_sim", line_a, line_b), "\n0\n"},
  };
  // 100,000 chat messages: JSON parsing was quadratic (nlohmann's callback parser).
  std::string msgs = "[";
  for (int i = 0; i < 100000; ++i)
    msgs += std::string(i ? "," : "") + R"({"role": ")" + (i % 2 ? "assistant" : "user") + R"(", "content": "hi"})";
  v.push_back({"tokenize_100k_messages",
               {{"m.json", msgs + "]"}},
               {"tokenize", "--model", "$S/tokenizers/llama3_1", "--messages", "$D/m.json"},
               "===== TOKENS (",
               30});
  for (auto& c : v) c.name = "i40_" + c.name;
  // Issue 46, item 2: multi-turn sessions (SCBench-like: six sessions of four turns over a short
  // context) under optimistic admission in a pool that holds one whole session and a half. Reserve
  // admission finishes them; optimistic admission used to run two sessions into their later turns
  // together and dead-end with "can be preempted no further" (checked: it did at 0.0006 and
  // 0.0008 GiB before the fix).
  std::string sessions;
  for (int r = 0; r < 6; ++r) {
    std::string ctx = "{";
    for (int k = 0; k < 6; ++k)
      ctx += std::string(k ? ", " : "") + "\"k" + std::to_string(r * 100 + k) + "\": \"v" + std::to_string(k) + "\"";
    nlohmann::json turns = nlohmann::json::array();
    for (int t = 0; t < 4; ++t)
      turns.push_back({{"input", "Key: \"k" + std::to_string(r * 100 + t) +
                                     "\"\nThe value associated with the specified key in the object above is: "},
                       {"answer", "v" + std::to_string(t)}});
    sessions += nlohmann::json{{"id", r}, {"context", ctx + "}"}, {"multi_turns", turns}}.dump() + "\n";
  }
  v.push_back({"i46_multiturn_optimistic_tiny_pool",
               {{"data/scbench/scbench_kv.jsonl", sessions}},
               {"run", "--task", "scbench_kv", "--data-dir", "$D/data", "--model", "$S/models/stories260K-hf",
                "--policies", "full", "--memory", "0.0008", "--admission", "optimistic", "--max-new-tokens", "24",
                "--quiet", "--db", "$D/r.db"},
               "scbench_kv",
               20});
  return v;
}

class HostileVerdict : public ::testing::TestWithParam<Verdict> {};

TEST_P(HostileVerdict, ExitZeroInTimeWithTheVerdict) {
  const Verdict& c = GetParam();
  const fs::path dir = kvb::test::temp_dir("verdict");  // kvb_verdict_<pid>_<test>_<case>
  for (const auto& [rel, content] : c.files) {
    fs::create_directories((dir / rel).parent_path());
    std::ofstream(dir / rel, std::ios::binary) << content;
  }
  // Arguments go through execv, not a shell: they hold backslashes, quotes and 120 KB.
  std::vector<std::string> args = {KVB_BINARY};
  for (std::string a : c.argv) {
    for (size_t at; (at = a.find("$D")) != std::string::npos;) a.replace(at, 2, dir.string());
    for (size_t at; (at = a.find("$S")) != std::string::npos;) a.replace(at, 2, KVB_TEST_DATA_DIR);
    args.push_back(a);
  }
  const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::vector<char*> cargv;
    for (auto& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    if (!std::freopen(out.c_str(), "w", stdout) || !std::freopen(err.c_str(), "w", stderr)) _exit(127);
    ::alarm(static_cast<unsigned>(4 * c.max_seconds * kvb::test::time_scale()));  // a hang fails, not sticks
    ::execv(cargv[0], cargv.data());
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string stdout_text = slurp(out), stderr_text = slurp(err);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << "\n" << stderr_text;
  EXPECT_EQ(WEXITSTATUS(status), 0) << stderr_text;
  EXPECT_NE(stdout_text.find(c.expect), std::string::npos)
      << "expected '" << c.expect << "' in stdout:\n"
      << stdout_text.substr(stdout_text.size() > 2000 ? stdout_text.size() - 2000 : 0);
  EXPECT_LT(seconds, c.max_seconds * kvb::test::time_scale()) << "took " << seconds << " s";
  if (std::getenv("KVB_HOSTILE_SHOW")) std::printf("%-40s %.2f s\n", c.name.c_str(), seconds);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Inputs, HostileVerdict, ::testing::ValuesIn(verdicts()),
                         [](const ::testing::TestParamInfo<Verdict>& i) { return i.param.name; });

}  // namespace
