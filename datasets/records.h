// Record readers for benchmark files: JSON Lines, top-level JSON arrays streamed element by
// element with bounded memory (LongMemEval-M is 2.75 GB, LongBench-v2 465 MB; see
// docs/benchmarks.md#longmemeval, #longbench-v2), and YAML documents converted to JSON.
//
// Every error names the file and the line (JSONL) or element index / byte (JSON arrays). A bad
// record either stops the load (OnBad::kFail, the default) or is skipped and remembered
// (OnBad::kSkip), which is what `--on-bad-example skip|fail` selects.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvb::datasets {

/// What to do with a record that cannot be used (malformed JSON line, missing field, ...).
enum class OnBad {
  kFail,  ///< throw kvb::Error naming the file and line/element (default)
  kSkip,  ///< remember the message in BadRecords::skipped and go on with the next record
};

/// Parses "skip" / "fail"; throws kvb::Error for anything else.
OnBad parse_on_bad(const std::string& s);

/// Collects the fate of bad records during one load. Not thread-safe.
struct BadRecords {
  OnBad mode = OnBad::kFail;
  /// Messages of skipped records, each "<file>: line N: <why>" or "<file>: element N: <why>".
  std::vector<std::string> skipped;

  /// Handles one bad record described by `msg` (already naming file and line): throws
  /// kvb::Error(msg) in kFail mode, appends it to `skipped` in kSkip mode.
  void report(std::string msg);
};

/// Where a record came from, for error messages.
struct RecordPos {
  std::string file;  ///< path of the file
  size_t index = 0;  ///< 0-based record index (JSONL: among non-blank lines; arrays: element)
  size_t line = 0;   ///< 1-based line where the record starts (JSONL); 0 when unknown
  /// "file: line N" for JSONL records, "file: element N" otherwise.
  std::string where() const;
};

/// Called once per record. It may throw kvb::Error to flag the record as bad: the readers turn
/// that into BadRecords::report("<where>: <message>").
using RecordFn = std::function<void(nlohmann::json&& record, const RecordPos& pos)>;

/// Reads a JSON Lines file: one JSON value per line, blank lines ignored, a UTF-8 BOM on the
/// first line ignored. A line that is not valid JSON is reported as "<file>: line N: invalid
/// JSON: ...". Returns the number of records passed to `fn` without error.
/// Throws kvb::Error if the file cannot be opened or holds no record at all (empty or blank).
size_t read_jsonl(const std::string& path, const RecordFn& fn, BadRecords& bad);

/// Incremental JSON Lines reader for data that arrives in chunks (a ZIP member, a pipe): bytes
/// are fed in any chunking, each complete line is handled exactly as read_jsonl handles a line
/// of a file (same BOM, blank-line and error rules; positions name `name` and the 1-based line).
/// Memory: one line at a time. Not copyable; `bad` must outlive the stream.
class JsonlStream {
 public:
  JsonlStream(std::string name, RecordFn fn, BadRecords& bad);
  ~JsonlStream();
  JsonlStream(const JsonlStream&) = delete;
  JsonlStream& operator=(const JsonlStream&) = delete;
  /// Consumes `n` bytes; calls the record function for every line completed by them.
  void feed(const char* data, size_t n);
  /// Handles a last line without a final newline; returns the number of records passed to the
  /// record function without error (same count read_jsonl returns).
  size_t finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Streams the elements of a file whose top-level value is a JSON array, calling `fn` with
/// each element as soon as it is complete (memory: one element at a time). A syntax error
/// anywhere aborts the load (it cannot be skipped) with "<file>: line L, byte B: invalid JSON:
/// ...". Errors thrown by `fn` for one element are reported through `bad`.
/// Returns the number of elements passed to `fn` without error.
size_t stream_json_array(const std::string& path, const RecordFn& fn, BadRecords& bad);

/// Reads `path` as a JSON array when its first non-blank character is '[', else as JSONL.
size_t read_records(const std::string& path, const RecordFn& fn, BadRecords& bad);

/// Like RecordFn, but objects keep the key order of the file (needed where the reference
/// re-serializes records with Python's json.dumps, e.g. LongMemEval sessions).
using OrderedRecordFn = std::function<void(nlohmann::ordered_json&& record, const RecordPos& pos)>;

/// read_records with insertion-ordered objects.
size_t read_records_ordered(const std::string& path, const OrderedRecordFn& fn, BadRecords& bad);

/// Loads a YAML file (yaml-cpp) as JSON: maps → objects, sequences → arrays, plain scalars
/// that look like YAML 1.2 core-schema ints/floats/bools/null → numbers/bools/null, every
/// other scalar (and every quoted scalar) → string. Block scalars keep their text exactly as
/// PyYAML's safe_load would (`|-` strips the final newline). Throws kvb::Error naming the file
/// and line on a syntax error.
nlohmann::json load_yaml_file(const std::string& path);

/// Same as load_yaml_file for YAML text in memory; `name` is used in error messages.
nlohmann::json parse_yaml(const std::string& text, const std::string& name);

}  // namespace kvb::datasets
