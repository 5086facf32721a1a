// `--model org/name[@revision][:FILE.gguf]` through the kvbench binary against a fake Hugging
// Face Hub (tests/support/local_http_server.h) serving the stories260K-hf test model (issue 44,
// item 2): what is fetched, what a second run and HF_HUB_OFFLINE=1 ask for, one GGUF of a
// repository, and the input identity of a run on a Hub id. Also the stop ids of a GGUF against
// the generation config transformers builds for it (issue 44, item 3a).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/util/hash.h"
#include "engine/util/io.h"
#include "harness/input_identity.h"
#include "harness/model_source.h"
#include "tests/support/local_http_server.h"
#include "tests/support/db_column.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kModel = kvb::test::test_data("models/stories260K-hf");
const std::string kData = kvb::test::test_data("datasets");

#define REQUIRE_MODEL() KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors")

}  // namespace

namespace {

/// A fake Hugging Face Hub serving one model repository, kvb-org/tiny-stories, at commit
/// kHubCommit: the stories260K-hf files, the stories260K.gguf fixture, and files the engine never
/// reads (README.md, a stray consolidated.safetensors) that must not be fetched. Answers the
/// model-info API and resolve/<revision>/<file> (X-Repo-Commit, ETag = git blob sha1), as the
/// Hub does; every request path is logged.
class TinyStoriesHub {
 public:
  static constexpr const char* kHubCommit = "4444444444444444444444444444444444444444";
  TinyStoriesHub() {
    const std::string src = kvb::test::test_data("models/stories260K-hf");
    for (const char* f :
         {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
      files_[f] = src + "/" + f;
    files_["README.md"] = src + "/README.md";
    files_["consolidated.safetensors"] = src + "/model.safetensors";
    files_["stories260K.gguf"] = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/gguf/stories260K.gguf";
    http_.server().Get("/api/models/kvb-org/tiny-stories/revision/main",
                       [this](const httplib::Request& req, httplib::Response& res) {
                         note(req);
                         json info = {{"sha", kHubCommit}, {"siblings", json::array()}};
                         for (const auto& [name, path] : files_) info["siblings"].push_back({{"rfilename", name}});
                         res.set_content(info.dump(), "application/json");
                       });
    http_.server().Get("/api/models/kvb-org/gguf-only/revision/main", [this](const httplib::Request& req,
                                                                             httplib::Response& res) {
      note(req);
      res.set_content(
          json({{"sha", kHubCommit}, {"siblings", {{{"rfilename", "README.md"}}, {{"rfilename", "tiny-Q8_0.gguf"}}}}}).dump(),
          "application/json");
    });
    http_.server().Get(
        R"(/kvb-org/tiny-stories/resolve/([^/]+)/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
          note(req);
          res.set_header("X-Repo-Commit", kHubCommit);
          auto it = files_.find(req.matches[2].str());
          if ((req.matches[1].str() != "main" && req.matches[1].str() != kHubCommit) || it == files_.end()) {
            res.status = 404;
            res.set_header("X-Error-Code", "EntryNotFound");
            return;
          }
          std::ifstream in(it->second, std::ios::binary);
          res.set_header("ETag", "\"" + kvb::git_blob_sha1_file(it->second) + "\"");
          res.set_content(std::string((std::istreambuf_iterator<char>(in)), {}), "application/octet-stream");
        });
    http_.start();
  }
  std::string url() const { return http_.url(); }
  std::vector<std::string> log() { return log_.lines(); }
  void clear() { log_.clear(); }

 private:
  void note(const httplib::Request& req) { log_.add(req.path); }
  std::map<std::string, std::string> files_;
  kvb::test::RequestLog log_;
  kvb::test::LocalHttpServer http_;  // last: stopped before the state its handlers use goes
};

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

TEST(HubModelIds, FetchedFromTheMirrorOnlyWhatTheEngineReadsThenOffline) {
  // `--model org/name` against a fake Hub (issue 44, item 2): the config, generation config,
  // tokenizer and model.safetensors of one commit are fetched into a huggingface_hub cache, and
  // nothing else (no README, no stray consolidated.safetensors, no GGUF); the model generates what
  // the same files give from a folder; a second run fetches no file again; HF_HUB_OFFLINE=1 makes
  // no request at all; `:FILE.gguf` takes one GGUF of the repository, and a `kvbench run` on the
  // Hub id records every fetched file in its input identity.
  KVB_REQUIRE_BINARY();
  REQUIRE_MODEL();
  KVB_REQUIRE_TEST_DATA("datasets/gsm8k");
  TinyStoriesHub hub;
  const fs::path d = kvb::test::temp_dir("hub_mirror_models");
  const fs::path snap = d / "hub/models--kvb-org--tiny-stories/snapshots" / TinyStoriesHub::kHubCommit;
  const std::string env =
      "env -u HF_HUB_OFFLINE -u TRANSFORMERS_OFFLINE -u HF_TOKEN HF_HUB_CACHE=" + (d / "hub").string() +
      " HF_ENDPOINT=" + hub.url() + " ";
  const std::string gen = " generate --prompt 'Once upon a time' --max-new-tokens 12 --temperature 0 --model ";
  const auto local = kvb::test::run_command(std::string(KVB_BINARY) + gen + kModel + " 2>/dev/null");
  ASSERT_EQ(local.rc, 0) << local.out;
  ASSERT_GT(first_line(local.out).size(), 20u) << local.out;

  const auto fetched = kvb::test::run_command(env + KVB_BINARY + gen + "kvb-org/tiny-stories 2>/dev/null");
  ASSERT_EQ(fetched.rc, 0) << fetched.out;
  EXPECT_EQ(first_line(fetched.out), first_line(local.out));
  std::vector<std::string> in_snapshot;
  for (const auto& e : fs::directory_iterator(snap)) in_snapshot.push_back(e.path().filename().string());
  std::sort(in_snapshot.begin(), in_snapshot.end());
  EXPECT_EQ(in_snapshot, (std::vector<std::string>{"config.json", "generation_config.json", "model.safetensors",
                                                   "tokenizer.json", "tokenizer_config.json"}));
  for (const auto& l : hub.log()) {
    EXPECT_EQ(l.find("README"), std::string::npos) << l;
    EXPECT_EQ(l.find("consolidated"), std::string::npos) << l;
    EXPECT_EQ(l.find(".gguf"), std::string::npos) << l;
  }
  std::ifstream ref(d / "hub/models--kvb-org--tiny-stories/refs/main");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(ref)), {}), TinyStoriesHub::kHubCommit);

  // Again online: the model info is asked for, but every file is already in the commit's snapshot.
  hub.clear();
  const auto again = kvb::test::run_command(env + KVB_BINARY + gen + "kvb-org/tiny-stories 2>/dev/null");
  EXPECT_EQ(again.rc, 0) << again.out;
  EXPECT_EQ(first_line(again.out), first_line(local.out));
  EXPECT_EQ(hub.log(), std::vector<std::string>{"/api/models/kvb-org/tiny-stories/revision/main"});
  // Offline: no request at all.
  hub.clear();
  const auto offline =
      kvb::test::run_command(env + "HF_HUB_OFFLINE=1 " + KVB_BINARY + gen + "kvb-org/tiny-stories 2>/dev/null");
  EXPECT_EQ(offline.rc, 0) << offline.out;
  EXPECT_EQ(first_line(offline.out), first_line(local.out));
  EXPECT_TRUE(hub.log().empty());

  // One GGUF file of the repository, as llama.cpp's -hf takes it.
  const std::string gguf = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/gguf/stories260K.gguf";
  const auto gguf_local = kvb::test::run_command(std::string(KVB_BINARY) + gen + gguf + " 2>/dev/null");
  ASSERT_EQ(gguf_local.rc, 0) << gguf_local.out;
  const auto gguf_hub =
      kvb::test::run_command(env + KVB_BINARY + gen + "kvb-org/tiny-stories:stories260K.gguf 2>/dev/null");
  EXPECT_EQ(gguf_hub.rc, 0) << gguf_hub.out;
  EXPECT_EQ(first_line(gguf_hub.out), first_line(gguf_local.out));
  EXPECT_TRUE(fs::exists(snap / "stories260K.gguf"));
  // A file the repository lacks: one input error naming it.
  const auto absent = kvb::test::run_command(env + KVB_BINARY + gen + "kvb-org/tiny-stories:absent.gguf");
  EXPECT_EQ(absent.rc, 2) << absent.out;
  EXPECT_NE(absent.out.find("absent.gguf"), std::string::npos) << absent.out;

  // A repository the Hub does not have, and one holding only GGUF files: one input error each.
  const auto no_repo = kvb::test::run_command(env + KVB_BINARY + gen + "kvb-org/absent");
  EXPECT_EQ(no_repo.rc, 2) << no_repo.out;
  EXPECT_NE(no_repo.out.find("kvbench: error: --model kvb-org/absent: " + hub.url() +
                             "/api/models/kvb-org/absent/revision/main: HTTP 404"),
            std::string::npos)
      << no_repo.out;
  const auto gguf_repo = kvb::test::run_command(env + KVB_BINARY + gen + "kvb-org/gguf-only");
  EXPECT_EQ(gguf_repo.rc, 2) << gguf_repo.out;
  EXPECT_NE(gguf_repo.out.find("kvbench: error: --model kvb-org/gguf-only: the repository has no config.json but "
                               "GGUF files; take one with --model kvb-org/gguf-only:tiny-Q8_0.gguf"),
            std::string::npos)
      << gguf_repo.out;

  // Input identity: a run on the Hub id records each file it read, by its name in the repository.
  const std::string db = (d / "r.db").string();
  const auto run = kvb::test::run_command(env + "HF_HUB_OFFLINE=1 " + KVB_BINARY +
                                          " run --task gsm8k --model kvb-org/tiny-stories --data-dir " + kData +
                                          " --policies full --limit 1 --max-new-tokens 4 --quiet --db " + db);
  ASSERT_EQ(run.rc, 0) << run.out;
  const auto inputs = kvb::test::db_column(db,
                                           "SELECT role || ':' || name || ':' || sha256 FROM run_inputs WHERE owner = "
                                           "'kvb-org/tiny-stories' ORDER BY role, name");
  std::vector<std::string> want;
  for (const auto& [role, name] : std::vector<std::pair<std::string, std::string>>{{"config", "config.json"},
                                                                                   {"config", "generation_config.json"},
                                                                                   {"tokenizer", "tokenizer.json"},
                                                                                   {"tokenizer", "tokenizer_config.json"},
                                                                                   {"weights", "model.safetensors"}})
    want.push_back(role + ":" + name + ":" + kvb::sha256_file(kModel + "/" + name));
  EXPECT_EQ(inputs, want);
  fs::remove_all(d);
}

