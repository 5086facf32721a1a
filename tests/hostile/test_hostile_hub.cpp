// A hostile Hub mirror (issue 40, item 1): every server-supplied name the Hub client would join
// to a cache path — X-Repo-Commit, ETag, X-Linked-Etag — served with "../", an absolute path, a
// NUL or newline inside, over-long or not hex, through each command that downloads from the Hub
// (`datasets fetch`, `tasks --download`, a learned policy's `gates=<Hub id>`). Each must end with
// one `kvbench: error:` line naming the URL and the header, exit 1, and no file anywhere but the
// cache folder (and none there named by the server). The server is a local cpp-httplib one
// (tests/support/local_http_server.h); header values httplib will not send (NUL, a bare newline)
// come from RawHttpResponder.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/local_http_server.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;

namespace {

const std::string kCommit = "5555555555555555555555555555555555555555";
const std::string kSha1 = "0123456789abcdef0123456789abcdef01234567";

/// One hostile reply: the headers of a 200 answer to the HEAD of any resolve URL.
struct Reply {
  std::string name;
  std::string commit;       // X-Repo-Commit ("" = not sent)
  std::string etag;         // ETag
  std::string linked_etag;  // X-Linked-Etag ("" = not sent)
  std::string expect;       // the header the error line must name
  bool raw = false;         // sent verbatim by RawHttpResponder (bytes httplib refuses)
};

std::vector<Reply> replies(const std::string& dir) {
  return {
      {"etag_dotdot", kCommit, "\"../../outside/pwned_by_etag\"", "", "ETag: '\"../../outside/pwned_by_etag\"'"},
      {"etag_absolute", kCommit, "\"" + dir + "/abs_pwned\"", "", "ETag: '\"" + dir + "/abs_pwned\"'"},
      {"etag_weak_dotdot", kCommit, "W/\"../outside/weak\"", "", "ETag: 'W/\"../outside/weak\"'"},
      {"etag_overlong", kCommit, std::string(5000, 'a'), "", "ETag: 'aaaa"},
      {"etag_uppercase_hex", kCommit, "\"" + std::string(40, 'A') + "\"", "", "ETag"},
      {"linked_etag_dotdot", kCommit, "\"" + kSha1 + "\"", "../../outside/pwned_linked", "X-Linked-Etag"},
      {"commit_dotdot", "../../outside/pwned_by_commit", "\"" + kSha1 + "\"", "", "X-Repo-Commit: '../../outside"},
      {"commit_absolute", dir + "/abs_commit", "\"" + kSha1 + "\"", "", "X-Repo-Commit"},
      {"commit_not_hex", std::string(40, 'g'), "\"" + kSha1 + "\"", "", "X-Repo-Commit: 'gggg"},
      {"commit_short", "abc123", "\"" + kSha1 + "\"", "", "X-Repo-Commit: 'abc123'"},
      {"commit_overlong", std::string(300, '1'), "\"" + kSha1 + "\"", "", "X-Repo-Commit"},
      // A NUL in a header line: kvbench refuses the name, or curl refuses the reply first ("Weird
      // server reply"), whichever sees it: one error line, exit 1, no file outside the cache.
      {"etag_nul", kCommit, std::string("\"../../outside/nul\0x\"", 21), "", "", true},
      {"etag_newline", kCommit, "\"../../outside/nl\nX-Other: 1\"", "", "ETag: '\"../../outside/nl'", true},
      // curl itself refuses a NUL in a header line ("Weird server reply"): one error line, exit 1.
      {"commit_nul", std::string("../../outside/c\0", 16), "\"" + kSha1 + "\"", "", "", true},
  };
}

/// The commands that download through the Hub client; $D is the case's directory.
struct Path {
  std::string name;
  std::string args;
};
const std::vector<Path>& paths() {
  static const std::vector<Path> p = {
      {"datasets_fetch", "datasets fetch longmemeval/longmemeval_oracle.json"},
      {"tasks_download", "tasks longmemeval_oracle --download --show 1 --data-dir $D/nodata"},
      {"gates_hub_id", "policies --resolve trimkv:gates=kvbench/tiny-trimkv"},
  };
  return p;
}

std::string raw_reply(const Reply& r) {
  std::string out = "HTTP/1.1 200 OK\r\n";
  if (!r.commit.empty()) out += "X-Repo-Commit: " + r.commit + "\r\n";
  out += "ETag: " + r.etag + "\r\n";
  if (!r.linked_etag.empty()) out += "X-Linked-Etag: " + r.linked_etag + "\r\n";
  return out + "Content-Length: 5\r\nConnection: close\r\n\r\nhello";
}

/// Every file, link or directory under `root` but the cache folder and what the test made.
std::vector<std::string> outside_cache(const fs::path& root) {
  std::vector<std::string> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const fs::path rel = fs::relative(it->path(), root);
    const std::string top = rel.begin()->string();
    if (top == "cache") continue;
    if (rel == "stderr.txt" || rel == "work" || rel == "nodata") continue;
    out.push_back(rel.string());
  }
  return out;
}

