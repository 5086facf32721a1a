// kvb::policy_driver — the per-layer policy protocol shared by the CPU and CUDA backends (issue 15):
// the query-history ring, the fields of LayerStep every backend fills the same way, applying the
// keep-sets a policy requested (validated), and the end-of-step hook. A backend supplies only its
// signals (layer input, keys before RoPE, column sums, window attention/scores, the head MLP), how a
// keep-set is compacted and how a policy's K/V row writes reach its store; WHEN a head is compressed is decided by the policies themselves
// (ScheduledPolicy::due, compress_point: `compress=prompt_end|chunked`), so it cannot differ
// between backends.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/backend/cpu/forward.h"
#include "engine/scheduler/step.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/quants.h"
#include "engine/kv/kv_cache.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"

namespace kvb::policy_driver {

/// Sizes the ring of `qh` for `num_layers` layers of `window` queries of [Hq, D] on first use.
inline void init_history(QueryHistory& qh, int window, int num_layers, int Hq, int D) {
  if (!qh.q.empty()) return;
  qh.window = window;
  qh.q.assign(num_layers, std::vector<float>(static_cast<size_t>(window) * Hq * D));
  qh.pos.assign(num_layers, std::vector<int32_t>(window));
  qh.head.assign(num_layers, 0);
  qh.count.assign(num_layers, 0);
}

/// The first of an item's n new queries the ring keeps (only the newest `window` can survive).
inline int first_recorded(const QueryHistory& qh, int n) { return std::max(0, n - qh.window); }

/// Appends queries first_recorded(qh, it.n) … it.n − 1 of `it` to layer `layer`'s ring; `rows`
/// points at query row first_recorded(...) and holds consecutive [Hq, D] rows. The ring keeps the
/// newest `window` queries of the sequence across prompt chunks and decode steps, so at the end
/// of a prompt it holds the last queries of the whole prompt whatever the prefill chunk.
inline void record_queries(QueryHistory& qh, int layer, const ForwardItem& it, const float* rows, int Hq, int D) {
  const int first = first_recorded(qh, it.n);
  for (int i = first; i < it.n; ++i) {
    int& slot = qh.head[layer];
    std::memcpy(&qh.q[layer][static_cast<size_t>(slot) * Hq * D], rows + static_cast<size_t>(i - first) * Hq * D,
                sizeof(float) * Hq * D);
    qh.pos[layer][slot] = static_cast<int32_t>(it.start_pos + i);
    slot = (slot + 1) % qh.window;
  }
  qh.count[layer] = std::min(qh.window, qh.count[layer] + (it.n - first));
}

/// The query history of `it`, sized for `needs`; throws when the engine gave none.
inline QueryHistory& history_of(const ForwardItem& it, const Policy& policy, const PolicyNeeds& needs, int num_layers,
                                int Hq, int D) {
  if (!it.history) fail("forward: policy '{}' needs a query history for sequence {}", policy.name(), it.seq);
  init_history(*it.history, needs.window_queries, num_layers, Hq, D);
  return *it.history;
}

/// Model and step sizes of a forward call.
struct Dims {
  int num_layers = 0, num_q_heads = 0, num_kv_heads = 0, head_dim = 0, hidden_size = 0;
  float attn_scale = 0.0f;
  const float* rope_inv_freq = nullptr;  ///< the model's RoPE inverse frequencies [head_dim / 2]
  float rope_mscale = 1.0f;              ///< the model's RoPE attention scaling
  float rms_norm_eps = 1e-6f;            ///< the model's RMSNorm epsilon
};

/// Sets the fields LayerStep and StepEnd share — the cache, the sequence, the model's layer and kv
/// head counts, and where the step stands (n_new, seq_len, prefill, prefill_last) — for item `it`.
template <class Step>
void fill_step(Step& s, KVCache& cache, const ForwardItem& it, const Dims& d) {
  s.cache = &cache;
  s.seq = it.seq;
  s.num_layers = d.num_layers;
  s.num_kv_heads = d.num_kv_heads;
  s.n_new = it.n;
  s.seq_len = it.start_pos + it.n;
  s.prefill = it.prefill;
  s.prefill_last = it.prefill_last;
  s.scoring_pass = it.scoring_pass;
}

/// A LayerStep for `it` at `layer` with the fields that do not depend on the backend; the caller
/// adds the signals and primitives. `wq_buf` backs LayerStep::window_queries (the host ring).
inline LayerStep layer_step(KVCache& cache, const ForwardItem& it, int layer, const Dims& d, std::vector<float>& wq_buf) {
  LayerStep st;
  fill_step(st, cache, it, d);
  st.layer = layer;
  st.num_q_heads = d.num_q_heads;
  st.head_dim = d.head_dim;
  st.prompt_end = it.prefill ? it.prompt_end : 0;
  st.hidden_size = d.hidden_size;
  st.attn_scale = d.attn_scale;
  st.rope_inv_freq = d.rope_inv_freq;
  st.rope_mscale = d.rope_mscale;
  st.rms_norm_eps = d.rms_norm_eps;
  QueryHistory* qh = it.history;
  const int Hq = d.num_q_heads, D = d.head_dim;
  st.window_queries = [qh, layer, Hq, D, &wq_buf](int* w_out) -> const float* {
    if (!qh || qh->q.empty()) fail("policy asked for window queries it did not declare");
    const int w = gather_window_queries(*qh, layer, Hq, D, wq_buf);
    if (w_out) *w_out = w;
    return wq_buf.data();
  };
  return st;
}

/// LayerStep::window_attention for one (item, layer) step, memoised per kv head: the first call
/// for head h runs `compute(h, out)`, which fills `out` with the head's [G, w, L_h] f32 window
/// attention (see LayerStep::window_attention) and returns w; later calls return the stored
/// result. Throws kvb::Error when the policy did not declare window queries (`qh` null or empty)
/// or names a kv head outside [0, num_kv_heads). The returned function owns the memo.
inline std::function<const std::vector<float>&(int, int*)> memo_window_attention(
    const QueryHistory* qh, int num_kv_heads, std::function<int(int h, std::vector<float>& out)> compute) {
  struct Memo {
    std::vector<std::vector<float>> out;
    std::vector<int> w;
  };
  auto m = std::make_shared<Memo>();
  m->out.resize(num_kv_heads);
  m->w.assign(num_kv_heads, -1);
  return [m, qh, num_kv_heads, compute = std::move(compute)](int h, int* w_out) -> const std::vector<float>& {
    if (!qh || qh->q.empty()) fail("policy asked for window attention it did not declare");
    if (h < 0 || h >= num_kv_heads) fail("window_attention: kv head {} of {}", h, num_kv_heads);
    if (m->w[h] < 0) m->w[h] = compute(h, m->out[h]);
    if (w_out) *w_out = m->w[h];
    return m->out[h];
  };
}

/// LayerStep::out_proj_head over the output projection `wo` ([H, Hq·D] as the model holds it) of
/// a model with Hq query heads of head_dim D: every row dequantised (kvb::dequantize_row) and its
/// D columns of query head hq copied out. `wo` must outlive the returned function (the Model's
/// weights do). Throws kvb::Error for hq outside [0, Hq) or a matrix of another width.
inline std::function<void(int, float*)> out_proj_head(const Mat& wo, int Hq, int D) {
  return [&wo, Hq, D](int hq, float* out) {
    if (hq < 0 || hq >= Hq) fail("out_proj_head: query head {} of {}", hq, Hq);
    if (wo.cols != static_cast<int64_t>(Hq) * D) fail("out_proj_head: W_o has {} columns, not {}", wo.cols, Hq * D);
    std::vector<float> row(static_cast<size_t>(wo.cols));
    for (int64_t i = 0; i < wo.rows; ++i) {
      dequantize_row(wo.type, wo.row(i), wo.cols, row.data());
      std::copy_n(row.data() + static_cast<size_t>(hq) * D, D, out + static_cast<size_t>(i) * D);
    }
  };
}

/// Compacts head h of layer `layer` of `seq` to `keep`; returns the tokens evicted.
using Compact = std::function<int64_t(SeqId seq, int layer, int h, const std::vector<int32_t>& keep)>;

/// Applies one validated row write of (seq, layer) to the cache's host rows ([D] f32 each);
/// `round_bf16` first rounds every element to bf16 (the CUDA backend's host mirror holds the
/// device pool's bf16 values). Throws kvb::Error when the cache holds no host K/V.
inline void write_host_rows(KVCache& cache, SeqId seq, int layer, const KvRowWrite& w, bool round_bf16 = false) {
  const int D = cache.config().head_dim;
  for (size_t j = 0; j < w.index.size(); ++j) {
    float* dst = w.values ? cache.value(seq, layer, w.head, w.index[j]) : cache.key(seq, layer, w.head, w.index[j]);
    const float* src = w.rows.data() + j * D;
    for (int d = 0; d < D; ++d) dst[d] = round_bf16 ? bf16_bits_to_f32(f32_to_bf16_bits(src[d])) : src[d];
  }
}

/// Applies the row write `w` of layer `layer` of `seq` (validated by run_layer) to a backend's
/// K/V store.
using Write = std::function<void(SeqId seq, int layer, const KvRowWrite& w)>;

/// Runs the policy's layer hook on `st`, applies the row writes it requested (LayerStep::writes,
/// in order, through `write`) and then its keep-sets; returns the tokens evicted. Throws kvb::Error
/// naming the policy for a keep-set or write naming a kv head out of range, a write to a token
/// index ≥ L_h or with rows of the wrong size, or writes from a policy without
/// PolicyNeeds::writes_kv.
inline int64_t run_layer(Policy& policy, LayerStep& st, const Compact& compact, const Write& write) {
  policy.on_layer_step(st);
  if (st.scoring_pass >= 0 && (!st.writes.empty() || !st.keeps.empty()))
    fail("policy '{}' changed the cache in a scoring pass (its tokens are rolled back; cut in on_scoring_passes_end)",
         policy.name());
  if (!st.writes.empty()) {
    if (!policy.needs().writes_kv)
      fail("policy '{}' wrote cached K/V rows without declaring PolicyNeeds::writes_kv", policy.name());
    for (const KvRowWrite& w : st.writes) {
      if (w.head < 0 || w.head >= st.num_kv_heads)
        fail("policy '{}' wrote rows of kv head {} of {}", policy.name(), w.head, st.num_kv_heads);
      const int32_t L = st.cache->length(st.seq, st.layer, w.head);
      if (w.rows.size() != w.index.size() * static_cast<size_t>(st.head_dim))
        fail("policy '{}' wrote {} floats for {} rows of {} (layer {} kv head {})", policy.name(), w.rows.size(),
             w.index.size(), st.head_dim, st.layer, w.head);
      for (int32_t i : w.index)
        if (i < 0 || i >= L)
          fail("policy '{}' wrote token {} of the {} of layer {} kv head {}", policy.name(), i, L, st.layer, w.head);
      write(st.seq, st.layer, w);
    }
  }
  int64_t evicted = 0;
  for (auto& [h, keep] : st.keeps) {
    if (h < 0 || h >= st.num_kv_heads)
      fail("policy '{}' returned a keep-set for kv head {} of {}", policy.name(), h, st.num_kv_heads);
    evicted += compact(st.seq, st.layer, h, keep);
  }
  return evicted;
}

/// True for an item whose attention a read-selection policy chooses (a decode step: one new
/// token, not part of a prompt).
inline bool is_decode(const ForwardItem& it) { return it.n == 1 && !it.prefill; }

/// Runs Policy::select_reads for decode item `it` at `layer` with its new token's post-RoPE
/// queries `q` [Hq, D], validates the spans it returned (throws kvb::Error naming the policy for
/// a span out of [0, L_h), empty, unsorted or overlapping, or a wrong head count) and returns them
/// in `spans` (empty: dense). Returns the token rows read, summed over kv heads, each kv head
/// counting the union of its query heads' spans.
inline int64_t select_reads(Policy& policy, const KVCache& cache, const ForwardItem& it, int layer, const Dims& d,
                            const float* q, std::vector<std::vector<std::pair<int32_t, int32_t>>>& spans) {
  ReadStep rs;
  rs.cache = &cache;
  rs.seq = it.seq;
  rs.layer = layer;
  rs.num_layers = d.num_layers;
  rs.num_q_heads = d.num_q_heads;
  rs.num_kv_heads = d.num_kv_heads;
  rs.head_dim = d.head_dim;
  rs.seq_len = it.start_pos + it.n;
  rs.queries = q;
  policy.select_reads(rs);
  spans = std::move(rs.spans);
  int64_t read = 0;
  if (spans.empty()) {
    for (int h = 0; h < d.num_kv_heads; ++h) read += cache.length(it.seq, layer, h);
    return read;
  }
  if (static_cast<int>(spans.size()) != d.num_q_heads)
    fail("policy '{}' selected reads for {} query heads of {}", policy.name(), spans.size(), d.num_q_heads);
  const int G = d.num_q_heads / d.num_kv_heads;
  std::vector<uint8_t> mark;
  for (int h = 0; h < d.num_kv_heads; ++h) {
    const int32_t L = cache.length(it.seq, layer, h);
    mark.assign(L, 0);
    for (int g = 0; g < G; ++g) {
      int32_t prev = 0;
      for (const auto& [b, e] : spans[h * G + g]) {
        if (b < prev || e <= b || e > L)
          fail("policy '{}' selected reads [{}, {}) outside the {} tokens of layer {} kv head {}, or unsorted",
               policy.name(), b, e, L, layer, h);
        std::fill(mark.begin() + b, mark.begin() + e, uint8_t{1});
        prev = e;
      }
    }
    for (uint8_t m : mark) read += m;
  }
  return read;
}

/// Runs the end-of-step hook (global budgets) for every item and applies its keep-sets;
/// `flush` (may be empty) is called after each item's compactions. Returns the tokens evicted.
inline int64_t run_step_end(Policy& policy, KVCache& cache, std::span<const ForwardItem> items, const Dims& d,
                            const Compact& compact, const std::function<void()>& flush = {}) {
  int64_t evicted = 0;
  for (const ForwardItem& it : items) {
    StepEnd se;
    fill_step(se, cache, it, d);
    policy.on_step_end(se);
    if (se.scoring_pass >= 0 && !se.keeps.empty())
      fail("policy '{}' returned keep-sets at the end of a scoring pass", policy.name());
    for (auto& k : se.keeps) {
      if (k.layer < 0 || k.layer >= d.num_layers || k.head < 0 || k.head >= d.num_kv_heads)
        fail("policy '{}' returned a keep-set for layer {} head {}", policy.name(), k.layer, k.head);
      evicted += compact(it.seq, k.layer, k.head, k.indices);
    }
    if (flush) flush();
  }
  return evicted;
}

}  // namespace kvb::policy_driver
