#include "engine/policies/gate_weights.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/formats/torch_checkpoint.h"
#include "engine/model/weights.h"  // bf16_bits_to_f32, f16_bits_to_f32 (inline)
#include "engine/policies/scoring.h"
#include "engine/util/error.h"
#include "engine/util/io.h"

namespace kvb {

namespace {

HubFileFetcher& hub_fetcher() {
  static HubFileFetcher f;
  return f;
}

float to_f32(const char* p, const char* dtype) {
  if (dtype[0] == 'F' && dtype[1] == '3') {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t v;
  std::memcpy(&v, p, 2);
  return dtype[0] == 'B' ? bf16_bits_to_f32(v) : f16_bits_to_f32(v);
}

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

bool weight_file_name(const std::string& name) {
  return ends_with(name, ".pth") || ends_with(name, ".pt") || ends_with(name, ".safetensors");
}

bool hub_name_ok(const std::string& s) {
  if (s.empty() || s.size() > 96 || s == "." || s == ".." || s.front() == '-' || s.front() == '.') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

struct HubSpec {
  std::string repo, revision = "main", path;
};

/// "org/name[@rev][/path]" → parts; false when it does not have that form.
bool parse_hub_spec(const std::string& spec, HubSpec* out) {
  const size_t s1 = spec.find('/');
  if (s1 == std::string::npos) return false;
  const size_t s2 = spec.find('/', s1 + 1);
  const std::string org = spec.substr(0, s1);
  std::string name = spec.substr(s1 + 1, s2 == std::string::npos ? std::string::npos : s2 - s1 - 1);
  HubSpec h;
  if (const size_t at = name.find('@'); at != std::string::npos) {
    h.revision = name.substr(at + 1);
    name = name.substr(0, at);
    if (h.revision.empty()) return false;
  }
  if (!hub_name_ok(org) || !hub_name_ok(name)) return false;
  h.repo = org + "/" + name;
  if (s2 != std::string::npos) {
    h.path = spec.substr(s2 + 1);
    if (h.path.empty() || h.path.find("..") != std::string::npos || h.path.front() == '/') return false;
  }
  *out = h;
  return true;
}

/// True when the file starts with a pickle PROTO opcode (0x80): what legacy torch.save writes.
bool starts_with_pickle(const std::string& path) {
  // A pickle starts with PROTO (0x80). So does a safetensors file whose 8-byte little-endian
  // header length has 0x80 as its low byte (a 640-byte header: KVzap's released layout), but its
  // JSON header then opens with '{' at byte 8, where a legacy torch.save stream holds its magic.
  const int fd = open_input(path, InputKind::kCheckpoint, nullptr);  // a regular file, not a FIFO
  unsigned char b[9] = {};
  const ssize_t got = ::read(fd, b, 9);
  ::close(fd);
  if (got < 1 || b[0] != 0x80) return false;
  return !(got == 9 && b[8] == '{');
}

/// Refuses a tensor holding NaN or an infinity: no learned gate, scorer or statistic is
/// meaningful with one, and it would silently turn every score it touches into NaN (issue 46,
/// item 7). Throws kvb::Error "<path>: tensor <name>: element <i> is <value>: ...".
void check_finite(const std::string& path, const std::string& name, const GateTensor& g) {
  for (size_t i = 0; i < g.data.size(); ++i)
    if (!std::isfinite(g.data[i]))
      fail_at(path, "tensor " + name, "element {} is {}: weights and statistics must be finite numbers", i,
              std::isnan(g.data[i]) ? "NaN"
              : g.data[i] > 0       ? "inf"
                                    : "-inf");
}

void read_safetensors(GateWeights& w, const std::string& path, const GateSource& source) {
  // Streams: the header, then only the kept tensors (a model shard may hold gigabytes).
  // One open (open_input: a regular file, never a FIFO or device, registered for the run's
  // identity), and every read from that descriptor, so the file checked is the file read.
  uint64_t size = 0;
  const int fd = open_input(path, InputKind::kWeights, &size);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  // Reads exactly `n` bytes at `offset`; false on a short read (the file shrank) or an error.
  auto read_at = [fd](char* dst, uint64_t n, uint64_t offset) {
    while (n > 0) {
      const ssize_t got =
          ::pread(fd, dst, static_cast<size_t>(std::min<uint64_t>(n, 1u << 30)), static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      dst += got;
      n -= static_cast<uint64_t>(got);
      offset += static_cast<uint64_t>(got);
    }
    return true;
  };
  if (size < 8) fail_at(path, "header", "file too short for safetensors ({} bytes)", size);
  uint64_t hlen = 0;
  if (!read_at(reinterpret_cast<char*>(&hlen), 8, 0)) fail_at(path, "header", "truncated");
  if (hlen > size - 8) fail_at(path, "header", "header length {} exceeds the file", hlen);
  std::string head(hlen, '\0');
  if (!read_at(head.data(), hlen, 8)) fail_at(path, "header", "truncated");
  const nlohmann::json header = parse_json(std::string_view(head), path + ": header");
  if (!header.is_object()) fail_at(path, "header", "expected a JSON object");
  const uint64_t data_size = size - 8 - hlen;
  std::string bytes;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    if (source.keep && !source.keep(it.key())) continue;
    const auto& t = it.value();
    const std::string field = "tensor " + it.key();
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets") ||
        !t["dtype"].is_string() || !t["shape"].is_array() || !t["data_offsets"].is_array() ||
        t["data_offsets"].size() != 2 || !t["data_offsets"][0].is_number_unsigned() ||
        !t["data_offsets"][1].is_number_unsigned())
      fail_at(path, field, "expected dtype, shape and data_offsets");
    const std::string dtype = t["dtype"].get<std::string>();
    const size_t esize = dtype == "F32" ? 4 : (dtype == "F16" || dtype == "BF16") ? 2 : 0;
    if (!esize) fail_at(path, field, "unsupported dtype {} (F32, F16, BF16)", dtype);
    GateTensor g;
    uint64_t n = 1;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) fail_at(path, field, "bad dimension");
      g.shape.push_back(d.get<int64_t>());
      n *= d.get<uint64_t>();
      if (n > data_size) fail_at(path, field, "shape larger than the file");
    }
    const uint64_t b = t["data_offsets"][0].get<uint64_t>(), e = t["data_offsets"][1].get<uint64_t>();
    if (b > e || e > data_size || e - b != n * esize)
      fail_at(path, field, "data_offsets [{}, {}] do not match shape x dtype or exceed the file", b, e);
    bytes.resize(e - b);
    if (!read_at(bytes.data(), e - b, 8 + hlen + b)) fail_at(path, field, "truncated");
    g.data.resize(n);
    for (uint64_t i = 0; i < n; ++i) g.data[i] = to_f32(bytes.data() + esize * i, dtype.c_str());
    check_finite(path, it.key(), g);
    w.tensors.emplace(it.key(), std::move(g));
  }
}

/// The shard files of a save_pretrained index (model.safetensors.index.json) that hold tensors
/// `source.keep` accepts, sorted and unique. Throws naming the index on a malformed weight_map.
std::vector<std::string> shards_of(const std::string& index_path, const GateSource& source) {
  const nlohmann::json idx = parse_json_file(index_path, InputKind::kPolicyMetadata);
  if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
    fail_at(index_path, "weight_map", "expected an object of tensor name -> shard file");
  std::vector<std::string> files;
  for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
    if (source.keep && !source.keep(it.key())) continue;
    if (!it.value().is_string()) fail_at(index_path, "weight_map." + it.key(), "expected a file name");
    const std::string f = it.value().get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f.find("..") != std::string::npos)
      fail_at(index_path, "weight_map." + it.key(), "bad shard file name '{}'", f);
    files.push_back(f);
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  if (files.empty())
    fail_at(index_path, "weight_map", "policy '{}': no {} tensors in this model", source.policy, source.param);
  return files;
}

