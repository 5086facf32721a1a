// `lazyeviction`: LazyEviction — keep the tokens whose attention recurs, evicting lazily every W
// decode steps. Source: LazyEviction (arXiv 2506.15969, §3: recurrence-interval tracking, the
// MRI-centric score, the lagged eviction window); reference code in WeianMao/triattention @
// e7a0eb18d056659570035708cda25f6bb6cda333, folder LazyEviction/ (a copy of the authors'
// Halo-949/LazyEviction): model/kv_utils.py (Window_LAZYKVCluster.update_kv_in_decoding) and
// model/temp_cacheobs.py (TempCache.record_recurrence); defaults from eval_qwen.sh (alpha 1e-4,
// decoding_recent_size 175 for MATH, max_kv_capacity 1492 = --budget).
// What the reference does, per layer and per QUERY head (it caches repeat_kv'd keys), at decode
// step t = 1, 2, ... (the prompt is stored whole): append the new token with last = t − 1,
// mri = 0 (at t = 1 every cached token starts at last = 0, mri = 0); a = softmax(q·Kᵀ/√d) over the
// head's whole set; every token with a >= alpha gets mri = max(mri, t − last), last = t; then, when
// the set holds more than C tokens and t mod W == 0, it keeps the W newest tokens and the top C − W
// older ones by importance (LazyEvictionPolicy::importance). The step's own attention reads the
// set before the eviction. Peak C + W tokens per head.
// Choices (docs/policies.md#lazyeviction): clocks are exact int64 (the reference keeps them in
// the model dtype, fp16, which rounds steps above 2048), the score is double, top-k ties go to the
// newer token (torch.topk leaves them unspecified), and the attention compared with alpha is the
// f32 softmax (the reference casts it to fp16 first).
#include "engine/policies/lazyeviction.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/policies/registration.h"
#include "engine/util/error.h"

