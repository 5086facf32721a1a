// Dataset records: JSON Lines through datasets/records.h read_records (the reader every task
// loader uses), with bad records reported rather than thrown.
#include "datasets/records.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kvb::fuzz::scratch_file(data, size, "records.jsonl");
  return kvb::fuzz::expect_ok_or_error([&] {
    kvb::datasets::BadRecords bad;
    kvb::datasets::read_records(path, [](nlohmann::json rec, const kvb::datasets::RecordPos&) { (void)rec.dump(); }, bad);
  });
}
