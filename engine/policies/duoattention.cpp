// `duoattention`: retrieval heads keep the full cache, streaming heads keep sinks + recent tokens.
// Sources: Xiao et al., "DuoAttention: Efficient Long-Context LLM Inference with Retrieval and
// Streaming Heads" (arXiv 2410.10819, §3.1–§3.3: a trained gate value α ∈ [0, 1] per (layer, kv
// head); the heads with the lowest α become streaming heads, whose cache holds `sink_size` first
// and `recent_size` most recent tokens, the others keep everything); released patterns
// mit-han-lab/duo-attention attn_patterns/<model>/<run>/ (duo_attn/utils.py load_attn_pattern:
// `full_attention_heads.tsv` = one row per layer, one tab-separated α per kv head, clipped to
// [0, 1]; `config.json` = {"sink_size", "recent_size"}, e.g. 64 and 256; WG-KV's baseline uses 128
// sinks + 256 recent, docs/policies.md); kvpress 0.5.5 DuoAttentionPress (NVIDIA/kvpress, PyPI kvpress==0.5.5,
// kvpress/presses/duo_attention_press.py: the round(n_heads·head_compression_ratio) heads with the
// lowest α are streaming; at the end of the prefill their tokens [sink_size, L − recent_size) are
// masked).
// Choices: `sparsity` is kvpress's head_compression_ratio (the fraction of streaming heads; the
// lowest α first, ties to the lower (layer, head)); default 0.5. Streaming heads are compressed at
// the end of the prompt and, while decoding, whenever they reach sinks + recent + buffer tokens
// (`buffer=1`: the rolling sink + recent cache of the paper, the default). Unlike kvpress's mask,
// evicted tokens free memory. No budget is needed: the retrieval heads keep everything. The
// pattern is required (`pattern=DIR` or a .tsv with `sinks`/`recent` given), or `random_pattern=SEED`
// for RANDOM test patterns (the missing-weights rule of trimkv/wgkv, docs/policies.md).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "engine/policies/params.h"
#include "engine/policies/catalog.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"
#include "engine/util/io.h"

namespace kvb {
namespace {

/// Parses a DuoAttention `full_attention_heads.tsv`: rows of tab-separated floats, clipped to [0, 1].
std::vector<std::vector<double>> read_pattern_tsv(const std::string& path) {
  const std::string text = read_file(path, InputKind::kPolicyMetadata);  // enters the run's identity
  std::vector<std::vector<double>> rows;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::vector<double> row;
    size_t start = 0;
    while (start <= line.size()) {
      const size_t tab = line.find('\t', start);
      const std::string cell = line.substr(start, tab == std::string::npos ? std::string::npos : tab - start);
      char* end = nullptr;
      const double v = std::strtod(cell.c_str(), &end);
      if (cell.empty() || end != cell.c_str() + cell.size() || std::isnan(v))
        fail("{}: line {}: '{}' is not a number", path, line_no, cell);
      row.push_back(std::clamp(v, 0.0, 1.0));
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
    if (!rows.empty() && row.size() != rows[0].size())
      fail("{}: line {}: {} values, the first row has {}", path, line_no, row.size(), rows[0].size());
    rows.push_back(std::move(row));
  }
  if (rows.empty()) fail("{}: no gate values", path);
  return rows;
}

class DuoAttentionPolicy : public ParamPolicy {
 public:
  explicit DuoAttentionPolicy(PolicyParams p) : ParamPolicy("duoattention", std::move(p)) {
    learned_ = learned_weights_choice(params_);
    const std::string& pattern = learned_.path;
    int64_t sinks = 0, recent = 0;
    params_.bind({{"sparsity", &sparsity_, within(0, 1)},
                  {"sinks", &sinks},
                  {"recent", &recent},
                  {"buffer", &buffer_, at_least(1, "1 = trim on every step")},
                  {"decode", &decode_}});
    chunked_ = parse_compress(params_);
    learned_.require();
    if (!pattern.empty()) {
      namespace fs = std::filesystem;
      const bool dir = fs::is_directory(pattern);
      const std::string tsv = dir ? (fs::path(pattern) / "full_attention_heads.tsv").string() : pattern;
      if (!fs::exists(tsv)) fail("policy 'duoattention': pattern file '{}' not found", tsv);
      gates_ = read_pattern_tsv(tsv);
      const std::string cfg = dir ? (fs::path(pattern) / "config.json").string() : std::string();
      if (!cfg.empty() && file_exists(cfg)) {
        const nlohmann::json j = parse_json_file(cfg, InputKind::kPolicyMetadata);
        for (const char* k : {"sink_size", "recent_size"})
          if (!j.contains(k) || !j[k].is_number_integer() || j[k].get<int64_t>() < 0 || j[k].get<int64_t>() > (1 << 30))
            fail("{}: {}: expected a non-negative integer", cfg, k);
        if (sinks < 0) sinks = j["sink_size"].get<int64_t>();
        if (recent < 0) recent = j["recent_size"].get<int64_t>();
      }
      if (sinks < 0 || recent < 0)
        fail("policy 'duoattention': pattern '{}' has no config.json: pass sinks=N and recent=N", pattern);
    } else {
      if (sinks < 0) sinks = 128;  // WG-KV's DuoAttention baseline: 128 sinks + 256 recent
      if (recent < 0) recent = 256;
    }
    if (sinks > (1 << 30) || recent > (1 << 30)) params_.fail_param("sinks", "too large");
    sinks_ = static_cast<int32_t>(sinks);
    recent_ = static_cast<int32_t>(recent);
    if (sinks_ + recent_ < 1) params_.fail_param("recent", "sinks + recent must be >= 1");
    resolved_ = params_.resolved();
    resolved_["sinks"] = sinks_;
    resolved_["recent"] = recent_;
  }

