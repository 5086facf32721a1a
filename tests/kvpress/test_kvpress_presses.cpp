// kvpress 0.5.5's method presses, and its ChunkPress, PerLayerCompressionPress, ComposedPress and
// BlockPress wrappers as the kvbench options press_chunk, layer_ratios, then and press_block, and
// ThinKPress (alone, and composed after SnapKVPress as then=think), MergingPress (merge=true),
// KeyRerotationPress (rerotate=true), CriticalKVPress and CriticalAdaKVPress (the output-projection
// primitive, LayerStep::out_proj_head) and FinchPress (its re-rotated keys) on
// the real SmolLM2-135M-Instruct weights: the keep-sets of tools/gen_kvpress_smollm2_goldens.py
// (kvpress's own presses under transformers, f32, on a >= 1,000-token few-shot GSM8K prompt ending
// in its question, two settings each) against the kvbench policies that reproduce them
// (docs/policies.md, "kvpress method presses").
//
// Cost. A prefill of the real model takes tens of CPU seconds, so every case is decided on ONE
// prefill: the Multiplex policy below runs each case's policy on the same LayerStep at the end of
// the prompt, records the keep-sets it requests and applies none. At the end of a prefill one
// layer's compression cannot change what another computes in that forward pass, so this equals
// running each policy alone; for the same reason the model is truncated to the layers the golden
// records. Each head must keep exactly kvpress's positions, except the near-tie tokens the golden
// marks (scores within 1e-3 relative of the kept/evicted boundary), and keep as many.
// Presses that rewrite cached rows (ThinK, merge=true, rerotate=true, finch) must also leave the same kept K/V: the
// Multiplex applies their writes to a view of the kept rows (KeptKv), compared with kvpress's kept
// tensors: the zeroed key channels exactly (but for channel near-ties), the sums of squares of the
// kept keys and values within 1e-3 relative and their signed sums within 1e-4 of their sums of
// magnitudes (on heads that keep exactly kvpress's positions, without channel or merge-target
// near-ties). CAMPress, a decode-time press, has its own test and golden file
// (CamMatchesKvpressCAMPress: three teacher-forced runs, the policy applied for real).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "engine/engine.h"
#include "engine/chat/chat_template.h"
#include "engine/model/gguf.h"
#include "engine/policies/policy.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/io.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

using nlohmann::json;
using KeepSets = std::vector<std::vector<std::vector<int32_t>>>;  // [layer][head] kept positions

/// The kept K/V of one (layer, kv head) after a policy's row writes (LayerStep::write_keys /
/// write_values), for the presses that rewrite the cache: sums of squares of the kept keys and
/// values, their signed sums and sums of magnitudes (f64), and the key channels that are 0 in every
/// kept key.
struct KeptKv {
  double k_sq = 0, v_sq = 0, k_sum = 0, k_abs = 0, v_sum = 0, v_abs = 0;
  std::vector<int> k_zero;
  /// Adds one kept token's key and value rows [D] to the sums.
  void add(const float* k, const float* v, int D) {
    for (int d = 0; d < D; ++d) {
      const double kk = k[d], vv = v[d];
      k_sq += kk * kk;
      v_sq += vv * vv;
      k_sum += kk;
      v_sum += vv;
      k_abs += std::fabs(kk);
      v_abs += std::fabs(vv);
    }
  }
};
using KeptKvs = std::vector<std::vector<KeptKv>>;  // [layer][head]

/// Runs every inner policy on each layer step of a single-step prompt and records, per policy,
/// the positions each (layer, head) would keep; the cache itself is never compressed. Inner
/// policies' per-token scalars are restored after each one, so each sees the step as if alone.
class Multiplex : public CompositePolicy {
 public:
  explicit Multiplex(std::vector<std::unique_ptr<Policy>> inner) : inner_(std::move(inner)), kept_(inner_.size()) {
    std::vector<Policy*> all;
    for (const auto& p : inner_) {
      const PolicyNeeds n = p->needs();
      needs_ = merge(needs_, n);
      needs_.host_kv |= n.writes_kv;  // the kept rows are summed on the host
      all.push_back(p.get());
    }
    forward_sequences_to(std::move(all));
  }
  std::string name() const override { return "multiplex"; }
  nlohmann::json resolved_params() const override { return json::object(); }
  PolicyNeeds needs() const override { return needs_; }
  void on_layer_step(LayerStep& step) override {
    if (!step.prefill_last) throw std::runtime_error("Multiplex: the prompt must be one prefill step");
    const int S = needs_.num_scalars;
    std::vector<std::vector<float>> saved(step.num_kv_heads);
    for (int h = 0; h < step.num_kv_heads; ++h)
      for (int32_t i = 0; i < step.cache->length(step.seq, step.layer, h); ++i)
        for (int k = 0; k < S; ++k) saved[h].push_back(step.cache->scalars(step.seq, step.layer, h, i)[k]);
    for (size_t p = 0; p < inner_.size(); ++p) {
      LayerStep s = step;
      s.keeps.clear();
      std::vector<float> qbuf;
      std::map<int, std::vector<float>> abuf;
      const int want = inner_[p]->needs().window_queries;
      if (want > 0 && want < needs_.window_queries) narrow_window(step, s, want, qbuf, abuf);
      inner_[p]->on_layer_step(s);
      auto& layers = kept_[p];
      if (static_cast<int>(layers.size()) <= step.layer) layers.resize(step.layer + 1);
      auto& heads = layers[step.layer];
      heads.assign(step.num_kv_heads, {});
      std::vector<bool> set(step.num_kv_heads, false);
      for (const auto& [h, idx] : s.keeps) {
        for (int32_t i : idx) heads[h].push_back(step.cache->position(step.seq, step.layer, h, i));
        set[h] = true;
      }
      record_kv(step, s, p);
      for (int h = 0; h < step.num_kv_heads; ++h) {
        if (!set[h])
          for (int32_t i = 0; i < step.cache->length(step.seq, step.layer, h); ++i)
            heads[h].push_back(step.cache->position(step.seq, step.layer, h, i));
        size_t j = 0;
        for (int32_t i = 0; i < step.cache->length(step.seq, step.layer, h); ++i)
          for (int k = 0; k < S; ++k) step.cache->scalars(step.seq, step.layer, h, i)[k] = saved[h][j++];
      }
    }
  }
  /// Policies that decide after the last layer (kvcompose) request their keep-sets here; they
  /// replace what the layer steps recorded for those heads.
  void on_step_end(StepEnd& se) override {
    for (size_t p = 0; p < inner_.size(); ++p) {
      StepEnd s = se;
      s.keeps.clear();
      inner_[p]->on_step_end(s);
      for (const auto& k : s.keeps) {
        auto& layers = kept_[p];
        if (static_cast<int>(layers.size()) <= k.layer) layers.resize(k.layer + 1);
        if (static_cast<int>(layers[k.layer].size()) <= k.head) layers[k.layer].resize(k.head + 1);
        auto& heads = layers[k.layer][k.head];
        heads.clear();
        for (int32_t i : k.indices) heads.push_back(se.cache->position(se.seq, k.layer, k.head, i));
      }
    }
  }
  const KeepSets& kept(size_t p) const { return kept_[p]; }
  /// KeptKv of policy p, its writes applied.
  const KeptKvs& kept_kv(size_t p) const { return kv_[p]; }

