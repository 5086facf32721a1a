// kvb::Engine — generation on top of a model, a paged KV cache, a policy and a backend:
// continuous batching of decode steps, chunked batched prefill, sampling, stop rules and
// per-sequence measurements (docs/architecture.md, Engine / Sampling and scheduling). Which
// sequences run each step is decided by the Scheduler (engine/scheduler/scheduler.h; Admission
// and ScheduleStats are declared there).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/policies/policy.h"
#include "engine/sampling/sampler.h"
#include "engine/scheduler/scheduler.h"
#include "engine/chat/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvb {

/// Engine-wide settings.
struct EngineOptions {
  std::string backend =
      "cpu";  ///< cpu | cpu-bf16 | cuda (backend_registry(), engine/backend/backend.h; cuda needs a KVB_CUDA build)
  int prefill_chunk = 512;  ///< prompt tokens per sequence per forward step
  /// Sequences running at once at most (continuous batching); 0 = no count limit (then the page
  /// pool, max_kv_pages, bounds the batch and must be set).
  int max_batch = 8;
  int page_size = 16;        ///< KV page size in tokens
  int64_t max_kv_pages = 0;  ///< page-pool limit (0 = unbounded): admission by pages and preemption
  /// The page pool as bytes (`--memory GIB` · 2^30, kv_pool_bytes_of_gib): max_kv_pages becomes
  /// ⌊bytes / page bytes⌋ with the page priced as the backend stores it (kv_page_geometry,
  /// engine/backend/backend.h: f32 K/V, positions and the policy's scalars on the CPU; bf16 K/V
  /// and positions on CUDA). 0 = not set; setting both this and max_kv_pages is an error.
  int64_t kv_pool_bytes = 0;
  /// Prompt tokens per forward step over all prefilling sequences (Sarathi-Serve's token budget;
  /// vLLM's max_num_batched_tokens, less the decode tokens); 0 = no limit beyond prefill_chunk per
  /// sequence. Whole chunks only (so ≥ prefill_chunk, else the Engine throws kvb::Error). A step
  /// always carries the running sequences' decode tokens as well.
  int64_t max_step_tokens = 0;
  Admission admission = Admission::kReserve;  ///< used when max_kv_pages > 0
  /// The token ids of KVzip's repeat prompts and the chat template's pieces, for a policy that
  /// asks for scoring passes (PolicyNeeds::scoring_pass; docs/architecture.md#scoring-passes).
  /// The commands fill it with kvzip_scoring_prompts from the model's tokenizer and chat
  /// template; left empty (library use without a tokenizer) a pass holds only the policy's own
  /// tokens.
  ScoringPrompts scoring_prompts;
};

/// KVzip's scoring-pass pieces for a model, built as kvpress 0.5.5 KVzipPress builds them
/// (kvpress/presses/kvzip_press.py, __call__ and prepare; all encoded without special tokens):
/// `repeat` = "\n\nRepeat the previous context exactly.", `repeat_part` = "\n\nRepeat the part of
/// the previous context exactly, starting with"; with a chat template, the template rendered for
/// one user message "dummy context\n#############" with the generation prompt (enable_thinking
/// false) and split at "\n#############": `suffix` = the ids of what follows, `prefix` = the number
/// of ids of what precedes "dummy context"; without one (`chat` null), suffix = "\n" and prefix 0.
/// Throws what the template's render throws (kvb::Error naming the template).
ScoringPrompts kvzip_scoring_prompts(const tok::Tokenizer& tok, const chat::ChatTemplate* chat);

/// Checks the options that need no model: --prefill-chunk > 0, --batch >= 0, --max-step-tokens
/// 0 or at least --prefill-chunk. The Engine constructor calls it; `kvbench run` calls it before
/// its results database is opened, so a run it refuses leaves no run row. Throws kvb::Error
/// naming the option.
void check_engine_options(const EngineOptions& opts);

/// A follow-up turn of a multi-turn request (SCBench's shared-context protocol,
/// docs/benchmarks.md, SCBench): once the previous turn has finished, the KV of the tokens
/// generated in it is dropped (KVCache::truncate_from; the model's own output is not part of
/// the history), `append` is prefilled at the positions that follow the previous turn's input,
/// and generation resumes. Whatever the policy evicted so far stays evicted: the compressed
/// cache is what the next turn reuses.
struct FollowupTurn {
  std::vector<int32_t> append;  ///< token ids: previous gold answer + next user message (+ assistant header)
  int max_new_tokens = 256;
  std::vector<std::string> stop_strings;  ///< this turn's stop strings (the request's stop_ids apply too)
};

