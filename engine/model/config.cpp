#include "engine/model/config.h"

#include <algorithm>
#include <cmath>

#include "engine/model/architecture.h"
#include "engine/util/error.h"
#include "engine/util/io.h"

namespace kvb {
namespace {

using json = nlohmann::json;

int64_t get_int(const json& j, const char* key, const std::string& origin, bool required, int64_t dflt = 0) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) fail_at(origin, key, "missing required field");
    return dflt;
  }
  if (!it->is_number_integer() && !it->is_number_unsigned())
    fail_at(origin, key, "expected an integer, got {}", it->dump());
  return it->get<int64_t>();
}

double get_num(const json& j, const char* key, const std::string& origin, double dflt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_number()) fail_at(origin, key, "expected a number, got {}", it->dump());
  return it->get<double>();
}

bool get_bool(const json& j, const char* key, const std::string& origin, bool dflt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) fail_at(origin, key, "expected true or false, got {}", it->dump());
  return it->get<bool>();
}

void add_ids(const json& v, std::vector<int32_t>& out, const std::string& origin, const char* key) {
  auto push = [&](const json& x) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
      fail_at(origin, key, "expected integer token ids in [0, 2^31-1], got {}", x.dump());
    int32_t id = x.get<int32_t>();
    for (int32_t e : out)
      if (e == id) return;
    out.push_back(id);
  };
  if (v.is_null()) return;
  if (v.is_array())
    for (const auto& x : v) push(x);
  else push(v);
}

/// `bos_token_id` of config.json or generation_config.json: nullopt when absent or null, else a
/// token id in [0, 2^31-1]; throws kvb::Error naming `origin` and the key otherwise.
std::optional<int32_t> get_bos_id(const json& j, const std::string& origin) {
  auto it = j.find("bos_token_id");
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX)
    fail_at(origin, "bos_token_id", "expected a token id (an integer in [0, 2^31-1]) or null, got {}", it->dump());
  return it->get<int32_t>();
}

/// Refuses `partial_rotary_factor` (transformers' RoPE rotates only that share of each head's
/// dims; kvbench rotates all of them) unless it is absent, null or 1. `field` names it in `j`
/// ("partial_rotary_factor" or "rope_parameters.partial_rotary_factor").
void check_partial_rotary(const json& j, const std::string& origin, const std::string& field) {
  auto it = j.find("partial_rotary_factor");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_number() || it->get<double>() != 1.0)
    fail_at(origin, field, "{} is not supported (kvbench applies RoPE to the whole head, factor 1)", it->dump());
}

/// Sets c.layer_window from config.json as transformers reads it for `a` (its SlidingRule):
/// `sliding_window` (null = none) applies to every layer (Mistral), to the layers `layer_types`
/// marks "sliding_attention" (Ministral: every layer without layer_types; Gemma 2: the even
/// layers without layer_types), or to those only when
/// `use_sliding_window` (Qwen2/Qwen3; without layer_types, the layers ≥ `max_window_layers`).
void read_layer_windows(const json& j, const Architecture& a, const std::string& origin, ModelConfig& c) {
  const int64_t L = c.num_layers;
  std::vector<std::string> types;
  if (auto lt = j.find("layer_types"); lt != j.end() && !lt->is_null()) {
    if (!lt->is_array()) fail_at(origin, "layer_types", "expected a list of layer types, got {}", lt->dump());
    if (static_cast<int64_t>(lt->size()) != L)
      fail_at(origin, "layer_types", "has {} entries for num_hidden_layers {}", lt->size(), L);
    for (size_t i = 0; i < lt->size(); ++i) {
      const json& t = (*lt)[i];
      if (t != "full_attention" && (t != "sliding_attention" || a.sliding == SlidingRule::kNone))
        fail_at(origin, fmt::format("layer_types[{}]", i), "unsupported layer type {} for {} (supported: {})", t.dump(),
                c.model_type, a.sliding == SlidingRule::kNone ? "full_attention" : "full_attention, sliding_attention");
      types.push_back(t.get<std::string>());
    }
  }
  if (a.sliding == SlidingRule::kNone) return;
  int64_t window = get_int(j, "sliding_window", origin, false, 0);
  if (window < 0) fail_at(origin, "sliding_window", "must be > 0 or null, got {}", window);
  if (window >= (int64_t{1} << 30)) window = 0;  // wider than any context: full attention
  if (a.sliding == SlidingRule::kGatedLayers && !get_bool(j, "use_sliding_window", origin, false)) window = 0;
  if (window == 0) return;
  if (a.sliding == SlidingRule::kEveryLayer || types.empty()) {
    const int64_t first = a.sliding == SlidingRule::kGatedLayers ? get_int(j, "max_window_layers", origin, false, L) : 0;
    types.assign(L, "full_attention");
    for (int64_t l = std::max<int64_t>(first, 0); l < L; ++l)
      if (a.sliding != SlidingRule::kAlternating || l % 2 == 0) types[l] = "sliding_attention";
  }
  c.layer_window.assign(L, 0);
  for (int64_t l = 0; l < L; ++l)
    if (types[l] == "sliding_attention") c.layer_window[l] = static_cast<int32_t>(window);
}

}  // namespace

