// kvb::Policy — the KV-cache policy interface
// (docs/architecture.md#policies-and-the-policy-driver and #budget-buffer-window-sinks;
// docs/policies.md).
// A policy decides, per (layer, kv_head) of one sequence, which cached tokens to keep.
// The engine calls it after every forward step (a prefill chunk or a decode step) of every layer,
// once the new tokens' K/V are in the cache and their attention has been computed; the policy
// reads the signals it declared in PolicyNeeds and may request a keep-set per head, which the
// engine applies with KVCache::compact, and (PolicyNeeds::writes_kv) rewrite cached key/value rows
// of a head (LayerStep::write_keys / write_values), which the engine applies first. Policies never allocate KV memory themselves.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/kv/kv_cache.h"
#include "engine/policies/lora.h"

namespace kvb {

/// A parsed `--policy name:key=value,...` spec plus the budget, before defaults are applied.
struct PolicySpec {
  std::string name;
  std::map<std::string, std::string> params;  ///< as written by the user
  int64_t budget = 0;                         ///< tokens kept per (layer, kv_head) right after a compression; 0 = none

  /// Parses "name[:k=v,k=v]" with the one spec parser (engine/util/spec.h, parse_named_spec).
  /// Throws kvb::Error naming the spec on bad syntax or a key given twice.
  static PolicySpec parse(const std::string& text, int64_t budget = 0);
  /// "name:k=v,..." with keys sorted (canonical form; used in content hashes).
  std::string to_string() const;
};

/// What a policy needs the engine to compute. Anything not requested is not computed.
struct PolicyNeeds {
  /// Keep the last `window_queries` post-RoPE query vectors per (sequence, layer, q_head) so
  /// LayerStep::window_attention() can be computed (SnapKV, R-KV, G-KV observation window).
  int window_queries = 0;
  /// LayerStep::attention_colsum: per kv_head, sum over the group's query heads and over the
  /// step's new queries of each cached token's attention probability (H2O).
  bool attention_colsum = false;
  /// LayerStep::layer_input: the attention block's input (after input RMSNorm) of the new tokens,
  /// [n_new, H] f32 (TRIM-KV retention gates).
  bool layer_input = false;
  /// LayerStep::layer_residual: the residual stream entering the layer (before the input RMSNorm)
  /// of the new tokens, [n_new, H] f32 (DMS's eviction-decision projection).
  bool layer_residual = false;
  /// LayerStep::keys_pre_rope: keys of the new tokens before RoPE, [n_new, Hkv, D] (WG-KV).
  bool keys_pre_rope = false;
  /// LayerStep::queries_pre_rope: queries of the new tokens before RoPE (after the q norm of
  /// Qwen3-style models), [n_new, Hq, D] (Expected Attention's query statistics, LocRet's
  /// retaining heads). Both backends provide it (CUDA: a device→host copy of the step's rows).
  bool queries_pre_rope = false;
  /// Per-token scalars the policy stores in the cache pages (KVCache::scalars).
  int num_scalars = 0;
  /// The policy reads layer_input only through scoring::head_mlp with x = nullptr: a backend that
  /// provides LayerStep::head_mlp may then leave LayerStep::layer_input null (no device→host copy).
  bool layer_input_via_mlp = false;
  /// The policy reads cached keys/values through KVCache::key/value (KeyDiff, R-KV and G-KV
  /// redundancy, WG-KV's post-RoPE key, ForesightKV's [k; v] features). A backend that keeps K/V
  /// on a device mirrors each step's new rows into the host pages only when this is set.
  bool host_kv = false;
  /// on_layer_step does something. False (the full cache) lets a backend skip the per-layer hook,
  /// and with it the CUDA backend's per-layer device synchronisation (a pipeline bubble per layer).
  bool layer_hook = true;
  /// The policy's own prompt chunk (LocRet's chunked prefill, locret.cpp): when > 0 the engine
  /// ends a prefill step at every absolute position that is a multiple of `prefill_chunk` and
  /// lies below LayerStep::prompt_end − `prefill_tail`, and at prompt_end − prefill_tail itself
  /// (when > 0); --prefill-chunk only splits further. The policy evicts at those boundaries, so
  /// its result does not depend on --prefill-chunk (engine/scheduler: prefill_step_tokens).
  int prefill_chunk = 0;
  /// Tokens at the end of each prompt that form the policy's last, separate prefill step (LocRet's
  /// local_len); used only with prefill_chunk.
  int prefill_tail = 0;
  /// The policy keeps the whole cache but chooses, before the attention of every decode step,
  /// which cached tokens each query head reads (Policy::select_reads; Quest, SeerAttention-R).
  /// Both backends attend over exactly the selected ranges (CUDA: plan.h plan_attention_ranged).
  bool read_select = false;
  /// The policy rewrites cached key and/or value rows through LayerStep::write_keys /
  /// write_values (ThinK's key-channel pruning, merge-on-evict, key re-rotation). The engine
  /// applies the writes of a layer step before its keep-sets, to the host pages (CPU; and the
  /// CUDA backend's host mirror when host_kv) and to the device pool (CUDA: a host→device copy of
  /// the changed rows, rounded to bf16). policy_driver::run_layer refuses writes from a policy
  /// that does not set it.
  bool writes_kv = false;
  /// LayerStep::out_proj_head: the layer's attention output projection W_o, one query head's
  /// columns at a time, dequantised to f32 from the host copy of the model's weights (CriticalKV's
  /// ‖W_o·v‖₁ value weighting). Costs nothing unless called.
  bool out_proj = false;
  /// The policy asks for scoring passes at the end of a prompt (Policy::scoring_passes; KVzip's
  /// context reconstruction, docs/architecture.md#scoring-passes): after the step that ends a
  /// prompt the engine feeds each pass's tokens as one extra step at the positions that follow
  /// the prompt, with LayerStep::scoring_pass set, then truncates every head back to its length
  /// before the pass; once all passes ran it calls Policy::on_scoring_passes_end.
  bool scoring_pass = false;
  /// The policy asks for a restore pass after its scoring passes (Policy::restore_pass; RestoreKV's
  /// learned restore tokens, docs/architecture.md#scoring-passes): rows of input embeddings run
  /// once as one prefill step at the positions after the prompt, optionally through a LoRA
  /// adapter, without the policy's layer hooks; their K/V stay in the cache. Needs scoring_pass.
  bool restore_pass = false;
};

/// The token ids a scoring pass is built from that only the tokenizer and the chat template know
/// (kvpress 0.5.5 KVzipPress.__call__ and prepare, kvpress/presses/kvzip_press.py): the engine
/// fills them (EngineOptions::scoring_prompts, kvzip_scoring_prompts in engine/engine.h) and
/// hands them to Policy::scoring_passes. Empty pieces (a library run without a tokenizer): the
/// pass then holds only what the policy adds itself.
struct ScoringPrompts {
  std::vector<int32_t> repeat;       ///< "\n\nRepeat the previous context exactly."
  std::vector<int32_t> repeat_part;  ///< "\n\nRepeat the part of the previous context exactly, starting with"
  std::vector<int32_t> suffix;       ///< the chat template's text after a user message: the assistant turn's header
  int64_t prefix = 0;                ///< tokens of the chat template before a user message's content
  bool from_template = false;        ///< built from a tokenizer (and its chat template, when it has one)
};

/// What Policy::scoring_passes sees at the end of a prompt of one sequence.
struct ScoringPassRequest {
  KVCache* cache = nullptr;
  SeqId seq = 0;
  int num_layers = 0, num_kv_heads = 0;
  int64_t seq_len = 0;  ///< tokens of the sequence so far (the prompt's end); passes start at this position
  /// The token ids of positions [0, seq_len) when the engine has them all (the first prompt of a
  /// request, not a recomputation); empty otherwise (the policy then asks for no pass).
  std::span<const int32_t> tokens;
  const ScoringPrompts* prompts = nullptr;  ///< never null
};

/// The restore pass a policy asks for (Policy::restore_pass): `n` input rows given as embeddings
/// (the residual stream's input, used as they are: no embedding scale is applied), fed as one
/// prefill step at positions ScoringPassRequest::seq_len … seq_len + n − 1 over the whole prompt's
/// cache, with `lora`'s deltas on the projections it targets (null: none) and no policy hooks.
/// Their K/V are appended and kept; later tokens of the sequence follow at seq_len + n.
struct RestorePass {
  int64_t n = 0;                      ///< rows (0: no pass)
  std::vector<float> embeddings;      ///< [n, hidden_size] f32
  const LoraAdapter* lora = nullptr;  ///< owned by the policy, alive until on_scoring_passes_end returns
};

/// A rewrite of cached rows of one kv head that a policy requests (LayerStep::write_keys,
/// LayerStep::write_values): rows[j · D … (j + 1) · D) f32 replaces the key (or value) row of the
/// head's token index[j], an index into the head's cache as it is when on_layer_step is called
/// (before this step's keep-sets are applied). Indices need not be sorted; a later write of the
/// same token wins.
struct KvRowWrite {
  int head = 0;                ///< kv head (0 ≤ head < Hkv)
  bool values = false;         ///< false: keys (post-RoPE, as cached), true: values
  std::vector<int32_t> index;  ///< token indices into the head's cache, each < L_h
  std::vector<float> rows;     ///< [index.size(), D] f32 row-major
};

/// What two policies driven together need (ComposedPolicy in scheduled.cpp, kvpress pipelines in
/// tests): the larger window_queries and num_scalars, every signal either requests, and
/// layer_input_via_mlp only when every one that reads layer_input reads it through head_mlp.
/// layer_hook when either has it; prefill_chunk, prefill_tail and read_select are `a`'s (a chunked
/// prefill or a read selection is one policy's schedule, not a signal to combine). Throws nothing.
inline PolicyNeeds merge(const PolicyNeeds& a, const PolicyNeeds& b) {
  PolicyNeeds n = a;
  n.window_queries = std::max(a.window_queries, b.window_queries);
  n.attention_colsum |= b.attention_colsum;
  n.layer_input |= b.layer_input;
  n.layer_residual |= b.layer_residual;
  n.keys_pre_rope |= b.keys_pre_rope;
  n.queries_pre_rope |= b.queries_pre_rope;
  n.host_kv |= b.host_kv;
  n.writes_kv |= b.writes_kv;
  n.out_proj |= b.out_proj;
  n.scoring_pass |= b.scoring_pass;
  n.restore_pass |= b.restore_pass;
  n.layer_input_via_mlp = a.layer_input_via_mlp && (b.layer_input_via_mlp || !b.layer_input);
  n.num_scalars = std::max(a.num_scalars, b.num_scalars);
  n.layer_hook |= b.layer_hook;
  return n;
}

/// What a read-selection policy (PolicyNeeds::read_select) sees before the attention of one
/// (sequence, layer) of a decode step (one new token), after that token's K/V were appended.
/// Shapes: Hq query heads, Hkv kv heads, D head_dim, G = Hq / Hkv; query head hq reads kv head
/// hq / G, whose cache holds L_h tokens (this step's included).
struct ReadStep {
  const KVCache* cache = nullptr;
  SeqId seq = 0;
  int layer = 0, num_layers = 0;
  int num_q_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t seq_len = 0;             ///< tokens of the sequence so far, this step's included
  const float* queries = nullptr;  ///< [Hq, D] f32: the new token's post-RoPE queries
  /// Filled by the policy: spans[hq] = the tokens query head hq reads, as sorted, disjoint,
  /// non-empty [begin, end) ranges of indices into its kv head's cache. Left empty (size 0): every
  /// head reads its whole cache (dense attention).
  std::vector<std::vector<std::pair<int32_t, int32_t>>> spans;
};

namespace scoring {
/// How the G query heads of a GQA group are reduced into one score per kv head.
enum class Gqa {
  kMaxLogits,  ///< max over the group of the scaled logits, BEFORE the softmax; the softmax then
               ///< runs over the older (non-window) keys only (R-KV repo: rkv/utils.py;
               ///< docs/policies.md, `rkv`)
  kMax,        ///< softmax per query head over all cached keys (causal), then max over the group
               ///< (G-KV repo order of operations; docs/policies.md, `gkv`)
  kMean,       ///< softmax per query head over all cached keys (causal), then mean over the group
               ///< (kvpress SnapKVPress; docs/policies.md, `snapkv`)
};

/// 1-D pooling along the token axis, stride 1, "same" length (padding kernel/2).
enum class Pool {
  kNone,
  kMax,  ///< torch max_pool1d: padding never wins (acts as −inf)
  kAvg,  ///< torch avg_pool1d with count_include_pad=True: zero padding, divide by kernel
};
}  // namespace scoring

/// A head-wise two-layer MLP of a learned policy (TRIM-KV retention gate, WG-KV write gate,
/// ForesightKV scorer), f32 row-major, weights owned by the policy and unchanged for its life:
///   z[r, h] = b2[h] + Σ_k W2[h, k] · act(b1[h', k] + Σ_c W1[h', k, c] · x[r, h', c]),
/// h' = 0 when `shared_hidden` (one hidden layer for all heads, TRIM-KV: W1 [1, hidden, in],
/// b1 [1, hidden], x [r, 1, in]) else h' = h (W1 [heads, hidden, in], b1 [heads, hidden],
/// x [r, heads, in]); W2 [heads, hidden], b2 [heads]. The output activation (log σ, σ) is the
/// policy's. Evaluate with scoring::head_mlp, which uses LayerStep::head_mlp when the backend
/// provides it (CUDA: cuBLAS SGEMM + a reduction kernel) and the host loop otherwise.
struct HeadMlp {
  enum class Act { kSilu, kGeluErf };
  int heads = 0;   ///< output heads (kv heads)
  int in = 0;      ///< input width per head
  int hidden = 0;  ///< hidden width
  bool shared_hidden = false;
  Act act = Act::kSilu;
  const float* w1 = nullptr;
  const float* b1 = nullptr;
  const float* w2 = nullptr;
  const float* b2 = nullptr;
};

/// What scoring::window_scores computes for one kv head: the SnapKV-family importance of the
/// older tokens (scoring::window_importance with `gqa`), then scoring::pool1d(kernel, pool).
struct WindowScoreSpec {
  scoring::Gqa gqa = scoring::Gqa::kMaxLogits;
  scoring::Pool pool = scoring::Pool::kNone;
  int kernel = 1;
};

/// Everything a policy sees for one (sequence, layer) after one forward step.
/// Shapes: Hq query heads, Hkv kv heads, D head_dim, group G = Hq / Hkv, L_h = cache length of
/// kv head h (already including this step's new tokens), n_new = tokens appended this step.
struct LayerStep {
  KVCache* cache = nullptr;
  SeqId seq = 0;
  int layer = 0, num_layers = 0;
  int num_q_heads = 0, num_kv_heads = 0, head_dim = 0;
  int n_new = 0;              ///< tokens appended in this step (prompt chunk length, or 1)
  int64_t seq_len = 0;        ///< tokens processed so far in this sequence (= next position)
  bool prefill = false;       ///< this step is (part of) the prompt
  bool prefill_last = false;  ///< this step ends the prompt (SnapKV compresses here)
  /// ≥ 0: this step is scoring pass number `scoring_pass` that the policy asked for
  /// (Policy::scoring_passes; its tokens are rolled back after the step, keep-sets are refused);
  /// −1: an ordinary step.
  int scoring_pass = -1;
  /// Prefill steps: the absolute position where this prompt ends (the step with prefill_last ends
  /// there; a query-agnostic request's context ends a prompt of its own). 0 on decode steps.
  int64_t prompt_end = 0;
  const float* layer_input = nullptr;  ///< [n_new, H] when PolicyNeeds::layer_input
  /// [n_new, H] f32 when PolicyNeeds::layer_residual: the residual stream before the layer's input
  /// RMSNorm (layer_input = RMSNorm(layer_residual) · input_norm.weight).
  const float* layer_residual = nullptr;
  int hidden_size = 0;
  float rms_norm_eps = 1e-6f;               ///< the model's RMSNorm epsilon
  const float* keys_pre_rope = nullptr;     ///< [n_new, Hkv, D] when PolicyNeeds::keys_pre_rope
  const float* queries_pre_rope = nullptr;  ///< [n_new, Hq, D] when PolicyNeeds::queries_pre_rope
  /// The model's RoPE: inverse frequencies [head_dim / 2] and the attention scaling (YaRN mscale,
  /// 1 otherwise); position p rotates dims (i, i + D/2) by angle p·inv_freq[i] and scales by mscale
  /// (rotate-half convention, as transformers). Null when the backend does not set it.
  const float* rope_inv_freq = nullptr;
  float rope_mscale = 1.0f;
  /// [Hkv] vectors of length L_h, when PolicyNeeds::attention_colsum.
  const std::vector<std::vector<float>>* attention_colsum = nullptr;
  /// Softmax attention of the last w (≤ PolicyNeeds::window_queries) queries of this sequence over
  /// the cached tokens of kv head h, for each of the G query heads of the group:
  /// returns [G, w, L_h] f32 row-major (causal: a query does not see tokens after its position,
  /// their probability is 0). Computed on first call per head and step; w = min(window, seq_len).
  std::function<const std::vector<float>&(int h, int* w_out)> window_attention;
  /// The post-RoPE query vectors of the last w (≤ PolicyNeeds::window_queries) tokens of this
  /// sequence, all query heads: returns a pointer to [Hq, w, D] f32 row-major, oldest query first;
  /// query r has absolute position seq_len − w + r. w = min(window, seq_len). Set whenever
  /// PolicyNeeds::window_queries > 0. Policies that need pre-softmax logits (R-KV's GQA max over
  /// logits, SnapKV as in the R-KV repo) compute them from these with scoring::window_logits.
  std::function<const float*(int* w_out)> window_queries;
  /// Softmax scale the model uses for q·k (0 = 1/sqrt(head_dim)).
  float attn_scale = 0.0f;