 private:
  /// KeptKv of every head of `step` after the writes `s` requested, over the tokens it keeps.
  void record_kv(const LayerStep& step, const LayerStep& s, size_t p) {
    if (kv_.size() < inner_.size()) kv_.resize(inner_.size());
    auto& layers = kv_[p];
    if (static_cast<int>(layers.size()) <= step.layer) layers.resize(step.layer + 1);
    auto& heads = layers[step.layer];
    heads.assign(step.num_kv_heads, {});
    const int D = step.head_dim;
    for (int h = 0; h < step.num_kv_heads; ++h) {
      const int32_t L = step.cache->length(step.seq, step.layer, h);
      std::vector<const float*> k(L), v(L);
      for (int32_t i = 0; i < L; ++i) {
        k[i] = std::as_const(*step.cache).key(step.seq, step.layer, h, i);
        v[i] = std::as_const(*step.cache).value(step.seq, step.layer, h, i);
      }
      for (const KvRowWrite& w : s.writes)
        if (w.head == h)
          for (size_t j = 0; j < w.index.size(); ++j) (w.values ? v : k)[w.index[j]] = w.rows.data() + j * D;
      std::vector<int32_t> keep(L);
      std::iota(keep.begin(), keep.end(), 0);
      for (const auto& [hh, idx] : s.keeps)
        if (hh == h) keep = idx;
      KeptKv& out = heads[h];
      std::vector<bool> zero(D, true);
      for (int32_t i : keep) {
        out.add(k[i], v[i], D);
        for (int d = 0; d < D; ++d)
          if (k[i][d] != 0.0f) zero[d] = false;
      }
      for (int d = 0; d < D; ++d)
        if (zero[d]) out.k_zero.push_back(d);
    }
  }

  /// Lets `s` show only the last `want` of the window queries `step` holds (an inner policy whose
  /// window is smaller than another's), as the engine would have kept for that policy alone.
  static void narrow_window(const LayerStep& step, LayerStep& s, int want, std::vector<float>& qbuf,
                            std::map<int, std::vector<float>>& abuf) {
    const int Hq = step.num_q_heads, D = step.head_dim, G = Hq / step.num_kv_heads;
    s.window_scores = nullptr;  // the host path, through the narrowed attention
    s.window_queries = [&step, want, &qbuf, Hq, D](int* w_out) -> const float* {
      int w = 0;
      const float* q = step.window_queries(&w);
      const int n = std::min(want, w);
      qbuf.resize(static_cast<size_t>(Hq) * n * D);
      for (int hq = 0; hq < Hq; ++hq)
        std::copy_n(q + (static_cast<size_t>(hq) * w + (w - n)) * D, static_cast<size_t>(n) * D,
                    qbuf.data() + static_cast<size_t>(hq) * n * D);
      *w_out = n;
      return qbuf.data();
    };
    s.window_attention = [&step, want, &abuf, G](int h, int* w_out) -> const std::vector<float>& {
      int w = 0;
      const std::vector<float>& a = step.window_attention(h, &w);
      const int n = std::min(want, w);
      const size_t L = a.size() / (static_cast<size_t>(G) * w);
      std::vector<float>& out = abuf[h];
      out.resize(static_cast<size_t>(G) * n * L);
      for (int g = 0; g < G; ++g)
        std::copy_n(a.begin() + (static_cast<size_t>(g) * w + (w - n)) * L, static_cast<size_t>(n) * L,
                    out.begin() + static_cast<size_t>(g) * n * L);
      *w_out = n;
      return out;
    };
  }

 public:
 private:
  std::vector<std::unique_ptr<Policy>> inner_;
  std::vector<KeepSets> kept_;
  std::vector<KeptKvs> kv_;
  PolicyNeeds needs_;
};

/// The positions of a golden hex mask (tools/gen_kvpress_smollm2_goldens.py: digit j holds
/// positions 4j..4j+3, position 4j in its most significant bit).
std::set<int32_t> mask_positions(const std::string& hex) {
  std::set<int32_t> out;
  for (size_t j = 0; j < hex.size(); ++j) {
    const int v = std::stoi(hex.substr(j, 1), nullptr, 16);
    for (int b = 0; b < 4; ++b)
      if (v & (8 >> b)) out.insert(static_cast<int32_t>(4 * j + b));
  }
  return out;
}

