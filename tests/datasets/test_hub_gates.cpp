// `gates=<Hub id>` end to end through the kvbench binary against a local fake Hub (cpp-httplib on
// 127.0.0.1, HF_ENDPOINT): TRIM-KV's released repo layout (trimkv_weights.pth + config.json,
// tests/fixtures/pth/trimkv_bf16) downloads through the project's Hub client into the
// huggingface_hub cache layout, its config fills the policy's defaults, a second run works offline
// from the cache, and a hostile .pth served by the Hub is refused like a local one.
#include <httplib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/util/hash.h"
#include "engine/util/io.h"
#include "tests/support/local_http_server.h"

namespace fs = std::filesystem;

namespace {

const std::string kCommit = "4444444444444444444444444444444444444444";
const std::string kPth = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/pth/";

class GateHub {
 public:
  GateHub() {
    files_["/kvbench/tiny-trimkv/resolve/main/config.json"] = kPth + "trimkv_bf16/config.json";
    files_["/kvbench/tiny-trimkv/resolve/main/trimkv_weights.pth"] = kPth + "trimkv_bf16/trimkv_weights.pth";
    files_["/kvbench/evil/resolve/main/trimkv_weights.pth"] = kPth + "evil_os_system.pth";
    files_["/kvbench/evil/resolve/main/config.json"] = kPth + "trimkv_bf16/config.json";
    for (const auto& [url, path] : files_) {
      http_.server().Get(url, [this, path = path](const httplib::Request&, httplib::Response& res) {
        ++requests_;
        res.set_header("X-Repo-Commit", kCommit);
        res.set_header("ETag", "\"" + kvb::git_blob_sha1_file(path) + "\"");
        res.set_content(kvb::read_file(path), "application/octet-stream");
      });
    }
    http_.start();
  }
  std::string endpoint() const { return http_.url(); }
  int requests() const { return requests_; }

 private:
  std::map<std::string, std::string> files_;
  std::atomic<int> requests_{0};
  kvb::test::LocalHttpServer http_;  // last: stopped before the state its handlers use is destroyed
};

std::pair<int, std::string> run(const std::string& env, const std::string& args) {
  const std::string cmd = env + " " + KVB_BINARY + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128, out};
}

TEST(HubGates, ReleasedRepoLayoutDownloadsIntoTheCacheAndConfiguresThePolicy) {
  GateHub hub;
  const fs::path cache = fs::temp_directory_path() / ("kvb_hub_gates_" + std::to_string(getpid()));
  fs::remove_all(cache);
  const std::string env = "HF_ENDPOINT=" + hub.endpoint() + " HF_HUB_CACHE=" + cache.string() + " HF_TOKEN=";
  auto [rc, out] = run(env, "policies --resolve trimkv:gates=kvbench/tiny-trimkv");
  ASSERT_EQ(rc, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["params"]["gates"], "kvbench/tiny-trimkv");
  EXPECT_EQ(j["params"]["buffer"], 8);   // config.json buffer_size
  EXPECT_EQ(j["params"]["budget"], 16);  // config.json memory_size (no --budget)
  const fs::path snap = cache / "models--kvbench--tiny-trimkv" / "snapshots" / kCommit;
  EXPECT_TRUE(fs::exists(snap / "trimkv_weights.pth"));
  EXPECT_TRUE(fs::exists(snap / "config.json"));
  EXPECT_EQ(kvb::sha256_file((snap / "trimkv_weights.pth").string()),
            kvb::sha256_file(kPth + "trimkv_bf16/trimkv_weights.pth"));
  // Offline, from the cache: no request.
  const int before = hub.requests();
  std::tie(rc, out) = run(env + " HF_HUB_OFFLINE=1", "policies --resolve trimkv:gates=kvbench/tiny-trimkv");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(hub.requests(), before);
  // A hostile pickle from the Hub: exit 2, one line, nothing executed.
  std::tie(rc, out) = run(env, "policies --resolve trimkv:gates=kvbench/evil");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("global posix.system is not allowed"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_FALSE(fs::exists("/tmp/kvb_pwned_os_system"));
  // A repo the Hub does not have: one error naming it.
  std::tie(rc, out) = run(env, "policies --resolve trimkv:gates=kvbench/missing");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("kvbench/missing"), std::string::npos) << out;
  fs::remove_all(cache);
}

}  // namespace
