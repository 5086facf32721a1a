// Content hashes used to verify downloads and mirrors (OpenSSL EVP).
#pragma once

#include <string>

namespace kvb::datasets {

/// Lower-case hex sha256 of a file's bytes. Throws kvb::Error naming the file on I/O errors.
std::string sha256_file(const std::string& path);
/// Lower-case hex sha256 of a byte string.
std::string sha256_hex(const std::string& bytes);
/// Git blob id of a file: hex sha1 of "blob <size>\0" + bytes (what the Hub returns as the
/// ETag of non-LFS files; datasets-graders.md §11.3).
std::string git_blob_sha1_file(const std::string& path);

}  // namespace kvb::datasets
