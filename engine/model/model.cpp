#include "engine/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <set>
#include <string_view>

#include "engine/model/architecture.h"
#include "engine/util/error.h"

namespace kvb {

namespace {

/// How a tensor is held: a weight matrix (in the model's WeightFormat), an f32 norm weight
/// (1 in random models) or an f32 bias.
enum class TensorKind { kMatrix, kNorm, kBias };

/// One tensor a config implies: its role, shape and kind.
struct TensorSpec {
  TensorRole role;
  std::vector<int64_t> shape;
  TensorKind kind;
};

/// The per-layer tensors `c` implies, in the order Model::random draws them (its weights depend
/// on that order). The one list bind() and random() share.
std::vector<TensorSpec> layer_tensor_specs(const ModelConfig& c) {
  const Architecture& a = architecture(c.model_type);
  const int64_t H = c.hidden_size, D = c.head_dim, Hq = c.num_heads, Hkv = c.num_kv_heads, I = c.intermediate_size;
  using R = TensorRole;
  using K = TensorKind;
  std::vector<TensorSpec> s = {{R::kAttnNorm, {H}, K::kNorm},      {R::kMlpNorm, {H}, K::kNorm},
                               {R::kWq, {Hq * D, H}, K::kMatrix},  {R::kWk, {Hkv * D, H}, K::kMatrix},
                               {R::kWv, {Hkv * D, H}, K::kMatrix}, {R::kWo, {H, Hq * D}, K::kMatrix}};
  if (c.attention_bias)
    s.insert(s.end(), {{R::kBq, {Hq * D}, K::kBias}, {R::kBk, {Hkv * D}, K::kBias}, {R::kBv, {Hkv * D}, K::kBias}});
  if (c.qk_norm) s.insert(s.end(), {{R::kQNorm, {D}, K::kNorm}, {R::kKNorm, {D}, K::kNorm}});
  s.insert(s.end(), {{R::kGate, {I, H}, K::kMatrix}, {R::kUp, {I, H}, K::kMatrix}, {R::kDown, {H, I}, K::kMatrix}});
  for (R r : {R::kPostAttnNorm, R::kPostMlpNorm})
    if (has_role(a, r)) s.push_back({r, {H}, K::kNorm});
  return s;
}

/// The LayerWeights slot of a per-layer matrix role, or null.
Mat* mat_slot(LayerWeights& w, TensorRole r) {
  switch (r) {
    case TensorRole::kWq: return &w.wq;
    case TensorRole::kWk: return &w.wk;
    case TensorRole::kWv: return &w.wv;
    case TensorRole::kWo: return &w.wo;
    case TensorRole::kGate: return &w.w_gate;
    case TensorRole::kUp: return &w.w_up;
    case TensorRole::kDown: return &w.w_down;
    default: return nullptr;
  }
}

/// The LayerWeights slot of a per-layer vector role (norm or bias), or null.
const float** vec_slot(LayerWeights& w, TensorRole r) {
  switch (r) {
    case TensorRole::kAttnNorm: return &w.attn_norm;
    case TensorRole::kMlpNorm: return &w.mlp_norm;
    case TensorRole::kPostAttnNorm: return &w.post_attn_norm;
    case TensorRole::kPostMlpNorm: return &w.post_mlp_norm;
    case TensorRole::kBq: return &w.bq;
    case TensorRole::kBk: return &w.bk;
    case TensorRole::kBv: return &w.bv;
    case TensorRole::kQNorm: return &w.q_norm;
    case TensorRole::kKNorm: return &w.k_norm;
    default: return nullptr;
  }
}

/// GGUF's RoPE frequency-factor tensor [head_dim / 2] (llama.cpp's converter writes it for
/// Llama 3 RoPE scaling); bound for the llama architecture.
constexpr const char* kRopeFreqs = "rope_freqs.weight";

/// The layer index when `name` matches `pattern` ("{}" = decimal digits), else -1; 0 for a
/// pattern without "{}" equal to name.
int64_t layer_of(std::string_view pattern, std::string_view name) {
  const size_t at = pattern.find("{}");
  if (at == std::string_view::npos) return pattern == name ? 0 : -1;
  const std::string_view pre = pattern.substr(0, at), post = pattern.substr(at + 2);
  if (name.size() <= pre.size() + post.size() || !name.starts_with(pre) || !name.ends_with(post)) return -1;
  const std::string_view digits = name.substr(pre.size(), name.size() - pre.size() - post.size());
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string_view::npos) return -1;
  return std::stoll(std::string(digits));
}

/// Tensors checkpoints carry beside the model's own that no architecture's forward reads; bind
/// skips them on purpose (every other unbound tensor is an error). `{}`: a layer index below
/// num_hidden_layers. The tied lm_head copy is the one other skip (check_all_bound).
constexpr const char* kIgnorable[] = {
    // Older transformers versions saved each layer's RoPE buffer in the state dict; it is
    // recomputed from config.json, and transformers skips it on load too.
    "model.layers.{}.self_attn.rotary_emb.inv_freq",
    "model.rotary_emb.inv_freq",
    // LocRet's full checkpoints (hyx21/Locret-*) hold the retaining heads inside each attention
    // block; the locret policy reads them (heads=), the forward does not.
    "model.layers.{}.self_attn.fc1.weight",
    "model.layers.{}.self_attn.fc2.weight",
    // DMS checkpoints (dms_separate_alpha) hold the eviction-decision projection in each attention
    // block; the dms policy reads it (alpha=), the forward does not.
    "model.layers.{}.self_attn.dms_proj_alpha.weight",
    "model.layers.{}.self_attn.dms_proj_alpha.bias",
    "model.layers.{}.self_attn.dms_proj_alpha_norm.weight",
};

/// True when `name` is one of kIgnorable with a layer index in [0, num_layers).
bool ignorable(std::string_view name, int64_t num_layers) {
  for (const char* pattern : kIgnorable)
    if (const int64_t l = layer_of(pattern, name); l >= 0 && l < std::max<int64_t>(num_layers, 1)) return true;
  return false;
}

/// How an error names tensor `name` of `t`'s file: GGUF files (origin *.gguf) call the tensors of
/// `a`'s table by their llama.cpp names, "blk.4.attn_norm.weight' (as 'model.layers.4...".
std::string shown_name(const Architecture& a, const std::string& name, const TensorView& t) {
  if (!t.origin.ends_with(".gguf")) return name;
  for (const TensorName& n : a.tensors) {
    if (!n.gguf) continue;
    if (const int64_t l = layer_of(n.hf, name); l >= 0) {
      std::string g = n.gguf;
      if (const size_t at = g.find("{}"); at != std::string::npos) g.replace(at, 2, std::to_string(l));
      return g + "' (as '" + name;
    }
  }
  return name;
}

/// Refuses the first tensor of `ws` (in name order) that is not in `bound`, not the tied lm_head
/// copy and not ignorable(): llama.cpp's tensor-count check (llama_model_loader's
/// done_getting_tensors), naming the tensor. Throws kvb::Error
/// "<file>: tensor '<name>': not used by the <arch> architecture as configured (...)".
void check_all_bound(const ModelConfig& c, const WeightStore& ws, const std::set<std::string>& bound,
                     const std::string& origin) {
  const Architecture& a = architecture(c.model_type);
  for (const auto& [name, t] : ws.tensors()) {
    if (bound.count(name)) continue;
    // Tied: transformers points lm_head at the embedding and ignores a stored copy.
    if (c.tie_word_embeddings && name == hf_tensor_name(a, TensorRole::kLmHead)) continue;
    if (ignorable(name, c.num_layers)) continue;
    const std::string shown = shown_name(a, name, t);  // GGUF: "<gguf name>' (as '<name>"
    fail_at(t.origin.empty() ? origin : t.origin, "tensor '" + shown + (shown == name ? "'" : "')"),
            "not used by the {} architecture as configured (kvbench binds {} of the {} tensors; ignoring this one "
            "would run a different model than the checkpoint's)",
            c.model_type, bound.size(), ws.tensors().size());
  }
}

}  // namespace