ModelConfig ModelConfig::from_json(const json& j, const std::string& origin) {
  if (!j.is_object()) fail_at(origin, "", "expected a JSON object");
  ModelConfig c;
  auto mt = j.find("model_type");
  const Architecture* arch = nullptr;
  if (mt == j.end() || mt->is_null()) {
    // No model_type: the first `architectures` class kvbench knows (e.g. "MistralForCausalLM").
    if (auto cls = j.find("architectures"); cls != j.end() && cls->is_array())
      for (const json& x : *cls)
        if (x.is_string() && !arch) arch = find_architecture_by_class(x.get<std::string>());
    if (!arch) fail_at(origin, "model_type", "missing (and no known class in architectures)");
    c.model_type = arch->model_type;
  } else {
    if (!mt->is_string()) fail_at(origin, "model_type", "expected a string, got {}", mt->dump());
    c.model_type = mt->get<std::string>();
  }
  arch = find_architecture(c.model_type);
  if (!arch)
    fail_at(origin, "model_type", "unsupported model type '{}' (supported: {})", c.model_type, architecture_names());
  c.vocab_size = get_int(j, "vocab_size", origin, true);
  c.hidden_size = get_int(j, "hidden_size", origin, true);
  c.intermediate_size = get_int(j, "intermediate_size", origin, true);
  c.num_layers = get_int(j, "num_hidden_layers", origin, true);
  c.num_heads = get_int(j, "num_attention_heads", origin, true);
  c.num_kv_heads = get_int(j, "num_key_value_heads", origin, false, c.num_heads);
  c.head_dim = get_int(j, "head_dim", origin, false, 0);
  if (c.head_dim == 0 && c.num_heads > 0) c.head_dim = c.hidden_size / c.num_heads;
  c.max_position_embeddings = get_int(j, "max_position_embeddings", origin, false, 2048);
  c.rms_norm_eps = get_num(j, "rms_norm_eps", origin, 1e-6);
  // transformers 5 moves rope_theta into rope_parameters; accept both.
  c.rope_theta = get_num(j, "rope_theta", origin, 10000.0);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", origin, false);
  c.attention_bias = arch->qkv_bias == QkvBias::kAlways ||
                     (arch->qkv_bias == QkvBias::kConfig && get_bool(j, "attention_bias", origin, false));
  c.qk_norm = arch->qk_norm;
  // Flags that change the model and that kvbench does not implement are refused, never ignored:
  // an ignored flag would run a different model than the checkpoint's (docs/robustness.md).
  if (arch->qkv_bias == QkvBias::kConfig && c.attention_bias)
    fail_at(origin, "attention_bias",
            "true is not supported for {}: transformers then gives o_proj a bias as well, which kvbench does not "
            "implement (q/k/v biases only, as Qwen2 has them)",
            c.model_type);
  if (get_bool(j, "mlp_bias", origin, false))
    fail_at(origin, "mlp_bias", "true is not supported (kvbench's MLP projections have no bias)");
  // transformers, after loading a GGUF, saves the dequantised float tensors with
  // quantization_config {"quant_method": "gguf"} and reloads that directory itself: its tensors
  // are float, which the safetensors loader checks tensor by tensor (any other dtype is refused
  // there). Every other quantisation method stores quantised tensors: refused here.
  const auto q = j.find("quantization_config");
  const bool gguf_dequantised =
      q != j.end() && q->is_object() && q->contains("quant_method") && (*q)["quant_method"] == "gguf";
  if (q != j.end() && !q->is_null() && !gguf_dequantised)
    fail_at(origin, "quantization_config",
            "quantised checkpoints ({}) are not supported; use the unquantised weights or a GGUF file",
            q->is_object() && q->contains("quant_method") ? (*q)["quant_method"].dump() : q->dump());
  check_partial_rotary(j, origin, "partial_rotary_factor");
  // A DMS checkpoint (NVIDIA Model-Optimizer experimental/dms, Qwen3ConfigDMS) runs as its base model
  // with the `dms` policy reading its dms_proj_alpha tensors; one trained with dms_separate_alpha
  // false (the default) instead borrows the last query channel of each group's first head for the
  // decision and zeroes it in attention: a different forward, refused rather than run wrongly.
  if (j.contains("dms_window_size") || j.contains("dms_separate_alpha") || j.contains("dms_alpha_scale"))
    if (auto sep = j.find("dms_separate_alpha"); sep == j.end() || *sep != true)
      fail_at(origin, "dms_separate_alpha",
              "a DMS checkpoint whose eviction decision borrows a query channel (dms_separate_alpha false, the "
              "default) is not supported: kvbench runs DMS checkpoints with a separate dms_proj_alpha projection");
  if (auto act = j.find(arch->act_key); act != j.end() && !act->is_null()) {
    const char* want = hidden_act_name(arch->activation);
    if (*act != want)
      fail_at(origin, arch->act_key, "unsupported activation {} for {} (only {})", act->dump(), c.model_type, want);
  }
  read_layer_windows(j, *arch, origin, c);
  c.query_pre_attn_scalar = get_num(j, "query_pre_attn_scalar", origin, 0.0);
  c.attn_logit_softcap = get_num(j, "attn_logit_softcapping", origin, 0.0);
  c.final_logit_softcap = get_num(j, "final_logit_softcapping", origin, 0.0);
  if (get_bool(j, "use_bidirectional_attention", origin, false))
    fail_at(origin, "use_bidirectional_attention", "bidirectional attention is not supported (decoder only)");

  const json* rs = nullptr;
  std::string f;
  // transformers 5 writes rope_parameters ({rope_type, rope_theta, ...}); older files
  // rope_scaling (+ top-level rope_theta). When both are present rope_parameters wins.
  // Either may be null (no scaling); any other non-mapping is an error, as in transformers
  // (an ignored `"rope_scaling": 5` would silently run unscaled RoPE).
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_object()) fail_at(origin, key, "expected a mapping or null, got {}", it->dump());
    if (!rs) {
      rs = &*it;
      f = key;
    }
  }
  if (rs) {
    const json& r = *rs;
    for (const char* k : {"rope_type", "type"})
      if (r.contains(k) && !r[k].is_string()) fail_at(origin, f + "." + k, "expected a string, got {}", r[k].dump());
    std::string type = r.value("rope_type", r.value("type", std::string("default")));
    if (type != "default" && type != "linear" && type != "llama3" && type != "yarn")
      fail_at(origin, f + ".rope_type", "unsupported RoPE scaling '{}' (default, linear, llama3, yarn)", type);
    c.rope_scaling.type = type;
    check_partial_rotary(r, origin, f + ".partial_rotary_factor");
    if (r.contains("rope_theta")) c.rope_theta = get_num(r, "rope_theta", origin + ": " + f, c.rope_theta);
    c.rope_scaling.factor = get_num(r, "factor", origin + ": " + f, 1.0);
    c.rope_scaling.low_freq_factor = get_num(r, "low_freq_factor", origin + ": " + f, 1.0);
    c.rope_scaling.high_freq_factor = get_num(r, "high_freq_factor", origin + ": " + f, 4.0);
    c.rope_scaling.original_max_position_embeddings =
        get_int(r, "original_max_position_embeddings", origin + ": " + f, false, 0);
    c.rope_scaling.beta_fast = get_num(r, "beta_fast", origin + ": " + f, 32.0);
    c.rope_scaling.beta_slow = get_num(r, "beta_slow", origin + ": " + f, 1.0);
    c.rope_scaling.attention_factor = get_num(r, "attention_factor", origin + ": " + f, 0.0);
    c.rope_scaling.mscale = get_num(r, "mscale", origin + ": " + f, 0.0);
    c.rope_scaling.mscale_all_dim = get_num(r, "mscale_all_dim", origin + ": " + f, 0.0);
    c.rope_scaling.truncate = get_bool(r, "truncate", origin + ": " + f, true);
    if ((type == "llama3" || type == "yarn" || type == "linear") && c.rope_scaling.factor <= 0)
      fail_at(origin, f + ".factor", "must be > 0");
    if (type == "llama3" && c.rope_scaling.original_max_position_embeddings <= 0)
      fail_at(origin, f + ".original_max_position_embeddings", "required for llama3 RoPE");
  }
  if (j.contains("eos_token_id")) add_ids(j["eos_token_id"], c.eos_token_ids, origin, "eos_token_id");
  if (const auto bos = get_bos_id(j, origin)) c.bos_token_id = *bos;
  c.validate(origin);
  return c;
}