/// One generation request.
struct GenerationRequest {
  std::vector<int32_t> prompt;  ///< token ids (BOS included if the model wants it)
  SamplingParams sampling;
  int max_new_tokens = 256;
  std::vector<int32_t> stop_ids;          ///< EOS ids; generation stops after emitting one
  std::vector<std::string> stop_strings;  ///< needs a tokenizer; text is cut before the match
  uint64_t seed = 0;                      ///< RNG seed of this sample (one RNG across all turns)
  std::vector<FollowupTurn> followups;    ///< further turns on the same sequence (empty: single turn)
  /// Query-agnostic compression: when 0 < context_tokens < prompt.size(), the first
  /// context_tokens prompt tokens (the shared context: document, chat history) are prefilled as
  /// a prompt of their own — the policy sees the end of a prompt there and compresses — before
  /// the rest (the query) is prefilled on the compressed cache (SCBench's / TRIM-KV's LongMemEval
  /// protocol: the context is compressed before the query arrives). 0: one prompt.
  size_t context_tokens = 0;
};

/// Why a generation ended.
enum class FinishReason { kEos, kStopString, kLength, kContext };
const char* finish_reason_name(FinishReason r);

/// Output and measurements of one request. Times in seconds, sizes in bytes.
struct GenerationResult {
  std::vector<int32_t> tokens;  ///< generated ids (an EOS that ended generation is included)
  std::string text;             ///< decoded (special tokens skipped; cut at a stop string)
  FinishReason finish = FinishReason::kLength;
  int64_t prompt_tokens = 0;
  /// prefill_s: wall seconds of the prefill steps this sequence took part in (a step batched with
  /// other sequences counts whole for each); decode_s: likewise for its decode steps (from
  /// forward to sampling; other sequences' prefill steps in between do not count); ttft: from
  /// the request's start (admission) to its first sampled token.
  double prefill_s = 0, decode_s = 0, ttft_s = 0;
  /// This sequence's share of its decode steps' wall time: each step's seconds divided by the
  /// sequences it decoded. Summed over the requests of a generate() call it is the decode wall
  /// time, so Σ tokens / Σ decode_share_s is the aggregate decode throughput.
  double decode_share_s = 0;
  double policy_s = 0;  ///< time in policy code (share of this sequence's steps)
  int64_t evictions = 0;
  /// Page bytes (KVCache::page_bytes) of this sequence: its high-water mark (KVCache::peak_bytes:
  /// counted at allocation, a step's compressions taking effect at the step's end, so under
  /// compress=prompt_end it is at least the prompt's full-cache bytes, whatever the prefill
  /// chunk), and what it holds when the request ends.
  size_t kv_bytes_peak = 0, kv_bytes_final = 0;
  /// The steady footprint: the most page bytes the sequence holds at the end of any step from the
  /// end of the turn's input on (the last prefill step, after its prompt-end compression, and
  /// every decode step, after its compression): budget + buffer per head, page-rounded, for a
  /// policy that compresses while decoding (docs/results.md, kv_bytes_steady).
  size_t kv_bytes_steady = 0;
  /// Realised KV tokens per (layer, kv_head), measured at the end of the same steps as
  /// kv_bytes_steady (from the end of the turn's input on): `kv_tokens_mean` is the mean over those
  /// steps of the tokens held per head (the sequence's tokens over all heads / (layers × kv_heads)),
  /// `kv_tokens_peak` the most tokens any one head held, `kv_token_steps` the number of steps.
  /// With budget_kind=threshold, whose budget is not fixed, they are the budget the policy
  /// realised (docs/results.md, kv_tokens_mean / kv_tokens_peak).
  double kv_tokens_mean = 0;
  int64_t kv_tokens_peak = 0;
  int64_t kv_token_steps = 0;
  size_t kv_token_bytes_peak = 0;  ///< K+V bytes of held tokens (no page rounding)
  /// K+V bytes the attention of this sequence's decode steps read, summed over the steps, layers
  /// and kv heads (ForwardStats::kv_read_tokens × KVCache::kv_bytes_per_token: f32 rows, as
  /// kv_token_bytes_peak), and the number of decode steps; their ratio is the bytes read per
  /// decode step. A policy that holds N tokens in a head reads N; Quest reads its selected pages.
  int64_t kv_read_bytes = 0;
  int64_t decode_steps = 0;
  /// Σ over this sequence's decode steps of the number of sequences each decoded (the realised
  /// batch it ran in: decode_batch_sum / decode_steps is its mean).
  int64_t decode_batch_sum = 0;
  /// Times this request was preempted (its pages freed when the pool ran short, then recomputed
  /// from its prompt and the tokens it had generated: vLLM's recompute preemption). The result is
  /// the one an unpreempted run gives; prefill_s and decode_s include the recomputation.
  int64_t preemptions = 0;
  /// Results of GenerationRequest::followups, in order (each with its own tokens, text, finish,
  /// prompt_tokens = its appended tokens, times, and the KV bytes at its end; kv_bytes_peak is
  /// the sequence's peak so far). A turn the context could not hold finishes kContext, and the
  /// turns after it are returned empty with finish kContext. Empty for single-turn requests.
  std::vector<GenerationResult> followups;
};

