// `seerattn_r`: SeerAttention-R — a learned AttnGate per layer picks the 64-token key blocks each
// kv head reads at every decode step; the whole cache is kept (retrieval, not eviction).
// Sources: Gao et al., "SeerAttention-R: Sparse Attention Adaptation for Long Reasoning"
// (arXiv 2506.08889, §3: AttnGate on pooled Q and block-compressed K, token-budget block top-k at
// decode, the last block always read); reference code microsoft/SeerAttention at commit aba03e3
// (seer_attn/decode_sparse/attn_gate_inf.py `AttnGate.forward`, `get_sparse_attn_mask_from_budget`;
// seer_attn/decode_sparse/cache_utils.py `KCompressionCache`;
// seer_attn/decode_sparse/qwen3/modeling_qwen3_seerattn_inference.py `Qwen3SeerAttention`,
// `Qwen3Model.forward`); TRIM-KV's comparison setting (
// sparsity_method token_budget, start_layer 0); docs/policies.md#seerattn_r.
//   gate of layer l, kv head h, group G = Hq / Hkv, block size B (64), gate width d (128):
//     query (Qproj): q̃_h = Σ_{g<G} W_q[h, g]ᵀ q_{hG+g}, W_q [Hkv, G, D, d]  (Qavgproj: W_q [Hkv, D, d]
//       applied to the group mean; Qavg: the group mean itself, d = D), from the queries BEFORE
//       RoPE (after Qwen3's q norm); then RMSNorm(d, eps 1e-6) when use_qk_norm; then RoPE at the
//       token's position with the model's frequencies (use_rope);
//     block key of block b (tokens bB … bB + B − 1): k̃_{h,b} = W_k[h]ᵀ [pool_1(k); pool_2(k); …],
//       pools over the block's keys BEFORE RoPE (after k norm) in the order the gate type names
//       them (Kmaxminavg: max, min, mean), W_k [Hkv, n_pool·D, d]; RMSNorm(d) when use_qk_norm; RoPE
//       at the position of the block's FIRST token when the block was complete at the end of a
//       prompt (Model.forward's block_position_ids = position_ids[:, 0::B]), at the position of
//       the token that completed it when a decode step did (AttnGate.forward's decode branch
//       rotates with the current token's position_embeddings);
//     the newest, partial block has the zero key (KCompressionCache appends zeros; the prefill
//       branch zeroes k_compressed[:, -1]), so its score is 0;
//     score s_{h,b} = q̃_h · k̃_{h,b} / √d; the reference's softmax does not change the order.
//   selection (token_budget): k = ⌊budget / B⌋ blocks; when the head has ≤ k blocks it reads all
//   of them, else the top-k blocks by score (the partial block competes with score 0) plus the
//   newest block (mask[:, :, -1] = True after the top-k: k or k + 1 blocks). One selection per kv
//   head, shared by its G query heads. The prompt is attended densely (q_len > 1); layers below
//   start_layer attend densely.
// Choices: the gate runs in f32/f64 (the reference in bf16); ties between equal scores go to the
// lower block (torch.topk leaves them unspecified). kvbench's --budget is the reference's
// seerattn_token_budget (required). Queries and keys before RoPE are recovered from the cached
// post-RoPE rows by the inverse rotation (the engine's own cos/sin), so the policy needs no
// engine hook at decode. Deliberate difference (docs): the reference's KCompressionCache writes a
// decode token into remainder slot `remainder_len` after layer 0 already advanced it, so in layers
// ≥ 1 the first block completed after a prompt whose length is not a multiple of B pools a zero
// row and loses the prompt's first remainder key; kvbench pools exactly the block's B keys in
// every layer (blocks that start at decode are the same in both: pooling ignores slot order).
// Weights: `gates=` names the released SeerAttention/SeerAttention-Decode-Qwen3-*-AttnGates repo
// as it is — attn_gate_weights.pth (torch.save state dict) + config.json (seerattn_* keys and the
// base model's config) — or a directory, .pth/.pt or .safetensors file; tensors
// model.layers.{l}.self_attn.attn_gate.attngate_{linear_q,linear_k,qnorm,knorm}.weight. Without
// weights the policy refuses to run; `random_gates=SEED` makes RANDOM gates (Qproj, Kmaxminavg,
// RMSNorm, RoPE, d = head_dim; Xavier-scaled normal weights) for tests only — not SeerAttention-R.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>

