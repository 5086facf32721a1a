// Dataset records: JSON Lines or a top-level JSON array through datasets/records.h read_records
// (the reader every task loader uses) and read_records_ordered (LongMemEval's key-ordered
// records), with bad records reported rather than thrown.
#include "datasets/records.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kvb::fuzz::scratch_file(data, size, "records.jsonl");
  kvb::fuzz::expect_ok_or_error([&] {
    kvb::datasets::BadRecords bad;
    kvb::datasets::read_records(
        path, [](nlohmann::json rec, const kvb::datasets::RecordPos&) { (void)rec.dump(); }, bad);
  });
  return kvb::fuzz::expect_ok_or_error([&] {
    kvb::datasets::BadRecords bad;
    kvb::datasets::read_records_ordered(
        path, [](nlohmann::ordered_json rec, const kvb::datasets::RecordPos&) { (void)rec.dump(); }, bad);
  });
}