namespace kvb {

LazyEvictionPolicy::LazyEvictionPolicy(PolicyParams p) : ParamPolicy("lazyeviction", std::move(p)) {
  params_.bind({{"buffer", &window_, at_least(1)},
                {"alpha", &alpha_, within(0, 1)},
                {"gqa", &expand_, one_of({"expand", "max"}, "expand")}});
  if (params_.get_choice("compress", {"prompt_end", "chunked"}) != "prompt_end")
    params_.fail_param("compress",
                       "LazyEviction stores the prompt whole and evicts only while decoding (its reference's update_kv); "
                       "chunked is not supported");
  budget_ = params_.budget();
  if (budget_ <= 0)
    fail("policy 'lazyeviction': a budget is required (--budget: C, tokens kept per head after an eviction)");
  if (budget_ < window_)
    fail("policy 'lazyeviction': budget {} is below buffer {} (the W newest tokens are always kept)", budget_, window_);
}

PolicyNeeds LazyEvictionPolicy::needs() const { return {.window_queries = 1, .host_kv = true, .read_select = expand_}; }

double LazyEvictionPolicy::importance(int64_t delta, int64_t mri) {
  const double m = static_cast<double>(mri);
  const double s = mri == 0 ? 0.0 : 2.0 / (1.0 + std::exp(m - 1.0));
  return 2.0 / (1.0 + std::exp(1.0 + static_cast<double>(delta) / (m + 1e-5))) + s;
}

const std::vector<LazyEvictionPolicy::Entry>& LazyEvictionPolicy::tracked(SeqId seq, int layer, int head) const {
  static const std::vector<Entry> none;
  const auto it = seqs_.find(seq);
  if (it == seqs_.end() || layer >= static_cast<int>(it->second.heads.size())) return none;
  const auto& l = it->second.heads[layer];
  return head < static_cast<int>(l.size()) ? l[head] : none;
}

namespace {
/// Cache indices of `entries` (increasing positions, each held) in head (seq, layer, h).
std::vector<int32_t> indices_of(const KVCache& c, SeqId seq, int layer, int h,
                                const std::vector<LazyEvictionPolicy::Entry>& entries) {
  std::vector<int32_t> idx;
  idx.reserve(entries.size());
  const int32_t L = c.length(seq, layer, h);
  int32_t i = 0;
  for (const auto& e : entries) {
    while (i < L && c.position(seq, layer, h, i) < e.pos) ++i;
    if (i == L || c.position(seq, layer, h, i) != e.pos)
      fail("policy 'lazyeviction': position {} is not in the cache of layer {} head {}", e.pos, layer, h);
    idx.push_back(i++);
  }
  return idx;
}

/// Softmax of q · k_i · scale over the keys at `idx` of head (seq, layer, h), f32 exponentials.
std::vector<float> probs(const KVCache& c, SeqId seq, int layer, int h, const std::vector<int32_t>& idx, const float* q,
                         int D, float scale) {
  std::vector<float> a(idx.size());
  float mx = -INFINITY;
  for (size_t j = 0; j < idx.size(); ++j) {
    const float* k = c.key(seq, layer, h, idx[j]);
    float dot = 0.0f;
    for (int d = 0; d < D; ++d) dot += q[d] * k[d];
    a[j] = dot * scale;
    mx = std::max(mx, a[j]);
  }
  double sum = 0.0;
  for (float& v : a) sum += (v = std::exp(v - mx));
  for (float& v : a) v = static_cast<float>(v / sum);
  return a;
}
}  // namespace

void LazyEvictionPolicy::on_layer_step(LayerStep& step) {
  Seq& s = seqs_[step.seq];
  if (static_cast<int>(s.heads.size()) != step.num_layers) s.heads.resize(step.num_layers);
  auto& hs = s.heads[step.layer];
  if (step.prefill) {  // the prompt is stored whole; tracking restarts at the next decode step
    hs.clear();
    s.prompt_end = step.seq_len;
    return;
  }
  if (step.n_new != 1) fail("policy 'lazyeviction': a decode step appends one token, got {}", step.n_new);
  const int64_t t = step.seq_len - s.prompt_end;
  const int Hq = step.num_q_heads, Hkv = step.num_kv_heads, D = step.head_dim, G = Hq / Hkv;
  const float scale = step.attn_scale > 0.0f ? step.attn_scale : 1.0f / std::sqrt(static_cast<float>(D));
  const bool init = hs.empty();
  if (init) hs.assign(expand_ ? Hq : Hkv, {});
  int w = 0;
  const float* Q = step.window_queries(&w);  // [Hq, w, D]; the newest query is row w − 1
  const KVCache& c = *step.cache;
  std::vector<int32_t> order;
  for (int h = 0; h < Hkv; ++h) {
    const int32_t L = c.length(step.seq, step.layer, h);
    const int32_t newest = c.position(step.seq, step.layer, h, L - 1);
    const int first = expand_ ? h * G : h, count = expand_ ? G : 1;
    for (int k = first; k < first + count; ++k) {
      std::vector<Entry>& e = hs[k];
      if (init) {
        for (int32_t i = 0; i < L; ++i) e.push_back({c.position(step.seq, step.layer, h, i), 0, 0});
      } else {
        e.push_back({newest, t - 1, 0});
      }
      const std::vector<int32_t> idx = indices_of(c, step.seq, step.layer, h, e);
      std::vector<char> hit(e.size(), 0);
      for (int g = expand_ ? k - h * G : 0; g < (expand_ ? k - h * G + 1 : G); ++g) {
        const float* q = Q + (static_cast<size_t>(h * G + g) * w + (w - 1)) * D;
        const std::vector<float> a = probs(c, step.seq, step.layer, h, idx, q, D, scale);
        for (size_t j = 0; j < e.size(); ++j) hit[j] |= a[j] >= static_cast<float>(alpha_);
      }
      for (size_t j = 0; j < e.size(); ++j)
        if (hit[j]) {
          e[j].mri = std::max(e[j].mri, t - e[j].last);
          e[j].last = t;
        }
      const int64_t n = static_cast<int64_t>(e.size());
      if (n <= budget_ || t % window_ != 0) continue;
      // Lagged eviction: the W newest stay; the C − W best older ones by importance, ties to the newer.
      const int64_t older = n - window_;
      order.resize(older);
      std::iota(order.begin(), order.end(), 0);
      std::vector<double> sc(older);
      for (int64_t j = 0; j < older; ++j) sc[j] = importance(t - e[j].last, e[j].mri);
      std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return sc[x] != sc[y] ? sc[x] > sc[y] : x > y; });
      order.resize(budget_ - window_);
      std::sort(order.begin(), order.end());
      std::vector<Entry> kept;
      kept.reserve(budget_);
      for (int32_t j : order) kept.push_back(e[j]);
      kept.insert(kept.end(), e.begin() + older, e.end());
      e = std::move(kept);
    }
    // The kv head keeps the union of its tracked sets (one set under gqa=max).
    std::vector<Entry> uni;
    for (int k = first; k < first + count; ++k) uni.insert(uni.end(), hs[k].begin(), hs[k].end());
    std::sort(uni.begin(), uni.end(), [](const Entry& x, const Entry& y) { return x.pos < y.pos; });
    uni.erase(std::unique(uni.begin(), uni.end(), [](const Entry& x, const Entry& y) { return x.pos == y.pos; }),
              uni.end());
    if (static_cast<int32_t>(uni.size()) < L) step.keep(h, indices_of(c, step.seq, step.layer, h, uni));
  }
}

void LazyEvictionPolicy::select_reads(ReadStep& st) {
  const auto it = seqs_.find(st.seq);
  if (!expand_ || it == seqs_.end() || st.layer >= static_cast<int>(it->second.heads.size())) return;
  const auto& hs = it->second.heads[st.layer];
  if (hs.empty()) return;  // first decode step of a prompt: every head reads the whole cache
  const int G = st.num_q_heads / st.num_kv_heads;
  std::vector<std::vector<std::pair<int32_t, int32_t>>> spans(st.num_q_heads);
  bool sparse = false;
  for (int h = 0; h < st.num_kv_heads; ++h) {
    const int32_t L = st.cache->length(st.seq, st.layer, h);
    for (int g = 0; g < G; ++g) {
      const auto& e = hs[h * G + g];
      std::vector<int32_t> idx = indices_of(*st.cache, st.seq, st.layer, h, e);
      idx.push_back(L - 1);  // this step's token, tracked from on_layer_step on
      auto& sp = spans[h * G + g];
      for (int32_t i : idx) {
        if (!sp.empty() && sp.back().second == i) ++sp.back().second;
        else sp.emplace_back(i, i + 1);
      }
      sparse |= static_cast<int32_t>(idx.size()) < L;
    }
  }
  if (sparse) st.spans = std::move(spans);  // else dense: the same reads on the plain path
}

KvFootprint LazyEvictionPolicy::kv_footprint(const FootprintQuery& q) const {
  if (expand_)
    return full_cache_footprint(q, "lazyeviction gqa=expand: up to group × (C + W) per kv head, at most the full cache");
  const int64_t peak = std::min(q.context + q.gen, std::max(q.context, budget_) + window_);
  return per_head_footprint(q, peak, peak, "lazyeviction gqa=max: max(context, C) + W per head");
}

KVB_POLICY(lazyeviction) {
  return policy_entry<LazyEvictionPolicy>("lazyeviction")
      // The registry sweeps bound a kv head by budget + buffer + 1 tokens: gqa=expand holds up to
      // group × that (the union of its query heads' sets), so they run the per-kv-head mode.
      .with_tests({.min_budget = 175, .params = "gqa=max"});
}

}  // namespace kvb