#include "engine/policies/gate_weights.h"
#include "engine/policies/params.h"
#include "engine/policies/catalog.h"
#include "engine/policies/registration.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

constexpr double kNormEps = 1e-6;  // the AttnGate's RMSNorm(gate_hidden_size, eps=1e-06)

std::string gate_prefix(int l) { return "model.layers." + std::to_string(l) + ".self_attn.attn_gate."; }

bool is_gate_tensor(const std::string& name) {
  return name.rfind("model.layers.", 0) == 0 && name.find(".self_attn.attn_gate.") != std::string::npos;
}

enum class QPool { kProj, kAvgProj, kAvg };
enum class KPool { kMax, kMin, kAvg };

/// The gate's architecture, from the checkpoint's config.json (or the random gates' defaults).
struct GateArch {
  int block = 64, hidden = 128;
  QPool q = QPool::kProj;
  std::vector<KPool> k = {KPool::kMax, KPool::kMin, KPool::kAvg};
  bool qk_norm = true, rope = true;
};

/// Parses seerattn_k_seq_pooling_type "K" + a sequence of max/min/avg (attn_gate_inf.py
/// generate_combinations: every non-empty combination of max, min, avg in that order).
std::vector<KPool> parse_k_pooling(const std::string& s, const std::string& file) {
  std::vector<KPool> out;
  size_t i = 1;
  if (s.empty() || s[0] != 'K') i = std::string::npos;
  while (i != std::string::npos && i < s.size()) {
    const std::string t = s.substr(i, 3);
    KPool p;
    if (t == "max") p = KPool::kMax;
    else if (t == "min") p = KPool::kMin;
    else if (t == "avg") p = KPool::kAvg;
    else {
      i = std::string::npos;
      break;
    }
    if (!out.empty() && static_cast<int>(p) <= static_cast<int>(out.back())) {
      i = std::string::npos;
      break;
    }
    out.push_back(p);
    i += 3;
  }
  if (i == std::string::npos || out.empty())
    fail_at(file, "seerattn_k_seq_pooling_type",
            "\"{}\" is not a gate type of the reference (K followed by max, min, avg in that order, e.g. "
            "Kmaxminavg)",
            s);
  return out;
}

struct GateLayer {
  std::vector<float> wq;            ///< Qproj [Hkv, G, D, d]; Qavgproj [Hkv, D, d]; Qavg: empty
  std::vector<float> wk;            ///< [Hkv, n_pool·D, d]
  std::vector<float> qnorm, knorm;  ///< [d] each, empty without qk norm
};

class SeerAttnRPolicy : public Policy {
 public:
  SeerAttnRPolicy(PolicyParams p, GateWeights weights) : p_(std::move(p)), weights_(std::move(weights)) {
    budget_ = p_.budget();
    learned_ = learned_weights_choice(p_);
    p_.bind({{"start_layer", &start_layer_}, {"block_size", &block_param_}});
    if (budget_ <= 0)
      fail(
          "policy 'seerattn_r' reads a budget of tokens per kv head at each decode step but none was given: pass "
          "--budget N (the reference's seerattn_token_budget; its README uses 2048-8192)");
    if (start_layer_ < 0 || start_layer_ > (1 << 20)) p_.fail_param("start_layer", "must be in [0, 1048576]");
    if (block_param_ < 0 || block_param_ > (1 << 20)) p_.fail_param("block_size", "must be in [0, 1048576]");
    learned_.require();
  }
  /// Its budget bounds the tokens a decode step reads (PolicyParams::budget_read).
  bool uses_budget() const override { return p_.budget_read(); }