TEST(HubModelIds, OneGgufOfARepositoryIsAnInputAsAPathIs) {
  // model_inputs of `org/name:FILE.gguf` from a huggingface_hub cache, offline: the one file,
  // hashed, named by its file name, as for a local .gguf path.
  const std::string gguf = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/gguf/stories260K.gguf";
  const fs::path d = kvb::test::temp_dir("hub_gguf_identity");
  const std::string commit = "5555555555555555555555555555555555555555";
  const fs::path repo = d / "models--kvb-org--gguf-only";
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "snapshots" / commit);
  fs::create_directories(repo / "refs");
  fs::copy_file(gguf, repo / "blobs" / kvb::sha256_file(gguf));
  fs::create_symlink(fs::path("../../blobs") / kvb::sha256_file(gguf), repo / "snapshots" / commit / "tiny.gguf");
  std::ofstream(repo / "refs" / "main") << commit;
  kvb::test::ScopedEnv cache("HF_HUB_CACHE", d.string()), offline("HF_HUB_OFFLINE", "1");
  const auto in = kvb::cli::model_inputs("kvb-org/gguf-only:tiny.gguf");
  ASSERT_EQ(in.size(), 1u);
  EXPECT_EQ(in[0].role, "weights");
  EXPECT_EQ(in[0].name, "tiny.gguf");
  EXPECT_EQ(in[0].owner, "kvb-org/gguf-only:tiny.gguf");
  EXPECT_EQ(in[0].sha256, kvb::sha256_file(gguf));
  EXPECT_EQ(in[0].path, (repo / "snapshots" / commit / "tiny.gguf").string());
  fs::remove_all(d);
}

TEST(ModelSource, GgufStopIdsAreTheGenerationConfigTransformersBuildsFromIt) {
  // transformers loading a GGUF (modeling_gguf_pytorch_utils.load_gguf_checkpoint) sets
  // config.eos_token_id from tokenizer.ggml.eos_token_id only, and GenerationConfig.from_model_config
  // copies it: that single id is every eos of its generation config (for the Qwen2.5-Coder GGUFs
  // 151645 alone, not 151643). kvbench stops on the same id, plus llama.cpp's end-of-turn ids
  // (tokenizer.ggml.eot_token_id / eom_token_id) when a file has them; these fixtures have none.
  // The golden config is transformers' own (tools/gen_gguf_goldens.py).
  for (const char* name : {"tiny_llama", "stories260K"}) {
    const std::string dir = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/gguf/";
    const json golden = kvb::parse_json_file(dir + name + ".golden.json");
    const auto m = kvb::cli::load_model(dir + name + ".gguf");
    EXPECT_EQ(m.eos_ids, std::vector<int32_t>{golden["config"]["eos_token_id"].get<int32_t>()}) << name;
  }
}