/// The default model with only its first `layers` layers (the other layers' tensors left out).
std::shared_ptr<const Model> truncated_default_model(int layers) {
  const std::string path = test::default_model_path();
  auto g = std::make_shared<GgufModel>(load_gguf(path));
  ModelConfig cfg = g->config;
  cfg.num_layers = layers;
  WeightStore w;
  for (const auto& [name, t] : g->weights.tensors()) {
    if (name.rfind("model.layers.", 0) == 0 && std::stoi(name.substr(13)) >= layers) continue;
    w.add_view(name, t.shape, t.dtype, t.data, g, t.row_index, t.origin);
  }
  return Model::from_weights(cfg, std::move(w), path, WeightFormat::kF32);
}

/// How `got` differs from golden case `c` over L positions: heads whose kept count differs (by more
/// than the head's `count_slack`, when the golden gives one), heads
/// with a position outside the near-ties kept by one side only (the first such position of the
/// first such head in `first`), and the near-tie tokens the case marks.
struct Diff {
  int count_heads = 0, set_heads = 0, ties = 0;
  std::string first;
};

Diff compare(const json& c, const KeepSets& got, int layers, int heads, int L) {
  Diff d;
  for (int l = 0; l < layers; ++l)
    for (int h = 0; h < heads; ++h) {
      const json& want = c["layers"][l][h];
      const std::set<int32_t> keep = mask_positions(want["keep"]), tie = mask_positions(want["tie"]);
      const std::set<int32_t> have(got[l][h].begin(), got[l][h].end());
      // KVCompose: a layer's count may move by the composite entries at its global cut.
      const auto slack = static_cast<int64_t>(want.value("count_slack", 0));
      if (std::abs(static_cast<int64_t>(have.size()) - static_cast<int64_t>(keep.size())) > slack) ++d.count_heads;
      int32_t bad = -1;
      for (int32_t i = 0; i < L && bad < 0; ++i)
        if (!tie.count(i) && have.count(i) != keep.count(i)) bad = i;
      if (bad >= 0 && d.set_heads++ == 0)
        d.first = "layer " + std::to_string(l) + " kv head " + std::to_string(h) + " position " + std::to_string(bad);
      d.ties += static_cast<int>(tie.size());
    }
  return d;
}

/// How policy's kept K/V `got` differs from golden case `c` (whose heads carry k_zero, k_tie,
/// v_tie and the sums of KeptKv): heads whose zeroed key channels differ outside the channel
/// near-ties (or in number), heads whose kept keys' or values' sum of squares is off by more than
/// 1e-3 relative or signed sum by more than 1e-4 of the sum of magnitudes (compared only on heads
/// that keep exactly kvpress's positions and have no channel or merge-target near-ties), and how
/// many heads were so compared.
struct KvDiff {
  int channel_heads = 0, sum_heads = 0, compared = 0;
  std::string first;
};

/// True when `have`'s sums of squares differ from `want`'s k_sq / v_sq by more than 1e-3 relative or
/// its signed sums from k_sum / v_sum by more than 1e-4 of k_abs / v_abs.
bool kv_sums_off(const KeptKv& have, const json& want) {
  auto off = [](double a, double b) { return std::fabs(a - b) > 1e-3 * std::max(std::fabs(b), 1e-12); };
  auto off_sum = [](double a, double b, double abs) { return std::fabs(a - b) > 1e-4 * std::max(abs, 1e-12); };
  return off(have.k_sq, want["k_sq"]) || off(have.v_sq, want["v_sq"]) ||
         off_sum(have.k_sum, want["k_sum"], want["k_abs"]) || off_sum(have.v_sum, want["v_sum"], want["v_abs"]);
}

KvDiff compare_kv(const json& c, const KeptKvs& got, const KeepSets& kept, int layers, int heads) {
  KvDiff d;
  for (int l = 0; l < layers; ++l)
    for (int h = 0; h < heads; ++h) {
      const json& want = c["layers"][l][h];
      const KeptKv& have = got.at(l).at(h);
      const auto zero = want.value("k_zero", std::vector<int>{}), tie = want.value("k_tie", std::vector<int>{});
      const std::set<int> wz(zero.begin(), zero.end()), hz(have.k_zero.begin(), have.k_zero.end()),
          t(tie.begin(), tie.end());
      bool bad = wz.size() != hz.size();
      for (int ch = 0; ch < 256 && !bad; ++ch) bad = !t.count(ch) && wz.count(ch) != hz.count(ch);
      if (bad && d.channel_heads++ == 0) d.first = "layer " + std::to_string(l) + " kv head " + std::to_string(h);
      const std::set<int32_t> same(kept[l][h].begin(), kept[l][h].end());
      if (!tie.empty() || want.value("v_tie", 0) > 0 || same != mask_positions(want["keep"])) continue;
      ++d.compared;
      if (kv_sums_off(have, want)) ++d.sum_heads;
    }
  return d;
}