/// Files in the cache named by the server: any path holding "pwned", "outside", "abs_" or "nul".
std::vector<std::string> named_by_server(const fs::path& cache) {
  std::vector<std::string> out;
  if (!fs::exists(cache)) return out;
  for (const auto& e : fs::recursive_directory_iterator(cache)) {
    const std::string s = e.path().string();
    for (const char* w : {"pwned", "outside", "abs_", "weak", "aaaa", "gggg", "abc123"})
      if (s.find(w, cache.string().size()) != std::string::npos) out.push_back(s);
  }
  return out;
}

TEST(HostileHub, ServerSuppliedNamesAreNeverPathsOneErrorLineExitOne) {
  KVB_REQUIRE_PATH(KVB_BINARY, "build the kvbench target");
  const fs::path base = fs::temp_directory_path() / ("kvb_hostile_hub_" + std::to_string(::getpid()));
  fs::remove_all(base);
  std::mutex mu;
  Reply current;
  kvb::test::LocalHttpServer http;
  http.server().Get(".*", [&](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> g(mu);
    if (!current.commit.empty()) res.set_header("X-Repo-Commit", current.commit);
    res.set_header("ETag", current.etag);
    if (!current.linked_etag.empty()) res.set_header("X-Linked-Etag", current.linked_etag);
    res.set_content("hello", "application/octet-stream");
  });
  http.start();
  kvb::test::RawHttpResponder raw([&](const std::string&) {
    std::lock_guard<std::mutex> g(mu);
    return raw_reply(current);
  });
  int n = 0;
  for (const Path& path : paths()) {
    for (size_t i = 0; i < replies("").size(); ++i) {
      const fs::path dir = base / std::to_string(n++);
      const Reply r = replies(dir.string())[i];  // absolute paths point into the case's directory
      SCOPED_TRACE(path.name + "/" + r.name);
      fs::create_directories(dir / "work");
      fs::create_directories(dir / "nodata");
      {
        std::lock_guard<std::mutex> g(mu);
        current = r;
      }
      std::string args = path.args;
      for (size_t at; (at = args.find("$D")) != std::string::npos;) args.replace(at, 2, dir.string());
      const std::string endpoint = r.raw ? raw.url() : http.url();
      const std::string cmd = "cd " + (dir / "work").string() + " && env HF_ENDPOINT=" + endpoint +
                              " HF_HUB_CACHE=" + (dir / "cache").string() + " HF_HOME=" + (dir / "hfhome").string() +
                              " HF_TOKEN= KVB_DATA_DIR= LSAN_OPTIONS=print_suppressions=0 timeout 60 " + KVB_BINARY +
                              " " + args + " > /dev/null 2> " + (dir / "stderr.txt").string();
      const int status = std::system(cmd.c_str());
      ASSERT_TRUE(WIFEXITED(status)) << cmd;
      std::FILE* f = std::fopen((dir / "stderr.txt").c_str(), "r");
      ASSERT_NE(f, nullptr);
      std::vector<std::string> lines;
      char buf[65536];
      while (std::fgets(buf, sizeof buf, f))
        if (buf[0] != '\n') lines.push_back(buf);
      std::fclose(f);
      std::string all;
      for (const auto& l : lines) all += l;
      EXPECT_EQ(WEXITSTATUS(status), 1) << cmd << "\n" << all;
      ASSERT_EQ(lines.size(), 1u) << all;
      EXPECT_EQ(lines[0].rfind("kvbench: error: ", 0), 0u) << lines[0];
      EXPECT_NE(lines[0].find(r.expect), std::string::npos) << "expected '" << r.expect << "' in: " << lines[0];
      EXPECT_NE(lines[0].find(endpoint + "/"), std::string::npos) << "the URL is not named: " << lines[0];
      EXPECT_EQ(outside_cache(dir), std::vector<std::string>{}) << "written outside the cache";
      EXPECT_EQ(named_by_server(dir / "cache"), std::vector<std::string>{}) << "a server-supplied name became a path";
      EXPECT_FALSE(fs::exists(base / "outside"));
      EXPECT_FALSE(fs::exists(fs::temp_directory_path() / "outside"));
    }
  }
  fs::remove_all(base);
}

}  // namespace

