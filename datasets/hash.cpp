#include "datasets/hash.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sys/stat.h>

#include "engine/util/error.h"

namespace kvb::datasets {

namespace {

struct MdCtx {
  EVP_MD_CTX* p = EVP_MD_CTX_new();
  ~MdCtx() { EVP_MD_CTX_free(p); }
};

std::string hex(const unsigned char* d, unsigned n) {
  static const char* k = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += k[d[i] >> 4];
    out += k[d[i] & 15];
  }
  return out;
}

std::string hash_file(const std::string& path, const EVP_MD* md, const std::string& prefix) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)), ErrorKind::kRuntime);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> guard(f, std::fclose);
  MdCtx ctx;
  EVP_DigestInit_ex(ctx.p, md, nullptr);
  if (!prefix.empty()) EVP_DigestUpdate(ctx.p, prefix.data(), prefix.size());
  std::string buf(1 << 20, '\0');
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) EVP_DigestUpdate(ctx.p, buf.data(), n);
  if (std::ferror(f)) throw Error(fmt::format("{}: read error", path), ErrorKind::kRuntime);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx.p, out, &len);
  return hex(out, len);
}

}  // namespace

std::string sha256_file(const std::string& path) { return hash_file(path, EVP_sha256(), ""); }

std::string sha256_hex(const std::string& bytes) {
  MdCtx ctx;
  EVP_DigestInit_ex(ctx.p, EVP_sha256(), nullptr);
  EVP_DigestUpdate(ctx.p, bytes.data(), bytes.size());
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx.p, out, &len);
  return hex(out, len);
}

std::string git_blob_sha1_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(fmt::format("{}: cannot stat: {}", path, std::strerror(errno)), ErrorKind::kRuntime);
  std::string prefix = "blob " + std::to_string(st.st_size);
  prefix.push_back('\0');
  return hash_file(path, EVP_sha1(), prefix);
}

}  // namespace kvb::datasets