// One changed parameter per press, each run against the golden case it mutates: it must keep a
// different set somewhere outside the near-ties, so the golden comparison discriminates.
const std::vector<std::pair<std::string, std::string>> kMutants = {
    {"observed_attention_r0.5", "observed_attention:decode=false,window=64"},
    {"chunkkv_r0.5", "chunkkv:budget_kind=ratio,ratio=0.5,decode=false,chunk=16"},
    {"lagkv_r0.5", "lagkv:decode=false,lag=64"},
    {"entropy_chunkkv_r0.5", "entropy_chunkkv:budget_kind=ratio,ratio=0.5,decode=false,low_entropy_chunk=2"},
    {"qfilter_r0.5", "qfilter:random_filters=3,decode=false"},
    {"cap_r0.5", "cap:decode=false,tau=1"},
    {"lukv_r0.5", "lukv:budget_kind=ratio,ratio=0.5,decode=false"},
    {"kvcompose_r0.5", "kvcompose:ratio=0.5,window=50,agg_task=mean"},
    {"cur_r0.5", "cur:decode=false,leverage=kv_avg"},
    {"noncausal_attn_r0.5", "noncausal_attn:chunk=128"},
    {"simlayerkv_t0.5_n256", "simlayerkv:lazy_threshold=0.3,n_recent=256"},
    {"chunkpress_knorm_r0.5_c256", "knorm:budget_kind=ratio,ratio=0.5,decode=false,press_chunk=128"},
    {"perlayer_snapkv_0.5_0.25",
     "snapkv:window=64,kernel=5,pool=avg,gqa=mean,decode=false,budget_kind=ratio,"
     "layer_ratios=0.5/0.75/0.5/0.5/0.75/0.25/0.5/0.75"},
    {"composed_snapkv_knorm_r0.5_0.5",
     "snapkv:window=64,kernel=5,pool=avg,gqa=mean,decode=false,then=knorm,then_ratio=0.25"},
    {"blockpress_keydiff_r0.5_b128", "keydiff:window=0,decode=false,press_block=256"},
    {"think_r0.5", "think:ratio=0.5,window=4"},
    {"merging_knorm_r0.5", "knorm:decode=false,merge=true,merge_fraction=0.5"},
    {"rerotation_knorm_r0.5", "knorm:decode=false,rerotate=false"},
    {"composed_snapkv_think_r0.5_0.25",
     "snapkv:window=64,kernel=5,pool=avg,gqa=mean,decode=false,then=think,then_ratio=0.625"},
    {"criticalkv_r0.5", "criticalkv:decode=false,first_stage_ratio=0.25"},
    {"criticaladakv_r0.5", "criticaladakv:decode=false,first_stage_ratio=0.25"},
    {"finch_r0.5", "finch:window=50,decode=false,normalize=false"},
    {"fastkvzip_r0.5", "fastkvzip:random_gates=45,ratio=0.5,window_ratio=0.05"},
};

/// `spec` with the golden's placeholders replaced by its fixture files under
/// tests/fixtures/policies: "{qfilters}" (the generator's random Q-filters) and "{lukv_curve}"
/// (its synthetic LU-KV budget curve) and "{restorekv_adapter}" (its random RestoreKV adapter
/// folder).
std::string with_fixtures(std::string spec) {
  for (const auto& [tag, file] :
       std::map<std::string, std::string>{{"{qfilters}", test::fixture("policies/qfilter_smollm2_random.safetensors")},
                                          {"{lukv_curve}", test::fixture("policies/lukv_curve_smollm2_random.npy")},
                                          {"{restorekv_adapter}", test::fixture("policies/restorekv_smollm2_random")}})
    for (size_t at = spec.find(tag); at != std::string::npos; at = spec.find(tag)) spec.replace(at, tag.size(), file);
  return spec;
}

/// The kvpress press a case's spec reproduces: a wrapper when the spec sets the option that
/// stands for it (rerotate: KeyRerotationPress, merge: MergingPress, press_chunk: ChunkPress, layer_ratios:
/// PerLayerCompressionPress, then: ComposedPress, press_block: BlockPress), else the
/// press of the spec's policy in `press_of`; "" when neither.
std::string press_of_spec(const std::string& text, const std::map<std::string, std::string>& press_of) {
  const PolicySpec s = PolicySpec::parse(text);
  if (s.name == "finch") return "FinchPress";  // its chunk_length is press_chunk
  if (s.params.count("rerotate")) return "KeyRerotationPress";
  if (s.params.count("merge")) return "MergingPress";
  if (s.params.count("press_chunk")) return "ChunkPress";
  if (s.params.count("layer_ratios")) return "PerLayerCompressionPress";
  if (s.params.count("then")) return "ComposedPress";
  if (s.params.count("press_block")) return "BlockPress";
  const auto it = press_of.find(s.name);
  return it == press_of.end() ? "" : it->second;
}

/// kvpress_smollm2_goldens.json (tools/gen_kvpress_smollm2_goldens.py): the whole file `g`, its
/// layer count and its prompt (token ids of the default model, L of them).
struct SmolGoldens {
  json g = parse_json_file(test::fixture("policies/kvpress_smollm2_goldens.json"));
  int layers = g["num_layers"];
  std::vector<int32_t> prompt = g["prompt"].get<std::vector<int32_t>>();
  int L = static_cast<int>(prompt.size());
};

