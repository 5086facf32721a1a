// Hostile inputs between two runs (issue 46, item 1): every file a run reads besides the model
// and the dataset — a task's template file, a LongProc webpage, a learned policy's weights or its
// metadata, the shards a model's index names — is part of the run's input identity. Each case runs
// `kvbench run` once (exit 0, the file listed in run_inputs with its role), rewrites that one file,
// and runs the same command again: the second run must refuse with one `kvbench: error: <file>:
// content changed since run 1 (<role> ...` line and exit 2, leaving the results database byte for
// byte as the first run left it (no item of the new input mixed into the old run). All cases run
// the stories260K model of tests/data for one example and two new tokens.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace fs = std::filesystem;

namespace {

struct Rerun {
  std::string name;
  // Relative path -> content, or "@copy:REL" (a copy of the test data's REL, tests/data).
  std::map<std::string, std::string> files;
  std::string args;     // kvbench arguments after `run`; $D = the case's directory, $S = the test data
  std::string changed;  // the file (relative to $D) rewritten between the two runs
  std::string role;     // its role in run_inputs
  // Its new content: "@flip" changes the last byte before the end of the file's first 4-byte
  // float of data (a safetensors file stays valid and finite), else the new text.
  std::string rewrite;
};

/// A safetensors file of F32 zeros holding `tensors` (name -> shape).
std::string zero_safetensors(const std::map<std::string, std::vector<int64_t>>& tensors) {
  nlohmann::json h = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& [name, shape] : tensors) {
    uint64_t n = 4;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    h[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  const std::string head = h.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((head.size() >> (8 * i)) & 0xff);
  return out + head + std::string(off, '\0');
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// The byte offset of the first tensor data byte of a safetensors file.
size_t data_start(const std::string& st) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(st[i])) << (8 * i);
  return 8 + static_cast<size_t>(n);
}

std::vector<Rerun> reruns() {
  const int L = 5, Hk = 4, H = 64;  // stories260K: 5 layers, 4 kv heads, hidden size 64
  std::map<std::string, std::vector<int64_t>> kvzap, dms;
  for (int l = 0; l < L; ++l) {
    kvzap["layers." + std::to_string(l) + ".weight"] = {Hk, H};
    kvzap["layers." + std::to_string(l) + ".bias"] = {Hk};
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    dms[p + "dms_proj_alpha.weight"] = {Hk, H};
    dms[p + "dms_proj_alpha_norm.weight"] = {H};
  }
  std::string pattern;  // DuoAttention: one row per layer, one column per kv head
  for (int l = 0; l < L; ++l) pattern += "1\t0\t1\t0\n";
  const std::string gsm8k = "--task gsm8k --data-dir $S/datasets --model $S/models/stories260K-hf";
  const std::string record = R"([{"output_length_group": "0.5k", "task_id": "t", "website_id": "w",
      "html_path": "webpage/p.html", "task_topic": "a", "task_description": "b",
      "filtering_instruction": "c", "tsv_header": "h", "gt": "x"}])";
  const std::string model = "@copy:models/stories260K-hf/";
  return {
      {"template_file",
       {{"t.txt", "Solve: {question}\n"}},
       "--task gsm8k:template=file:$D/t.txt --data-dir $S/datasets --model $S/models/stories260K-hf --policies full",
       "t.txt",
       "template",
       "Answer this: {question}\n"},
      {"longproc_webpage",
       {{"data/longproc/html_to_tsv/prompts.yaml", "@copy:datasets/longproc/html_to_tsv/prompts.yaml"},
        {"data/longproc/html_to_tsv/html_to_tsv_0.5k.json", record},
        {"data/longproc/html_to_tsv/webpage/p.html", "<html><body><p>one</p></body></html>\n"}},
       "--task longproc_html_to_tsv_0.5k:sample=all --data-dir $D/data --model $S/models/stories260K-hf --policies full",
       "data/longproc/html_to_tsv/webpage/p.html",
       "data_record",
       "<html><body><p>two</p></body></html>\n"},
      {"kvzap_scorer",
       {{"s.safetensors", zero_safetensors(kvzap)}},
       gsm8k + " --policies kvzap:scorer=$D/s.safetensors",
       "s.safetensors",
       "policy_weights",
       "@flip"},
      {"dms_alpha",
       {{"a.safetensors", zero_safetensors(dms)}},
       gsm8k + " --policies dms:alpha=$D/a.safetensors",
       "a.safetensors",
       "policy_weights",
       "@flip"},
      {"duoattention_pattern",
       {{"duo/full_attention_heads.tsv", pattern}, {"duo/config.json", R"({"sink_size": 4, "recent_size": 16})"}},
       gsm8k + " --policies duoattention:pattern=$D/duo",
       "duo/full_attention_heads.tsv",
       "policy_config",
       "0\t1\t0\t1\n0\t1\t0\t1\n0\t1\t0\t1\n0\t1\t0\t1\n0\t1\t0\t1\n"},
      {"duoattention_config",
       {{"duo/full_attention_heads.tsv", pattern}, {"duo/config.json", R"({"sink_size": 4, "recent_size": 16})"}},
       gsm8k + " --policies duoattention:pattern=$D/duo",
       "duo/config.json",
       "policy_config",
       R"({"sink_size": 2, "recent_size": 16})"},
      // A model folder with a stray model.safetensors beside an index: the loader reads the shard.
      {"model_shard",
       {{"m/config.json", model + "config.json"},
        {"m/generation_config.json", model + "generation_config.json"},
        {"m/tokenizer.json", model + "tokenizer.json"},
        {"m/tokenizer_config.json", model + "tokenizer_config.json"},
        {"m/model.safetensors", model + "model.safetensors"},
        {"m/model-00001-of-00001.safetensors", model + "model.safetensors"},
        {"m/model.safetensors.index.json", "@index"}},
       "--task gsm8k --data-dir $S/datasets --model $D/m --policies full",
       "m/model-00001-of-00001.safetensors",
       "weights",
       "@flip"},
  };
}