  // Optional backend primitives (null = the policy's host code computes the same thing). They
  // let one policy implementation drive both backends while the heavy math runs where the
  // activations live; kernels hold no policy logic beyond scoring and selection primitives
  // (the GPU issue's rule; engine/backend/cuda/NOTES.md, "Why top-k stays on the host").
  /// Evaluates `mlp` (see HeadMlp) into out. head < 0: every head, out [rows, heads]; x is
  /// [rows, shared ? 1 : heads, in], or null for the step's layer inputs (shared_hidden, in ==
  /// hidden_size, rows == n_new). head ≥ 0: only that head (not shared), x [rows, in], out [rows].
  /// Throws kvb::Error on inconsistent shapes or a device failure.
  std::function<void(const HeadMlp& mlp, const float* x, int rows, int head, float* out)> head_mlp;
  /// scoring::window_scores of kv head h computed by the backend: L_h − w values (empty when
  /// L_h ≤ w); w_out receives w. Needs PolicyNeeds::window_queries.
  std::function<std::vector<float>(int h, const WindowScoreSpec& spec, int* w_out)> window_scores;
  /// When PolicyNeeds::out_proj: writes the columns of this layer's attention output projection
  /// W_o (torch o_proj.weight, [H, Hq·D]) that read query head hq into out, [H, D] f32 row-major
  /// (out[i·D + d] = W_o[i, hq·D + d]), dequantised from the model's host weights as stored (f32,
  /// bf16 or a GGUF block type; the CUDA backend reads the host Model its device weights were
  /// uploaded from, so both backends give the same values). Throws kvb::Error for hq outside
  /// [0, Hq). Null when the policy did not declare it.
  std::function<void(int hq, float* out)> out_proj_head;

