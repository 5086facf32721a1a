// `kvbench datasets list|fetch|verify`: the benchmark file registry (datasets/registry.h).
//   list    every registered file with its source, size, sha256 and where it is: a data dir, or
//           the Hugging Face cache (looked up offline)
//   fetch   BENCH|KEY...: GitHub-hosted files are downloaded into --data-dir (sha256 checked where
//           the registry has one; the others are fetched from the pinned commit and reported);
//           Hub-hosted files go into the Hugging Face cache (huggingface_hub layout) and are
//           linked into --data-dir when one is given
//   verify  sha256 of every registered file found in the data dirs; exit code 1 on a mismatch
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "datasets/hub.h"
#include "datasets/registry.h"
#include "engine/util/error.h"
#include "engine/util/hash.h"
#include "engine/util/io.h"
#include "tasks/task.h"
#include "harness/commands.h"

namespace kvb::cli {

namespace fs = std::filesystem;

namespace {

struct DatasetsArgs {
  std::vector<std::string> data_dirs;
  std::vector<std::string> what;
};

std::vector<std::string> all_dirs(const DatasetsArgs& a) {
  std::vector<std::string> d = a.data_dirs;
  for (const auto& x : datasets::default_data_dirs()) d.push_back(x);
  return d;
}

// The first data dir holding `key` (anything by that name: verify then refuses what is not a
// regular file, naming it; a symlink loop is found too, as lstat does not follow it).
std::string find_local(const std::vector<std::string>& dirs, const std::string& key) {
  for (const auto& d : dirs) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(fs::path(d) / key, ec))) return (fs::path(d) / key).string();
  }
  return "";
}

// Hub-hosted files already in the Hugging Face cache (offline lookup: no request is sent).
std::string find_cached(datasets::HubClient& hub, const datasets::SourceFile& s) {
  if (s.host != "hf-dataset" && s.host != "hf-model") return "";
  try {
    return hub.download(
        {s.host == "hf-model" ? datasets::RepoType::kModel : datasets::RepoType::kDataset, s.repo, s.revision, s.path});
  } catch (const Error&) {
    return "";
  }
}

void run_list(const DatasetsArgs& a) {
  auto dirs = all_dirs(a);
  datasets::HubConfig cfg = datasets::HubConfig::from_env();
  cfg.offline = true;
  datasets::HubClient hub(cfg);
  size_t w = 3;
  for (const auto& s : datasets::sources()) w = std::max(w, s.key.size());
  const int kw = static_cast<int>(w);
  std::printf("%-*s %-12s %-11s %12s  %-16s %s\n", kw, "key", "benchmark", "host", "bytes", "sha256", "local");
  for (const auto& s : datasets::sources()) {
    std::string local = find_local(dirs, s.key);
    if (local.empty()) {
      std::string cached = find_cached(hub, s);
      if (!cached.empty()) local = cached + " (HF cache)";
    }
    std::printf("%-*s %-12s %-11s %12s  %-16s %s\n", kw, s.key.c_str(), s.benchmark.c_str(), s.host.c_str(),
                s.size ? std::to_string(s.size).c_str() : "?", s.sha256.empty() ? "?" : s.sha256.substr(0, 16).c_str(),
                local.empty() ? "-" : local.c_str());
  }
}

std::vector<const datasets::SourceFile*> select(const std::vector<std::string>& what) {
  std::vector<const datasets::SourceFile*> out;
  for (const auto& w : what) {
    size_t before = out.size();
    for (const auto& s : datasets::sources())
      if (s.key == w || s.benchmark == w) out.push_back(&s);
    if (out.size() == before)
      fail("datasets: '{}' is neither a benchmark nor a registered key (`kvbench datasets list`)", w);
  }
  return out;
}

void run_fetch(const DatasetsArgs& a) {
  if (a.what.empty()) fail("datasets fetch: name benchmarks or keys (e.g. gsm8k math500 longproc)");
  std::string dir = a.data_dirs.empty() ? "" : a.data_dirs[0];
  datasets::HubClient hub(datasets::HubConfig::from_env());
  for (const auto* s : select(a.what)) {
    if (s->host == "derived") {
      std::printf("skip  %s: %s\n", s->key.c_str(), s->note.c_str());
      continue;
    }
    if (s->host == "github") {
      if (dir.empty()) fail("datasets fetch: {} is hosted on GitHub; give --data-dir DIR to store it", s->key);
      fs::path dest = fs::path(dir) / s->key;
      // (sha256_file refuses a FIFO or device by name: engine/util/io.h open_input.)
      if (fs::exists(dest) && (s->sha256.empty() || sha256_file(dest.string()) == s->sha256)) {
        std::printf("ok    %s (already present)\n", dest.c_str());
        continue;
      }
      check_replaceable(dest.string(), "datasets fetch");  // the output policy: a regular file or a new name
      hub.download_url(datasets::source_url(*s, hub.config().endpoint), dest.string(), s->sha256, s->size);
      if (s->sha256.empty()) {
        std::printf("got   %s (unverified: %s; sha256 %s)\n", dest.c_str(), s->note.c_str(),
                    sha256_file(dest.string()).c_str());
      } else {
        std::printf("got   %s\n", dest.c_str());
      }
      continue;
    }
    datasets::HubFile f{s->host == "hf-model" ? datasets::RepoType::kModel : datasets::RepoType::kDataset, s->repo,
                        s->revision, s->path};
    std::string cached = hub.download(f);
    if (!s->sha256.empty() && sha256_file(cached) != s->sha256)
      throw Error(fmt::format("{}: sha256 differs from the registry's {} (the Hub file changed?)", cached, s->sha256),
                  ErrorKind::kRuntime);
    if (!dir.empty()) {
      fs::path dest = fs::path(dir) / s->key;
      fs::create_directories(dest.parent_path());
      std::error_code ec;
      if (!fs::exists(fs::symlink_status(dest, ec))) {
        fs::create_symlink(fs::canonical(cached), dest);
      } else if (fs::is_symlink(fs::symlink_status(dest, ec)) &&
                 !(fs::exists(dest, ec) && fs::equivalent(dest, cached, ec))) {
        // A link that points anywhere but the downloaded file is neither followed nor replaced
        // (issue 46, item 7): the data directory would keep naming other content.
        fail(
            "{}: is a symbolic link to {}, not to the downloaded {}; datasets fetch neither follows nor replaces it: "
            "remove it first",
            dest.string(), fs::read_symlink(dest, ec).string(), cached);
      } else if (!fs::is_symlink(fs::symlink_status(dest, ec))) {
        check_replaceable(dest.string(), "datasets fetch");  // kept as it is, unless a device or FIFO
      }
      std::printf("got   %s -> %s\n", dest.c_str(), cached.c_str());
    } else {
      std::printf("got   %s\n", cached.c_str());
    }
  }
}