GenerationDefaults GenerationDefaults::from_file(const std::string& path) {
  GenerationDefaults g;
  if (!file_exists(path)) return g;
  const json j = parse_json_file(path);
  if (!j.is_object()) fail_at(path, "", "expected a JSON object");
  g.present = true;
  if (j.contains("do_sample") && !j["do_sample"].is_null()) g.do_sample = get_bool(j, "do_sample", path, false);
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    g.temperature = get_num(j, "temperature", path, 1.0);
    if (*g.temperature < 0) fail_at(path, "temperature", "must be >= 0, got {}", *g.temperature);
  }
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    g.top_p = get_num(j, "top_p", path, 1.0);
    if (!(*g.top_p > 0 && *g.top_p <= 1)) fail_at(path, "top_p", "must be in (0, 1], got {}", *g.top_p);
  }
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    const int64_t k = get_int(j, "top_k", path, false, 50);
    if (k < 0 || k > (1 << 30)) fail_at(path, "top_k", "must be >= 0, got {}", k);
    g.top_k = static_cast<int>(k);
  }
  if (j.contains("eos_token_id")) add_ids(j["eos_token_id"], g.eos_token_ids, path, "eos_token_id");
  g.bos_token_id = get_bos_id(j, path);
  return g;
}

json GenerationDefaults::sampling() const {
  if (!do_sample.value_or(false)) return {{"temperature", 0.0}};
  return {{"temperature", temperature.value_or(1.0)}, {"top_p", top_p.value_or(1.0)}, {"top_k", top_k.value_or(50)}};
}

