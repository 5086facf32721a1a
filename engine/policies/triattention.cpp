// `triattention`: TriAttention — keys scored by a trigonometric series built from calibrated
// pre-RoPE query centres, decode-time.
// Sources: Mao et al., "TriAttention" (ICML 2026; repository WeianMao/triattention, commit
// c3744ee6a50522a1559a577f85aef2b165a344f2: triattention/methods/triattention.py,
// triattention/methods/pruning_utils.py, scripts/calibrate.py, scripts/cli.py's defaults);
// docs/policies.md, `triattention` (the formula, the schedule, what kvbench does differently).
// Per query head (layer l, head q) with calibration statistics over frequency f < D/2 (the
// rotate-half pairs (f, f + D/2) read as complex numbers): the mean pre-RoPE query E[q_f] and the
// mean modulus E|q_f|. A cached key k at position p is un-rotated (RoPE inverted at p) and scored,
// for each offset o in {1, 2, 4, ..., offset_max}, at the future distance d = now − p + o:
//   s_o = Σ_f s²·|E[q_f]|·|k_f|·cos(d·ω_f + φ_f) + Σ_f s²·(E|q_f| − |E[q_f]|)·|k_f|,
//   φ_f = arg(E[q_f]·conj(k_f)), s = the RoPE attention scaling, ω_f the model's inverse frequency;
// the key's score is the mean (or max) of s_o over the offsets. Scores are z-normalised per query
// head over the competing tokens; a kv head's score is, in `select=per_head` (the paper's runs),
// the mean over layers of the max over its GQA group, and its keep-set is applied to every layer;
// `select=per_layer_head` keeps per (layer, kv head) with the max over the group.
// Schedule (the reference's attention-layer compression with its defaults: slack trigger,
// count_prompt_tokens, per_head_pruning, no prefill compression): after a decode step in which
// the cache holds budget + buffer tokens, it is cut to `budget`; the prompt's tokens are kept and
// only generated tokens compete (`prompt=compress` lets them compete too); the prompt itself is
// never compressed while it is prefilled.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "engine/policies/gate_weights.h"
#include "engine/policies/params.h"
#include "engine/policies/policies.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

/// Name of a statistics tensor in a kvbench stats file: "layer03_head07.q_mean_real" (the
/// reference's per-head key, `layer{l:02d}_head{h:02d}`, joined to its field).
std::string stats_tensor(int layer, int head, const char* field) {
  return fmt::format("layer{:02d}_head{:02d}.{}", layer, head, field);
}

class TriAttentionPolicy : public ParamPolicy {
 public:
  explicit TriAttentionPolicy(PolicyParams p) : ParamPolicy("triattention", std::move(p)) {
    budget_ = params_.budget();
    int64_t offset_max = 1;
    params_.bind({{"buffer", &buffer_, at_least(1)},
                  {"prompt", &prompt_compete_, one_of({"keep", "compress"}, "compress")},
                  {"select", &per_layer_, one_of({"per_head", "per_layer_head"}, "per_layer_head")},
                  {"stats", &stats_spec_},
                  {"seed", &seed_},
                  {"normalize", &normalize_},
                  {"aggregation", &use_max_, one_of({"mean", "max"}, "max")},
                  {"offset_max", &offset_max, within(1, 1 << 24)},
                  {"mlr", &mlr_},
                  {"trig", &trig_}});
    // TriAttention compresses while decoding only; a prompt is prefilled whole (no chunked mode).
    (void)params_.get_choice("compress", {"prompt_end"});
    if (budget_ <= 0)
      fail(
          "policy 'triattention' compresses the cache to a budget but none was given: pass --budget N (tokens kept "
          "per layer and kv head)");
    for (int64_t o = 1; o <= offset_max; o *= 2) offsets_.push_back(static_cast<float>(o));
    if (stats_spec_.empty()) params_.fail_param("stats", "must be prompt, random or a stats file");
    stats_prompt_ = stats_spec_ == "prompt";
    stats_random_ = stats_spec_ == "random";
    if (!stats_prompt_ && !stats_random_)
      file_ = GateWeights::load(stats_spec_, GateSource{"triattention", "stats", "", false, nullptr, false});
  }

  PolicyNeeds needs() const override { return {.queries_pre_rope = stats_prompt_, .host_kv = true}; }