void read_torch(GateWeights& w, const std::string& path, const GateSource& source) {
  const TorchCheckpoint ck = read_torch_checkpoint(path);
  for (const auto& [name, t] : ck.tensors) {
    if (source.keep && !source.keep(name)) continue;
    GateTensor g;
    g.shape = t.shape;
    const int64_t n = t.numel();
    const size_t es = torch_dtype_size(t.dtype);
    const char* dt = torch_dtype_name(t.dtype);
    g.data.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) g.data[i] = to_f32(t.data() + es * i, dt);
    check_finite(path, name, g);
    w.tensors.emplace(name, std::move(g));
  }
}

/// The weights file of directory `dir`: source.default_file when present, else its only
/// .pth/.pt/.safetensors file.
std::string pick_in_dir(const std::string& dir, const GateSource& source) {
  namespace fs = std::filesystem;
  if (!source.default_file.empty() && fs::is_regular_file(fs::path(dir) / source.default_file))
    return (fs::path(dir) / source.default_file).string();
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && weight_file_name(e.path().filename().string())) found.push_back(e.path().string());
  std::sort(found.begin(), found.end());
  if (found.size() == 1) return found[0];
  if (found.empty())
    fail_at(dir, source.param, "policy '{}': the directory holds no {}.pth, .pt or .safetensors file", source.policy,
            source.default_file.empty() ? "" : source.default_file + " and no ");
  fail_at(dir, source.param, "policy '{}': the directory holds {} weight files ({}, ...): name one", source.policy,
          found.size(), fs::path(found[0]).filename().string());
}

}  // namespace