TEST(KvpressSmolLM2, KeepSetsMatchKvpressPresses) {
  KVB_REQUIRE_DEFAULT_MODEL();
  const json g = parse_json_file(test::fixture("policies/kvpress_smollm2_goldens.json"));
  const int layers = g["num_layers"];
  const auto prompt = g["prompt"].get<std::vector<int32_t>>();
  const int L = static_cast<int>(prompt.size());
  ASSERT_GE(L, 800);
  auto model = truncated_default_model(layers);
  const int heads = model->config().num_kv_heads;
  std::vector<std::unique_ptr<Policy>> policies;
  std::map<std::string, const json*> by_name;
  // The cases one prefill decides; KVzipPress and RestoreKVPress run passes of their own
  // (KvzipMatchesKvpressKVzipPress, RestorekvMatchesKvpressRestoreKVPress).
  std::vector<const json*> cases;
  for (const auto& c : g["cases"]) {
    if (c["press"] == "KVzipPress" || c["press"] == "RestoreKVPress") continue;
    policies.push_back(make_policy(PolicySpec::parse(with_fixtures(c["spec"]), c["budget"])));
    by_name[c["name"]] = &c;
    cases.push_back(&c);
  }
  for (const auto& [name, spec] : kMutants) {
    ASSERT_TRUE(by_name.count(name)) << "no golden case " << name;
    policies.push_back(make_policy(PolicySpec::parse(spec, (*by_name[name])["budget"])));
  }
  auto mux = std::make_unique<Multiplex>(std::move(policies));
  Multiplex* m = mux.get();
  EngineOptions eo;
  eo.prefill_chunk = L;
  Engine e(model, eo, std::move(mux));
  e.score(prompt, {});
  // The press each policy reproduces; every case's spec names one of these policies.
  const std::map<std::string, std::string> press_of = {
      {"observed_attention", "ObservedAttentionPress"},
      {"chunkkv", "ChunkKVPress"},
      {"lagkv", "LagKVPress"},
      {"entropy_chunkkv", "EntropyGatedChunkKVPress"},
      {"qfilter", "QFilterPress"},
      {"cap", "CapPress"},
      {"kvcompose", "KVComposePress"},
      {"lukv", "LUKVPress"},
      {"cur", "CURPress"},
      {"noncausal_attn", "NonCausalAttnPress"},
      {"simlayerkv", "SimLayerKVPress"},
      {"think", "ThinKPress"},
      {"criticalkv", "CriticalKVPress"},
      {"criticaladakv", "CriticalAdaKVPress"},
      {"finch", "FinchPress"},
      {"fastkvzip", "FastKVzipPress"},
  };
  // Every press with golden cases: the method presses above and the wrappers kvbench options reproduce.
  std::set<std::string> expected = {"ChunkPress",   "PerLayerCompressionPress", "ComposedPress", "BlockPress",
                                    "MergingPress", "KeyRerotationPress"};
  for (const auto& [policy, press] : press_of) expected.insert(press);
  std::set<std::string> presses;
  const size_t n_cases = cases.size();
  for (size_t p = 0; p < n_cases; ++p) {
    const json& c = *cases[p];
    const std::string press = press_of_spec(c["spec"], press_of);
    ASSERT_FALSE(press.empty()) << c["spec"];
    EXPECT_EQ(press, c["press"].get<std::string>());
    presses.insert(c["press"].get<std::string>());
    SCOPED_TRACE(c["name"].get<std::string>() + " (" + c["spec"].get<std::string>() + ", budget " +
                 std::to_string(c["budget"].get<int64_t>()) + ")");
    const KeepSets& got = m->kept(p);
    ASSERT_EQ(static_cast<int>(got.size()), layers);
    for (int l = 0; l < layers; ++l) ASSERT_EQ(static_cast<int>(got[l].size()), heads);
    const Diff d = compare(c, got, layers, heads, L);
    EXPECT_EQ(d.count_heads, 0) << "heads keeping another number of tokens";
    EXPECT_EQ(d.set_heads, 0) << "heads differing outside the near-ties, first " << d.first;
    // BlockPress cuts once per block (about L / block times per head), and each cut marks its own
    // near-ties (KeyDiff's cosines crowd near the cut): a larger, still minor, fraction.
    const int tie_share = c["press"] == "BlockPress" ? 5 : 20;
    EXPECT_LT(d.ties, layers * heads * L / tie_share) << "near-ties must stay a small fraction";
    if (c["layers"][0][0].contains("k_zero")) {  // a press that rewrites keys: its kept K/V too
      const KvDiff k = compare_kv(c, m->kept_kv(p), got, layers, heads);
      EXPECT_EQ(k.channel_heads, 0) << "heads zeroing other key channels, first " << k.first;
      EXPECT_EQ(k.sum_heads, 0) << "heads whose kept K/V sums of squares differ (of " << k.compared << ")";
      EXPECT_GE(k.compared, layers * heads / 3) << "too few heads without near-ties to compare";
      presses.insert("write:" + c["press"].get<std::string>());
    }
  }
  EXPECT_TRUE(presses.count("write:ThinKPress")) << "no golden case of ThinK alone";
  EXPECT_TRUE(presses.count("write:MergingPress")) << "no golden case of MergingPress";
  EXPECT_TRUE(presses.count("write:KeyRerotationPress")) << "no golden case of KeyRerotationPress";
  for (const auto& press : expected) EXPECT_TRUE(presses.count(press)) << "no golden case for " << press;
  for (size_t k = 0; k < kMutants.size(); ++k) {
    SCOPED_TRACE(kMutants[k].second + " against " + kMutants[k].first);
    const KeepSets& got = m->kept(n_cases + k);
    ASSERT_EQ(static_cast<int>(got.size()), layers);
    const json& c = *by_name[kMutants[k].first];
    int differ = compare(c, got, layers, heads, L).set_heads;
    if (c["layers"][0][0].contains("k_zero")) {
      const KvDiff kd = compare_kv(c, m->kept_kv(n_cases + k), got, layers, heads);
      differ += kd.channel_heads + kd.sum_heads;
    }
    EXPECT_GT(differ, 0) << "a changed parameter keeps kvpress's sets and K/V: the golden does not discriminate";
  }
  std::set<std::string> mutated;
  for (const auto& [name, spec] : kMutants) mutated.insert(press_of_spec(spec, press_of));
  for (const auto& press : expected) EXPECT_TRUE(mutated.count(press)) << "no mutant for " << press;
}

/// The kept positions and K/V sums (KeptKv) of every (layer, kv head) after teacher-forced decoding:
/// `prompt` prefilled, then `forced` fed one token per step, under policy `spec` at `budget`.
std::pair<KeepSets, KeptKvs> run_forced(const std::shared_ptr<const Model>& model, const std::string& spec,
                                        int64_t budget, const std::vector<int32_t>& prompt,
                                        const std::vector<int32_t>& forced) {
  EngineOptions eo;
  eo.prefill_chunk = static_cast<int>(prompt.size());
  Engine e(model, eo, make_policy(PolicySpec::parse(spec, budget)));
  KeepSets kept;
  KeptKvs kv;
  e.on_step = [&](const KVCache& c, SeqId seq) {  // the last step's state is what remains
    const int layers = static_cast<int>(model->config().num_layers),
              heads = static_cast<int>(model->config().num_kv_heads), D = static_cast<int>(model->config().head_dim);
    kept.assign(layers, std::vector<std::vector<int32_t>>(heads));
    kv.assign(layers, std::vector<KeptKv>(heads));
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < heads; ++h)
        for (int32_t i = 0; i < c.length(seq, l, h); ++i) {
          kept[l][h].push_back(c.position(seq, l, h, i));
          kv[l][h].add(c.key(seq, l, h, i), c.value(seq, l, h, i), D);
        }
  };
  e.score(prompt, forced);
  return {kept, kv};
}

