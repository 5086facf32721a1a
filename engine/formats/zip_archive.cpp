#include "engine/formats/zip_archive.h"

#include <filesystem>
#include <memory>
#include <system_error>

#include <zip.h>

#include "engine/util/error.h"

namespace kvb {

namespace {

std::string zip_error_text(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string s = zip_error_strerror(&e);
  zip_error_fini(&e);
  return s;
}

struct ZipFileCloser {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};

}  // namespace

ZipArchive::ZipArchive(const std::string& path) : path_(path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) == 0 && !ec)
    fail("{}: not a readable ZIP archive (corrupt or truncated?): the file is empty", path);  // libzip: empty archive
  int err = 0;
  z_ = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &err);
  if (!z_) {
    if (err == ZIP_ER_NOENT || err == ZIP_ER_OPEN)
      throw Error(fmt::format("{}: cannot open ZIP archive: {}", path, zip_error_text(err)), ErrorKind::kRuntime);
    fail("{}: not a readable ZIP archive (corrupt or truncated?): {}", path, zip_error_text(err));
  }
}

ZipArchive::~ZipArchive() {
  if (z_) zip_discard(z_);  // read-only: nothing to write back
}

std::vector<std::string> ZipArchive::members() const {
  std::vector<std::string> out;
  zip_int64_t n = zip_get_num_entries(z_, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* name = zip_get_name(z_, static_cast<zip_uint64_t>(i), ZIP_FL_ENC_GUESS);
    if (name) out.emplace_back(name);
  }
  return out;
}

bool ZipArchive::has(const std::string& member) const { return zip_name_locate(z_, member.c_str(), 0) >= 0; }

void ZipArchive::missing(const std::string& member) const {
  auto names = members();
  std::string eg;
  for (size_t i = 0; i < names.size() && i < 5; ++i) eg += (i ? ", " : "") + names[i];
  fail("{}: member '{}' not found (the archive has {} members{}{})", path_, member, names.size(),
       names.empty() ? "" : ", e.g. ", eg);
}

uint64_t ZipArchive::size_of(const std::string& member) const {
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat(z_, member.c_str(), 0, &st) != 0) missing(member);
  if (!(st.valid & ZIP_STAT_SIZE)) fail("{}: member '{}': size unknown", path_, member);
  return st.size;
}

void ZipArchive::read(const std::string& member, const std::function<void(const char*, size_t)>& sink,
                      size_t chunk) const {
  zip_int64_t idx = zip_name_locate(z_, member.c_str(), 0);
  if (idx < 0) missing(member);
  std::unique_ptr<zip_file_t, ZipFileCloser> f(zip_fopen_index(z_, static_cast<zip_uint64_t>(idx), 0));
  if (!f) fail("{}: member '{}': cannot open: {}", path_, member, zip_strerror(z_));
  std::vector<char> buf(chunk ? chunk : 1);
  for (;;) {
    zip_int64_t n = zip_fread(f.get(), buf.data(), buf.size());
    if (n < 0) fail("{}: member '{}': corrupt data: {}", path_, member, zip_file_strerror(f.get()));
    if (n == 0) break;
    sink(buf.data(), static_cast<size_t>(n));
  }
}

std::string ZipArchive::read_all(const std::string& member) const {
  std::string out;
  read(member, [&](const char* d, size_t n) { out.append(d, n); });
  return out;
}

}  // namespace kvb
