#include "engine/formats/torch_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include "engine/formats/zip_archive.h"
#include "engine/util/error.h"
#include "engine/util/io.h"

namespace kvb {

size_t torch_dtype_size(TorchDType t) { return t == TorchDType::kF32 ? 4 : 2; }

const char* torch_dtype_name(TorchDType t) {
  switch (t) {
    case TorchDType::kF32: return "F32";
    case TorchDType::kF16: return "F16";
    case TorchDType::kBF16: return "BF16";
  }
  return "?";
}

namespace {

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // dims are validated (each ≤ 2^40, product ≤ 2^48) when parsed
  return n;
}

// Caps: far above any real state dict (a 1000-layer model has ~10k tensors, ~20 objects each),
// low enough that a hostile pickle cannot exhaust memory.
constexpr size_t kMaxObjects = size_t{1} << 22;
constexpr size_t kMaxStack = size_t{1} << 20;
constexpr int64_t kMaxDim = int64_t{1} << 40;
constexpr int64_t kMaxNumel = int64_t{1} << 48;
constexpr size_t kMaxDims = 16;
// Dicts and lists nested inside the top dict (a module's state dicts under a key, in a list).
constexpr int kMaxNesting = 16;

/// The globals a state dict may name (everything else is refused at the GLOBAL opcode).
enum class Global { kOrderedDict, kRebuildTensorV2, kRebuildParameter, kRebuildParameterWithState, kStorage };

struct GlobalInfo {
  const char* module;
  const char* name;
  Global g;
  TorchDType dtype;  // kStorage only
};
constexpr GlobalInfo kGlobals[] = {
    {"collections", "OrderedDict", Global::kOrderedDict, TorchDType::kF32},
    {"torch._utils", "_rebuild_tensor_v2", Global::kRebuildTensorV2, TorchDType::kF32},
    {"torch._utils", "_rebuild_parameter", Global::kRebuildParameter, TorchDType::kF32},
    {"torch._utils", "_rebuild_parameter_with_state", Global::kRebuildParameterWithState, TorchDType::kF32},
    {"torch", "FloatStorage", Global::kStorage, TorchDType::kF32},
    {"torch", "HalfStorage", Global::kStorage, TorchDType::kF16},
    {"torch", "BFloat16Storage", Global::kStorage, TorchDType::kBF16},
};

std::string allowed_globals() {
  std::string s;
  for (const auto& g : kGlobals) s += std::string(s.empty() ? "" : ", ") + g.module + "." + g.name;
  return s;
}

enum class Kind { kNone, kBool, kInt, kStr, kTuple, kList, kDict, kGlobal, kStorage, kTensor };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kStr: return "str";
    case Kind::kTuple: return "tuple";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kGlobal: return "global";
    case Kind::kStorage: return "storage";
    case Kind::kTensor: return "tensor";
  }
  return "?";
}

/// One unpickled object. Objects live in an arena and refer to each other by index, so a
/// hostile pickle can build neither ownership cycles nor deep recursive destructors.
struct Obj {
  Kind kind = Kind::kNone;
  int64_t i = 0;                // int, bool; storage numel; tensor offset
  std::string s;                // str; storage key; global "module.name"
  std::vector<uint32_t> items;  // tuple and list elements; dict k0, v0, k1, v1, ...
  Global global = Global::kOrderedDict;
  TorchDType dtype = TorchDType::kF32;  // storage / tensor
  uint32_t storage = 0;                 // tensor: index of its storage object
  std::vector<int64_t> shape;           // tensor
};

class Unpickler {
 public:
  Unpickler(std::string_view p, const std::string& file, const std::string& member)
      : p_(p), file_(file), member_(member) {}

  std::vector<TorchTensorRecord> run() {
    const uint32_t top = execute();
    const Obj& d = objs_[top];
    if (d.kind != Kind::kDict)
      fail_at(file_, member_, "the pickle holds a {}, not a state dict (a dict of tensors)", kind_name(d.kind));
    std::vector<TorchTensorRecord> out;
    std::set<std::string> seen;
    std::set<uint32_t> listed;
    flatten(top, "", 0, listed, seen, out);
    return out;
  }

