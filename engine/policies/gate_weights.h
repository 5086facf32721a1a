// kvb::GateWeights — small learned-policy weights (TRIM-KV retention gates, WG-KV write gates,
// ForesightKV scorers) read fully into f32 memory from what the papers released or a converter
// wrote (docs/policies.md#gate-files):
//   - a PyTorch .pth / .pt file (torch.save's ZIP format; engine/formats/torch_checkpoint.h, a
//     restricted unpickler that executes nothing), F32, F16 or BF16;
//   - a .safetensors file, F32, F16 or BF16;
//   - a directory holding one of them (the policy's default file name first, e.g. TRIM-KV's
//     trimkv_weights.pth) and optionally the checkpoint's config.json;
//   - a Hugging Face model repository "org/name[@revision][/path/in/repo]" (e.g.
//     ngocbh/TrimKV-Qwen3-4B-Math, WG-KV/checkpoints/qwen3-4b-instruct-2507-0.16.pt),
//     downloaded through the fetcher the CLI installs (set_hub_file_fetcher: the project's Hub
//     client and cache), never by the policy itself.
// Self-contained: policies do not depend on the model component.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvb {

/// One tensor converted to f32, shape outermost first.
struct GateTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/// Downloads `path` of the Hub model repository `repo_id` at `revision` and returns its local
/// path. Throws kvb::Error (404, gated repository, offline without a cached copy, network).
using HubFileFetcher =
    std::function<std::string(const std::string& repo_id, const std::string& revision, const std::string& path)>;

/// Installs the fetcher used for Hub ids (the CLI installs datasets::HubClient::download at start).
/// Without one, a Hub id is refused with an error that says so. Not thread-safe: call at start-up.
void set_hub_file_fetcher(HubFileFetcher fetcher);

/// How a policy's weights are looked up in a directory or Hub repository.
struct GateSource {
  std::string policy;           ///< policy name, for error messages
  std::string param = "gates";  ///< the parameter naming the weights, for error messages
  /// File read from a directory or a Hub repo id without a path ("" = a directory must hold
  /// exactly one .pth/.pt/.safetensors file, and a Hub id must name the file).
  std::string default_file;
  /// Read config.json next to the weights (required from a Hub repo, optional in a directory).
  bool config = false;
  /// Tensors to read (null = all); the others are skipped without being converted (LocRet's
  /// retaining heads inside a full model checkpoint).
  std::function<bool(const std::string& name)> keep = nullptr;
  /// The weights are tensors of a model saved with save_pretrained: a directory or a Hub repo id
  /// without a path is read through its model.safetensors.index.json (only the shards that hold
  /// kept tensors), else through `default_file`.
  bool model_shards = false;
  /// The name of the checkpoint's JSON config read when `config` is set (PEFT adapters:
  /// adapter_config.json).
  std::string config_file = "config.json";
};

/// All tensors of a gate checkpoint, plus its config.json when it has one.
class GateWeights {
 public:
  /// Reads `spec` (a file, a directory or a Hub id; see the file comment). Throws kvb::Error
  /// naming the file and the tensor/field when it is missing, truncated, malformed, refused by
  /// the restricted unpickler, or has an unsupported dtype; a Hub id without an installed
  /// fetcher is refused.
  static GateWeights load(const std::string& spec, const GateSource& source);

  /// The tensor `name` or nullptr.
  const GateTensor* find(const std::string& name) const;
  /// The tensor `name`, which must have exactly `shape` (a shape with trailing 1-sized dims
  /// removed also matches, e.g. Conv1d weights [O, I, 1] for [O, I]); throws kvb::Error
  /// "<path>: tensor <name>: ..." otherwise.
  const GateTensor& require(const std::string& name, const std::vector<int64_t>& shape) const;
  /// The tensor `name` of decoder layer `layer` (a name under "model.layers.{layer}."), applied to
  /// a `num_layers`-layer model; throws kvb::Error "<path>: tensor <name>: missing (the <what> do
  /// not cover layer <layer> of this <num_layers>-layer model)" when absent. `what` is the plural
  /// noun of the messages ("gates", "retaining heads").
  const GateTensor& layer_tensor(const std::string& name, int layer, int num_layers, const std::string& what) const;
  /// Adds an owned tensor (random test gates).
  void add(const std::string& name, std::vector<int64_t> shape, std::vector<float> data);

  /// The number of decoder layers the tensors cover: 1 + the largest l of "model.layers.{l}."
  /// names (0 when there are none).
  int num_layers() const { return layers_under("model.layers.", "."); }
  /// 1 + the largest decimal l of the tensor names "<prefix>{l}<suffix>..." (0 when there are
  /// none): layers_under("layers.", ".") for KVzap's scorers, ("layer", "_") for TriAttention's
  /// statistics "layer03_head07.q_abs_mean".
  int layers_under(const std::string& prefix, const std::string& suffix) const;
  /// Refuses tensors made for another layer count: throws kvb::Error "<path>: tensors: the <what>
  /// cover N decoder layers; this model has M (<one> for another model?)" unless
  /// layers_under(prefix, suffix) == num_layers. `what` is the plural noun ("gates", "scorers"),
  /// `one` how one names a set of them ("gates", "a scorer").
  void require_layers(const std::string& prefix, const std::string& suffix, int num_layers, const std::string& what,
                      const std::string& one) const;
  /// Checks the checkpoint against the model it is applied to: its config.json's
  /// num_hidden_layers, num_key_value_heads, hidden_size and head_dim (when present) and the
  /// layers its tensors cover. Throws one kvb::Error "<file>: <field>: the gates were trained for
  /// <base_model> with N ...; this model has M" at the first mismatch.
  void check_model(int num_layers, int num_kv_heads, int hidden_size, int head_dim) const;

  std::string path;         ///< file the tensors came from ("random_gates=N" for generated gates)
  std::string spec;         ///< what the user named (file, directory or Hub id)
  std::string config_path;  ///< the config.json read, "" if none
  nlohmann::json config = nlohmann::json::object();  ///< its content ({} if none)
  std::map<std::string, GateTensor> tensors;
};

/// Deterministic draws for RANDOM test weights (the random_gates / random_heads / random_scorer
/// parameters): draw i depends on (seed, i) alone through scoring::hash_uniform, so one seed gives
/// the same weights on every platform and backend. Not the papers' weights: tests only.
class SeededDraws {
 public:
  explicit SeededDraws(int64_t seed) : seed_(static_cast<uint64_t>(seed)) {}
  /// N(0, stdv²) by Box–Muller from the next two uniform draws u1 (clamped to ≥ 1e-300), u2:
  /// stdv·sqrt(−2 ln u1)·cos(2π u2), computed in f64 and rounded to f32.
  float normal(double stdv);
  /// U(−bound, bound) from the next uniform draw u: bound·(2u − 1), rounded to f32.
  float uniform(double bound);

 private:
  uint64_t seed_, ctr_ = 0;
};

/// Writes `w` as an F32 safetensors file (tests, tools). Throws kvb::Error on I/O failure.
void save_gate_weights(const GateWeights& w, const std::string& path);

/// Whether `spec` would be read as a Hub id: no local file or directory of that name exists and
/// it has the form org/name[@rev][/path] with Hub-valid org and name.
bool is_hub_gate_spec(const std::string& spec);

}  // namespace kvb