namespace {

/// Runs `kvbench <args>` against the Hub mirror `endpoint` with its cache under `dir`; returns the
/// exit status and stores stderr's non-empty lines in `*lines`.
int run_against(const std::string& endpoint, const fs::path& dir, const std::string& args,
                std::vector<std::string>* lines) {
  const std::string cmd = "cd " + dir.string() + " && env HF_ENDPOINT=" + endpoint +
                          " HF_HUB_CACHE=" + (dir / "cache").string() + " HF_HOME=" + (dir / "hfhome").string() +
                          " HF_TOKEN= KVB_DATA_DIR= LSAN_OPTIONS=print_suppressions=0 timeout " +
                          std::to_string(static_cast<int>(60 * kvb::test::time_scale())) + " " + KVB_BINARY + " " +
                          args + " > /dev/null 2> " + (dir / "stderr.txt").string();
  const int status = std::system(cmd.c_str());
  lines->clear();
  std::FILE* f = std::fopen((dir / "stderr.txt").c_str(), "r");
  if (!f) return -1;
  char buf[65536];
  while (std::fgets(buf, sizeof buf, f))
    if (buf[0] != '\n') lines->push_back(buf);
  std::fclose(f);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// Regular files under `root` whose path holds `part` (a blob, an .incomplete download).
std::vector<std::string> files_with(const fs::path& root, const std::string& part) {
  std::vector<std::string> out;
  if (!fs::exists(root)) return out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file() && e.path().string().find(part) != std::string::npos) out.push_back(e.path().string());
  return out;
}

}  // namespace

// Issue 46, items 4 and 7: a download never grows past the size the server announced, an
// announced size over the cap of the file's kind is refused before any byte is requested, and
// `datasets fetch` never leaves a data directory link pointing at other content.
TEST(HostileHub, DownloadsStopAtTheAnnouncedSizeAndTheKindCap) {
  KVB_REQUIRE_PATH(KVB_BINARY, "build the kvbench target");
  const fs::path base = fs::temp_directory_path() / ("kvb_hostile_hub_bounds_" + std::to_string(::getpid()));
  fs::remove_all(base);
  const std::string hello_sha256 = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
  std::mutex mu;
  std::string announced;  // the HEAD's Content-Length
  std::string body;       // what a GET sends, until the connection closes
  int gets = 0;
  kvb::test::RawHttpResponder raw([&](const std::string& head) {
    std::lock_guard<std::mutex> g(mu);
    std::string out = "HTTP/1.1 200 OK\r\nX-Repo-Commit: " + kCommit + "\r\nETag: \"" + hello_sha256 + "\"\r\n";
    if (head.rfind("HEAD ", 0) == 0) return out + "Content-Length: " + announced + "\r\nConnection: close\r\n\r\n";
    ++gets;
    return out + "Connection: close\r\n\r\n" + body;  // no length: the body ends when the connection does
  });
  auto serve = [&](const std::string& size, const std::string& content) {
    std::lock_guard<std::mutex> g(mu);
    announced = size;
    body = content;
    gets = 0;
  };
  auto gets_seen = [&] {
    std::lock_guard<std::mutex> g(mu);
    return gets;
  };
  const std::string fetch = "datasets fetch longmemeval/longmemeval_oracle.json";
  std::vector<std::string> lines;
  {
    SCOPED_TRACE("a body longer than announced (312 bytes announced, 4 MiB sent)");
    const fs::path dir = base / "longer";
    fs::create_directories(dir);
    serve("312", std::string(4 << 20, 'x'));
    EXPECT_EQ(run_against(raw.url(), dir, fetch, &lines), 1);
    ASSERT_EQ(lines.size(), 1u) << (lines.empty() ? "" : lines[0]);
    EXPECT_NE(lines[0].find("the server sent more than the announced 312 bytes; nothing kept"), std::string::npos)
        << lines[0];
    EXPECT_EQ(files_with(dir / "cache", "blobs"), std::vector<std::string>{}) << "a partial download was kept";
  }
  {
    SCOPED_TRACE("an announced size over the data file cap");
    const fs::path dir = base / "overcap";
    fs::create_directories(dir);
    serve(std::to_string(uint64_t{5} << 30), "hello");
    EXPECT_EQ(run_against(raw.url(), dir, fetch, &lines), 1);
    ASSERT_EQ(lines.size(), 1u) << (lines.empty() ? "" : lines[0]);
    EXPECT_NE(lines[0].find("announced 5368709120 bytes, over the 4 GiB limit"), std::string::npos) << lines[0];
    EXPECT_EQ(gets_seen(), 0) << "the body was requested";
    EXPECT_EQ(files_with(dir / "cache", "blobs"), std::vector<std::string>{});
  }
  {
    SCOPED_TRACE("datasets fetch onto a link to other content");
    const fs::path dir = base / "link";
    fs::create_directories(dir / "data" / "longmemeval");
    std::ofstream(dir / "other.json") << "[]";
    fs::create_symlink(dir / "other.json", dir / "data" / "longmemeval" / "longmemeval_oracle.json");
    serve("5", "hello");
    EXPECT_EQ(run_against(raw.url(), dir, fetch + " --data-dir " + (dir / "data").string(), &lines), 2);
    ASSERT_EQ(lines.size(), 1u) << (lines.empty() ? "" : lines[0]);
    EXPECT_NE(lines[0].find("longmemeval_oracle.json: is a symbolic link to " + (dir / "other.json").string()),
              std::string::npos)
        << lines[0];
    EXPECT_EQ(fs::read_symlink(dir / "data" / "longmemeval" / "longmemeval_oracle.json"), dir / "other.json");
  }
  fs::remove_all(base);
}