  void on_layer_step(LayerStep& step) override {
    if (!ready_) init_model(step);
    if (!stats_prompt_ || !step.prefill) return;
    if (!step.queries_pre_rope)
      fail(
          "policy 'triattention': stats=prompt needs the pre-RoPE queries (LayerStep::queries_pre_rope), which this "
          "backend did not provide; pass stats=FILE");
    SeqState& st = seqs_[step.seq];
    const size_t F = static_cast<size_t>(D_ / 2);
    if (st.sum_re.empty()) {
      const size_t n = static_cast<size_t>(layers_) * Hq_ * F;
      st.sum_re.assign(n, 0.0);
      st.sum_im.assign(n, 0.0);
      st.sum_abs.assign(n, 0.0);
      st.count.assign(static_cast<size_t>(layers_), 0);
    }
    for (int t = 0; t < step.n_new; ++t)
      for (int hq = 0; hq < Hq_; ++hq) {
        const float* q = step.queries_pre_rope + (static_cast<size_t>(t) * Hq_ + hq) * D_;
        const size_t base = (static_cast<size_t>(step.layer) * Hq_ + hq) * F;
        for (size_t f = 0; f < F; ++f) {
          st.sum_re[base + f] += q[f];
          st.sum_im[base + f] += q[f + F];
          st.sum_abs[base + f] += std::hypot(static_cast<double>(q[f]), static_cast<double>(q[f + F]));
        }
      }
    st.count[step.layer] += step.n_new;
  }

  void on_step_end(StepEnd& s) override {
    SeqState& st = seqs_[s.seq];
    if (s.prefill) {
      if (s.prefill_last) st.prompt_end = s.seq_len;  // positions below it are the prompt
      return;
    }
    if (!ready_) return;
    // The slack trigger: the cache (prompt included) has reached budget + buffer tokens.
    if (s.cache->length(s.seq, 0, 0) < budget_ + buffer_) return;
    const int G = Hq_ / Hkv_;
    const int64_t now = s.seq_len;
    for (int h = 0; h < Hkv_; ++h) {
      std::vector<std::vector<float>> layer_agg(static_cast<size_t>(layers_));
      int32_t pin = 0, L = 0;
      int64_t keep_n = 0;
      bool score_it = false;
      // What this head competes with: the reference's decode_start / decode_budget, on layer 0
      // (every layer holds the same tokens in per_head mode; per_layer_head checks each layer).
      auto plan = [&](int l) {
        L = s.cache->length(s.seq, l, h);
        pin = 0;
        if (!prompt_compete_)
          while (pin < L && s.cache->position(s.seq, l, h, pin) < st.prompt_end) ++pin;
        score_it = false;
        if (L <= budget_) return false;                   // nothing to cut
        if (pin >= L || budget_ - pin <= 0) return true;  // no generated token fits: the first B tokens
        keep_n = std::min<int64_t>(budget_ - pin, L - pin);
        score_it = true;
        return true;
      };
      auto first_tokens = [&]() {
        std::vector<int32_t> keep(static_cast<size_t>(std::min<int64_t>(budget_, L)));
        for (size_t i = 0; i < keep.size(); ++i) keep[i] = static_cast<int32_t>(i);
        return keep;
      };
      auto keep_from = [&](const std::vector<float>& agg) {
        std::vector<int32_t> keep(static_cast<size_t>(pin));
        for (int32_t i = 0; i < pin; ++i) keep[i] = i;
        for (int32_t i : scoring::top_k_indices(agg, keep_n)) keep.push_back(pin + i);
        return keep;
      };
      if (per_layer_) {
        for (int l = 0; l < layers_; ++l) {
          if (!plan(l)) continue;
          if (!score_it) {
            s.keep(l, h, first_tokens());
            continue;
          }
          const std::vector<std::vector<float>> rows = group_scores(*s.cache, s.seq, l, h, pin, L, now, st);
          std::vector<float> agg(rows[0].size(), -INFINITY);
          for (int g = 0; g < G; ++g)
            for (size_t i = 0; i < agg.size(); ++i) agg[i] = std::max(agg[i], rows[g][i]);
          s.keep(l, h, keep_from(agg));
        }
        continue;
      }
      if (!plan(0)) continue;
      std::vector<int32_t> keep;
      if (!score_it) {
        keep = first_tokens();
      } else {
        std::vector<double> sum(static_cast<size_t>(L - pin), 0.0);
        for (int l = 0; l < layers_; ++l) {
          if (s.cache->length(s.seq, l, h) != L)
            fail("policy 'triattention': layer {} kv head {} holds {} tokens, layer 0 holds {}", l, h,
                 s.cache->length(s.seq, l, h), L);
          const std::vector<std::vector<float>> rows = group_scores(*s.cache, s.seq, l, h, pin, L, now, st);
          for (size_t i = 0; i < sum.size(); ++i) {
            float m = rows[0][i];
            for (int g = 1; g < G; ++g) m = std::max(m, rows[g][i]);
            sum[i] += m;
          }
        }
        std::vector<float> agg(sum.size());
        for (size_t i = 0; i < agg.size(); ++i) agg[i] = static_cast<float>(sum[i] / layers_);
        keep = keep_from(agg);
      }
      for (int l = 0; l < layers_; ++l) s.keep(l, h, keep);
    }
  }

  void on_sequence_end(SeqId seq) override { seqs_.erase(seq); }

 private:
  struct SeqState {
    int64_t prompt_end = 0;                       ///< positions below it belong to the prompt
    std::vector<double> sum_re, sum_im, sum_abs;  ///< stats=prompt: [layer][q head][f] sums
    std::vector<int64_t> count;                   ///< stats=prompt: query rows summed per layer
  };

  /// Reads the model's shapes and RoPE on the first layer step, and builds the file or random
  /// statistics (throws kvb::Error naming the stats file and tensor when one is missing or of the
  /// wrong shape).
  void init_model(const LayerStep& step) {
    layers_ = step.num_layers;
    Hq_ = step.num_q_heads;
    Hkv_ = step.num_kv_heads;
    D_ = step.head_dim;
    if (!step.rope_inv_freq) fail("policy 'triattention': the backend did not pass the model's RoPE");
    if (D_ % 2 != 0) fail("policy 'triattention': head_dim {} is odd", D_);
    const int F = D_ / 2;
    omega_.assign(step.rope_inv_freq, step.rope_inv_freq + F);
    mscale_ = step.rope_mscale;
    // pruning_utils.compute_frequency_scaling: |(cos 0, sin 0)| of the scaled table, squared.
    const float s0 = std::sqrt(mscale_ * mscale_ + 0.0f);
    scale_sq_ = s0 * s0;
    const size_t n = static_cast<size_t>(layers_) * Hq_ * F;
    if (stats_random_) {
      // Seeded test statistics: E[q] ~ N(0, 1) per component, E|q| = |E[q]| + |N(0, 1)| (≥ |E[q]|
      // as for real queries). Not calibrated: tests only.
      SeededDraws draw(seed_);
      qre_.resize(n);
      qim_.resize(n);
      qabs_.resize(n);
      for (size_t i = 0; i < n; ++i) {
        qre_[i] = draw.normal(1.0);
        qim_[i] = draw.normal(1.0);
        qabs_[i] = std::hypot(qre_[i], qim_[i]) + std::fabs(draw.normal(1.0));
      }
    } else if (!stats_prompt_) {
      // Statistics for another layer count are refused, as dms and trimkv refuse their weights.
      file_.require_layers("layer", "_", layers_, "statistics", "statistics");
      qre_.resize(n);
      qim_.resize(n);
      qabs_.resize(n);
      for (int l = 0; l < layers_; ++l)
        for (int hq = 0; hq < Hq_; ++hq) {
          const size_t base = (static_cast<size_t>(l) * Hq_ + hq) * F;
          const char* fields[3] = {"q_mean_real", "q_mean_imag", "q_abs_mean"};
          std::vector<float>* dst[3] = {&qre_, &qim_, &qabs_};
          for (int k = 0; k < 3; ++k) {
            const GateTensor& t = file_.require(stats_tensor(l, hq, fields[k]), {F});
            if (k == 2)  // E|q| is a mean of moduli: never below 0
              for (int f = 0; f < F; ++f)
                if (t.data[f] < 0)
                  fail_at(file_.path, "tensor " + stats_tensor(l, hq, fields[k]),
                          "element {} is {}: a mean modulus cannot be negative", f, t.data[f]);
            std::copy(t.data.begin(), t.data.end(), dst[k]->begin() + base);
          }
        }
    }
    ready_ = true;
  }

