// `noncausal_attn`: attention each prompt token receives from every query of its chunk, earlier
// and later ones alike, times its value norm.
// Sources: Chari & Van Durme, "Compactor: Calibrated Query-Agnostic KV Cache Compression with
// Approximate Leverage Scores" (arXiv 2507.08143, the non-causal chunked attention score);
// kvpress 0.5.5 NonCausalAttnPress (NVIDIA/kvpress, PyPI kvpress==0.5.5,
// kvpress/presses/non_causal_attention_press.py: the prompt is cut into chunks of chunk_size =
// 256 positions; inside a chunk every post-RoPE query attends to every key of the chunk with
// UNSCALED logits q·k (no 1/√D) and an f32 softmax; a prompt that is not a multiple of the chunk
// pads the last chunk with zero queries and keys, the padded keys' logits set to −1e-9 (not −inf,
// so they share the softmax) and the padded queries' rows to 0 (each adds 1/chunk_size to every
// real key of the chunk); the column sums are averaged over the GQA group, multiplied by ‖v‖,
// average-pooled with kernel 3 (zero padding 1), and z-normalised over all the layer's heads and
// tokens (unbiased std, at least 1e-6); ScorerPress keeps the top n_kept per kv head).
// Choices: the chunks' column sums are accumulated in a per-token cache scalar as soon as a chunk's
// queries are all in (its keys then are too), so a chunked prefill gives kvpress's one pass and
// holds at most one chunk of queries; the prompt's last, partial chunk is scored with kvpress's
// padding at the step that ends the prompt. Queries: the step's pre-RoPE queries rotated with the
// model's RoPE (f32 angle, as transformers). kvpress only scores a prompt: `decode=false` is the
// default and decode=true, compress=chunked and a second prompt of a sequence are refused.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

class NonCausalAttnPolicy : public ScheduledPolicy {
 public:
  explicit NonCausalAttnPolicy(PolicyParams p) : ScheduledPolicy("noncausal_attn", std::move(p)) {
    params_.bind({{"chunk", &chunk_, within(1, 1 << 20)}});
    if (decode_) params_.fail_param("decode", "must be false: NonCausalAttnPress scores a prompt's queries only");
    if (chunked_) params_.fail_param("compress", "must be prompt_end: the chunks' scores need the whole prompt");
  }
  PolicyNeeds needs() const override { return {.queries_pre_rope = true, .num_scalars = 1, .host_kv = true}; }
  void on_sequence_end(SeqId seq) override {
    for (auto it = pending_.begin(); it != pending_.end();)
      it = it->first.first == seq ? pending_.erase(it) : std::next(it);
    if (std::get<0>(z_key_) == seq) z_key_ = {-1, -1, -1};
  }

 protected:
  /// Rotates the step's queries into this (sequence, layer)'s pending chunk and scores every chunk
  /// that is complete (at the prompt's end, the partial last one too, padded as kvpress).
  void observe(LayerStep& step) override {
    if (!step.prefill) return;
    if (!step.queries_pre_rope) fail("policy 'noncausal_attn': LayerStep::queries_pre_rope is not set");
    if (!step.rope_inv_freq) fail("policy 'noncausal_attn': the backend did not pass the model's RoPE");
    for (int h = 0; h < step.num_kv_heads; ++h)
      if (scoring::head_length(step, h) != step.seq_len)
        fail(
            "policy 'noncausal_attn': kv head {} of layer {} holds {} of {} tokens; NonCausalAttnPress scores one "
            "uncompressed prompt per sequence",
            h, step.layer, scoring::head_length(step, h), step.seq_len);
    const int Hq = step.num_q_heads, D = step.head_dim;
    std::vector<float>& q = pending_[{step.seq, step.layer}];
    const size_t row = static_cast<size_t>(Hq) * D;
    for (int t = 0; t < step.n_new; ++t) {
      const int64_t pos = step.seq_len - step.n_new + t;
      q.resize(q.size() + row);
      for (int hq = 0; hq < Hq; ++hq)
        scoring::rope_rotate(step.queries_pre_rope + (static_cast<size_t>(t) * Hq + hq) * D, D, pos, step.rope_inv_freq,
                             step.rope_mscale, q.data() + q.size() - row + hq * D);
      if ((pos + 1) % chunk_ == 0) {
        score_chunk(step, q, pos + 1 - static_cast<int64_t>(q.size() / row));
        q.clear();
      }
    }
    if (step.prefill_last && !q.empty()) {
      score_chunk(step, q, step.seq_len - static_cast<int64_t>(q.size() / row));
      q.clear();
    }
  }

