// The identity of a run's inputs (issue 40): the SHA-256 of every file `kvbench run` reads — a
// model's weights (the safetensors file or shards and their index, or the GGUF), config.json and
// generation_config.json, tokenizer.json and tokenizer_config.json, chat_template.jinja /
// chat_template.json, and each task's dataset files — recorded with the run (results/store.h
// RunInput, table run_inputs) so that a resume or a merge never mixes results of changed inputs.
//
// Hashes are computed once per process (memoised by path) and may be reused across processes
// from the results database's file_hashes table: an entry is used only while the file keeps the
// device, inode, size, mtime and ctime (nanoseconds) it had when it was hashed, and an entry is
// written only for a file whose mtime and ctime were over kRacyWindowNs older than the start of
// its hashing and that did not change while it was read (git's "racy clean" rule), so a write
// within the file system's timestamp granularity cannot hide behind a cached hash.
// docs/results.md#input-identity.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "results/store.h"

namespace kvb::cli {

struct LoadedTasks;

/// How recent (nanoseconds) a file's mtime or ctime may be, relative to the start of its
/// hashing, for its hash to be cached: 2 s.
inline constexpr int64_t kRacyWindowNs = 2'000'000'000;

/// A file's identity as stat(2) reports it (the cache key besides the path).
struct FileStat {
  int64_t dev = 0, inode = 0, bytes = 0, mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileStat&) const = default;
};

/// stat(2) of `path` (following symbolic links). Throws kvb::Error (kInput) naming the file when
/// it does not exist or is not a regular file (a FIFO or device would never end), kRuntime on
/// other stat errors.
FileStat stat_input_file(const std::string& path);

/// Whether a hash computed from a file that had `before` when its hashing started at
/// `start_ns` (CLOCK_REALTIME nanoseconds) and `after` when it ended may be cached: unchanged
/// while read, and mtime and ctime at least kRacyWindowNs before start_ns.
bool hash_cacheable(const FileStat& before, const FileStat& after, int64_t start_ns);

/// Makes the file_hashes table of the results database `db` the cache of hash_input_file, read
/// once now (read-only). A missing file, or one that is not a kvbench database at the current
/// schema version, gives no cache (the run itself reports a bad database later). Call before
/// the first hash_input_file.
void use_hash_cache(const std::string& db);

/// The SHA-256 (hex) and size of the regular file `path`, from this process's memo, else the
/// cache (when the file's FileStat equals the cached one), else read once in 1 MiB blocks.
/// Throws kvb::Error naming the file when it is missing, not a regular file, unreadable
/// (kRuntime), or changed while it was read (kRuntime).
results::RunInput hash_input_file(const std::string& path);

/// Stats again every file this process hashed and throws kvb::Error (kRuntime) naming the first
/// one whose FileStat changed since (or that is gone): `kvbench run` calls it after loading each
/// model, so generations never come from a file other than the one its run recorded.
void recheck_input_files();

/// The hashes this process computed that may be cached (hash_cacheable), for
/// Store::put_file_hashes once the run's database is open.
std::vector<results::FileHash> cacheable_file_hashes();

/// Bytes this process read to hash files, and bytes whose hash came from the cache.
struct HashCounters {
  int64_t bytes_read = 0, bytes_from_cache = 0;
};
HashCounters hash_counters();

/// The files model `spec` (a --model value) is read from, hashed, in a fixed order: weights
/// (model.safetensors, or model.safetensors.index.json and its shards; a .gguf file, or the
/// default model's GGUF, which also holds the tokenizer and chat template), config
/// (config.json, generation_config.json), tokenizer (tokenizer.json, tokenizer_config.json),
/// chat_template (chat_template.jinja, chat_template.json). Files that do not exist are left
/// out. Each RunInput's owner is `spec`, its name the file name. Throws kvb::Error as
/// hash_input_file, and for a malformed safetensors index.
std::vector<results::RunInput> model_inputs(const std::string& spec);

/// The dataset files each suite task of `lt` located (LoadedTasks::data_files), hashed: role
/// "dataset", owner the task spec, name the registry key. Throws kvb::Error as hash_input_file.
std::vector<results::RunInput> dataset_inputs(const LoadedTasks& lt);

/// Fills `info.inputs` with model_inputs of each of `model_specs` then dataset_inputs of `lt`,
/// and `info.datasets` with one row per suite task: source = the paths it located (", "
/// between them), sha256 = combined_sha256 of those files ("" for both when it located none).
/// Throws kvb::Error as hash_input_file.
void add_input_identity(results::RunInfo& info, const std::vector<std::string>& model_specs, const LoadedTasks& lt);

/// The content digest of a group of files as run_models and run_datasets record it: the
/// file's sha256 for one file, else SHA-256 of the concatenated hex digests (in order).
std::string combined_sha256(const std::vector<results::RunInput>& files);

}  // namespace kvb::cli
