// Reading members of ZIP archives in place, with libzip (Debian libzip-dev) — no system `unzip`,
// no extraction to disk. Used for benchmark files (LongBench v1 ships its JSONL files only inside
// the Hub's data.zip; datasets/zip_archive.h, docs/benchmarks.md#longbench) and for PyTorch
// checkpoints, which are ZIP archives (engine/formats/torch_checkpoint.h). Members are decompressed as a stream in bounded memory and
// their CRC-32 is checked by libzip at the end of each member.
//
// Every error is one kvb::Error naming the archive and, for member errors, the member:
//   "<zip>: not a readable ZIP archive: <libzip reason>"                  (corrupt / truncated)
//   "<zip>: member '<m>' not found (the archive has N members, e.g. ...)"  (missing member)
//   "<zip>: member '<m>': <libzip reason>"                                 (bad data, CRC error)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

typedef struct zip zip_t;

namespace kvb {

/// A ZIP archive opened read-only. Not thread-safe (libzip archives are not); cheap to open.
class ZipArchive {
 public:
  /// Opens `path`. Throws kvb::Error (input error) when the file is missing or is not a
  /// readable ZIP archive (no end-of-central-directory record, inconsistent directory, ...).
  explicit ZipArchive(const std::string& path);
  ~ZipArchive();
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  /// Path the archive was opened from (used in every error message).
  const std::string& path() const { return path_; }
  /// Names of all members (files and directory entries), in central-directory order.
  std::vector<std::string> members() const;
  /// True when a member named exactly `member` exists ("/"-separated, case-sensitive).
  bool has(const std::string& member) const;
  /// Uncompressed size of `member` in bytes. Throws kvb::Error when it does not exist.
  uint64_t size_of(const std::string& member) const;

  /// Decompresses `member` and hands its bytes to `sink` in chunks of at most `chunk` bytes
  /// (memory: one chunk). Throws kvb::Error naming archive and member when the member is
  /// missing, uses an unsupported compression method or encryption, its compressed data is
  /// corrupt, or its CRC-32 does not match. Errors thrown by `sink` propagate unchanged.
  void read(const std::string& member, const std::function<void(const char* data, size_t n)>& sink,
            size_t chunk = size_t{1} << 20) const;

  /// The whole member as a string (small members only: held in memory).
  std::string read_all(const std::string& member) const;

 private:
  [[noreturn]] void missing(const std::string& member) const;
  std::string path_;
  zip_t* z_ = nullptr;
};

}  // namespace kvb