void set_hub_file_fetcher(HubFileFetcher fetcher) { hub_fetcher() = std::move(fetcher); }

bool is_hub_gate_spec(const std::string& spec) {
  std::error_code ec;
  if (std::filesystem::exists(spec, ec)) return false;
  HubSpec h;
  return parse_hub_spec(spec, &h);
}

GateWeights GateWeights::load(const std::string& spec, const GateSource& source) {
  namespace fs = std::filesystem;
  GateWeights w;
  w.spec = spec;
  std::error_code ec;
  std::string dir;                  // where config.json is looked for
  std::vector<std::string> shards;  // model_shards: the shard files to read (w.path = the index)
  if (fs::is_directory(spec, ec)) {
    dir = spec;
    if (const fs::path index = fs::path(spec) / "model.safetensors.index.json";
        source.model_shards && fs::is_regular_file(index, ec)) {
      w.path = index.string();
      for (const auto& f : shards_of(w.path, source)) shards.push_back((fs::path(spec) / f).string());
    } else {
      w.path = pick_in_dir(spec, source);
    }
  } else if (fs::exists(spec, ec)) {
    w.path = spec;
  } else if (HubSpec h; parse_hub_spec(spec, &h)) {
    if (!hub_fetcher())
      fail_at(spec, source.param,
              "policy '{}': a Hugging Face Hub id, but this program cannot download (use the "
              "kvbench CLI, or a local file)",
              source.policy);
    std::string file = h.path;
    if (file.empty()) {
      if (source.default_file.empty())
        fail_at(spec, source.param,
                "policy '{}': name the checkpoint file inside the repository, {}/<file>.pt "
                "(see `kvbench policies --checkpoints`)",
                source.policy, h.repo);
      file = source.default_file;
    }
    if (source.model_shards && h.path.empty()) {
      // A full model: its shard index when it has one (a 404 falls back to default_file).
      std::string index;
      try {
        index = hub_fetcher()(h.repo, h.revision, "model.safetensors.index.json");
      } catch (const Error&) {
      }
      if (!index.empty()) {
        w.path = index;
        for (const auto& f : shards_of(index, source)) shards.push_back(hub_fetcher()(h.repo, h.revision, f));
      }
    }
    if (shards.empty()) w.path = hub_fetcher()(h.repo, h.revision, file);
    if (source.config && h.path.empty()) w.config_path = hub_fetcher()(h.repo, h.revision, source.config_file);
  } else {
    fail_at(spec, source.param,
            "policy '{}': not found (no such file or directory, nor a Hub id org/name[@revision][/path])", source.policy);
  }
  if (source.config && w.config_path.empty() && !dir.empty() && fs::is_regular_file(fs::path(dir) / source.config_file))
    w.config_path = (fs::path(dir) / source.config_file).string();
  if (!w.config_path.empty()) {
    w.config = parse_json_file(w.config_path, InputKind::kPolicyMetadata);  // enters the run's identity
    if (!w.config.is_object()) fail_at(w.config_path, "", "expected a JSON object");
  }
  if (!shards.empty())
    for (const auto& f : shards) read_safetensors(w, f, source);
  else if (looks_like_zip(w.path)) read_torch(w, w.path, source);
  else if (ends_with(w.path, ".pth") || ends_with(w.path, ".pt") || starts_with_pickle(w.path))
    // torch.save before PyTorch 1.6 (or with _use_new_zipfile_serialization=False) writes a bare
    // pickle stream, not the ZIP archive read here; it is not a safetensors file either.
    fail_at(w.path, "",
            "a legacy (non-ZIP) PyTorch checkpoint: only the ZIP format of torch.save (PyTorch >= 1.6) "
            "is read; re-save it with torch.save(state_dict, path) on a current PyTorch, or as safetensors");
  else read_safetensors(w, w.path, source);
  return w;
}