// kvpress 0.5.5 CAMPress (decode-time: every `compression_interval` steps a layer keeps the
// target_size best tokens by its base press's mean score over kv heads, and the best evicted ones
// merge their values into the next kept tokens, each by a Bernoulli draw) as `cam`, against
// tools/gen_kvpress_smollm2_goldens.py's kvpress_smollm2_cam_goldens.json: the prompt, then 12
// forced tokens, one compression after the 8th. kvpress's torch.bernoulli draws are replaced there
// by kvbench's seeded ones (cam.cpp). Each head must keep kvpress's positions (but for near-ties)
// and, where no merge decision is in doubt, leave the same K/V sums. One changed parameter
// (seed=1: other merge draws) must differ.
TEST(KvpressSmolLM2, CamMatchesKvpressCAMPress) {
  KVB_REQUIRE_DEFAULT_MODEL();
  const json g = parse_json_file(test::fixture("policies/kvpress_smollm2_cam_goldens.json"));
  const int layers = g["num_layers"];
  const auto prompt = g["prompt"].get<std::vector<int32_t>>();
  const auto forced = g["forced"].get<std::vector<int32_t>>();
  ASSERT_GE(prompt.size(), 800u);
  const int L = static_cast<int>(prompt.size() + forced.size());
  auto model = truncated_default_model(layers);
  const int heads = model->config().num_kv_heads;
  for (const auto& c : g["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>() + " (" + c["spec"].get<std::string>() + ")");
    EXPECT_EQ(c["press"], "CAMPress");
    const auto [kept, kv] = run_forced(model, c["spec"], c["budget"], prompt, forced);
    const Diff d = compare(c, kept, layers, heads, L);
    EXPECT_EQ(d.count_heads, 0) << "heads keeping another number of tokens";
    EXPECT_EQ(d.set_heads, 0) << "heads differing outside the near-ties, first " << d.first;
    const KvDiff k = compare_kv(c, kv, kept, layers, heads);
    EXPECT_EQ(k.sum_heads, 0) << "heads whose kept K/V sums differ (of " << k.compared << ")";
    EXPECT_GE(k.compared, layers * heads / 3) << "too few heads without near-ties to compare";
  }
  const json& c = g["cases"][0];
  const auto [kept, kv] =
      run_forced(model, "cam:scorer=knorm,interval=8,merge_budget=32,seed=1", c["budget"], prompt, forced);
  const KvDiff k = compare_kv(c, kv, kept, layers, heads);
  EXPECT_GT(compare(c, kept, layers, heads, L).set_heads + k.sum_heads, 0)
      << "other merge draws leave kvpress's K/V: the golden does not discriminate";
}

/// The scoring-pass pieces kvbench builds from the default model's GGUF tokenizer and chat
/// template (kvzip_scoring_prompts).
ScoringPrompts default_scoring_prompts() {
  GgufModel gg = load_gguf(test::default_model_path());
  const tok::Tokenizer tok = tok::Tokenizer::from_json(gg.tokenizer_json, "gguf", gg.tokenizer_config);
  const chat::ChatTemplate tmpl(gg.chat_template, "gguf", gg.tokenizer_config.value("bos_token", ""),
                                gg.tokenizer_config.value("eos_token", ""));
  return kvzip_scoring_prompts(tok, &tmpl);
}

/// After one prompt step under `policy`: the kept positions of every (layer, kv head) and, per
/// head, the sums of the K/V rows at positions ≥ `from` (the restore rows).
std::pair<KeepSets, KeptKvs> run_restore(const std::shared_ptr<const Model>& model, std::unique_ptr<Policy> policy,
                                         const std::vector<int32_t>& prompt, const ScoringPrompts& prompts, int32_t from) {
  EngineOptions eo;
  eo.prefill_chunk = static_cast<int>(prompt.size());
  eo.scoring_prompts = prompts;
  Engine e(model, eo, std::move(policy));
  KeepSets kept;
  KeptKvs kv;
  const int layers = static_cast<int>(model->config().num_layers),
            heads = static_cast<int>(model->config().num_kv_heads), D = static_cast<int>(model->config().head_dim);
  e.on_step = [&](const KVCache& c, SeqId seq) {
    kept.assign(layers, std::vector<std::vector<int32_t>>(heads));
    kv.assign(layers, std::vector<KeptKv>(heads));
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < heads; ++h)
        for (int32_t i = 0; i < c.length(seq, l, h); ++i) {
          const int32_t pos = c.position(seq, l, h, i);
          kept[l][h].push_back(pos);
          if (pos >= from) kv[l][h].add(c.key(seq, l, h, i), c.value(seq, l, h, i), D);
        }
  };
  e.score(prompt, {});
  return {kept, kv};
}

/// The kept positions of every (layer, kv head) once `prompt` has been prefilled (one step) under
/// policy `spec` with the scoring-pass pieces `prompts` (EngineOptions::scoring_prompts).
KeepSets run_prompt(const std::shared_ptr<const Model>& model, const std::string& spec,
                    const std::vector<int32_t>& prompt, const ScoringPrompts& prompts) {
  return run_restore(model, make_policy(PolicySpec::parse(spec, 0)), prompt, prompts, std::numeric_limits<int32_t>::max())
      .first;
}