  /// z-normalised pooled (column sum · ‖v‖) of head h, over the layer's heads (kvpress's score).
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    const auto key = std::make_tuple(step.seq, step.layer, step.seq_len);
    if (key != z_key_) {
      const int H = step.num_kv_heads;
      z_.assign(H, {});
      double sum = 0, n = 0;
      for (int hk = 0; hk < H; ++hk) {
        const int32_t Lk = scoring::head_length(step, hk);
        const std::vector<double> v2 = scoring::row_sq_norms(*step.cache, step.seq, step.layer, hk, /*values=*/true);
        std::vector<float> raw(Lk);
        for (int32_t i = 0; i < Lk; ++i)
          raw[i] = static_cast<float>(step.cache->scalars(step.seq, step.layer, hk, i)[0] * std::sqrt(v2[i]));
        z_[hk] = scoring::pool1d(raw, 3, scoring::Pool::kAvg);
        for (float v : z_[hk]) sum += v;
        n += Lk;
      }
      const double mean = sum / n;
      double ss = 0;
      for (const auto& zh : z_)
        for (float v : zh) ss += (v - mean) * (v - mean);
      const double sd = std::max(std::sqrt(ss / std::max(n - 1, 1.0)), 1e-6);
      for (auto& zh : z_)
        for (float& v : zh) v = static_cast<float>((v - mean) / sd);
      z_key_ = key;
    }
    std::copy(z_[h].begin(), z_[h].begin() + L, scores.begin());
  }

 private:
  /// Adds to every kv head's per-token scalar the group-mean column sums of the non-causal chunk
  /// attention of the queries `q` ([n, Hq, D], positions c0 … c0 + n − 1, n ≤ chunk) over the keys
  /// at the same positions, padded to the chunk as kvpress when n < chunk.
  void score_chunk(LayerStep& step, const std::vector<float>& q, int64_t c0) {
    const int Hq = step.num_q_heads, D = step.head_dim, G = Hq / step.num_kv_heads;
    const int32_t n = static_cast<int32_t>(q.size() / (static_cast<size_t>(Hq) * D));
    std::vector<float> row(chunk_), col(n);
    for (int h = 0; h < step.num_kv_heads; ++h) {
      std::fill(col.begin(), col.end(), 0.0f);
      for (int g = 0; g < G; ++g) {
        const int hq = h * G + g;
        for (int32_t r = 0; r < chunk_; ++r) {  // the padded queries' rows: 0 for real keys
          for (int32_t j = 0; j < n; ++j) {
            float dot = 0.0f;
            if (r < n) {
              const float* qv = q.data() + (static_cast<size_t>(r) * Hq + hq) * D;
              const float* k = step.cache->key(step.seq, step.layer, h, static_cast<int32_t>(c0 + j));
              for (int d = 0; d < D; ++d) dot += qv[d] * k[d];
            }
            row[j] = dot;
          }
          std::fill(row.begin() + n, row.end(), -1e-9f);  // padded keys (kvpress's mask value)
          scoring::softmax_inplace(row);
          for (int32_t j = 0; j < n; ++j) col[j] += row[j];
        }
      }
      for (int32_t j = 0; j < n; ++j)
        step.cache->scalars(step.seq, step.layer, h, static_cast<int32_t>(c0 + j))[0] += col[j] / static_cast<float>(G);
    }
  }

  int32_t chunk_ = 256;
  std::map<std::pair<SeqId, int>, std::vector<float>> pending_;  ///< rotated queries of the open chunk
  std::tuple<SeqId, int, int64_t> z_key_{-1, -1, -1};
  std::vector<std::vector<float>> z_;  ///< [kv head] z-scores of the layer last scored
};

}  // namespace

KVB_POLICY(noncausal_attn) {
  return policy_entry<NonCausalAttnPolicy>("noncausal_attn").with_tests({.min_budget = 1, .decode_evicts = false});
}

}  // namespace kvb