json GenerationDefaults::to_json() const {
  json j = json::object();
  if (do_sample) j["do_sample"] = *do_sample;
  if (temperature) j["temperature"] = *temperature;
  if (top_p) j["top_p"] = *top_p;
  if (top_k) j["top_k"] = *top_k;
  if (!eos_token_ids.empty()) j["eos_token_id"] = eos_token_ids;
  if (bos_token_id) j["bos_token_id"] = *bos_token_id;
  return j;
}

ModelConfig ModelConfig::from_dir(const std::string& dir) {
  const std::string path = dir + "/config.json";
  if (!file_exists(path)) fail("{}: not found (a model directory needs config.json)", path);
  ModelConfig c = from_json(parse_json_file(path), path);
  c.generation = GenerationDefaults::from_file(dir + "/generation_config.json");
  for (int32_t id : c.generation.eos_token_ids) add_ids(json(id), c.eos_token_ids, path, "eos_token_id");
  if (c.bos_token_id < 0 && c.generation.bos_token_id) c.bos_token_id = *c.generation.bos_token_id;
  return c;
}

void ModelConfig::validate(const std::string& origin) const {
  auto pos = [&](int64_t v, const char* f) {
    if (v <= 0) fail_at(origin, f, "must be > 0, got {}", v);
  };
  if (!find_architecture(model_type))
    fail_at(origin, "model_type", "unsupported model type '{}' (supported: {})", model_type, architecture_names());
  pos(vocab_size, "vocab_size");
  pos(hidden_size, "hidden_size");
  pos(intermediate_size, "intermediate_size");
  pos(num_layers, "num_hidden_layers");
  pos(num_heads, "num_attention_heads");
  pos(num_kv_heads, "num_key_value_heads");
  pos(head_dim, "head_dim");
  pos(max_position_embeddings, "max_position_embeddings");
  if (num_heads % num_kv_heads != 0)
    fail_at(origin, "num_key_value_heads", "{} does not divide num_attention_heads {}", num_kv_heads, num_heads);
  if (head_dim % 2 != 0) fail_at(origin, "head_dim", "must be even for RoPE, got {}", head_dim);
  // Written as !(x > 0) so that NaN (possible in GGUF metadata) fails too.
  if (!(rms_norm_eps > 0) || !std::isfinite(rms_norm_eps))
    fail_at(origin, "rms_norm_eps", "must be > 0, got {}", rms_norm_eps);
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) fail_at(origin, "rope_theta", "must be > 0, got {}", rope_theta);
  if (!(query_pre_attn_scalar >= 0) || !std::isfinite(query_pre_attn_scalar))
    fail_at(origin, "query_pre_attn_scalar", "must be > 0");
  if (!(attn_logit_softcap >= 0) || !std::isfinite(attn_logit_softcap))
    fail_at(origin, "attn_logit_softcapping", "must be > 0 or null");
  if (!(final_logit_softcap >= 0) || !std::isfinite(final_logit_softcap))
    fail_at(origin, "final_logit_softcapping", "must be > 0 or null");
  for (const auto& [v, f] : {std::pair<double, const char*>{rope_scaling.factor, "rope_scaling.factor"},
                             {rope_scaling.low_freq_factor, "rope_scaling.low_freq_factor"},
                             {rope_scaling.high_freq_factor, "rope_scaling.high_freq_factor"},
                             {rope_scaling.beta_fast, "rope_scaling.beta_fast"},
                             {rope_scaling.beta_slow, "rope_scaling.beta_slow"},
                             {rope_scaling.attention_factor, "rope_scaling.attention_factor"},
                             {rope_scaling.mscale, "rope_scaling.mscale"},
                             {rope_scaling.mscale_all_dim, "rope_scaling.mscale_all_dim"}})
    if (!std::isfinite(v)) fail_at(origin, f, "must be a finite number, got {}", v);
  if (rope_scaling.original_max_position_embeddings < 0 || rope_scaling.original_max_position_embeddings > INT32_MAX)
    fail_at(origin, "rope_scaling.original_max_position_embeddings", "must be in [0, 2^31-1], got {}",
            rope_scaling.original_max_position_embeddings);
  // Sizes index int32 tables and are multiplied together when buffers are sized: each must fit
  // int32 (num_hidden_layers far less) so an absurd value is named here, not met as "out of memory".
  auto fits = [&](int64_t v, const char* f, int64_t hi) {
    if (v > hi) fail_at(origin, f, "{} is absurdly large (at most {})", v, hi);
  };
  fits(vocab_size, "vocab_size", INT32_MAX);
  fits(hidden_size, "hidden_size", 1 << 20);
  fits(intermediate_size, "intermediate_size", 1 << 22);
  fits(num_layers, "num_hidden_layers", 1 << 16);
  fits(num_heads, "num_attention_heads", 1 << 16);
  fits(num_kv_heads, "num_key_value_heads", 1 << 16);
  fits(head_dim, "head_dim", 1 << 16);
  fits(max_position_embeddings, "max_position_embeddings", INT32_MAX);
  if (!layer_window.empty() && static_cast<int64_t>(layer_window.size()) != num_layers)
    fail_at(origin, "sliding_window", "{} layer windows for num_hidden_layers {}", layer_window.size(), num_layers);
}

float ModelConfig::attention_scale() const {
  if (query_pre_attn_scalar > 0) return static_cast<float>(std::pow(query_pre_attn_scalar, -0.5));
  return 1.0f / std::sqrt(static_cast<float>(head_dim));
}

int64_t ModelConfig::num_parameters() const {
  const int64_t H = hidden_size, D = head_dim;
  int64_t attn = H * num_heads * D + 2 * H * num_kv_heads * D + num_heads * D * H;
  if (attention_bias) attn += num_heads * D + 2 * num_kv_heads * D;
  if (qk_norm) attn += 2 * D;
  const int64_t mlp = 3 * H * intermediate_size;
  const Architecture* a = find_architecture(model_type);
  const int64_t norms = a && has_role(*a, TensorRole::kPostAttnNorm) ? 4 : 2;
  const int64_t per_layer = attn + mlp + norms * H;
  const int64_t emb = vocab_size * H * (tie_word_embeddings ? 1 : 2);
  return emb + num_layers * per_layer + H;
}

}  // namespace kvb