  std::string name() const override { return "seerattn_r"; }
  nlohmann::json resolved_params() const override { return p_.resolved(); }
  PolicyNeeds needs() const override {
    PolicyNeeds n;
    n.read_select = true;
    n.host_kv = true;  // cached keys are pooled into block keys
    return n;
  }
  void on_sequence_end(SeqId seq) override { seqs_.erase(seq); }

  /// Prefill steps: loads and checks the gates at the first step, records where the prompt ends
  /// (blocks completed inside a prompt are rotated at their first token), and drops block state
  /// past a rewritten cache tail (KVCache::truncate_from before the next turn of a request).
  void on_layer_step(LayerStep& step) override {
    if (!step.prefill) return;
    init(step);
    Seq& s = seqs_[step.seq];
    s.prompt_end = std::max<int64_t>(s.prompt_end, step.seq_len);
    for (int h = 0; h < step.num_kv_heads; ++h) {
      Head& m = head(s, step.layer, h, step.num_kv_heads);
      const int32_t first = std::max(0, step.cache->length(step.seq, step.layer, h) - step.n_new);
      if (first < m.done) rewind(m, first);
    }
  }

  void select_reads(ReadStep& st) override {
    if (st.layer < start_layer_) return;
    if (layers_.empty())
      fail("policy 'seerattn_r': decode step before any prompt (the gates are loaded at the prompt)");
    const int Hq = st.num_q_heads, Hkv = st.num_kv_heads, D = st.head_dim, G = Hq / Hkv;
    const GateLayer& g = layers_.at(st.layer);
    Seq& s = seqs_[st.seq];
    const int64_t k = budget_ / arch_.block;
    std::vector<std::vector<std::pair<int32_t, int32_t>>> spans(Hq);
    bool sparse = false;
    std::vector<double> qn(static_cast<size_t>(G) * D), qg, score;
    std::vector<int32_t> order;
    for (int h = 0; h < Hkv; ++h) {
      Head& m = head(s, st.layer, h, Hkv);
      const int32_t L = st.cache->length(st.seq, st.layer, h);
      fold(m, g, *st.cache, st.seq, st.layer, h, L, D, s.prompt_end);
      const int64_t n_blocks = (L + arch_.block - 1) / arch_.block;
      if (n_blocks <= k) {  // the reference's full mask: every block is read
        for (int j = 0; j < G; ++j) spans[h * G + j] = {{0, L}};
        continue;
      }
      sparse = true;
      const int32_t pos = st.cache->position(st.seq, st.layer, h, L - 1);
      for (int j = 0; j < G; ++j) unrotate(st.queries + static_cast<size_t>(h * G + j) * D, pos, D, &qn[j * D]);
      gate_query(g, h, G, D, qn, pos, qg);
      block_scores(m, qg, n_blocks, score);
      const auto sp = pick(score, k, L, order);
      for (int j = 0; j < G; ++j) spans[h * G + j] = sp;
    }
    if (sparse) st.spans = std::move(spans);
  }

 private:
  struct Head {
    int32_t done = 0;                 ///< tokens folded into the block keys and the running pools
    std::vector<double> mx, mn, sum;  ///< [D] pools of the current, incomplete block
    std::vector<float> keys;          ///< [complete blocks, d] gate keys k̃ (after norm and RoPE)
  };
  struct Seq {
    int64_t prompt_end = 0;   ///< tokens of the sequence that came from prompts (the last prefill's end)
    std::vector<Head> heads;  ///< [layer · Hkv + h]
  };

  Head& head(Seq& s, int layer, int h, int Hkv) {
    const size_t i = static_cast<size_t>(layer) * Hkv + h;
    if (s.heads.size() <= i) s.heads.resize(i + 1);
    return s.heads[i];
  }

  void rewind(Head& m, int32_t first) const {
    const int32_t b = first / arch_.block;
    m.done = b * arch_.block;
    m.keys.resize(static_cast<size_t>(b) * arch_.hidden);
  }

