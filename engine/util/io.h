// Small file helpers shared by the loaders: whole-file reads, read-only memory maps and JSON
// parsing that turn every failure into a kvb::Error naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvb {

/// Reads a whole file into a string. Throws kvb::Error naming `path` if it cannot be read.
std::string read_file(const std::string& path);

/// Deepest nesting of objects and arrays accepted in any JSON input (config.json, tokenizer.json,
/// safetensors headers, dataset records, --messages, judge replies). Real inputs stay far below
/// it; deeper documents are rejected while parsing, before they are built (a 100,000-deep array
/// would otherwise overflow the stack in code that walks it recursively).
inline constexpr int kMaxJsonDepth = 256;

/// Parses JSON `text` that came from `origin` (a file name, or e.g. "--messages") with the
/// project's limits. Throws kvb::Error (exit 2), one line naming `origin`:
///   "<origin>: invalid JSON at byte N: <parser message>",
///   "<origin>: JSON nested deeper than 256 levels",
///   "<origin>: number out of range: <the number>" (a literal beyond ±1.8e308).
nlohmann::json parse_json(std::string_view text, const std::string& origin);
/// The same, keeping object key order (chat messages rendered by templates).
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& origin);

/// Parses JSON text read from `path` (parse_json with origin = path).
nlohmann::json parse_json_file(const std::string& path);

/// True when `path` names an existing regular file.
bool file_exists(const std::string& path);

/// True when `a` and `b` name the same existing file or directory (any spelling: relative,
/// through symlinks, hard links). False when either does not exist.
bool same_file(const std::string& a, const std::string& b);

/// Refuses (kvb::Error, exit 2) an output path that names one of `inputs` (same_file, or the
/// same spelling when neither exists yet): "<option> <out>: is also an input (<input>); name
/// another file". Called before any work starts, so an input is never overwritten.
void check_output_not_input(const std::string& out, const std::string& option, const std::vector<std::string>& inputs);

/// Writes `text` to `path` through a temporary file in the same directory and a rename, so a
/// failed write (disk full, EFBIG under `ulimit -f`) leaves any old file whole, and a symlink at
/// `path` is replaced rather than written through (the write stays in the directory named).
/// Throws kvb::Error (ErrorKind::kRuntime) naming `path` on failure; no temporary file remains.
void write_output_file(const std::string& path, const std::string& text);

/// A read-only memory map of a whole file (used for safetensors and GGUF weights).
/// Move-only; unmaps on destruction. Throws kvb::Error naming the file on failure.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvb
