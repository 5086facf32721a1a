// JSON Lines read straight out of ZIP archives (LongBench v1 ships its JSONL files only inside the
// Hub's data.zip: data/<task>.jsonl and data/<task>_e.jsonl; see docs/benchmarks.md#longbench).
// The archive reader itself is kvb::ZipArchive (engine/formats/zip_archive.h), shared with the
// PyTorch checkpoint reader.
#pragma once

#include <cstddef>
#include <string>

#include "datasets/records.h"
#include "engine/formats/zip_archive.h"

namespace kvb::datasets {

using kvb::ZipArchive;

/// The name records of a ZIP member carry in error messages: "<zip>!<member>"
/// (e.g. ".../data.zip!data/hotpotqa.jsonl: line 3: missing field 'input'").
std::string zip_member_name(const std::string& zip_path, const std::string& member);

/// Reads member `member` of the archive `zip_path` as JSON Lines, streamed, with exactly the
/// rules of read_jsonl (records.h); positions name zip_member_name(zip_path, member).
/// Returns the number of records passed to `fn` without error. Throws as ZipArchive::read.
size_t read_jsonl_zip(const std::string& zip_path, const std::string& member, const RecordFn& fn, BadRecords& bad);

}  // namespace kvb::datasets