// kvpress 0.5.5 KVzipPress (context reconstruction: after the prompt, passes of "repeat the
// previous context" + the chat template's assistant header + each chunk of the context again, each
// token scored by the most attention the passes' queries pay it, then one cut over all layers) as
// `kvzip`, against the KVzipPress cases of kvpress_smollm2_goldens.json: r = 0.5 and 0.75, 0.75
// layerwise, 0.5 with chunk_size=512 (three passes: the continuation prompt, the sinks of later
// chunks) and 0.5 with KVzip+'s normalisation. The engine runs the passes for real (one prompt
// step, then the passes, rolled back, then the cut). First, the pieces kvbench builds from the
// GGUF's tokenizer and chat template (kvzip_scoring_prompts) must equal the ones kvpress built.
// Each head must keep kvpress's positions but for the near-ties the golden marks (entries within
// 1e-3 relative of the cut), and as many. One changed parameter (chunk_size=300) must differ.
TEST(KvpressSmolLM2, KvzipMatchesKvpressKVzipPress) {
  KVB_REQUIRE_DEFAULT_MODEL();
  const SmolGoldens gold;
  ASSERT_GE(gold.L, 800);
  std::vector<const json*> cases;
  for (const auto& c : gold.g["cases"])
    if (c["press"] == "KVzipPress") cases.push_back(&c);
  ASSERT_EQ(cases.size(), 5u) << "the golden's KVzipPress cases";
  const json& want = (*cases[0])["kvzip_prompts"];
  const ScoringPrompts prompts = default_scoring_prompts();
  EXPECT_EQ(prompts.repeat, want["repeat"].get<std::vector<int32_t>>());
  EXPECT_EQ(prompts.repeat_part, want["repeat_part"].get<std::vector<int32_t>>());
  EXPECT_EQ(prompts.suffix, want["suffix"].get<std::vector<int32_t>>());
  EXPECT_EQ(prompts.prefix, want["prefix"].get<int64_t>());
  auto model = truncated_default_model(gold.layers);
  const int heads = model->config().num_kv_heads;
  for (const json* c : cases) {
    SCOPED_TRACE((*c)["name"].get<std::string>() + " (" + (*c)["spec"].get<std::string>() + ")");
    const KeepSets kept = run_prompt(model, (*c)["spec"], gold.prompt, prompts);
    ASSERT_EQ(static_cast<int>(kept.size()), gold.layers);
    const Diff d = compare(*c, kept, gold.layers, heads, gold.L);
    EXPECT_EQ(d.count_heads, 0) << "heads keeping another number of tokens";
    EXPECT_EQ(d.set_heads, 0) << "heads differing outside the near-ties, first " << d.first;
    EXPECT_LT(d.ties, gold.layers * heads * gold.L / 20) << "near-ties must stay a small fraction";
  }
  const KeepSets other = run_prompt(model, "kvzip:ratio=0.5,chunk_size=300", gold.prompt, prompts);
  EXPECT_GT(compare(*cases[0], other, gold.layers, heads, gold.L).set_heads, 0)
      << "another chunk size keeps kvpress's sets: the golden does not discriminate";
}

/// Runs `primary` for real and `shadow` (the same policy at another ratio) beside it on the same
/// scoring passes: the shadow scores every pass too, and its cut is recorded in `*shadow_kept`
/// (kept positions, [layer][head]), not applied. The engine runs the primary's restore pass; the
/// shadow's must be the same rows.
class ShadowCut : public Policy {
 public:
  ShadowCut(std::unique_ptr<Policy> primary, std::unique_ptr<Policy> shadow, KeepSets* shadow_kept)
      : primary_(std::move(primary)), shadow_(std::move(shadow)), shadow_kept_(shadow_kept) {}
  std::string name() const override { return primary_->name(); }
  nlohmann::json resolved_params() const override { return primary_->resolved_params(); }
  PolicyNeeds needs() const override { return merge(primary_->needs(), shadow_->needs()); }
  void on_sequence_begin(SeqId seq, uint64_t seed) override {
    primary_->on_sequence_begin(seq, seed);
    shadow_->on_sequence_begin(seq, seed);
  }
  void on_sequence_end(SeqId seq) override {
    primary_->on_sequence_end(seq);
    shadow_->on_sequence_end(seq);
  }
  std::vector<std::vector<int32_t>> scoring_passes(const ScoringPassRequest& rq) override {
    auto passes = primary_->scoring_passes(rq);
    if (shadow_->scoring_passes(rq) != passes) throw std::runtime_error("ShadowCut: the two ask for other passes");
    return passes;
  }
  void on_layer_step(LayerStep& step) override {
    primary_->on_layer_step(step);
    LayerStep s = step;
    shadow_->on_layer_step(s);
  }
  RestorePass restore_pass(const ScoringPassRequest& rq) override {
    RestorePass r = primary_->restore_pass(rq);
    if (shadow_->restore_pass(rq).embeddings != r.embeddings)
      throw std::runtime_error("ShadowCut: the two restore other rows");
    return r;
  }
  void on_scoring_passes_end(StepEnd& se) override {
    StepEnd s = se;
    s.keeps.clear();
    shadow_->on_scoring_passes_end(s);
    KeepSets& shadow_kept = *shadow_kept_;
    shadow_kept.assign(se.num_layers, std::vector<std::vector<int32_t>>(se.num_kv_heads));
    std::vector<std::vector<bool>> set(se.num_layers, std::vector<bool>(se.num_kv_heads, false));
    for (const auto& k : s.keeps) {
      for (int32_t i : k.indices)
        shadow_kept[k.layer][k.head].push_back(se.cache->position(se.seq, k.layer, k.head, i));
      set[k.layer][k.head] = true;
    }
    for (int l = 0; l < se.num_layers; ++l)
      for (int h = 0; h < se.num_kv_heads; ++h)
        if (!set[l][h])
          for (int32_t i = 0; i < se.cache->length(se.seq, l, h); ++i)
            shadow_kept[l][h].push_back(se.cache->position(se.seq, l, h, i));
    primary_->on_scoring_passes_end(se);
  }
  void on_step_end(StepEnd& se) override { primary_->on_step_end(se); }