std::vector<float> rope_inv_freq(const ModelConfig& c, float* attention_scaling) {
  const int64_t D = c.head_dim;
  std::vector<double> f(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) f[i] = 1.0 / std::pow(c.rope_theta, double(2 * i) / double(D));
  double scale = 1.0;
  const RopeScaling& r = c.rope_scaling;
  if (r.type == "linear") {
    for (auto& x : f) x /= r.factor;
  } else if (r.type == "llama3") {
    // transformers _compute_llama3_parameters
    const double old_ctx = double(r.original_max_position_embeddings);
    const double low_wl = old_ctx / r.low_freq_factor, high_wl = old_ctx / r.high_freq_factor;
    for (auto& x : f) {
      const double wl = 2 * std::numbers::pi / x;
      if (wl > low_wl) {
        x = x / r.factor;
      } else if (wl >= high_wl) {  // medium band: smooth interpolation
        const double smooth = (old_ctx / wl - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        x = (1 - smooth) * x / r.factor + smooth * x;
      }
    }
  } else if (r.type == "yarn") {
    // transformers _compute_yarn_parameters
    const double base = c.rope_theta, factor = r.factor;
    const double orig = r.original_max_position_embeddings > 0 ? double(r.original_max_position_embeddings)
                                                               : double(c.max_position_embeddings);
    auto get_mscale = [](double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * std::log(s) + 1.0; };
    if (r.attention_factor > 0) scale = r.attention_factor;
    else if (r.mscale > 0 && r.mscale_all_dim > 0)
      scale = get_mscale(factor, r.mscale) / get_mscale(factor, r.mscale_all_dim);
    else scale = get_mscale(factor, 1.0);
    auto corr_dim = [&](double nrot) {
      return (double(D) * std::log(orig / (nrot * 2 * std::numbers::pi))) / (2 * std::log(base));
    };
    double low = corr_dim(r.beta_fast), high = corr_dim(r.beta_slow);
    if (r.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, double(D - 1));
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < D / 2; ++i) {
      const double pos_freq = std::pow(base, double(2 * i) / double(D));
      const double extrap = 1.0 / pos_freq, interp = 1.0 / (factor * pos_freq);
      double ramp = (double(i) - low) / (high - low);
      ramp = std::clamp(ramp, 0.0, 1.0);
      const double extrap_factor = 1 - ramp;
      f[i] = interp * (1 - extrap_factor) + extrap * extrap_factor;
    }
  }
  if (attention_scaling) *attention_scaling = static_cast<float>(scale);
  std::vector<float> out(f.size());
  for (size_t i = 0; i < f.size(); ++i) out[i] = static_cast<float>(f[i]);
  return out;
}