 private:
  /// The tensors below container `c` (a dict, or a list inside the top dict) in pickle order,
  /// named by their dotted path: dict keys as they are, list elements by their index, as torch's
  /// nn.Module.state_dict names nested modules ({"module": [sd0, sd1]} -> "module.0.<key>", ...).
  /// `listed` holds the containers already walked: a container reached twice (inside itself, or
  /// shared by two entries, which no saved state dict holds) is refused, so the walk is linear in
  /// the pickle's size. Nesting is capped at kMaxNesting.
  void flatten(uint32_t c, const std::string& prefix, int depth, std::set<uint32_t>& listed,
               std::set<std::string>& seen, std::vector<TorchTensorRecord>& out) {
    const std::string here = prefix.empty() ? prefix : prefix.substr(0, prefix.size() - 1);  // without the '.'
    if (depth > kMaxNesting) fail_at(file_, member_, "entry '{}': nested deeper than {} levels", here, kMaxNesting);
    if (!listed.insert(c).second)
      fail_at(file_, member_, "entry '{}' is a dict or list already read above (shared or self-containing)", here);
    const Obj& o = objs_[c];
    const bool dict = o.kind == Kind::kDict;
    const size_t step = dict ? 2 : 1;
    for (size_t k = 0; k + step <= o.items.size(); k += step) {
      const std::string name = prefix + (dict ? objs_[o.items[k]].s : std::to_string(k));
      const uint32_t vi = o.items[k + step - 1];
      const Obj& v = objs_[vi];
      if (v.kind == Kind::kDict || v.kind == Kind::kList) {
        flatten(vi, name + ".", depth + 1, listed, seen, out);
        continue;
      }
      if (v.kind != Kind::kTensor)
        fail_at(file_, member_,
                "entry '{}' is a {}, not a tensor (only state dicts of tensors, nested in dicts and lists, are read)",
                name, kind_name(v.kind));
      if (!seen.insert(name).second) fail_at(file_, member_, "entry '{}' appears twice", name);
      const Obj& st = objs_[v.storage];
      out.push_back(TorchTensorRecord{
          .name = name, .storage_key = st.s, .dtype = st.dtype, .storage_numel = st.i, .offset = v.i, .shape = v.shape});
    }
  }

  template <typename... Args>
  [[noreturn]] void bad(fmt::format_string<Args...> f, Args&&... args) const {
    fail_at(file_, member_, "byte {}: {}", op_pos_, fmt::format(f, std::forward<Args>(args)...));
  }