int GateWeights::layers_under(const std::string& prefix, const std::string& suffix) const {
  int n = 0;
  for (const auto& [name, t] : tensors) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const size_t end = name.find(suffix, prefix.size());
    if (end == std::string::npos) continue;
    const std::string num = name.substr(prefix.size(), end - prefix.size());
    if (num.empty() || num.size() > 6 || !std::all_of(num.begin(), num.end(), ::isdigit)) continue;
    n = std::max(n, std::stoi(num) + 1);
  }
  return n;
}

void GateWeights::require_layers(const std::string& prefix, const std::string& suffix, int num_layers,
                                 const std::string& what, const std::string& one) const {
  const int covered = layers_under(prefix, suffix);
  if (covered != num_layers)
    fail_at(path, "tensors", "the {} cover {} decoder layers; this model has {} ({} for another model?)", what, covered,
            num_layers, one);
}

void GateWeights::check_model(int num_layers, int num_kv_heads, int hidden_size, int head_dim) const {
  const std::string base = config.contains("base_model") && config["base_model"].is_string()
                               ? config["base_model"].get<std::string>()
                               : std::string("its base model");
  auto check = [&](const char* key, int have) {
    if (!config.contains(key)) return;
    const auto& v = config[key];
    if (!v.is_number_integer()) fail_at(config_path, key, "expected an integer");
    if (v.get<int64_t>() != have)
      fail_at(config_path, key, "the gates were trained for {} with {} = {}; this model has {}", base, key,
              v.get<int64_t>(), have);
  };
  check("num_hidden_layers", num_layers);
  check("num_key_value_heads", num_kv_heads);
  check("hidden_size", hidden_size);
  check("head_dim", head_dim);
  require_layers("model.layers.", ".", num_layers, "gates", "gates");
}

const GateTensor* GateWeights::find(const std::string& name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

const GateTensor& GateWeights::layer_tensor(const std::string& name, int layer, int num_layers,
                                            const std::string& what) const {
  const GateTensor* t = find(name);
  if (!t)
    fail_at(path, "tensor " + name, "missing (the {} do not cover layer {} of this {}-layer model)", what, layer,
            num_layers);
  return *t;
}

float SeededDraws::normal(double stdv) {
  const double u1 = std::max(scoring::hash_uniform({seed_, ctr_++}), 1e-300);
  const double u2 = scoring::hash_uniform({seed_, ctr_++});
  return static_cast<float>(stdv * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

float SeededDraws::uniform(double bound) {
  return static_cast<float>(bound * (2 * scoring::hash_uniform({seed_, ctr_++}) - 1));
}

const GateTensor& GateWeights::require(const std::string& name, const std::vector<int64_t>& shape) const {
  const GateTensor* t = find(name);
  if (!t) fail_at(path, "tensor " + name, "missing");
  std::vector<int64_t> s = t->shape;
  while (s.size() > shape.size() && s.back() == 1) s.pop_back();
  if (s != shape) {
    auto str = [](const std::vector<int64_t>& v) {
      std::string r = "[";
      for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
      return r + "]";
    };
    fail_at(path, "tensor " + name, "shape {} but the model needs {}", str(t->shape), str(shape));
  }
  return *t;
}

void GateWeights::add(const std::string& name, std::vector<int64_t> shape, std::vector<float> data) {
  tensors[name] = GateTensor{std::move(shape), std::move(data)};
}

void save_gate_weights(const GateWeights& w, const std::string& path) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& [name, t] : w.tensors) {
    const uint64_t n = t.data.size() * 4;
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  std::ofstream out(path, std::ios::binary);
  if (!out) fail_at(path, "", "cannot open for writing");
  uint64_t hl = h.size();
  out.write(reinterpret_cast<const char*>(&hl), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& [name, t] : w.tensors)
    out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size() * 4));
  if (!out) fail_at(path, "", "write failed");
}

}  // namespace kvb
