// Content hashes (OpenSSL EVP, libcrypto): the one wrapper the project uses for work-item, run
// and judge-cache keys (results/), download and mirror verification (datasets/) and model
// revisions (harness/).
#pragma once

#include <string>
#include <string_view>

namespace kvb {

/// SHA-256 (FIPS 180-4) of `data`, as 64 lower-case hex digits. Throws kvb::Error(kRuntime) if
/// libcrypto fails.
std::string sha256_hex(std::string_view data);

/// SHA-256 of a file's bytes, as 64 lower-case hex digits, read in 1 MiB blocks. Throws
/// kvb::Error(kRuntime) naming the file when it cannot be opened or read.
std::string sha256_file(const std::string& path);

/// Git blob id of a file: hex SHA-1 of "blob <size>\0" + bytes (what the Hugging Face Hub
/// returns as the ETag of non-LFS files; docs/benchmarks.md). Throws kvb::Error(kRuntime) naming
/// the file on I/O errors.
std::string git_blob_sha1_file(const std::string& path);

}  // namespace kvb