int run_verify(const DatasetsArgs& a) {
  auto dirs = all_dirs(a);
  if (dirs.empty()) fail("datasets verify: give --data-dir DIR (or set KVB_DATA_DIR)");
  for (const auto& d : a.data_dirs)
    if (!fs::is_directory(d)) fail("--data-dir {}: not a directory", d);
  int bad = 0, ok = 0, unknown = 0;
  for (const auto* s : a.what.empty() ? std::vector<const datasets::SourceFile*>{} : select(a.what)) (void)s;
  std::vector<int> found(a.what.size(), 0);  // files found per requested name
  for (const auto& s : datasets::sources()) {
    std::vector<size_t> wanted_by;
    for (size_t i = 0; i < a.what.size(); ++i)
      if (a.what[i] == s.key || a.what[i] == s.benchmark) wanted_by.push_back(i);
    if (!a.what.empty() && wanted_by.empty()) continue;
    std::string p = find_local(dirs, s.key);
    if (p.empty()) continue;
    for (size_t i : wanted_by) ++found[i];
    // A regular file within the data cap (a FIFO, device or symlink loop is named and refused);
    // a registered size that differs is a mismatch without reading the file.
    uint64_t size = 0;
    ::close(open_input(p, InputKind::kDataFile, &size));
    if (s.size && size != s.size) {
      std::printf("BAD   %s: %llu bytes, expected %llu\n", p.c_str(), static_cast<unsigned long long>(size),
                  static_cast<unsigned long long>(s.size));
      ++bad;
      continue;
    }
    std::string got = sha256_file(p);
    if (s.sha256.empty()) {
      std::printf("?     %s sha256 %s (no registered hash)\n", p.c_str(), got.c_str());
      ++unknown;
    } else if (got == s.sha256) {
      std::printf("ok    %s\n", p.c_str());
      ++ok;
    } else {
      std::printf("BAD   %s sha256 %s, expected %s\n", p.c_str(), got.c_str(), s.sha256.c_str());
      ++bad;
    }
  }
  // Nothing verified is not a pass: a named benchmark with no file in the data dirs, or no
  // registered file at all, is an error (it printed "0 ok" and exited 0).
  const std::string where = fmt::format("{}", fmt::join(dirs, ", "));
  for (size_t i = 0; i < a.what.size(); ++i)
    if (found[i] == 0) fail("datasets verify: {}: no file of it in the data dirs ({})", a.what[i], where);
  if (ok + bad + unknown == 0) fail("datasets verify: no registered file in the data dirs ({})", where);
  std::printf("%d ok, %d mismatched, %d without a registered hash\n", ok, bad, unknown);
  return bad ? 1 : 0;
}

}  // namespace

void register_datasets(CLI::App& app) {
  auto a = std::make_shared<DatasetsArgs>();
  auto* c = app.add_subcommand("datasets", "Benchmark data: list the registry, fetch files, verify hashes");
  c->require_subcommand(1);
  // The registry includes the files task files declare (TaskFactory::sources), added when the
  // task registry is first used.
  c->preparse_callback([](size_t) { (void)tasks::task_names(); });
  auto add_dirs = [a](CLI::App* s) {
    // One folder per --data-dir (repeat it for several): otherwise `--data-dir D gsm8k` took the
    // benchmark name as a second folder.
    s->add_option("--data-dir", a->data_dirs,
                  "local data mirror laid out as docs/benchmarks.md describes (also $KVB_DATA_DIR); repeatable")
        ->allow_extra_args(false);
  };
  auto* l = c->add_subcommand("list", "every registered file: source, size, sha256, local copy");
  add_dirs(l);
  l->callback([a] { run_list(*a); });
  auto* f = c->add_subcommand("fetch", "download benchmarks or files (GitHub → --data-dir; Hub → HF cache)");
  add_dirs(f);
  f->add_option("what", a->what, "benchmark names or registry keys")->required();
  f->callback([a] { run_fetch(*a); });
  auto* v = c->add_subcommand("verify", "check the sha256 of the files found in the data dirs");
  add_dirs(v);
  v->add_option("what", a->what, "benchmark names or registry keys (default: all)");
  v->callback([a] {
    if (run_verify(*a) != 0) throw Error("datasets verify: hash mismatch", ErrorKind::kRuntime);
  });
}

}  // namespace kvb::cli