  /// Raw (then z-normalised) scores of tokens [pin, L) of kv head h of layer l for each of the G
  /// query heads of its group: [G][L − pin].
  std::vector<std::vector<float>> group_scores(const KVCache& c, SeqId seq, int l, int h, int32_t pin, int32_t L,
                                               int64_t now, const SeqState& st) const {
    const int F = D_ / 2, G = Hq_ / Hkv_;
    const int32_t n = L - pin;
    // Un-rotated keys as complex pairs, with their moduli (pruning_utils.invert_rope,
    // to_complex_pairs; the reference's f32 arithmetic).
    std::vector<float> kr(static_cast<size_t>(n) * F), ki(kr.size()), km(kr.size());
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) {
      const float* k = c.key(seq, l, h, pin + i);
      pos[i] = c.position(seq, l, h, pin + i);
      for (int f = 0; f < F; ++f) {
        const float ang = static_cast<float>(pos[i]) * omega_[f];
        const float cu = (std::cos(ang) * mscale_) / mscale_, su = (std::sin(ang) * mscale_) / mscale_;
        const float a = k[f] / mscale_, b = k[f + F] / mscale_;
        const size_t j = static_cast<size_t>(i) * F + f;
        kr[j] = a * cu + b * su;
        ki[j] = b * cu - a * su;
        km[j] = std::hypot(kr[j], ki[j]);
      }
    }
    std::vector<std::vector<float>> rows(static_cast<size_t>(G), std::vector<float>(static_cast<size_t>(n)));
    std::vector<float> qr(F), qi(F), qa(F);
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(n) * F * G >= (1 << 14)) firstprivate(qr, qi, qa)
    for (int g = 0; g < G; ++g) {
      const int hq = h * G + g;
      stats_of(l, hq, st, qr, qi, qa);
      std::vector<float>& out = rows[g];
      std::vector<float> amp(F), phi(F);
      for (int32_t i = 0; i < n; ++i) {
        float additive = 0;
        for (int f = 0; f < F; ++f) {
          const size_t j = static_cast<size_t>(i) * F + f;
          const float qm = std::hypot(qr[f], qi[f]);
          const float re = qr[f] * kr[j] + qi[f] * ki[j];
          const float im = qi[f] * kr[j] - qr[f] * ki[j];
          phi[f] = std::atan2(im, re);
          amp[f] = qm * km[j];
          const float extra = (mlr_ ? qa[f] - qm : qa[f]) * km[j];
          additive += extra * scale_sq_;
        }
        const float base_delta = static_cast<float>(now - pos[i]);
        float acc = use_max_ ? -INFINITY : 0.0f;
        for (float o : offsets_) {
          const float d = base_delta + o;
          float trig = 0;
          if (trig_)
            for (int f = 0; f < F; ++f) {
              const float prod = d * omega_[f];
              trig += amp[f] * scale_sq_ * std::cos(prod + phi[f]);
            }
          const float comb = trig + additive;
          acc = use_max_ ? std::max(acc, comb) : acc + comb;
        }
        out[i] = use_max_ ? acc : acc / static_cast<float>(offsets_.size());
      }
      if (normalize_ && n > 0) {  // z-score over the competing tokens (std ÷ N, at least 1e-6)
        double mean = 0, var = 0;
        for (float v : out) mean += v;
        mean /= n;
        for (float v : out) var += (v - mean) * (v - mean);
        const float sd = std::max(static_cast<float>(std::sqrt(var / n)), 1e-6f);
        for (float& v : out) v = (v - static_cast<float>(mean)) / sd;
      }
    }
    return rows;
  }

  /// The statistics of query head hq of layer l: from the file / random draws, or the prompt's
  /// pre-RoPE queries so far (stats=prompt; an empty prompt gives zeros).
  void stats_of(int l, int hq, const SeqState& st, std::vector<float>& qr, std::vector<float>& qi,
                std::vector<float>& qa) const {
    const int F = D_ / 2;
    const size_t base = (static_cast<size_t>(l) * Hq_ + hq) * F;
    if (!stats_prompt_) {
      std::copy_n(qre_.begin() + base, F, qr.begin());
      std::copy_n(qim_.begin() + base, F, qi.begin());
      std::copy_n(qabs_.begin() + base, F, qa.begin());
      return;
    }
    const double n = st.count.empty() ? 0.0 : static_cast<double>(st.count[l]);
    for (int f = 0; f < F; ++f) {
      qr[f] = n > 0 ? static_cast<float>(st.sum_re[base + f] / n) : 0.0f;
      qi[f] = n > 0 ? static_cast<float>(st.sum_im[base + f] / n) : 0.0f;
      qa[f] = n > 0 ? static_cast<float>(st.sum_abs[base + f] / n) : 0.0f;
    }
  }

  int64_t budget_ = 0, buffer_ = 128, seed_ = 0;
  bool prompt_compete_ = false, per_layer_ = false, normalize_ = true, use_max_ = false, mlr_ = true, trig_ = true;
  bool stats_prompt_ = false, stats_random_ = false;
  std::string stats_spec_;
  GateWeights file_;
  std::vector<float> offsets_;
  bool ready_ = false;
  int layers_ = 0, Hq_ = 0, Hkv_ = 0, D_ = 0;
  std::vector<float> omega_;
  float mscale_ = 1.0f, scale_sq_ = 1.0f;
  std::vector<float> qre_, qim_, qabs_;  ///< file / random statistics, [layer][q head][f]
  std::map<SeqId, SeqState> seqs_;
};

}  // namespace

KVB_POLICY(triattention) { return policy_entry<TriAttentionPolicy>("triattention").with_tests({.min_budget = 1}); }

}  // namespace kvb