  /// The engine's RoPE cos/sin at `pos` (forward.cpp apply_rope: f32 angle, f64 cos/sin rounded to
  /// f32, times the attention scaling), so that unrotate() inverts exactly what was applied.
  void cos_sin(int32_t pos, int half, std::vector<double>& c, std::vector<double>& s) const {
    c.resize(half);
    s.resize(half);
    const float p = static_cast<float>(pos);
    for (int i = 0; i < half; ++i) {
      const float ang = p * inv_freq_[i];
      c[i] = static_cast<float>(std::cos(static_cast<double>(ang))) * mscale_;
      s[i] = static_cast<float>(std::sin(static_cast<double>(ang))) * mscale_;
    }
  }

  /// x [D] before RoPE from its rotated row r [D] at `pos` (rotate-half pairs (i, i + D/2)).
  void unrotate(const float* r, int32_t pos, int D, double* x) {
    const int half = D / 2;
    cos_sin(pos, half, c_, s_);
    for (int i = 0; i < half; ++i) {
      const double a = r[i], b = r[i + half], n = c_[i] * c_[i] + s_[i] * s_[i];
      x[i] = (a * c_[i] + b * s_[i]) / n;
      x[i + half] = (b * c_[i] - a * s_[i]) / n;
    }
  }

  /// Rotate-half RoPE of v [d] at `pos` in place (the gate's rotary embedding: the model's
  /// frequencies and attention scaling, d = head_dim).
  void rotate(double* v, int32_t pos, int d) {
    const int half = d / 2;
    cos_sin(pos, half, c_, s_);
    for (int i = 0; i < half; ++i) {
      const double a = v[i], b = v[i + half];
      v[i] = a * c_[i] - b * s_[i];
      v[i + half] = b * c_[i] + a * s_[i];
    }
  }

  static void rms_norm(double* v, const std::vector<float>& w, int d) {
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += v[i] * v[i];
    const double inv = 1.0 / std::sqrt(ss / d + kNormEps);
    for (int i = 0; i < d; ++i) v[i] = v[i] * inv * w[i];
  }

  /// Folds tokens m.done … L − 1 of kv head h into the running pools; every block they complete
  /// becomes a gate key, rotated at its first token's position when its last token came from a
  /// prompt (index < prompt_end) and at its last token's position otherwise.
  void fold(Head& m, const GateLayer& g, const KVCache& cache, SeqId seq, int layer, int h, int32_t L, int D,
            int64_t prompt_end) {
    if (m.done > L) rewind(m, L);
    const int B = arch_.block, d = arch_.hidden;
    kn_.resize(D);
    for (int32_t t = m.done; t < L; ++t) {
      unrotate(cache.key(seq, layer, h, t), cache.position(seq, layer, h, t), D, kn_.data());
      if (t % B == 0) {
        m.mx.assign(kn_.begin(), kn_.end());
        m.mn.assign(kn_.begin(), kn_.end());
        m.sum.assign(kn_.begin(), kn_.end());
      } else {
        for (int c = 0; c < D; ++c) {
          m.mx[c] = std::max(m.mx[c], kn_[c]);
          m.mn[c] = std::min(m.mn[c], kn_[c]);
          m.sum[c] += kn_[c];
        }
      }
      if (t % B != B - 1) continue;
      // The block [t − B + 1, t] is complete: pooled [n_pool · D] → W_k[h] → norm → RoPE.
      pooled_.clear();
      for (KPool p : arch_.k)
        for (int c = 0; c < D; ++c)
          pooled_.push_back(p == KPool::kMax ? m.mx[c] : p == KPool::kMin ? m.mn[c] : m.sum[c] / B);
      const int in = static_cast<int>(pooled_.size());
      key_.assign(d, 0.0);
      const float* w = &g.wk[static_cast<size_t>(h) * in * d];
      for (int i = 0; i < in; ++i)
        for (int o = 0; o < d; ++o) key_[o] += pooled_[i] * w[static_cast<size_t>(i) * d + o];
      if (arch_.qk_norm) rms_norm(key_.data(), g.knorm, d);
      if (arch_.rope) {
        const int32_t first = t - B + 1;
        rotate(key_.data(), t < prompt_end ? cache.position(seq, layer, h, first) : cache.position(seq, layer, h, t), d);
      }
      for (int o = 0; o < d; ++o) m.keys.push_back(static_cast<float>(key_[o]));
    }
    m.done = L;
  }

