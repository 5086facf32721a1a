// Small file helpers shared by the loaders: bounded whole-file reads, read-only memory maps, JSON
// parsing and the output policy, turning every failure into a kvb::Error naming the file.
//
// Inputs (docs/robustness.md, "Input caps"): every file a command reads is opened with
// open_input, which refuses anything but a regular file (a directory, FIFO, device or socket;
// opened with O_NONBLOCK, so a FIFO never blocks) and a file larger than its kind's cap, checked
// on fstat before a byte is read; the reads themselves stop at the cap, so a file that grows
// while being read is bounded too.
//
// Outputs: check_output_path + write_output_file (or OutputFile) — see their comments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvb {

/// What a file input is, which sets its size cap (input_cap; the table is in docs/robustness.md).
enum class InputKind {
  kMetadata,        ///< config.json, generation_config.json, tokenizer_config.json, *.index.json,
                    ///< policy configs and pattern files: 64 MiB
  kTokenizer,       ///< tokenizer.json: 256 MiB
  kChatTemplate,    ///< a .jinja chat template or a prompt template file: 4 MiB
  kYaml,            ///< suites, run configs, a dataset's prompts.yaml: 16 MiB
  kMessages,        ///< tokenize --messages: 64 MiB
  kPrompts,         ///< fidelity --prompts / --text: 64 MiB
  kDataRecord,      ///< one record of a data file (a JSONL line, a JSON array element), or a data
                    ///< file read whole (a LongProc HTML page): 256 MiB
  kDataFile,        ///< a data file streamed record by record, or hashed: 4 GiB (LongMemEval-M
                    ///< is 2.7 GB)
  kCheckpoint,      ///< a policy checkpoint (.pth/.pt/.safetensors gates) read into memory: 4 GiB
  kPolicyMetadata,  ///< a learned policy's text beside its weights that changes what it does (a
                    ///< DuoAttention pattern .tsv and its config.json, a checkpoint's config.json,
                    ///< a shard index): 64 MiB
  kSmall,           ///< a token file or a Hub cache ref: 64 KiB
  kWeights,         ///< model weights (safetensors, GGUF), memory-mapped, never copied: no cap
};

/// The size cap of `kind` in bytes (UINT64_MAX for kWeights).
uint64_t input_cap(InputKind kind);

/// The cap as text for messages: "64 MiB", "4 GiB".
std::string cap_text(uint64_t bytes);

/// Opens `path` for reading as an input of `kind`: O_RDONLY | O_NONBLOCK | O_CLOEXEC (a FIFO is
/// not waited on), then fstat. Returns the descriptor (the caller closes it) and stores the size
/// in `*size`. Throws kvb::Error (exit 2) naming `path`: "cannot open: <errno text>" (a missing
/// file, a symlink loop, no permission), "is a directory", "is a FIFO / character device / block
/// device / socket, not a regular file", "<N> bytes is over the <cap> limit for <kind> files".
int open_input(const std::string& path, InputKind kind, uint64_t* size);

/// A file open_input opened (see opened_inputs).
struct OpenedInput {
  std::string path;  ///< as given to open_input
  InputKind kind;
};

/// Every file this process opened through open_input as a template (kChatTemplate), a data file
/// read whole (kDataRecord: a LongProc webpage), a policy checkpoint (kCheckpoint), a policy's
/// metadata (kPolicyMetadata) or weights (kWeights), in first-open order, each once (registered
/// before the open, so a file is listed even when its read then fails). Reading such a file registers it: `kvbench run`
/// hashes every one into the run's input identity (harness/input_identity.h), so no loader can
/// read an input that a resume would not notice changing. Thread-safe.
std::vector<OpenedInput> opened_inputs();

/// Reads a whole input file into a string, at most input_cap(kind) bytes (open_input's checks
/// first; a file that grows past the cap while read is refused). Throws kvb::Error naming `path`.
std::string read_file(const std::string& path, InputKind kind = InputKind::kMetadata);

/// A stdio stream over an input file (open_input's checks), whose reads end at input_cap(kind):
/// one byte past it makes the stream report an error and `*over_cap` (if given) true. For
/// streaming readers (data files). Close with std::fclose. Throws kvb::Error naming `path`.
std::FILE* open_input_stream(const std::string& path, InputKind kind, bool* over_cap = nullptr);

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

/// Parses JSON text read from `path` (read_file with `kind`, then parse_json with origin = path).
nlohmann::json parse_json_file(const std::string& path, InputKind kind = InputKind::kMetadata);

/// True when `path` names an existing regular file.
bool file_exists(const std::string& path);

/// True when `a` and `b` name the same existing file or directory (any spelling: relative,
/// through symlinks, hard links). False when either does not exist.
bool same_file(const std::string& a, const std::string& b);

/// The output policy (docs/robustness.md, "Outputs"), checked by every command that writes a
/// file before any work starts. Refuses (kvb::Error, exit 2), naming `option` and `out`:
///   - an output that is one of `inputs`: the same (st_dev, st_ino), or the same canonical path
///     when it does not exist yet: "<option> <out>: is also an input (<input>); name another file";
///   - an existing output inside an input that is a directory (a model folder's config.json or
///     safetensors, a dataset under --data-dir): "... is a file of the input directory <dir>";
///   - an existing output that is not a regular file (a directory, FIFO, character or block
///     device, socket, or a symbolic link, whatever it points to): only a regular file or a new
///     name is ever replaced: "<option> <out>: is a character device, not a regular file; ...";
///   - an output whose folder does not exist or is not a directory.
/// Empty entries of `inputs` are skipped.
void check_output_path(const std::string& out, const std::string& option, const std::vector<std::string>& inputs);

/// The not-a-regular-file check of check_output_path alone: refuses an existing `out` that is a
/// directory, FIFO, device, socket or symbolic link (kvb::Error, exit 2). A missing `out` passes.
void check_replaceable(const std::string& out, const std::string& option);

/// The first check of check_output_path alone (kept for its callers): refuses `out` when it is
/// one of `inputs` (same file, or same canonical path when it does not exist yet).
void check_output_not_input(const std::string& out, const std::string& option, const std::vector<std::string>& inputs);

/// Writes `text` to `path` through a temporary file in the same directory, fsync and a rename,
/// checking every write, the fsync and the close, so a failed write (disk full, EFBIG under
/// `ulimit -f`) leaves any old file whole and no partial file. A `path` that exists and is not
/// a regular file (a device, FIFO, directory or symbolic link) is refused, never replaced.
/// Throws kvb::Error naming `path`: ErrorKind::kRuntime "<path>: write failed (<errno text>)"
/// on an I/O failure, ErrorKind::kInput for a path that is not a regular file; no temporary
/// file remains.
void write_output_file(const std::string& path, const std::string& text);

/// A read-only memory map of a whole file (used for safetensors and GGUF weights), opened with
/// open_input(kWeights): a regular file only (a FIFO or device is refused, never waited on).
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
