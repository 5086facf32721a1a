// The Hub client's reading of a HEAD response (datasets/hub.h parse_file_metadata) from raw
// header lines as net::add_header_line receives them. Byte 0 picks the status (200, 302, 401,
// 404, 500) and whether an absolute redirect was taken; the rest is split into lines. Contract:
// either kvb::Error (a refused server-supplied value: one line, naming the URL) or metadata
// whose commit is 40 and etag 40 or 64 lowercase hex digits — never a value that could climb
// out of the cache folder as a path component.
#include "datasets/hub.h"
#include "fuzz/fuzz_support.h"
#include "net/http.h"

namespace {
bool lower_hex(const std::string& s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const long kStatus[] = {200, 302, 401, 404, 500};
  const long status = kStatus[(data[0] & 7) % 5];
  const std::string location = (data[0] & 8) ? "https://cdn.example/x" : "";
  const std::string_view text = kvb::fuzz::as_text(data + 1, size - 1);
  std::map<std::string, std::string> headers;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) nl = text.size() - 1;
    kvb::net::add_header_line(text.substr(at, nl - at + 1), headers);
    at = nl + 1;
  }
  const std::string url = "http://127.0.0.1:1/datasets/org/name/resolve/main/f.json";
  try {
    const kvb::datasets::FileMetadata m = kvb::datasets::parse_file_metadata(status, headers, url, location);
    if (m.ok && (m.commit.size() != 40 || !lower_hex(m.commit) || (m.etag.size() != 40 && m.etag.size() != 64) ||
                 !lower_hex(m.etag)))
      __builtin_trap();  // a name that is not a hash reached the caller
    if (!m.ok && (m.error.empty() || m.error.find('\n') != std::string::npos)) __builtin_trap();
    if (!m.commit.empty() && (m.commit.size() != 40 || !lower_hex(m.commit))) __builtin_trap();
  } catch (const kvb::Error& e) {
    const std::string w = e.what();
    if (w.rfind(url, 0) != 0 || w.find('\n') != std::string::npos || w.find('\0') != std::string::npos)
      __builtin_trap();  // one line, naming the URL
  }
  return 0;
}