  /// The gate query q̃ [d] of kv head h from its group's queries before RoPE qn [G, D] at `pos`.
  void gate_query(const GateLayer& g, int h, int G, int D, const std::vector<double>& qn, int32_t pos,
                  std::vector<double>& out) {
    const int d = arch_.hidden;
    out.assign(d, 0.0);
    if (arch_.q == QPool::kProj) {
      const float* w = &g.wq[static_cast<size_t>(h) * G * D * d];
      for (int i = 0; i < G * D; ++i)
        for (int o = 0; o < d; ++o) out[o] += qn[i] * w[static_cast<size_t>(i) * d + o];
    } else {
      std::vector<double> avg(D, 0.0);
      for (int j = 0; j < G; ++j)
        for (int c = 0; c < D; ++c) avg[c] += qn[static_cast<size_t>(j) * D + c] / G;
      if (arch_.q == QPool::kAvg) {
        out = avg;
      } else {
        const float* w = &g.wq[static_cast<size_t>(h) * D * d];
        for (int i = 0; i < D; ++i)
          for (int o = 0; o < d; ++o) out[o] += avg[i] * w[static_cast<size_t>(i) * d + o];
      }
    }
    if (arch_.qk_norm) rms_norm(out.data(), g.qnorm, d);
    if (arch_.rope) rotate(out.data(), pos, d);
  }

  /// s_b = q̃ · k̃_b / √d for the complete blocks; the partial newest block (zero key) scores 0.
  void block_scores(const Head& m, const std::vector<double>& qg, int64_t n_blocks, std::vector<double>& out) const {
    const int d = arch_.hidden;
    const int64_t complete = static_cast<int64_t>(m.keys.size()) / d;
    out.assign(n_blocks, 0.0);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    for (int64_t b = 0; b < complete; ++b) {
      double s = 0;
      for (int o = 0; o < d; ++o) s += qg[o] * m.keys[static_cast<size_t>(b) * d + o];
      out[b] = s * scale;
    }
  }

