#include "datasets/zip_archive.h"

namespace kvb::datasets {

std::string zip_member_name(const std::string& zip_path, const std::string& member) { return zip_path + "!" + member; }

size_t read_jsonl_zip(const std::string& zip_path, const std::string& member, const RecordFn& fn, BadRecords& bad) {
  ZipArchive z(zip_path);
  JsonlStream lines(zip_member_name(zip_path, member), fn, bad);
  z.read(member, [&](const char* d, size_t n) { lines.feed(d, n); });
  return lines.finish();
}

}  // namespace kvb::datasets
