// Small file helpers shared by the loaders: whole-file reads, read-only memory maps and JSON
// parsing that turn every failure into a kvb::Error naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace kvb {

/// Reads a whole file into a string. Throws kvb::Error naming `path` if it cannot be read.
std::string read_file(const std::string& path);

/// Parses JSON text read from `path`; throws kvb::Error("<path>: invalid JSON at byte N: ...").
nlohmann::json parse_json_file(const std::string& path);

/// True when `path` names an existing regular file.
bool file_exists(const std::string& path);

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
