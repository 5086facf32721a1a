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
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "net/http.h"

namespace kvb::datasets {

/// Kind of Hub repository (URL prefix and cache folder prefix).
enum class RepoType { kModel, kDataset, kSpace };

/// The size cap of a download of `path` (a file name inside a repository of `type`): the input
/// cap (engine/util/io.h input_cap) of the kind kvbench will read it as, so nothing is
/// downloaded that would be refused when read: weights (.safetensors, .gguf, .bin) none; .pth /
/// .pt and every file of a dataset repository 4 GiB; tokenizer.json 256 MiB; .jinja 4 MiB;
/// .yaml 16 MiB; any other file of a model repository (config.json, an index) 64 MiB.
uint64_t download_cap(RepoType type, const std::string& path);

/// One file in a Hub repository at a revision (branch, tag, "refs/pr/N" or 40-hex commit).
struct HubFile {
  RepoType type = RepoType::kDataset;
  std::string repo_id;  ///< "org/name"
  std::string revision = "main";
  std::string path;  ///< path inside the repo, "/"-separated
};

/// What the HEAD of a resolve URL says about a file. Every server-supplied name in it is
/// validated (parse_file_metadata): `commit` is 40 lowercase hex digits, `etag` a content hash
/// (40 or 64 lowercase hex digits), so either can be a cache path component.
struct FileMetadata {
  bool ok = false;           ///< commit, etag (and maybe size) are set
  long status = 0;           ///< HTTP status of the last response
  std::string error;         ///< why it failed (one line, no token inside)
  bool input_error = false;  ///< 401/403/404: the user's fault
  bool entry_missing = false;
  std::string commit;    ///< X-Repo-Commit
  std::string etag;      ///< X-Linked-Etag, else ETag, normalised (no W/, no quotes)
  std::string location;  ///< an absolute redirect (the CDN URL), "" if none
  uint64_t size = 0;     ///< X-Linked-Size, else Content-Length when not redirected (0: unknown)
};

/// Reads the metadata of a HEAD response (`status`, lower-case `headers` as net::Response
/// holds them) of `url`; `location` is an absolute redirect already taken from it ("" if none).
/// HTTP failures (401/403/404/other >= 400) are returned with ok = false and `error` set.
/// A server-supplied value that is not what the Hub sends throws kvb::Error (ErrorKind::kRuntime,
/// exit 1) naming `url` and the header, before anything is written: X-Repo-Commit not 40
/// lowercase hex digits, an ETag that is not a content hash after normalize_etag, a size that is
/// not a decimal number below 2^63. Never uses a value as a path.
FileMetadata parse_file_metadata(long status, const std::map<std::string, std::string>& headers, const std::string& url,
                                 const std::string& location);

/// `value` (the header `header` of `url`'s response) when it is a commit id: exactly 40
/// lowercase hex digits. Throws kvb::Error (kRuntime) "<url>: <header>: '<value>': not a
/// 40-hex-digit commit id ..." otherwise (the value quoted with \xNN escapes, at most 64 bytes).
std::string checked_commit(std::string_view value, const std::string& url, const std::string& header);

/// A server's ETag as a content hash, as huggingface_hub normalises it: a leading "W/" and the
/// double quotes removed; the rest must be 40 (git blob sha1) or 64 (sha256) lowercase hex
/// digits. Throws kvb::Error (kRuntime) naming `url` and `header` otherwise.
std::string normalize_etag(std::string_view value, const std::string& url, const std::string& header);

/// Checks the names a user or a task gives the client before any is joined to the cache path:
/// `repo_id` is "name" or "org/name" with [A-Za-z0-9._-] parts other than "." and "..";
/// `revision` and `path` are "/"-separated parts, none empty, "." or "..", with no control
/// character or backslash, at most 1024 bytes (`path` may not start with "/"). Throws kvb::Error
/// (ErrorKind::kInput, exit 2) "<what>: <field> '<value>': <why>".
void check_hub_names(const std::string& repo_id, const std::string& revision, const std::string& path,
                     const std::string& what);

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
  /// Overall deadline of one download attempt: deadline_base_s + bytes / min_rate_bps seconds
  /// (the announced size; max_unknown_bytes when none is announced). A body dripping slower than
  /// that is cut off, whatever its per-second rate (issue 46, item 4).
  long deadline_base_s = 120;
  uint64_t min_rate_bps = 64 * 1024;  ///< bytes per second the deadline allows for
  /// Size cap of a download whose size was not announced (a plain URL without a known size);
  /// a body longer than an announced size is always refused at the first byte past it. Each
  /// download is also capped by the kind of file it is (download_cap: a config.json at 64 MiB,
  /// a tokenizer at 256 MiB, a checkpoint or data file at 4 GiB), announced or not.
  uint64_t max_unknown_bytes = uint64_t{4} << 30;
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
  /// directory holding the files the engine reads and nothing else: config.json,
  /// generation_config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja/.json,
  /// and the weights as the loader reads them (model.safetensors.index.json and the shards its
  /// weight_map names when the repository has an index, else model.safetensors). The file list
  /// comes from GET {endpoint}/api/models/{repo}/revision/{rev} (siblings); every file is fetched
  /// at the commit that answer names, and refs/{rev} then points at it. A commit id whose
  /// snapshot already holds config.json and every weight file is used without a request. With
  /// HF_HUB_OFFLINE no request is made: refs/{rev} (or the commit itself) picks the cached
  /// snapshot. When the Hub
  /// cannot be reached (network, 5xx, 401) a cached snapshot of {rev} is used, as transformers
  /// does. Errors (kvb::Error): not cached while offline, no config.json, no weights (input);
  /// the Hub unreachable with nothing cached (runtime).
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
  net::Backoff backoff() const;  ///< cfg_.max_retries retries, retry_base_ms doubling
  std::string download_impl(const HubFile& f);
  FileMetadata head(const std::string& url);
  /// GETs `url` into `part_path` (resuming what is there), at most `expected_size` bytes (0 = not
  /// announced: at most min(max_unknown_bytes, `cap`)) within the overall deadline. An announced
  /// size over `cap` (the input cap of the kind the file will be read as, download_cap) is
  /// refused before any request. Throws kvb::Error (kRuntime) when cut off; nothing is kept.
  void get_to_file(const std::string& url, const std::string& part_path, uint64_t expected_size, bool send_auth,
                   uint64_t cap = UINT64_MAX);
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