const float* Model::f32(const std::string& name, const std::vector<int64_t>& shape, bool optional) {
  if (optional && !weights_.find(name)) return nullptr;
  const TensorView& t = weights_.require(name, shape);
  weight_bytes_ += t.numel() * sizeof(float);
  if (t.dtype == DType::F32 && !t.row_index && reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0)
    return static_cast<const float*>(t.data);
  converted_.push_back(std::make_unique<std::vector<float>>(WeightStore::to_f32(t)));
  return converted_.back()->data();
}

const float* Model::norm(const std::string& name, const std::vector<int64_t>& shape) {
  const float* w = f32(name, shape);
  if (!architecture(cfg_.model_type).norm_plus_one) return w;
  // Gemma2RMSNorm: x̂·(1 + w), the sum in f32 as torch forms it.
  auto one_plus = std::make_unique<std::vector<float>>(w, w + shape[0]);
  for (float& v : *one_plus) v = 1.0f + v;
  converted_.push_back(std::move(one_plus));
  return converted_.back()->data();
}

Mat Model::mat(const std::string& name, const std::vector<int64_t>& shape) {
  const int64_t rows = shape[0], cols = shape[1];
  if (fmt_ == WeightFormat::kF32) return Mat::of_f32(f32(name, shape), rows, cols);
  const TensorView& t = weights_.require(name, shape);
  if (fmt_ == WeightFormat::kStored) {
    const size_t align = t.dtype == DType::F32 ? 4 : t.dtype == DType::F16 || t.dtype == DType::BF16 ? 2 : 1;
    if (cols % dtype_traits(t.dtype).block != 0)
      fail_at(t.origin, "tensor '" + name + "'", "rows of {} elements are not whole {} blocks", cols,
              dtype_name(t.dtype));
    if (reinterpret_cast<uintptr_t>(t.data) % align == 0) {
      weight_bytes_ += t.nbytes();
      return Mat::of(t.dtype, t.data, rows, cols, t.row_index ? t.row_index->data() : nullptr);
    }
    // Unaligned F32/F16/BF16 data (safetensors need not align): an aligned copy as stored.
    auto copy = std::make_unique<std::vector<float>>((t.nbytes() + 3) / 4);
    std::memcpy(copy->data(), t.data, t.nbytes());
    weight_bytes_ += t.nbytes();
    const Mat m = Mat::of(t.dtype, copy->data(), rows, cols, t.row_index ? t.row_index->data() : nullptr);
    converted_.push_back(std::move(copy));
    return m;
  }
  weight_bytes_ += t.numel() * sizeof(uint16_t);
  if (t.dtype == DType::BF16 && !t.row_index && reinterpret_cast<uintptr_t>(t.data) % alignof(uint16_t) == 0)
    return Mat::of_bf16(static_cast<const uint16_t*>(t.data), rows, cols);
  std::vector<float> f = WeightStore::to_f32(t);
  auto out = std::make_unique<std::vector<uint16_t>>(f.size());
  for (size_t i = 0; i < f.size(); ++i) (*out)[i] = f32_to_bf16_bits(f[i]);
  const Mat m = Mat::of_bf16(out->data(), rows, cols);
  converted16_.push_back(std::move(out));
  return m;
}