  /// Requests that kv head h keep exactly `keep` (strictly increasing indices < L_h).
  void keep(int h, std::vector<int32_t> keep_set) { keeps.emplace_back(h, std::move(keep_set)); }
  std::vector<std::pair<int, std::vector<int32_t>>> keeps;  ///< filled by the policy

  /// Requests that the cached keys of kv head h's tokens `index` become `rows` ([index.size(), D]
  /// f32, post-RoPE like every cached key); needs PolicyNeeds::writes_kv. The engine applies every
  /// write of the step before its keep-sets (KvRowWrite: indices are pre-compaction), on both
  /// backends; it throws kvb::Error for a head, index or row count out of range.
  void write_keys(int h, std::vector<int32_t> index, std::vector<float> rows) {
    writes.push_back({h, false, std::move(index), std::move(rows)});
  }
  /// As write_keys, for the cached values of kv head h.
  void write_values(int h, std::vector<int32_t> index, std::vector<float> rows) {
    writes.push_back({h, true, std::move(index), std::move(rows)});
  }
  std::vector<KvRowWrite> writes;  ///< filled by the policy, applied in order
};

struct StepEnd;

/// What Policy::kv_footprint projects for: one sequence of `context` input tokens (its prompt,
/// plus every follow-up turn's appended tokens) that generates at most `gen` tokens, prefilled
/// in steps of at most `prefill_chunk` tokens, in a cache of `num_layers` × `num_kv_heads` heads
/// with `page_size` tokens per page.
struct FootprintQuery {
  int64_t context = 0;          ///< input tokens (> 0)
  int64_t gen = 0;              ///< generated tokens at most (≥ 0)
  int64_t prefill_chunk = 512;  ///< tokens per prefill step at most (> 0)
  int page_size = 16;           ///< tokens per page (> 0)
  int num_layers = 0;           ///< layers (> 0)
  int num_kv_heads = 0;         ///< kv heads per layer (> 0)