void PrintTo(const Rerun& c, std::ostream* os) { *os << c.name; }

/// Runs `cmd` (a shell command line) with stderr to `err`; returns the exit status (-1: killed).
int run(const std::string& cmd, const fs::path& err) {
  const int status = std::system((cmd + " > /dev/null 2> " + err.string()).c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

std::vector<std::string> roles_of(const std::string& db, const std::string& path) {
  sqlite3* h = nullptr;
  std::vector<std::string> out;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(h);
    ADD_FAILURE() << "cannot open " << db;
    return out;
  }
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(h, "SELECT role FROM run_inputs WHERE path = ?", -1, &st, nullptr) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, path.c_str(), -1, SQLITE_TRANSIENT);
    while (sqlite3_step(st) == SQLITE_ROW) out.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
  } else {
    ADD_FAILURE() << sqlite3_errmsg(h);
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
  return out;
}

class HostileIdentity : public ::testing::TestWithParam<Rerun> {};

TEST_P(HostileIdentity, AFileRewrittenBetweenRunsIsNeverResumed) {
  const Rerun& c = GetParam();
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  KVB_REQUIRE_PATH(KVB_BINARY, "build the kvbench target");
  const fs::path dir = kvb::test::temp_dir("identity");  // kvb_identity_<pid>_<test>_<case>
  for (const auto& [rel, content] : c.files) {
    const fs::path p = dir / rel;
    fs::create_directories(p.parent_path());
    if (content.rfind("@copy:", 0) == 0) {
      fs::copy_file(fs::path(KVB_TEST_DATA_DIR) / content.substr(6), p);
    } else if (content == "@index") {  // every tensor of stories260K in the one shard
      const std::string st = slurp(fs::path(KVB_TEST_DATA_DIR) / "models/stories260K-hf/model.safetensors");
      const nlohmann::json h = nlohmann::json::parse(st.substr(8, data_start(st) - 8));
      nlohmann::json map = nlohmann::json::object();
      for (const auto& [k, v] : h.items())
        if (k != "__metadata__") map[k] = "model-00001-of-00001.safetensors";
      std::ofstream(p) << nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump();
    } else {
      std::ofstream(p, std::ios::binary) << content;
    }
  }
  std::string args = c.args;
  for (size_t at; (at = args.find("$D")) != std::string::npos;) args.replace(at, 2, dir.string());
  for (size_t at; (at = args.find("$S")) != std::string::npos;) args.replace(at, 2, KVB_TEST_DATA_DIR);
  const std::string db = (dir / "r.db").string();
  const std::string cmd = "LSAN_OPTIONS=print_suppressions=0 timeout " +
                          std::to_string(static_cast<int>(60 * kvb::test::time_scale())) + " " + KVB_BINARY + " run " +
                          args + " --limit 1 --max-new-tokens 2 --quiet --db " + db;
  const fs::path err = dir / "stderr.txt";
  ASSERT_EQ(run(cmd, err), 0) << cmd << "\n" << slurp(err);
  const fs::path changed = dir / c.changed;
  EXPECT_EQ(roles_of(db, changed.string()), std::vector<std::string>{c.role}) << "not in run_inputs: " << changed;

  std::string bytes = slurp(changed);
  if (c.rewrite == "@flip") {
    const size_t at = data_start(bytes);
    ASSERT_LT(at, bytes.size());
    bytes[at] = static_cast<char>(bytes[at] ^ 1);  // the lowest mantissa bit of the first float
  } else {
    bytes = c.rewrite;
  }
  std::ofstream(changed, std::ios::binary | std::ios::trunc) << bytes;
  const std::string db_before = slurp(db);
  EXPECT_EQ(run(cmd, err), 2) << cmd << "\n" << slurp(err);
  const std::vector<std::string> lines = lines_of(err);
  ASSERT_EQ(lines.size(), 1u) << slurp(err);
  EXPECT_EQ(lines[0].rfind("kvbench: error: " + changed.string() + ": content changed since run 1 (" + c.role, 0), 0u)
      << lines[0];
  EXPECT_TRUE(slurp(db) == db_before) << "the second run changed the results database";
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Inputs, HostileIdentity, ::testing::ValuesIn(reruns()),
                         [](const ::testing::TestParamInfo<Rerun>& i) { return i.param.name; });

}  // namespace
