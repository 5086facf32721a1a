// SHA-256 / git blob SHA-1 over OpenSSL's EVP interface; see engine/util/hash.h.
#include "engine/util/hash.h"

#include <unistd.h>

#include <openssl/evp.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "engine/util/error.h"
#include "engine/util/io.h"

namespace kvb {

namespace {

/// One digest computation: init, updates, final hex.
class Digest {
 public:
  explicit Digest(const EVP_MD* md) : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_, md, nullptr) != 1)
      throw Error("hash: OpenSSL EVP_DigestInit failed", ErrorKind::kRuntime);
  }
  ~Digest() { EVP_MD_CTX_free(ctx_); }
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;

  void update(const void* p, size_t n) {
    if (EVP_DigestUpdate(ctx_, p, n) != 1) throw Error("hash: OpenSSL EVP_DigestUpdate failed", ErrorKind::kRuntime);
  }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    if (EVP_DigestFinal_ex(ctx_, md, &len) != 1)
      throw Error("hash: OpenSSL EVP_DigestFinal failed", ErrorKind::kRuntime);
    static const char* k = "0123456789abcdef";
    std::string out(2 * len, '0');
    for (unsigned i = 0; i < len; ++i) {
      out[2 * i] = k[md[i] >> 4];
      out[2 * i + 1] = k[md[i] & 15];
    }
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

std::string hash_file(const std::string& path, const EVP_MD* md, const std::string& prefix) {
  // A regular file (engine/util/io.h open_input: a FIFO or device is refused, not read forever).
  const int fd = open_input(path, InputKind::kWeights, nullptr);
  std::FILE* f = ::fdopen(fd, "rb");
  if (!f) {
    ::close(fd);
    throw Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)), ErrorKind::kRuntime);
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> guard(f, std::fclose);
  Digest d(md);
  d.update(prefix.data(), prefix.size());
  std::string buf(1 << 20, '\0');
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) d.update(buf.data(), n);
  if (std::ferror(f)) throw Error(fmt::format("{}: read error", path), ErrorKind::kRuntime);
  return d.hex();
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  Digest d(EVP_sha256());
  d.update(data.data(), data.size());
  return d.hex();
}

std::string sha256_file(const std::string& path) { return hash_file(path, EVP_sha256(), ""); }

std::string git_blob_sha1_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(fmt::format("{}: cannot stat: {}", path, std::strerror(errno)), ErrorKind::kRuntime);
  std::string prefix = "blob " + std::to_string(st.st_size);
  prefix.push_back('\0');
  return hash_file(path, EVP_sha1(), prefix);
}

}  // namespace kvb