  /// The query's page counting (engine/kv/page_geometry.h: pages_for_tokens, pages_for_sequence).
  /// Counts only: it has no head_dim or dtype, so its bytes_per_page is not a page's bytes (those
  /// are the backend's, kv_page_geometry in engine/backend/backend.h).
  KvPageGeometry page_counts() const {
    KvPageGeometry g;
    g.num_layers = num_layers;
    g.num_kv_heads = num_kv_heads;
    g.page_tokens = page_size;
    return g;
  }
};

/// A policy's projection of what one sequence holds in the paged KV cache (pages of
/// KVCache::page_bytes each, summed over its (layer, kv head) page lists): at its peak, and at
/// its steady state — the most it holds at any point from the end of its prompt on, inside a
/// step included (a decode step appends before it compresses). The engine's admission by pages
/// reserves `peak_pages` for a sequence that is still prefilling and `steady_pages` for one that
/// is decoding (Engine, docs/architecture.md#memory-aware-batching); `kvbench bench --memory`
/// sizes its batch with it. An upper bound, exact for the scheduled policies' per-head budgets.
struct KvFootprint {
  int64_t peak_pages = 0;              ///< pages at the sequence's peak
  int64_t steady_pages = 0;            ///< pages at most once its prompt has been prefilled
  int64_t peak_tokens_per_head = 0;    ///< tokens of the largest head at the peak
  int64_t steady_tokens_per_head = 0;  ///< tokens of the largest head from the prompt's end on
  std::string rule;                    ///< how it was worked out, for plans and messages
};

/// The footprint of a sequence whose every (layer, kv head) holds at most `peak_tokens` tokens
/// (`steady_tokens` from the prompt's end on): pages = layers · kv heads · ⌈tokens / page_size⌉.
KvFootprint per_head_footprint(const FootprintQuery& q, int64_t peak_tokens, int64_t steady_tokens, std::string rule);
/// The full cache's footprint: every head holds context + gen tokens at the end.
KvFootprint full_cache_footprint(const FootprintQuery& q, std::string rule = "full cache: context + gen");
/// The footprint of policy `name` whose heads (AdaKV) or layers (PyramidKV, CAKE) share the budget
/// unevenly, so one head may hold more than budget + buffer: the full cache (an upper bound).
KvFootprint uneven_budget_footprint(const FootprintQuery& q, const std::string& name);

/// Base class of every policy. One instance per (model, run); it may keep per-sequence state
/// keyed by SeqId (release it in on_sequence_end).
class Policy {
 public:
  virtual ~Policy() = default;
  /// Registry name ("full", "snapkv", ...).
  virtual std::string name() const = 0;
  /// Fully resolved parameters (every default filled in) — written into every result row.
  virtual nlohmann::json resolved_params() const = 0;
  /// Signals to compute for this policy (fixed for the policy's life).
  virtual PolicyNeeds needs() const = 0;
  /// Called after layer `step.layer` of a forward step; may call step.keep(h, ...).
  virtual void on_layer_step(LayerStep& step) = 0;
  /// Called once after the LAST layer of every forward step, after the keep-sets requested in
  /// on_layer_step have been applied; may request keep-sets for any (layer, kv_head) (global
  /// budgets across heads and layers: TRIM-KV's DynamicBudget variant, WG-KV's global-cache
  /// SnapKV eviction). The engine applies StepEnd::keeps with KVCache::compact.
  virtual void on_step_end(StepEnd& step) {}
  /// Called by the engine after the step that ends a prompt when PolicyNeeds::scoring_pass is set:
  /// returns the token ids of each scoring pass to run (empty: none). Each pass runs as one
  /// prefill step of its own at positions request.seq_len … (LayerStep::scoring_pass = its index),
  /// and every head is truncated back to its length before it (KVCache::truncate_from) before the
  /// next pass. Then on_scoring_passes_end is called.
  virtual std::vector<std::vector<int32_t>> scoring_passes(const ScoringPassRequest& request) { return {}; }
  /// Called once the passes of scoring_passes have run and been rolled back (the cache holds the
  /// prompt again, StepEnd::seq_len is its end); may request keep-sets as on_step_end, which the
  /// engine applies through the backend.
  virtual void on_scoring_passes_end(StepEnd& step) {}
  /// Called by the engine (PolicyNeeds::restore_pass) after the passes of scoring_passes have run
  /// and been rolled back, before on_scoring_passes_end, with the same request: the restore pass
  /// to run (RestorePass; n = 0: none). Its rows stay in the cache, so on_scoring_passes_end then
  /// sees StepEnd::seq_len = request.seq_len + n. Not called when scoring_passes asked for none.
  virtual RestorePass restore_pass(const ScoringPassRequest& request) { return {}; }
  /// Called before the attention of every (sequence, layer) of a decode step when
  /// PolicyNeeds::read_select is set; may fill step.spans (see ReadStep). Must not change the
  /// cache. Prefill steps attend densely and do not call it.
  virtual void select_reads(ReadStep& step) {}
  /// Called when a sequence starts, before its first forward step, with the sampling seed of its
  /// request (GenerationRequest::seed; 0 for Engine::score). Stochastic policies derive their
  /// per-sample randomness from it (ForesightKV's eviction noise), so the samples of one example
  /// are independent draws and the same seed reproduces a sample.
  virtual void on_sequence_begin(SeqId seq, uint64_t sample_seed) {}
  /// Called when a sequence finishes (free per-sequence state).
  virtual void on_sequence_end(SeqId seq) {}
  /// The pages one sequence of `q` holds at its peak and at its steady state (KvFootprint).
  /// Default: the full cache (context + gen tokens in every head), an upper bound for any policy;
  /// the scheduled policies give their budget + buffer schedule (ScheduledPolicy). Throws
  /// kvb::Error for a query with a non-positive context, chunk, page size or shape.
  virtual KvFootprint kv_footprint(const FootprintQuery& q) const { return full_cache_footprint(q); }
  /// True when what this policy keeps or reads depends on its token budget (PolicySpec::budget):
  /// built at two budgets it behaves differently. False for the full cache and for policies whose
  /// keep-sets a ratio or a score threshold decides (budget_kind=ratio|threshold), or that read no
  /// budget at all. ResolvedPolicy::uses_budget (the grid's one cell per budget) asks this.
  virtual bool uses_budget() const { return false; }
};

/// Base of a policy that drives other policies (ComposedPolicy in scheduled.cpp, the device check's
/// ShadowPolicy in tools/cuda_check): the begin and the end of every sequence reach each of them,
/// in the order given to forward_sequences_to.
class CompositePolicy : public Policy {
 public:
  void on_sequence_begin(SeqId seq, uint64_t sample_seed) override {
    for (Policy* p : inner_) p->on_sequence_begin(seq, sample_seed);
  }
  void on_sequence_end(SeqId seq) override {
    for (Policy* p : inner_) p->on_sequence_end(seq);
  }