void Model::embed_row(int32_t token, float* out) const {
  dequantize_row(embed_.type, embed_.row(token), cfg_.hidden_size, out);
  if (embed_scale_ != 1.0f)
    for (int64_t i = 0; i < cfg_.hidden_size; ++i) out[i] *= embed_scale_;
}

void Model::bind(const std::string& origin) {
  const ModelConfig& c = cfg_;
  const Architecture& a = architecture(c.model_type);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  std::set<std::string> bound;  // every tensor name resolved below
  auto use = [&](const std::string& name) -> const std::string& { return *bound.insert(name).first; };
  embed_ = mat(use(hf_tensor_name(a, TensorRole::kEmbed)), {V, H});
  norm_ = norm(use(hf_tensor_name(a, TensorRole::kFinalNorm)), {H});
  // Gemma2Model: hidden * torch.tensor(H ** 0.5, dtype=float32).
  embed_scale_ = a.embed_scale ? static_cast<float>(std::sqrt(static_cast<double>(H))) : 1.0f;
  lm_head_ = c.tie_word_embeddings ? embed_ : mat(use(hf_tensor_name(a, TensorRole::kLmHead)), {V, H});
  const std::vector<TensorSpec> specs = layer_tensor_specs(c);
  layers_.resize(c.num_layers);
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (const TensorSpec& t : specs) {
      const std::string& name = use(hf_tensor_name(a, t.role, l));
      if (t.kind == TensorKind::kMatrix) *mat_slot(layers_[l], t.role) = mat(name, t.shape);
      else if (t.kind == TensorKind::kNorm) *vec_slot(layers_[l], t.role) = norm(name, t.shape);
      else *vec_slot(layers_[l], t.role) = f32(name, t.shape);
    }
  inv_freq_ = rope_inv_freq(c, &rope_mscale_);
  // llama.cpp's converter stores Llama 3 RoPE scaling as one divisor per frequency, GGUF
  // `rope_freqs.weight` [D/2]; ggml's rope divides each angle by it. llama.cpp reads it for its
  // "llama" architecture only.
  if (c.model_type == "llama" && weights_.find(kRopeFreqs)) {
    const float* ff = f32(use(kRopeFreqs), {c.head_dim / 2});
    for (int64_t i = 0; i < c.head_dim / 2; ++i) {
      if (!(ff[i] > 0) || !std::isfinite(ff[i]))
        fail_at(weights_.find(kRopeFreqs)->origin, std::string("tensor '") + kRopeFreqs + "'",
                "element {} is {}; RoPE frequency factors must be finite and > 0", i, ff[i]);
      inv_freq_[i] /= ff[i];
    }
  }
  check_all_bound(c, weights_, bound, origin);
}

std::shared_ptr<Model> Model::from_weights(ModelConfig cfg, WeightStore weights, std::string id, WeightFormat fmt) {
  auto m = std::shared_ptr<Model>(new Model());
  m->fmt_ = fmt;
  m->cfg_ = std::move(cfg);
  m->weights_ = std::move(weights);
  m->id_ = std::move(id);
  m->bind(m->weights_.origin);
  return m;
}

std::shared_ptr<Model> Model::load_dir(const std::string& dir, WeightFormat fmt) {
  ModelConfig cfg = ModelConfig::from_dir(dir);
  WeightStore ws = WeightStore::from_safetensors_dir(dir);
  return from_weights(std::move(cfg), std::move(ws), dir, fmt);
}

namespace {
/// splitmix64's finaliser: a bijective 64-bit mix (Steele et al. 2014), used as a counter-based
/// generator so that element i of a random tensor depends only on (seed, tensor, i).
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
/// An approximately normal draw N(0, σ²) from one 64-bit hash: the Irwin–Hall sum of four
/// 16-bit uniforms, centred and scaled to unit variance (|x| ≤ 2√3·σ; plenty for benchmark weights).
inline float irwin_hall4(uint64_t h, float sigma) {
  const float s = static_cast<float>((h & 0xffff) + ((h >> 16) & 0xffff) + ((h >> 32) & 0xffff) + (h >> 48));
  // Each term is uniform on {0..65535}: mean 32767.5, variance (65536² − 1) / 12.
  constexpr float kMean = 4 * 32767.5f, kInvStd = 1.0f / 37837.23f;  // 1 / sqrt(4 (65536² − 1) / 12)
  return (s - kMean) * kInvStd * sigma;
}
}  // namespace