  /// The token spans of the top-k blocks (score descending, lower block first on ties) plus the
  /// newest block, merged and sorted.
  std::vector<std::pair<int32_t, int32_t>> pick(const std::vector<double>& score, int64_t k, int32_t L,
                                                std::vector<int32_t>& order) const {
    const auto n = static_cast<int32_t>(score.size());
    order.resize(n);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return score[a] != score[b] ? score[a] > score[b] : a < b; });
    order.resize(k);
    if (std::find(order.begin(), order.end(), n - 1) == order.end()) order.push_back(n - 1);
    std::sort(order.begin(), order.end());
    std::vector<std::pair<int32_t, int32_t>> spans;
    const int B = arch_.block;
    for (int32_t b : order) {
      const int32_t lo = b * B, hi = static_cast<int32_t>(std::min<int64_t>(L, static_cast<int64_t>(b + 1) * B));
      if (!spans.empty() && spans.back().second == lo) spans.back().second = hi;
      else spans.emplace_back(lo, hi);
    }
    return spans;
  }

  /// Reads the architecture and the per-layer tensors once, at the first prompt step, checking
  /// them against the model.
  void init(const LayerStep& step) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!layers_.empty()) return;
    const int L = step.num_layers, Hq = step.num_q_heads, Hkv = step.num_kv_heads, D = step.head_dim;
    const int G = Hq / Hkv;
    if (!step.rope_inv_freq) fail("policy 'seerattn_r': the backend did not pass the model's RoPE");
    inv_freq_.assign(step.rope_inv_freq, step.rope_inv_freq + D / 2);
    mscale_ = step.rope_mscale;
    const std::string& file = weights_.config_path.empty() ? weights_.path : weights_.config_path;
    if (learned_.path.empty()) {
      arch_ = GateArch{};
      arch_.hidden = D;
      make_random(L, G, Hkv, D);
    } else {
      read_arch(weights_.config, file, D);
      weights_.check_model(L, Hkv, step.hidden_size, D);
    }
    if (block_param_ > 0) arch_.block = static_cast<int>(block_param_);
    const int d = arch_.hidden;
    if (arch_.rope && d != D)
      fail_at(file, "seerattn_gate_hidden_size",
              "{} differs from the model's head_dim {} (the gate's RoPE rotates with the model's frequencies)", d, D);
    if (arch_.q == QPool::kAvg && d != D)
      fail_at(file, "seerattn_gate_hidden_size", "{} must equal head_dim {} for Qavg gates", d, D);
    const auto n_pool = static_cast<int64_t>(arch_.k.size());
    layers_.resize(L);
    for (int l = 0; l < L; ++l) {
      const std::string p = gate_prefix(l);
      GateLayer& g = layers_[l];
      if (!weights_.find(p + "attngate_linear_k.weight"))
        fail_at(weights_.path, "tensor " + p + "attngate_linear_k.weight",
                "missing (the gates do not cover layer {} of this {}-layer model)", l, L);
      g.wk = weights_.require(p + "attngate_linear_k.weight", {Hkv, n_pool * D, d}).data;
      if (arch_.q == QPool::kProj) g.wq = weights_.require(p + "attngate_linear_q.weight", {Hkv, G, D, d}).data;
      if (arch_.q == QPool::kAvgProj) g.wq = weights_.require(p + "attngate_linear_q.weight", {Hkv, D, d}).data;
      if (arch_.qk_norm) {
        g.qnorm = weights_.require(p + "attngate_qnorm.weight", {d}).data;
        g.knorm = weights_.require(p + "attngate_knorm.weight", {d}).data;
      }
    }
  }

  /// The gate architecture from the checkpoint's config.json (SeerAttnQwen3Config's seerattn_*
  /// keys; block sizes 16, 32, 64 as its asserts). A key the config lacks (a bare weights file
  /// has no config) is read from the tensors where they tell it — the gate width from
  /// attngate_linear_k [Hkv, n_pool·D, d], Qproj/Qavgproj/Qavg from the rank of attngate_linear_q
  /// or its absence, qk norm from attngate_qnorm, Kmaxminavg from n_pool = 3 — else it takes the
  /// config class default (block 64, RoPE on); fewer than 3 pools cannot be told apart by shape
  /// and need the config.
  void read_arch(const nlohmann::json& c, const std::string& file, int D) {
    GateArch a;
    auto get_int = [&](const char* key, int def, std::initializer_list<int> allowed) {
      if (!c.contains(key)) return def;
      if (!c[key].is_number_integer()) fail_at(file, key, "expected an integer, got {}", c[key].dump());
      const int v = c[key].get<int>();
      if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
        std::string list;
        for (int x : allowed) list += (list.empty() ? "" : ", ") + std::to_string(x);
        fail_at(file, key, "{} is not supported (the reference accepts {})", v, list);
      }
      return v;
    };
    a.block = get_int("seerattn_gate_block_size", 64, {16, 32, 64});
    // The gate width only has to fit the tensors (and head_dim, for RoPE; checked in init).
    const GateTensor* wk = weights_.find(gate_prefix(0) + "attngate_linear_k.weight");
    const GateTensor* wq = weights_.find(gate_prefix(0) + "attngate_linear_q.weight");
    if (c.contains("seerattn_gate_hidden_size")) {
      const auto& v = c["seerattn_gate_hidden_size"];
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 65536)
        fail_at(file, "seerattn_gate_hidden_size", "expected an integer in [1, 65536], got {}", v.dump());
      a.hidden = v.get<int>();
    } else if (wk && wk->shape.size() == 3) {
      a.hidden = static_cast<int>(wk->shape[2]);
    }
    if (!c.contains("seerattn_q_head_pooling_type"))
      a.q = !wq ? QPool::kAvg : wq->shape.size() == 3 ? QPool::kAvgProj : QPool::kProj;
    if (!c.contains("seerattn_k_seq_pooling_type") && wk && wk->shape.size() == 3 && wk->shape[1] != 3 * D)
      fail_at(weights_.path, "tensor " + gate_prefix(0) + "attngate_linear_k.weight",
              "holds {} pooled keys of head_dim {}: without the checkpoint's config.json "
              "(seerattn_k_seq_pooling_type) their pooling functions are unknown",
              wk->shape[1] / std::max(D, 1), D);
    if (c.contains("seerattn_q_head_pooling_type")) {
      const auto& v = c["seerattn_q_head_pooling_type"];
      const std::string q = v.is_string() ? v.get<std::string>() : v.dump();
      if (q == "Qproj") a.q = QPool::kProj;
      else if (q == "Qavgproj") a.q = QPool::kAvgProj;
      else if (q == "Qavg") a.q = QPool::kAvg;
      else fail_at(file, "seerattn_q_head_pooling_type", "{} is not one of Qproj, Qavgproj, Qavg", q);
    }
    if (c.contains("seerattn_k_seq_pooling_type")) {
      const auto& v = c["seerattn_k_seq_pooling_type"];
      a.k = parse_k_pooling(v.is_string() ? v.get<std::string>() : v.dump(), file);
    }
    auto get_bool = [&](const char* key, bool def) {
      if (!c.contains(key)) return def;
      if (!c[key].is_boolean()) fail_at(file, key, "expected true or false, got {}", c[key].dump());
      return c[key].get<bool>();
    };
    a.qk_norm = get_bool("seerattn_use_qk_norm", weights_.find(gate_prefix(0) + "attngate_qnorm.weight") != nullptr);
    a.rope = get_bool("seerattn_use_rope", true);
    if (c.contains("seerattn_sparsity_method") && c["seerattn_sparsity_method"] != "token_budget" &&
        c["seerattn_sparsity_method"] != "threshold")
      fail_at(file, "seerattn_sparsity_method", "{} is not token_budget or threshold",
              c["seerattn_sparsity_method"].dump());
    arch_ = a;
  }

  void make_random(int L, int G, int Hkv, int D) {
    weights_.path = learned_.random_name();
    SeededDraws draw(learned_.random_seed);
    const int64_t d = arch_.hidden, n_pool = static_cast<int64_t>(arch_.k.size());
    for (int l = 0; l < L; ++l) {
      const std::string p = gate_prefix(l);
      std::vector<float> wq(static_cast<size_t>(Hkv) * G * D * d), wk(static_cast<size_t>(Hkv) * n_pool * D * d);
      for (auto& v : wq) v = draw.normal(std::sqrt(2.0 / static_cast<double>(G * D + d)));
      for (auto& v : wk) v = draw.normal(std::sqrt(2.0 / static_cast<double>(n_pool * D + d)));
      weights_.add(p + "attngate_linear_q.weight", {Hkv, G, D, d}, std::move(wq));
      weights_.add(p + "attngate_linear_k.weight", {Hkv, n_pool * D, d}, std::move(wk));
      weights_.add(p + "attngate_qnorm.weight", {d}, std::vector<float>(d, 1.0f));
      weights_.add(p + "attngate_knorm.weight", {d}, std::vector<float>(d, 1.0f));
    }
  }

  PolicyParams p_;
  GateWeights weights_;
  LearnedWeightsChoice learned_;
  int64_t budget_ = 0, start_layer_ = 0, block_param_ = 0;
  GateArch arch_;
  std::vector<GateLayer> layers_;
  std::vector<float> inv_freq_;
  float mscale_ = 1.0f;
  std::map<SeqId, Seq> seqs_;
  std::vector<double> c_, s_, kn_, pooled_, key_;  // scratch
  std::mutex mu_;
};

}  // namespace

KVB_POLICY(seerattn_r) {
  return learned_policy_entry<SeerAttnRPolicy>(
             "seerattn_r", GateSource{"seerattn_r", "gates", "attn_gate_weights.pth", true, is_gate_tensor})
      .with_tests({.min_budget = 1, .params = "random_gates=1", .needs_weights = true, .evicts = false});
}

}  // namespace kvb