  const char* take(size_t n) {
    if (n > p_.size() - pos_) bad("truncated pickle (needs {} more bytes, {} left)", n, p_.size() - pos_);
    const char* r = p_.data() + pos_;
    pos_ += n;
    return r;
  }
  uint64_t le(size_t n) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(take(n));
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(b[k]) << (8 * k);
    return v;
  }
  std::string line() {
    const size_t nl = p_.find('\n', pos_);
    if (nl == std::string_view::npos || nl - pos_ > 256) bad("GLOBAL: no newline-terminated name");
    std::string s(p_.substr(pos_, nl - pos_));
    pos_ = nl + 1;
    return s;
  }

  uint32_t make(Obj o) {
    if (objs_.size() >= kMaxObjects) bad("more than {} objects: not a state dict", kMaxObjects);
    objs_.push_back(std::move(o));
    return static_cast<uint32_t>(objs_.size() - 1);
  }
  uint32_t make_int(int64_t v, Kind k = Kind::kInt) {
    Obj o;
    o.kind = k;
    o.i = v;
    return make(std::move(o));
  }
  void push(uint32_t v) {
    if (stack_.size() >= kMaxStack) bad("stack deeper than {}", kMaxStack);
    stack_.push_back(v);
  }
  uint32_t pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) bad("stack underflow");
    const uint32_t v = stack_.back();
    stack_.pop_back();
    return v;
  }
  uint32_t top() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) bad("stack underflow");
    return stack_.back();
  }
  /// Pops everything above the last MARK and the mark itself.
  std::vector<uint32_t> pop_mark() {
    if (marks_.empty()) bad("no MARK on the stack");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<uint32_t> v(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return v;
  }
  uint32_t tuple(std::vector<uint32_t> items) {
    Obj o;
    o.kind = Kind::kTuple;
    o.items = std::move(items);
    return make(std::move(o));
  }
  uint32_t list(std::vector<uint32_t> items) {
    Obj o;
    o.kind = Kind::kList;
    o.items = std::move(items);
    return make(std::move(o));
  }
  void append_items(uint32_t list, const std::vector<uint32_t>& v) {
    if (objs_[list].kind != Kind::kList) bad("APPEND(S) on a {}, not a list", kind_name(objs_[list].kind));
    for (uint32_t e : v) {
      if (e == list) bad("a list may not contain itself");
      objs_[list].items.push_back(e);
    }
  }
  uint32_t str(std::string_view s) {
    Obj o;
    o.kind = Kind::kStr;
    o.s = std::string(s);
    return make(std::move(o));
  }
  void memo_put(uint64_t idx) {
    if (memo_.size() >= kMaxObjects && !memo_.count(idx)) bad("memo larger than {} entries", kMaxObjects);
    memo_[idx] = top();
  }
  void memo_get(uint64_t idx) {
    auto it = memo_.find(idx);
    if (it == memo_.end()) bad("memo entry {} was never stored", idx);
    push(it->second);
  }
  void set_items(uint32_t dict, const std::vector<uint32_t>& kv) {
    if (objs_[dict].kind != Kind::kDict) bad("SETITEM(S) on a {}, not a dict", kind_name(objs_[dict].kind));
    if (kv.size() % 2) bad("SETITEMS with an odd number of items");
    for (size_t k = 0; k < kv.size(); k += 2) {
      if (objs_[kv[k]].kind != Kind::kStr) bad("dict key is a {}, not a str", kind_name(objs_[kv[k]].kind));
      if (kv[k + 1] == dict) bad("a dict may not contain itself");
      objs_[dict].items.push_back(kv[k]);
      objs_[dict].items.push_back(kv[k + 1]);
    }
  }

  std::vector<int64_t> int_tuple(const std::vector<uint32_t>& a, size_t k, const char* what, const char* field) {
    const Obj& t = objs_[a[k]];
    if (t.kind != Kind::kTuple) bad("{}: {} is a {}, expected a tuple of ints", what, field, kind_name(t.kind));
    if (t.items.size() > kMaxDims) bad("{}: {} has {} dimensions (at most {})", what, field, t.items.size(), kMaxDims);
    std::vector<int64_t> v;
    for (uint32_t e : t.items) {
      if (objs_[e].kind != Kind::kInt) bad("{}: {} holds a {}, expected ints", what, field, kind_name(objs_[e].kind));
      v.push_back(objs_[e].i);
    }
    return v;
  }
  bool empty_hooks(uint32_t h) const {
    return (objs_[h].kind == Kind::kDict && objs_[h].items.empty()) || objs_[h].kind == Kind::kNone;
  }

  /// REDUCE: callable(*args) for the allowed callables only.
  uint32_t reduce(uint32_t callable, uint32_t args_idx) {
    const Obj& c = objs_[callable];
    if (c.kind != Kind::kGlobal) bad("REDUCE of a {} (only allowed globals may be called)", kind_name(c.kind));
    const Obj& at = objs_[args_idx];
    if (at.kind != Kind::kTuple) bad("REDUCE: the arguments of {} are a {}, not a tuple", c.s, kind_name(at.kind));
    const std::vector<uint32_t> a = at.items;
    switch (c.global) {
      case Global::kOrderedDict: {
        if (!a.empty())
          bad("collections.OrderedDict called with {} arguments (a state dict pickles it with none)", a.size());
        Obj d;
        d.kind = Kind::kDict;
        return make(std::move(d));
      }
      case Global::kRebuildTensorV2: {
        const char* what = "torch._utils._rebuild_tensor_v2";
        if (a.size() != 6 && a.size() != 7) bad("{}: {} arguments (expected 6 or 7)", what, a.size());
        if (objs_[a[0]].kind != Kind::kStorage)
          bad("{}: argument 1 is a {}, not a storage", what, kind_name(objs_[a[0]].kind));
        const Obj& st = objs_[a[0]];
        const Obj& off = objs_[a[1]];
        if (off.kind != Kind::kInt || off.i < 0) bad("{}: storage_offset must be an int >= 0", what);
        std::vector<int64_t> size = int_tuple(a, 2, what, "size");
        std::vector<int64_t> stride = int_tuple(a, 3, what, "stride");
        if (objs_[a[4]].kind != Kind::kBool)
          bad("{}: requires_grad is a {}, not a bool", what, kind_name(objs_[a[4]].kind));
        if (!empty_hooks(a[5])) bad("{}: backward_hooks must be an empty OrderedDict", what);
        if (a.size() == 7 && objs_[a[6]].kind != Kind::kDict && objs_[a[6]].kind != Kind::kNone)
          bad("{}: metadata is a {}, expected a dict", what, kind_name(objs_[a[6]].kind));
        if (size.size() != stride.size()) bad("{}: size has {} dims but stride {}", what, size.size(), stride.size());
        int64_t numel = 1;
        for (int64_t d : size) {
          if (d < 0 || d > kMaxDim) bad("{}: dimension {} out of range", what, d);
          numel *= d;
          if (numel > kMaxNumel) bad("{}: more than {} elements", what, kMaxNumel);
        }
        // Contiguous (row-major) only: the stride of every dimension longer than 1 is the product
        // of the later sizes.
        int64_t expect = 1;
        for (size_t k = size.size(); k-- > 0;) {
          if (size[k] > 1 && stride[k] != expect)
            bad("{}: stride {} of dimension {} is not contiguous (expected {}); save tensors with .contiguous()", what,
                stride[k], k, expect);
          expect *= size[k];
        }
        if (numel > 0 && (off.i > st.i || numel > st.i - off.i))
          bad("{}: elements [{}, {}) lie outside storage '{}' of {} elements", what, off.i, off.i + numel, st.s, st.i);
        Obj t;
        t.kind = Kind::kTensor;
        t.storage = a[0];
        t.dtype = st.dtype;
        t.i = off.i;
        t.shape = std::move(size);
        return make(std::move(t));
      }
      case Global::kRebuildParameter:
      case Global::kRebuildParameterWithState: {
        const bool with_state = c.global == Global::kRebuildParameterWithState;
        const size_t n = with_state ? 4 : 3;
        if (a.size() != n) bad("{}: {} arguments (expected {})", c.s, a.size(), n);
        if (objs_[a[0]].kind != Kind::kTensor)
          bad("{}: argument 1 is a {}, not a tensor", c.s, kind_name(objs_[a[0]].kind));
        if (objs_[a[1]].kind != Kind::kBool)
          bad("{}: requires_grad is a {}, not a bool", c.s, kind_name(objs_[a[1]].kind));
        if (!empty_hooks(a[2])) bad("{}: backward_hooks must be an empty OrderedDict", c.s);
        if (with_state && objs_[a[3]].kind != Kind::kDict && objs_[a[3]].kind != Kind::kNone)
          bad("{}: state is a {}, expected a dict", c.s, kind_name(objs_[a[3]].kind));
        return a[0];
      }
      case Global::kStorage: bad("REDUCE of {} (storages are only valid as persistent ids)", c.s);
    }
    bad("REDUCE of {}", c.s);
  }

  /// BINPERSID: ("storage", torch.<T>Storage, key, location, numel) → a storage object.
  uint32_t persistent(uint32_t pid) {
    const Obj& t = objs_[pid];
    if (t.kind != Kind::kTuple || t.items.size() != 5)
      bad("persistent id is not a 5-tuple ('storage', type, key, location, numel)");
    const Obj& tag = objs_[t.items[0]];
    const Obj& type = objs_[t.items[1]];
    const Obj& key = objs_[t.items[2]];
    const Obj& loc = objs_[t.items[3]];
    const Obj& numel = objs_[t.items[4]];
    if (tag.kind != Kind::kStr || tag.s != "storage") bad("persistent id tag is not 'storage'");
    if (type.kind != Kind::kGlobal || type.global != Global::kStorage)
      bad("persistent id storage type is not one of torch.FloatStorage, torch.HalfStorage, torch.BFloat16Storage");
    if (key.kind != Kind::kStr || key.s.empty() || key.s.size() > 64 ||
        !std::all_of(key.s.begin(), key.s.end(),
                     [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; }))
      bad("persistent id storage key is not a plain name ([A-Za-z0-9_]+)");
    if (loc.kind != Kind::kStr) bad("persistent id location is not a str");
    if (numel.kind != Kind::kInt || numel.i < 0 || numel.i > kMaxNumel) bad("persistent id numel out of range");
    auto it = storages_.find(key.s);
    if (it != storages_.end()) {
      const Obj& prev = objs_[it->second];
      if (prev.dtype != type.dtype || prev.i != numel.i)
        bad("storage '{}' is declared twice with different types or sizes", key.s);
      return it->second;
    }
    Obj s;
    s.kind = Kind::kStorage;
    s.s = key.s;
    s.dtype = type.dtype;
    s.i = numel.i;
    const uint32_t idx = make(std::move(s));
    storages_[objs_[idx].s] = idx;
    return idx;
  }

  uint32_t global(const std::string& module, const std::string& name) {
    for (const auto& g : kGlobals)
      if (module == g.module && name == g.name) {
        Obj o;
        o.kind = Kind::kGlobal;
        o.global = g.g;
        o.dtype = g.dtype;
        o.s = module + "." + name;
        return make(std::move(o));
      }
    bad("global {}.{} is not allowed (a tensor checkpoint may only name {})", module, name, allowed_globals());
  }

  uint32_t execute() {
    while (true) {
      op_pos_ = pos_;
      const unsigned char op = static_cast<unsigned char>(*take(1));
      switch (op) {
        case 0x80: {  // PROTO
          const unsigned v = static_cast<unsigned char>(*take(1));
          if (v < 2 || v > 5) bad("pickle protocol {} (torch.save writes 2; 2..5 are read)", v);
          break;
        }
        case 0x95: le(8); break;  // FRAME: a length hint only
        case 'c': {               // GLOBAL
          std::string module = line();
          std::string name = line();
          push(global(module, name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          const uint32_t n = pop(), m = pop();
          if (objs_[n].kind != Kind::kStr || objs_[m].kind != Kind::kStr) bad("STACK_GLOBAL needs two strings");
          push(global(objs_[m].s, objs_[n].s));
          break;
        }
        case '(':
          if (marks_.size() >= kMaxStack) bad("too many MARKs");
          marks_.push_back(stack_.size());
          break;
        case '}': {
          Obj d;
          d.kind = Kind::kDict;
          push(make(std::move(d)));
          break;
        }
        case ')': push(tuple({})); break;
        case ']': push(list({})); break;          // EMPTY_LIST
        case 'l': push(list(pop_mark())); break;  // LIST
        case 'a': {                               // APPEND
          const uint32_t v = pop();
          append_items(top(), {v});
          break;
        }
        case 'e': {  // APPENDS
          std::vector<uint32_t> v = pop_mark();
          append_items(top(), v);
          break;
        }
        case 't': push(tuple(pop_mark())); break;
        case 0x85: {
          const uint32_t a = pop();
          push(tuple({a}));
          break;
        }
        case 0x86: {
          const uint32_t b = pop(), a = pop();
          push(tuple({a, b}));
          break;
        }
        case 0x87: {
          const uint32_t c = pop(), b = pop(), a = pop();
          push(tuple({a, b, c}));
          break;
        }
        case 'X': {
          const uint64_t n = le(4);
          push(str(std::string_view(take(n), n)));
          break;
        }
        case 0x8c: {
          const uint64_t n = le(1);
          push(str(std::string_view(take(n), n)));
          break;
        }
        case 0x8d: {
          const uint64_t n = le(8);
          push(str(std::string_view(take(n), n)));
          break;
        }
        case 'J': push(make_int(static_cast<int32_t>(static_cast<uint32_t>(le(4))))); break;
        case 'K': push(make_int(static_cast<int64_t>(le(1)))); break;
        case 'M': push(make_int(static_cast<int64_t>(le(2)))); break;
        case 0x8a: {  // LONG1: n bytes, little-endian two's complement
          const uint64_t n = le(1);
          if (n > 8) bad("LONG1 of {} bytes (at most 8 are read)", n);
          uint64_t v = n ? le(n) : 0;
          if (n && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign-extend
          push(make_int(static_cast<int64_t>(v)));
          break;
        }
        case 'N': push(make_int(0, Kind::kNone)); break;
        case 0x88: push(make_int(1, Kind::kBool)); break;
        case 0x89: push(make_int(0, Kind::kBool)); break;
        case 'q': memo_put(le(1)); break;
        case 'r': memo_put(le(4)); break;
        case 0x94: memo_put(memo_.size()); break;
        case 'h': memo_get(le(1)); break;
        case 'j': memo_get(le(4)); break;
        case 's': {
          const uint32_t v = pop(), k = pop();
          set_items(top(), {k, v});
          break;
        }
        case 'u': {
          std::vector<uint32_t> kv = pop_mark();
          set_items(top(), kv);
          break;
        }
        case 'R': {
          const uint32_t args = pop(), callable = pop();
          push(reduce(callable, args));
          break;
        }
        case 'b': {  // BUILD: only an OrderedDict's state (state_dict()._metadata), which is ignored
          const uint32_t state = pop();
          const uint32_t target = top();
          if (objs_[target].kind != Kind::kDict)
            bad("BUILD on a {} (only a dict's state is accepted)", kind_name(objs_[target].kind));
          if (objs_[state].kind != Kind::kDict && objs_[state].kind != Kind::kNone && objs_[state].kind != Kind::kTuple)
            bad("BUILD with a {} state", kind_name(objs_[state].kind));
          break;
        }
        case 'Q': push(persistent(pop())); break;
        case '.': {
          if (!marks_.empty()) bad("STOP with an open MARK");
          if (stack_.size() != 1) bad("STOP with {} objects on the stack (expected 1)", stack_.size());
          return stack_.back();
        }
        default:
          if (op >= 0x20 && op < 0x7f)
            bad("opcode 0x{:02x} ('{}') is not allowed in a tensor checkpoint", op, static_cast<char>(op));
          bad("opcode 0x{:02x} is not allowed in a tensor checkpoint", op);
      }
    }
  }

  std::string_view p_;
  const std::string& file_;
  const std::string& member_;
  size_t pos_ = 0, op_pos_ = 0;
  std::vector<Obj> objs_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, uint32_t> memo_;
  std::map<std::string, uint32_t> storages_;
};

}  // namespace

int64_t TorchTensorRecord::numel() const { return product(shape); }
int64_t TorchTensor::numel() const { return product(shape); }

std::vector<TorchTensorRecord> parse_torch_state_dict_pickle(std::string_view pkl, const std::string& file,
                                                             const std::string& member) {
  return Unpickler(pkl, file, member).run();
}

bool looks_like_zip(const std::string& path) {
  // Through open_input (O_NONBLOCK, then fstat): a FIFO, device or socket is refused with the
  // standard error instead of blocking this first read (issue 46, item 5).
  const int fd = open_input(path, InputKind::kCheckpoint, nullptr);
  char b[4] = {};
  size_t got = 0;
  while (got < 4) {
    const ssize_t n = ::read(fd, b + got, 4 - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return got == 4 && std::memcmp(b, "PK\x03\x04", 4) == 0;
}

TorchCheckpoint read_torch_checkpoint(const std::string& path) {
  // A regular file within the checkpoint cap (a FIFO or device is refused, never waited on).
  ::close(open_input(path, InputKind::kCheckpoint, nullptr));
  if (!looks_like_zip(path))
    fail_at(path, "",
            "not a ZIP archive: only torch.save's ZIP format (torch >= 1.6) is read; re-save the "
            "state dict with a current torch, or convert it to safetensors");
  ZipArchive z(path);
  std::string top;
  int pkls = 0;
  for (const std::string& m : z.members()) {
    const size_t slash = m.find('/');
    if (slash != std::string::npos && slash > 0 && m.substr(slash) == "/data.pkl") {
      top = m.substr(0, slash);
      ++pkls;
    }
  }
  if (pkls != 1)
    fail_at(path, "data.pkl", "{} (a torch.save archive has exactly one <top>/data.pkl)",
            pkls ? "several top folders hold a data.pkl" : "no <top>/data.pkl member: not a torch.save archive");
  const std::string bo_member = top + "/byteorder";
  if (z.has(bo_member)) {
    if (z.size_of(bo_member) > 16) fail_at(path, bo_member, "unexpected size");
    const std::string bo = z.read_all(bo_member);
    if (bo == "big")
      fail_at(path, bo_member, "big-endian checkpoints are not supported (re-save on a little-endian machine)");
    if (bo != "little") fail_at(path, bo_member, "expected 'little' or 'big', got '{}'", bo);
  }
  const std::string pkl_member = top + "/data.pkl";
  constexpr uint64_t kMaxPickle = uint64_t{64} << 20;
  const uint64_t pkl_size = z.size_of(pkl_member);
  if (pkl_size > kMaxPickle)
    fail_at(path, pkl_member, "{} bytes: larger than any state dict pickle ({} MiB at most)", pkl_size, kMaxPickle >> 20);
  const std::string pkl = z.read_all(pkl_member);
  std::vector<TorchTensorRecord> recs = parse_torch_state_dict_pickle(pkl, path, pkl_member);

  TorchCheckpoint ck;
  ck.path = path;
  std::map<std::string, std::shared_ptr<const std::string>> storages;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> ranges;  // key -> [begin, end) elements
  for (const TorchTensorRecord& r : recs) {
    auto it = storages.find(r.storage_key);
    if (it == storages.end()) {
      const std::string m = top + "/data/" + r.storage_key;
      if (!z.has(m)) fail_at(path, m, "missing: tensor '{}' refers to storage '{}'", r.name, r.storage_key);
      const uint64_t want = static_cast<uint64_t>(r.storage_numel) * torch_dtype_size(r.dtype);
      const uint64_t have = z.size_of(m);
      if (have != want)
        fail_at(path, m, "{} bytes, but the pickle declares {} {} elements ({} bytes)", have, r.storage_numel,
                torch_dtype_name(r.dtype), want);
      auto bytes = std::make_shared<std::string>();
      bytes->reserve(want);
      z.read(m, [&](const char* d, size_t n) {
        if (n > want - bytes->size()) fail_at(path, m, "more data than its declared size");
        bytes->append(d, n);
      });
      if (bytes->size() != want) fail_at(path, m, "{} bytes read, {} declared", bytes->size(), want);
      it = storages.emplace(r.storage_key, std::move(bytes)).first;
    }
    const int64_t n = r.numel();
    if (n > 0) ranges[r.storage_key].push_back({r.offset, r.offset + n});
    TorchTensor t;
    t.dtype = r.dtype;
    t.shape = r.shape;
    t.storage = it->second;
    t.byte_offset = static_cast<size_t>(r.offset) * torch_dtype_size(r.dtype);
    ck.tensors.emplace_back(r.name, std::move(t));
  }
  // Views of one storage: identical or disjoint ranges only (a partial overlap is no state dict
  // torch writes from distinct parameters).
  for (auto& [key, rs] : ranges) {
    std::sort(rs.begin(), rs.end());
    rs.erase(std::unique(rs.begin(), rs.end()), rs.end());
    for (size_t k = 1; k < rs.size(); ++k)
      if (rs[k].first < rs[k - 1].second)
        fail_at(path, top + "/data/" + key, "tensors overlap partially: elements [{}, {}) and [{}, {})",
                rs[k - 1].first, rs[k - 1].second, rs[k].first, rs[k].second);
  }
  return ck;
}

}  // namespace kvb