  nlohmann::json resolved_params() const override { return resolved_; }
  PolicyNeeds needs() const override { return {}; }

  void on_layer_step(LayerStep& step) override {
    resolve_streaming(step.num_layers, step.num_kv_heads);
    if (!compress_point(step.prefill, step.prefill_last, chunked_)) return;
    if (!step.prefill && !decode_) return;
    const int32_t cap = sinks_ + recent_;
    for (int h = 0; h < step.num_kv_heads; ++h) {
      if (!streaming_[static_cast<size_t>(step.layer) * step.num_kv_heads + h]) continue;
      const int32_t L = step.cache->length(step.seq, step.layer, h);
      if (L <= cap) continue;
      if (!step.prefill_last && L < cap + buffer_) continue;
      std::vector<int32_t> keep;
      keep.reserve(cap);
      for (int32_t i = 0; i < sinks_; ++i) keep.push_back(i);
      for (int32_t i = L - recent_; i < L; ++i) keep.push_back(i);
      step.keep(h, std::move(keep));
    }
  }

  /// The streaming mask [layer * kv_heads + head] (for tests and the docs' measurements).
  const std::vector<char>& streaming() const { return streaming_; }

 private:
  /// Builds the streaming mask on the first step, once the model's shape is known.
  void resolve_streaming(int layers, int heads) {
    if (!streaming_.empty()) return;
    if (gates_.empty()) {  // random_pattern: uniform gate values from the seed
      gates_.assign(layers, std::vector<double>(heads));
      for (int l = 0; l < layers; ++l)
        for (int h = 0; h < heads; ++h)
          gates_[l][h] = scoring::hash_uniform({static_cast<uint64_t>(learned_.random_seed), 0xd00aULL,
                                                static_cast<uint64_t>(l), static_cast<uint64_t>(h)});
    }
    if (static_cast<int>(gates_.size()) != layers || static_cast<int>(gates_[0].size()) != heads)
      fail("policy 'duoattention': the pattern has {} layers x {} kv heads, the model {} x {}", gates_.size(),
           gates_[0].size(), layers, heads);
    const int64_t n = static_cast<int64_t>(layers) * heads;
    // kvpress: round(size · ratio), Python rounds half to even (nearbyint in the default mode)
    const int64_t n_stream = static_cast<int64_t>(std::nearbyint(static_cast<double>(n) * sparsity_));
    std::vector<int64_t> order(n);
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return gates_[a / heads][a % heads] < gates_[b / heads][b % heads]; });
    streaming_.assign(n, 0);
    for (int64_t i = 0; i < n_stream; ++i) streaming_[order[i]] = 1;
  }

  nlohmann::json resolved_;
  std::vector<std::vector<double>> gates_;
  std::vector<char> streaming_;
  LearnedWeightsChoice learned_;
  int64_t buffer_ = 1;
  double sparsity_ = 0.5;
  int32_t sinks_ = 0, recent_ = 0;
  bool decode_ = true, chunked_ = false;
};

}  // namespace

KVB_POLICY(duoattention) {
  return policy_entry<DuoAttentionPolicy>("duoattention")
      .with_tests({.min_budget = 0, .params = "random_pattern=1", .needs_weights = true});
}

}  // namespace kvb