std::shared_ptr<Model> Model::random(const ModelConfig& c, uint64_t seed, WeightFormat fmt) {
  c.validate("random model");
  WeightStore ws;
  ws.origin = "random weights";
  uint64_t tensor_index = 0;
  // Counter-based and OpenMP-parallel: the weights depend only on (seed, tensor order, element),
  // never on the thread count, and an 8B-parameter shape builds in seconds (a sequential
  // std::normal_distribution took minutes). bf16 models are generated directly as bf16.
  auto rnd = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    const uint64_t key = mix64(seed * 0x9e3779b97f4a7c15ull + (++tensor_index) * 0xd1b54a32d192ed03ull);
    if (fmt == WeightFormat::kBF16) {
      std::vector<uint16_t> v(n);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i)
        v[i] = f32_to_bf16_bits(irwin_hall4(mix64(key + static_cast<uint64_t>(i)), 0.02f));
      ws.add_owned_bf16(name, std::move(shape), std::move(v), "random");
    } else {
      std::vector<float> v(n);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) v[i] = irwin_hall4(mix64(key + static_cast<uint64_t>(i)), 0.02f);
      ws.add_owned(name, std::move(shape), std::move(v), "random");
    }
  };
  auto ones = [&](const std::string& name, int64_t n) { ws.add_owned(name, {n}, std::vector<float>(n, 1.0f), "random"); };
  const Architecture& a = architecture(c.model_type);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  rnd(hf_tensor_name(a, TensorRole::kEmbed), {V, H});
  ones(hf_tensor_name(a, TensorRole::kFinalNorm), H);
  if (!c.tie_word_embeddings) rnd(hf_tensor_name(a, TensorRole::kLmHead), {V, H});
  const std::vector<TensorSpec> specs = layer_tensor_specs(c);
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (const TensorSpec& t : specs) {
      const std::string name = hf_tensor_name(a, t.role, l);
      if (t.kind == TensorKind::kMatrix) {
        rnd(name, t.shape);
      } else if (t.kind == TensorKind::kNorm) {
        ones(name, t.shape[0]);
      } else {
        // Biases stay f32 (Model::f32 reads them as f32 in every format).
        const int64_t n = t.shape[0];
        const uint64_t key = mix64(seed * 0x9e3779b97f4a7c15ull + (++tensor_index) * 0xd1b54a32d192ed03ull);
        std::vector<float> v(n);
        for (int64_t i = 0; i < n; ++i) v[i] = irwin_hall4(mix64(key + static_cast<uint64_t>(i)), 0.02f);
        ws.add_owned(name, {n}, std::move(v), "random");
      }
    }
  return from_weights(c, std::move(ws), "random", fmt);
}

ModelConfig shape_config(const char* type, int64_t V, int64_t H, int64_t I, int64_t L, int64_t Hq, int64_t Hkv,
                         int64_t D, double theta, bool tied) {
  ModelConfig c;
  c.model_type = type;
  c.vocab_size = V;
  c.hidden_size = H;
  c.intermediate_size = I;
  c.num_layers = L;
  c.num_heads = Hq;
  c.num_kv_heads = Hkv;
  c.head_dim = D;
  c.rope_theta = theta;
  c.tie_word_embeddings = tied;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-6;
  c.qk_norm = architecture(type).qk_norm;
  c.attention_bias = architecture(type).qkv_bias == QkvBias::kAlways;
  return c;
}

ModelConfig model_shape(const std::string& name) {
  ModelConfig c;
  if (name == "stories260k") c = shape_config("llama", 512, 64, 172, 5, 8, 4, 8, 10000, true);
  else if (name == "smollm2-135m") c = shape_config("llama", 49152, 576, 1536, 30, 9, 3, 64, 100000, true);
  else if (name == "qwen3-0.6b") c = shape_config("qwen3", 151936, 1024, 3072, 28, 16, 8, 128, 1000000, true);
  else if (name == "qwen3-4b") c = shape_config("qwen3", 151936, 2560, 9728, 36, 32, 8, 128, 1000000, true);
  else if (name == "qwen3-8b") c = shape_config("qwen3", 151936, 4096, 12288, 36, 32, 8, 128, 1000000, false);
  else if (name == "llama-3.1-8b") {
    c = shape_config("llama", 128256, 4096, 14336, 32, 32, 8, 128, 500000, false);
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = 8;
    c.rope_scaling.original_max_position_embeddings = 8192;
  } else {
    fail(
        "unknown --model-shape '{}' (known: stories260k, smollm2-135m, qwen3-0.6b, qwen3-4b, "
        "qwen3-8b, llama-3.1-8b)",
        name);
  }
  return c;
}

}  // namespace kvb