 protected:
  /// The policies the sequences' begin and end are forwarded to, in order. Not owned: the derived
  /// class owns them for its whole life.
  void forward_sequences_to(std::vector<Policy*> inner) { inner_ = std::move(inner); }

 private:
  std::vector<Policy*> inner_;
};

/// What a policy sees after the last layer of one forward step (Policy::on_step_end).
struct StepEnd {
  KVCache* cache = nullptr;
  SeqId seq = 0;
  int num_layers = 0, num_kv_heads = 0;
  int n_new = 0;              ///< tokens appended in this step
  int64_t seq_len = 0;        ///< tokens processed so far in this sequence (= next position)
  bool prefill = false;       ///< this step is (part of) the prompt
  bool prefill_last = false;  ///< this step ends the prompt
  int scoring_pass = -1;      ///< as LayerStep::scoring_pass
  /// Requests that head (layer, h) keep exactly `keep_set` (strictly increasing indices).
  void keep(int layer, int h, std::vector<int32_t> keep_set) { keeps.push_back({layer, h, std::move(keep_set)}); }
  struct Keep {
    int layer, head;
    std::vector<int32_t> indices;
  };
  std::vector<Keep> keeps;  ///< filled by the policy
};

/// Description of one policy parameter, for `kvbench policies`.
struct PolicyParamInfo {
  std::string key, default_value, help;
};

/// A policy that needs learned weights (TRIM-KV, WG-KV, ForesightKV, LocRet, SeerAttention-R,
/// DuoAttention): which parameter names the checkpoint, which one asks for RANDOM test weights
/// instead, and how to name them in messages. The registry entry adds both parameters to the
/// policy's table (weights_params, params.h). `kvbench run` fills a missing checkpoint from
/// known_checkpoints() (checkpoints.h) for the model, else falls back to random weights with a
/// loud warning (docs/policies.md#released-checkpoints).
struct LearnedWeightsInfo {
  std::string file_param;    ///< "gates" / "scorer" / "heads"
  std::string random_param;  ///< "random_gates" / "random_scorer" / "random_heads"
  std::string what;          ///< "gates" / "scorer weights" (plural noun phrase for messages)
  std::string paper;         ///< "TRIM-KV"
  /// What `file_param` takes, for its help line: "a Hub id (org/name), a directory, or a .pt file".
  std::string where;
};

/// What registry-wide tests and the device check (`kvb_cuda_check`) need to build and run a policy
/// without knowing its name, so that a new policy is covered by them without editing them
/// (docs/policies.md#adding-a-policy). tests/policies/test_policy_registry.cpp checks every field
/// against the policy itself.
struct PolicyTestInfo {
  /// The smallest token budget (`--budget`, tokens per (layer, kv_head)) the policy accepts with
  /// its default parameters plus `params`; one less is refused with an error naming the budget.
  /// 0: the policy takes no token budget (full, wgkv's admission gate, duoattention's spans).
  int64_t min_budget = 0;
  /// Parameters, as spec text "key=value,...", that let the policy build and run with no file:
  /// RANDOM weights for learned policies (LearnedWeightsInfo::random_param), a random head
  /// pattern; "" when the defaults run as they are.
  std::string params{};
  /// True when it cannot run without weights or a pattern the user supplies (then `params` names
  /// the random stand-in).
  bool needs_weights = false;
  /// True when it evicts tokens; false when the whole cache is kept (full; quest and seerattn_r
  /// choose what a decode step reads instead).
  bool evicts = true;
  /// True when it also evicts while decoding; false when it compresses only while prefilling a
  /// long prompt (locret's chunked prefill), so a short-prompt decode test sees no eviction.
  bool decode_evicts = true;
  /// True when it needs the two-pass trace of `kvbench fidelity` (oracle: the future's attention);
  /// Engine::generate and Engine::score alone do not provide it.
  bool needs_trace = false;
  /// True when its result depends on the sample seed (stochastic eviction: random, foresightkv's
  /// default `sample=true`); such runs are compared seed for seed.
  bool stochastic = false;
};

/// Registry entry: name, one-line description with source, parameters, learned weights, what
/// tests need, factory.
struct PolicyInfo {
  std::string name;
  std::string description;
  std::vector<PolicyParamInfo> params;
  /// Set when the policy cannot run without learned weights (see LearnedWeightsInfo).
  std::optional<LearnedWeightsInfo> learned;
  /// Builds the policy from a spec; throws kvb::Error naming the parameter on unknown keys or
  /// bad values.
  std::function<std::unique_ptr<Policy>(const PolicySpec&)> make;
  /// What registry-wide tests and the device check need (see PolicyTestInfo).
  PolicyTestInfo tests;

  /// This entry with `t` as its test information (chained on policy_entry(...) in the policy's file).
  PolicyInfo with_tests(PolicyTestInfo t) && {
    tests = std::move(t);
    return std::move(*this);
  }
  /// The spec registry-wide tests build: the name, PolicyTestInfo::params, and `extra` ("k=v,..."
  /// appended; a key given twice is an error), at `budget` (PolicySpec::parse's errors).
  PolicySpec test_spec(int64_t budget, const std::string& extra = "") const;
  /// The budget a test that wants `want` tokens uses: 0 for a policy that takes no budget
  /// (PolicyTestInfo::min_budget == 0), else at least PolicyTestInfo::min_budget.
  int64_t test_budget(int64_t want) const {
    return tests.min_budget == 0 ? 0 : (want > tests.min_budget ? want : tests.min_budget);
  }
};

/// All registered policies, in a fixed order.
const std::vector<PolicyInfo>& policy_registry();
/// Builds a policy from its spec. Throws kvb::Error("unknown policy 'x' (known: ...)").
std::unique_ptr<Policy> make_policy(const PolicySpec& spec);

}  // namespace kvb
