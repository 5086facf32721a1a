// kvb::read_torch_checkpoint — PyTorch `.pth` / `.pt` files (torch.save's ZIP format, torch ≥ 1.6)
// read as a flat {name → tensor} state dict, WITHOUT executing anything (docs/policies.md#gate-files).
//
// The format (torch/serialization.py `_save`, `_load`): a ZIP archive, members stored
// uncompressed, all under one top folder whose name varies ("archive", the file's stem, ...):
//   <top>/data.pkl      a pickle (protocol 2 by default) of the saved object; every storage is a
//                       persistent id ("storage", torch.<T>Storage, key, location, numel)
//   <top>/data/<key>    the raw bytes of storage <key> (numel elements of T, byte order below)
//   <top>/byteorder     "little" or "big" (torch ≥ 2.1; absent = little)
//   <top>/version, <top>/.data/serialization_id, ...   (ignored)
// A tensor is the pickle call torch._utils._rebuild_tensor_v2(storage, storage_offset, size,
// stride, requires_grad, backward_hooks[, metadata]); an nn.Parameter wraps it in
// torch._utils._rebuild_parameter(tensor, requires_grad, backward_hooks) (or ..._with_state).
//
// The unpickler is RESTRICTED (like torch.load(weights_only=True), but stricter): it implements
// only the opcodes a state dict of tensors needs (PROTO, FRAME, GLOBAL, STACK_GLOBAL, MARK,
// EMPTY_DICT, EMPTY_TUPLE, TUPLE/TUPLE1-3, EMPTY_LIST, LIST, APPEND, APPENDS,
// BINUNICODE/SHORT_BINUNICODE/BINUNICODE8, BININT,
// BININT1, BININT2, LONG1, NONE, NEWTRUE, NEWFALSE, BINPUT, LONG_BINPUT, MEMOIZE, BINGET,
// LONG_BINGET, SETITEM, SETITEMS, REDUCE, BUILD, BINPERSID, STOP) and names only these globals:
// collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter,
// torch._utils._rebuild_parameter_with_state and torch.{Float,BFloat16,Half}Storage. Anything
// else (os.system, builtins.eval, a REDUCE of a storage type, floats, ...) is refused
// with one kvb::Error "<file>: <member>: byte N: <what>" before any object is built from it.
//
// Nesting: the top dict's values may be dicts and lists of tensors in turn (at most 16 levels),
// read under dotted names as nn.Module.state_dict names nested modules: a dict key as it is, a list
// element by its index. The published Fast-KVzip gates ({"module": [state dict of layer 0, ...]})
// so read as module.0.q_proj.weight, module.0.k_base, ... A container reached twice (inside
// itself, or shared by two entries) is refused.
//
// Bounds: every read is checked against the pickle's length; object, memo and nesting counts
// are capped; every tensor must be contiguous and lie inside its storage; two tensors may share
// a storage only with identical or disjoint byte ranges; a storage member must hold exactly
// numel × element size bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvb {

/// Element type of a checkpoint tensor (the storage class it was saved with).
enum class TorchDType {
  kF32,   ///< torch.FloatStorage
  kF16,   ///< torch.HalfStorage
  kBF16,  ///< torch.BFloat16Storage
};

/// Size of one element in bytes (4 or 2).
size_t torch_dtype_size(TorchDType t);
/// "F32", "F16" or "BF16" (safetensors spelling).
const char* torch_dtype_name(TorchDType t);

/// One tensor of a state dict as the pickle describes it (before its storage is read).
struct TorchTensorRecord {
  std::string name;         ///< the dict key
  std::string storage_key;  ///< "0", "1", ... (member <top>/data/<key>)
  TorchDType dtype = TorchDType::kF32;
  int64_t storage_numel = 0;   ///< elements the persistent id declares for the storage
  int64_t offset = 0;          ///< storage_offset, in elements
  std::vector<int64_t> shape;  ///< row-major, outermost first; contiguous
  int64_t numel() const;
};

/// Parses the pickle `pkl` of a saved state dict: a dict or collections.OrderedDict whose keys
/// are strings and whose values are tensors or nn.Parameters, or dicts and lists of them (named
/// by dotted paths, see the file comment). `file` and `member` name the source
/// in errors. Returns the tensors in pickle order. Throws kvb::Error (input error)
/// "<file>: <member>: byte N: <what>" for any opcode, global, call or value outside the subset
/// described above, a truncated or malformed pickle, a non-contiguous tensor, a tensor outside
/// its storage, or a key that appears twice. Never executes anything; memory is bounded by a
/// constant factor of pkl.size().
std::vector<TorchTensorRecord> parse_torch_state_dict_pickle(std::string_view pkl, const std::string& file,
                                                             const std::string& member);

/// One tensor of a loaded checkpoint: a view into its (shared) storage bytes, little-endian.
struct TorchTensor {
  TorchDType dtype = TorchDType::kF32;
  std::vector<int64_t> shape;
  std::shared_ptr<const std::string> storage;  ///< the whole storage member
  size_t byte_offset = 0;                      ///< start of this tensor in *storage
  int64_t numel() const;
  /// numel() × element size bytes starting at storage->data() + byte_offset.
  const char* data() const { return storage->data() + byte_offset; }
};

/// A state dict read from a .pth/.pt file.
struct TorchCheckpoint {
  std::string path;
  std::vector<std::pair<std::string, TorchTensor>> tensors;  ///< pickle order
};

/// True when the file starts with a ZIP local-file header ("PK\x03\x04"): torch.save's format
/// since torch 1.6 (and any other ZIP archive). False for short files. Opens through open_input:
/// throws kvb::Error (exit 2) naming `path` for a missing file, a FIFO, device or socket, or a
/// file over the checkpoint cap, never blocking on it.
bool looks_like_zip(const std::string& path);

/// Reads `path` (see the file comment). Throws kvb::Error (input error) naming the file and the
/// member or field: not a ZIP archive (including torch's pre-1.6 legacy format), no or several
/// <top>/data.pkl, a big-endian byteorder, a refused pickle (parse_torch_state_dict_pickle), a
/// missing storage member or one whose size differs from numel × element size, tensors that
/// overlap partially in one storage, a corrupt or truncated archive (ZipArchive errors).
TorchCheckpoint read_torch_checkpoint(const std::string& path);

}  // namespace kvb