/// Called for each generated token (request index, token id), in generation order per request.
using TokenCallback = std::function<void(size_t, int32_t)>;
/// Called once when a request has finished (every turn), with its index; its result in the
/// vector generate() returns is then final and may be read (the caller may store it while the
/// other requests run). It must not call into the Engine; an exception it throws ends generate()
/// (the engine then holds the unfinished sequences until it is destroyed).
using FinishedCallback = std::function<void(size_t)>;

/// Generation engine for one model and one policy. Not thread-safe.
class Engine {
 public:
  /// `policy` may be null (= full cache). Throws kvb::Error for an unknown backend.
  Engine(std::shared_ptr<const Model> model, EngineOptions opts, std::unique_ptr<Policy> policy);
  ~Engine();

  /// Generates for every request with continuous batching: requests are admitted in order, up to
  /// max_batch at once and, with a page pool (max_kv_pages), while their projected pages fit
  /// (EngineOptions::admission). Every forward step carries one decode token of each running
  /// sequence plus prompt chunks of the sequences still prefilling (chunked prefill interleaved
  /// with decode, at most max_step_tokens prompt tokens). When the pool cannot hold a step, the
  /// most recently admitted sequence is preempted and recomputed later. generate() samples each
  /// sequence's tokens (each with its own RNG) and applies its stop rules and turns. Because
  /// every kernel gives a row the same bits whatever shares its step, results do not depend on
  /// the batch, the step composition or preemption. `tok` is needed for stop strings and result
  /// text (may be null: text stays empty). Throws kvb::Error for an empty prompt or turn, stop
  /// strings without a tokenizer, a prompt longer than the model's context, max_batch 0 without a
  /// page pool, a pool that cannot hold one sequence's next step (runtime), and what forward()
  /// throws.
  std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& reqs, const tok::Tokenizer* tok,
                                         const TokenCallback& cb = {}, const FinishedCallback& on_finished = {});
  /// generate() writing into `out` (sized and filled by it), so that a FinishedCallback can read
  /// out[i] while the other requests run.
  void generate_into(const std::vector<GenerationRequest>& reqs, const tok::Tokenizer* tok,
                     std::vector<GenerationResult>& out, const TokenCallback& cb = {},
                     const FinishedCallback& on_finished = {});

  /// Teacher-forced scoring: runs `prompt` as a prefill, then feeds `forced` one token per decode
  /// step, returning the logits [forced.size() + 1, V] f32 predicted after the prompt and after
  /// each forced token. The policy is active throughout (used by tests and `kvbench fidelity`).
  /// Its steps are planned by the scheduler's plan_step (prefill chunks of at most prefill_chunk
  /// tokens, then one-token decode steps) and run by the step runner generate() uses, with the
  /// same KV-cache step bookkeeping
  /// and measurements: `stats` (may be null) gets them as generate() reports them (prompt_tokens,
  /// prefill / decode seconds of its steps, policy seconds, evictions, KV bytes, KV reads; no
  /// tokens or text). Throws kvb::Error for an empty prompt, and what forward() throws.
  std::vector<float> score(const std::vector<int32_t>& prompt, const std::vector<int32_t>& forced,
                           GenerationResult* stats = nullptr);

  /// What the scheduler did in the last generate() call (ScheduleStats).
  const ScheduleStats& schedule_stats() const { return stats_; }

  KVCache& cache() { return *cache_; }
  const Model& model() const { return *model_; }
  Policy* policy() { return policy_.get(); }
  /// The backend's device report (Backend::report(): device, memory, decode bandwidth); empty
  /// for the CPU backend.
  std::string backend_report() const;
  /// Called after every forward step with the cache (tests check per-head bounds here).
  std::function<void(const KVCache&, SeqId)> on_step;

 private:
  struct Impl;
  std::shared_ptr<const Model> model_;
  EngineOptions opts_;
  std::unique_ptr<Policy> policy_;
  std::unique_ptr<KVCache> cache_;
  std::unique_ptr<Impl> impl_;
  ScheduleStats stats_;
};

/// Peak RSS of this process in bytes: its own VmHWM, not the launcher's (engine/util/proc_status.h).
size_t peak_rss_bytes();

}  // namespace kvb