 private:
  std::unique_ptr<Policy> primary_, shadow_;
  KeepSets* shadow_kept_;
};

/// Heads whose restore rows' K/V sums (run_restore) differ from golden case `c`'s restore_kv by
/// more than 1e-3 relative (sums of squares) or 1e-4 of the sum of magnitudes (signed sums).
int restore_kv_diff(const json& c, const KeptKvs& got) {
  int bad = 0;
  const json& want = c["restore_kv"];
  for (size_t l = 0; l < want.size(); ++l)
    for (size_t h = 0; h < want[l].size(); ++h) bad += kv_sums_off(got.at(l).at(h), want[l][h]);
  return bad;
}

// kvpress 0.5.5 RestoreKVPress (KVzipPress's passes, then one restore pass of 8 learned embeddings
// through a LoRA adapter over the uncut cache, whose K/V are kept, then KVzip's cut raised by 8 / L)
// as `restorekv`, against the RestoreKVPress cases of kvpress_smollm2_goldens.json (r = 0.5 and
// 0.75; the generator's random adapter and embeddings, tests/fixtures/policies/restorekv_smollm2_random,
// loaded by transformers' PEFT; the model truncated to the cases' num_layers). Cost: ONE prompt
// step with its scoring pass serves both ratios (ShadowCut: the 0.75 policy scores the same passes
// and its cut is recorded), and one more run for the changed parameter. Each head must keep
// kvpress's positions (the restore rows included) but for the marked near-ties, and as many; the
// restore rows' K/V sums must match within 1e-3 relative. A LoRA of twice the scale (lora_alpha
// doubled) must change them.
TEST(KvpressSmolLM2, RestorekvMatchesKvpressRestoreKVPress) {
  KVB_REQUIRE_DEFAULT_MODEL();
  const SmolGoldens gold;
  std::vector<const json*> cases;
  for (const auto& c : gold.g["cases"])
    if (c["press"] == "RestoreKVPress") cases.push_back(&c);
  ASSERT_EQ(cases.size(), 2u) << "the golden's RestoreKVPress cases";
  const int layers = (*cases[0])["num_layers"], n = (*cases[0])["restore_rows"];
  // The pieces kvpress built (the KVzipPress cases record them; KvzipMatchesKvpressKVzipPress checks
  // that kvbench builds the same from the GGUF's tokenizer and template, which take seconds to load).
  ScoringPrompts prompts;
  for (const auto& c : gold.g["cases"])
    if (c["press"] == "KVzipPress") {
      const json& kp = c["kvzip_prompts"];
      prompts.repeat = kp["repeat"].get<std::vector<int32_t>>();
      prompts.repeat_part = kp["repeat_part"].get<std::vector<int32_t>>();
      prompts.suffix = kp["suffix"].get<std::vector<int32_t>>();
      prompts.prefix = kp["prefix"].get<int64_t>();
      prompts.from_template = true;
    }
  ASSERT_FALSE(prompts.repeat.empty()) << "the golden's KVzipPress cases record kvpress's prompts";
  auto model = truncated_default_model(layers);
  const int heads = model->config().num_kv_heads;
  const auto P = static_cast<int32_t>(gold.L);
  auto policy = [](const json& c) { return make_policy(PolicySpec::parse(with_fixtures(c["spec"]), 0)); };
  KeepSets shadow_kept;
  auto shadow = std::make_unique<ShadowCut>(policy(*cases[0]), policy(*cases[1]), &shadow_kept);
  const std::pair<KeepSets, KeptKvs> run = run_restore(model, std::move(shadow), gold.prompt, prompts, P);
  const KeepSets& kept0 = run.first;
  const KeptKvs& kv0 = run.second;
  for (size_t k = 0; k < cases.size(); ++k) {
    const json& c = *cases[k];
    SCOPED_TRACE(c["name"].get<std::string>() + " (" + c["spec"].get<std::string>() + ")");
    const KeepSets& got = k == 0 ? kept0 : shadow_kept;
    ASSERT_EQ(static_cast<int>(got.size()), layers);
    const Diff d = compare(c, got, layers, heads, gold.L + n);
    EXPECT_EQ(d.count_heads, 0) << "heads keeping another number of tokens";
    EXPECT_EQ(d.set_heads, 0) << "heads differing outside the near-ties, first " << d.first;
    EXPECT_LT(d.ties, layers * heads * gold.L / 20) << "near-ties must stay a small fraction";
    for (const auto& l : got)
      for (const auto& h : l)
        for (int32_t i = 0; i < n; ++i) EXPECT_TRUE(std::count(h.begin(), h.end(), P + i)) << "restore row " << i;
  }
  EXPECT_EQ(restore_kv_diff(*cases[0], kv0), 0) << "the restore rows' K/V differ from kvpress's";
  // The changed parameter: the same adapter with lora_alpha doubled (twice the LoRA scale).
  const std::filesystem::path src = test::fixture("policies/restorekv_smollm2_random"),
                              dir = test::temp_dir("restorekv_alpha");
  for (const char* f : {"adapter_model.safetensors", "restore_embeddings.safetensors"})
    std::filesystem::copy_file(src / f, dir / f, std::filesystem::copy_options::overwrite_existing);
  json cfg = parse_json_file((src / "adapter_config.json").string());
  cfg["lora_alpha"] = cfg["lora_alpha"].get<double>() * 2;
  std::ofstream((dir / "adapter_config.json").string()) << cfg.dump();
  const auto other = run_restore(
      model, make_policy(PolicySpec::parse("restorekv:ratio=0.5,adapter=" + dir.string(), 0)), gold.prompt, prompts, P);
  EXPECT_GT(restore_kv_diff(*cases[0], other.second), 0)
      << "twice the LoRA scale keeps kvpress's restore K/V: the golden does not discriminate";
}

}  // namespace
}  // namespace kvb
