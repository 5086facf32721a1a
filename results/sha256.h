// SHA-256 content hashing for work-item keys, run keys and judge-cache keys.
#pragma once

#include <string>
#include <string_view>

namespace kvb::results {

/// SHA-256 (FIPS 180-4) of `data`, as 64 lower-case hex digits. Computed with OpenSSL's EVP
/// interface (libcrypto). Throws kvb::Error(kRuntime) if libcrypto fails.
std::string sha256_hex(std::string_view data);

}  // namespace kvb::results
