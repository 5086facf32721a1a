// A Hugging Face Hub client (HTTP through net/http.h) whose cache is interchangeable with huggingface_hub's
// (docs/architecture.md#layers); the layout: $HF_HUB_CACHE/{type}s--{org}--{name}/
// {blobs/<etag>, snapshots/<commit>/<path> → ../../blobs/<etag> (relative symlinks),
// refs/<revision>, .no_exist/<commit>/<path>}, .locks/, CACHEDIR.TAG.
//
// download(): HEAD the resolve URL (relative redirects followed, an absolute redirect gives the
// download URL), read X-Repo-Commit and the ETag (X-Linked-Etag first), reuse the blob when it
// is cached, else GET into blobs/<etag>.incomplete with Range resume and retries with
// exponential backoff, check size and hash (sha256 for LFS etags, git blob sha1 otherwise),
// rename, link. HF_HUB_OFFLINE=1 resolves from refs/ and snapshots/ only. The token goes only
// into the Authorization header of requests to the Hub host, never into logs or files.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "net/http.h"

namespace kvb::datasets {

/// Kind of Hub repository (URL prefix and cache folder prefix).
enum class RepoType { kModel, kDataset, kSpace };

/// One file in a Hub repository at a revision (branch, tag, "refs/pr/N" or 40-hex commit).
struct HubFile {
  RepoType type = RepoType::kDataset;
  std::string repo_id;  ///< "org/name"
  std::string revision = "main";
  std::string path;  ///< path inside the repo, "/"-separated
};

/// Client settings; from_env() reads the variables huggingface_hub reads.
struct HubConfig {
  std::string endpoint = "https://huggingface.co";  ///< HF_ENDPOINT (trailing "/" dropped)
  std::string cache_dir;                            ///< HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub
  std::string token;                                ///< HF_TOKEN / HUGGING_FACE_HUB_TOKEN / $HF_HOME/token
  bool offline = false;                             ///< HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE = 1/true/yes/on
  bool symlinks = true;                             ///< false with HF_HUB_DISABLE_SYMLINKS: copy blobs into snapshots
  long etag_timeout_s = 10;                         ///< HF_HUB_ETAG_TIMEOUT: timeout of the metadata (HEAD) request
  int max_retries = 4;                              ///< retries of 429 / 5xx / transfer errors (exponential backoff)
  long retry_base_ms = 1000;                        ///< first backoff delay; doubles each retry
  bool progress = true;                             ///< progress line on stderr for files ≥ 16 MiB
  std::string user_agent = "kvbench/0.1; hf_hub-compatible";

  /// Settings from the environment (see the field comments).
  static HubConfig from_env();
};

/// Sink for log lines (progress, retries). Default: stderr. Never receives the token.
using HubLogFn = std::function<void(const std::string&)>;

/// The client. Not thread-safe; one download at a time per instance (a file lock under
/// .locks/ serializes processes sharing a cache).
class HubClient {
 public:
  explicit HubClient(HubConfig cfg);
  ~HubClient();
  HubClient(const HubClient&) = delete;
  HubClient& operator=(const HubClient&) = delete;

  /// Local path (inside snapshots/) of the file, downloading it if needed. Errors (kvb::Error):
  /// 401/403 "gated or private repository: set HF_TOKEN" (input error), 404 entry/repo/revision
  /// not found (input error), network failure after retries and nothing cached (runtime
  /// error), offline mode without a cached copy (input error).
  std::string download(const HubFile& f);

  /// Resolves "org/name[@revision]" (or a local directory, returned as is) to a local snapshot
  /// directory holding the files the engine needs: config.json, generation_config.json,
  /// tokenizer*.json, special_tokens_map.json, *.safetensors and their index. The file list
  /// comes from GET {endpoint}/api/models/{repo}/revision/{rev} (siblings), or in offline mode
  /// from the cached snapshot.
  std::string resolve_model(const std::string& spec);

  /// Downloads a plain URL (e.g. a raw.githubusercontent.com file) to `dest` through
  /// `dest.incomplete` with Range resume and retries; checks `size` (0 = unknown) and `sha256`
  /// ("" = unknown) before renaming. No Authorization header is sent. Throws kvb::Error.
  void download_url(const std::string& url, const std::string& dest, const std::string& sha256, uint64_t size);

  /// Cache folder of a repo: {cache}/{type}s--{org}--{name}.
  std::string repo_folder(RepoType type, const std::string& repo_id) const;

  /// Replaces the log sink (tests capture it).
  void set_log(HubLogFn fn) { log_ = std::move(fn); }

  const HubConfig& config() const { return cfg_; }

  /// Number of HTTP requests sent so far (for tests and --verbose).
  int requests() const { return requests_; }

 private:
  struct Meta;
  net::Backoff backoff() const;  ///< cfg_.max_retries retries, retry_base_ms doubling
  std::string download_impl(const HubFile& f);
  Meta head(const std::string& url);
  void get_to_file(const std::string& url, const std::string& part_path, uint64_t expected_size, bool send_auth);
  std::string api_get(const std::string& url);
  std::string cached_path(const HubFile& f, const std::string& folder, std::string* commit_out) const;

  HubConfig cfg_;
  HubLogFn log_;
  int requests_ = 0;
};

/// The URL of a file: {endpoint}/{"" | datasets/ | spaces/}{repo}/resolve/{rev}/{path}, with
/// the revision percent-encoded without safe characters and the path keeping "/".
std::string hub_file_url(const std::string& endpoint, const HubFile& f);

/// Percent-encodes `s` (RFC 3986 unreserved characters kept, plus those in `safe`).
std::string percent_encode(const std::string& s, const std::string& safe);

}  // namespace kvb::datasets
