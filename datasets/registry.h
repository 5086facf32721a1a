// The registry of every benchmark file kvbench reads: where it comes from (HF repo or GitHub
// commit), its path there, format, size and sha256 where known, and the path it has in a local
// mirror (--data-dir, laid out like the repository paths below). Sources:
// docs/benchmarks.md, one section per benchmark (V = hash verified, else noted).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

namespace kvb::datasets {

class HubClient;

/// One file of one benchmark.
struct SourceFile {
  std::string key;        ///< path relative to a data mirror, e.g. "gsm8k/test.jsonl"
  std::string benchmark;  ///< "gsm8k", "math500", "aime24", "aime25", "longproc", ...
  std::string host;       ///< "hf-dataset", "hf-model", "github", or "derived" (made by a tool)
  std::string repo;       ///< HF repo id or GitHub owner/name
  std::string revision;   ///< branch or commit (GitHub: always a commit)
  std::string path;       ///< path inside the repo
  std::string format;     ///< "jsonl", "json", "yaml", "zip"
  std::string sha256;     ///< lower-case hex, "" when unknown
  uint64_t size = 0;      ///< bytes, 0 when unknown
  std::string note;       ///< provenance / caveats
};

/// Every registered file: the built-in table (datasets/registry.cpp) in benchmark order, then
/// the files benchmark task files declared (TaskFactory::sources, added by the task registry
/// through add_sources when it is first used). Entries never move once added.
const std::deque<SourceFile>& sources();

/// Adds files to the registry (the task registry does this for each task file's declared
/// sources, so a new benchmark registers its data next to its task). A key already registered
/// with the same repo, revision and path is ignored; with different ones it throws kvb::Error
/// naming the key. Thread-safe; intended to run once at start-up.
void add_sources(const std::vector<SourceFile>& files);

/// The entry with this key, or nullptr.
const SourceFile* find_source(const std::string& key);

/// Download URL: GitHub → https://raw.githubusercontent.com/{repo}/{revision}/{path};
/// HF → {endpoint}/datasets/{repo}/resolve/{revision}/{path} (models: no "datasets/").
/// Throws kvb::Error for "derived" files (they have no URL).
std::string source_url(const SourceFile& f, const std::string& hf_endpoint);

/// Finds benchmark files: first in each data directory (mirror layout: <dir>/<key>), then,
/// for HF-hosted files, through the hub client (its cache, or a download unless offline).
class DataLocator {
 public:
  /// `data_dirs`: mirrors searched in order; `hub`: optional (nullptr = local mirrors only).
  explicit DataLocator(std::vector<std::string> data_dirs, HubClient* hub = nullptr);

  /// Local path of `key`. Keys not in the registry (e.g. fixture files) are looked up in the
  /// data directories only. Throws kvb::Error naming the key, the directories searched and
  /// how to get the file (`kvbench datasets fetch ...`) when it is not available.
  std::string locate(const std::string& key) const;

  /// The mirror directories searched.
  const std::vector<std::string>& data_dirs() const { return dirs_; }

 private:
  std::vector<std::string> dirs_;
  HubClient* hub_;
};

/// The default data directories: $KVB_DATA_DIR (colon-separated) if set, else none.
std::vector<std::string> default_data_dirs();

}  // namespace kvb::datasets
