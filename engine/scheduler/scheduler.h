// kvb::Scheduler — decides, before every forward step, which sequences run and how many tokens
// each feeds: admission of waiting sequences (by count, --batch, and by pages of the KV pool,
// --memory, under reserve or optimistic admission), the step plan (prompt chunks of at most
// --prefill-chunk tokens each and --max-step-tokens in all, plus one decode token of each
// decoding sequence), and recompute preemption when the pool cannot hold the step (vLLM's
// Scheduler.schedule). It reads the pool only through a KVCacheManager and the sequences only
// through ScheduledSequence, so it runs without a model (tests/scheduler). What runs the step,
// samples and applies stop rules and turns is the engine's (engine/engine.cpp: StepRunner,
// Generation); docs/architecture.md, "The scheduler".
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/policies/policy.h"
#include "engine/scheduler/kv_cache_manager.h"
#include "engine/scheduler/step.h"

namespace kvb {

/// How a waiting request is admitted when the page pool is bounded (EngineOptions::max_kv_pages).
enum class Admission {
  /// A sequence reserves what its policy projects it will ever hold (Policy::kv_footprint: its
  /// peak while it prefills, its steady state once its prompt is done); a waiting sequence is
  /// admitted when its peak fits beside every running sequence's reservation. Preemption then
  /// happens only where a projection falls short.
  kReserve,
  /// vLLM's rule: a waiting sequence is admitted when its prompt's pages fit in the free pool now;
  /// a running sequence that outgrows the pool preempts the most recently admitted one.
  kOptimistic,
};
/// "reserve" | "optimistic".
const char* admission_name(Admission a);
/// Parses "reserve" | "optimistic"; throws kvb::Error naming `--admission` otherwise.
Admission parse_admission(const std::string& text);

/// What the scheduler did in one Engine::generate call (the batch a cell really ran at).
struct ScheduleStats {
  int64_t steps = 0;              ///< forward steps
  int64_t decode_steps = 0;       ///< steps that decoded at least one sequence
  int64_t decoded_sequences = 0;  ///< Σ over decode steps of the sequences decoded in it
  int max_decode_batch = 0;       ///< most sequences decoded in one step
  int max_running = 0;            ///< most sequences admitted at once
  int64_t preemptions = 0;        ///< sequences preempted (freed and recomputed later)
  int64_t peak_pages = 0;         ///< most pages in use in the pool at once
  /// Mean sequences per decode step (decoded_sequences / decode_steps; 0 without decode steps).
  double mean_decode_batch() const {
    return decode_steps > 0 ? static_cast<double>(decoded_sequences) / static_cast<double>(decode_steps) : 0.0;
  }
};

/// A sequence as the scheduler sees it: where it is in the KV cache, the input it prefills, and
/// the token it decodes next. The owner (the engine's Generation, or a test) derives from it,
/// sets `input` (and `context_tokens`) when it is admitted (SequenceEvents::on_admitted), sets
/// `next` after each step, and answers the admission questions (the virtual functions).
struct ScheduledSequence {
  virtual ~ScheduledSequence() = default;

  SeqId seq = 0;                                ///< its sequence in the KV cache while it runs
  int64_t pos = 0;                              ///< tokens in the sequence so far
  const std::vector<int32_t>* input = nullptr;  ///< the current turn's input: the prompt or a turn's append
  size_t prompt_done = 0;                       ///< tokens of *input already prefilled
  /// First turn of a query-agnostic request: GenerationRequest::context_tokens (the context ends a
  /// prefill of its own); 0 otherwise.
  size_t context_tokens = 0;
  QueryHistory history;  ///< the backend's query ring of this sequence
  int32_t next = -1;     ///< the next decode step's input token: sampled (or forced), not yet fed; -1 none
  bool done = false;     ///< finished or preempted: it takes part in no further step
  int64_t order = -1;    ///< admission order, set by the Scheduler (the newest is preempted first)

  /// True while it has input left to prefill.
  bool prefilling() const { return input && prompt_done < input->size(); }
  /// Tokens its first admission prefills (the request's prompt). Default: the input's size.
  virtual int64_t prompt_tokens() const { return input ? static_cast<int64_t>(input->size()) : 0; }
  /// Tokens it had generated that a recomputation after a preemption feeds again (0 before its
  /// first admission).
  virtual int64_t recompute_tokens() const { return 0; }
  /// True when it may be preempted (a multi-turn sequence past its first turn may not: its later
  /// turns are not recomputed).
  virtual bool preemptible() const { return true; }
  /// True when it has turns to come after the first (optimistic admission reserves their
  /// footprint).
  virtual bool multi_turn() const { return false; }
  /// What it projects to hold over all its turns (Policy::kv_footprint), in pages. Asked only
  /// under a bounded pool.
  virtual KvFootprint footprint() const { return {}; }
};

/// What the scheduler tells the sequences' owner when it admits or preempts one.
class SequenceEvents {
 public:
  virtual ~SequenceEvents() = default;
  /// `s` was just admitted: its cache sequence `s.seq` exists (empty) and its step state is reset
  /// (pos, prompt_done, next, done, history). The owner sets `s.input` (and context_tokens) here.
  virtual void on_admitted(ScheduledSequence& s) = 0;
  /// `s` is being preempted: its pages are freed right after this returns and it goes back to
  /// the head of the waiting queue, to be recomputed when it is admitted again.
  virtual void on_preempted(ScheduledSequence& s) = 0;
};

/// Limits and rules of the scheduler (EngineOptions; the policy's prompt chunking).
struct SchedulerConfig {
  /// Sequences running at once at most (--batch); 0 = no count limit (the pool bounds the batch).
  int max_batch = 8;
  int prefill_chunk = 512;      ///< prompt tokens per sequence per step at most (--prefill-chunk, > 0)
  int64_t max_step_tokens = 0;  ///< prompt tokens per step over all sequences (--max-step-tokens); 0 = no limit
  Admission admission = Admission::kReserve;  ///< used when the pool is bounded
  /// True when one step may carry prompt chunks and decode tokens together (Backend::mixed_steps);
  /// false: prefill steps and decode steps run apart.
  bool mixed_steps = true;
  /// Tokens of the model's context; a prompt longer than it is refused at admission. 0 = no limit.
  int64_t max_context = 0;
  /// The policy's own prompt chunking (PolicyNeeds::prefill_chunk, prefill_tail); default: none.
  PolicyNeeds needs;
};

/// One planned forward step: prompt chunks of the prefilling sequences, then one decode token of
/// each decoding sequence. Move-only: the decode items point into `toks`, which a move keeps in
/// place and a copy would not.
struct StepPlan {
  StepPlan() = default;
  StepPlan(StepPlan&&) = default;             ///< keeps the items' pointers valid
  StepPlan& operator=(StepPlan&&) = default;  ///< keeps the items' pointers valid
  StepPlan(const StepPlan&) = delete;
  StepPlan& operator=(const StepPlan&) = delete;
  std::vector<ForwardItem> items;         ///< the step's items, in order
  std::vector<ScheduledSequence*> owner;  ///< items[i]'s sequence
  size_t n_prefill = 0;                   ///< items [0, n_prefill) are prompt chunks, the rest decode tokens
  std::vector<int32_t> toks;              ///< the decode items' input tokens (items point into it)
  /// True when the step carries nothing.
  bool empty() const { return items.empty(); }
  /// Prompt tokens the step carries (Σ n over its prompt chunks).
  int64_t prompt_tokens() const;
};

/// Tokens of the next prefill step of a prompt at absolute position `pos` that ends at `end`:
/// at most `chunk` (--prefill-chunk), and never across a boundary of the policy's own prompt
/// chunking (PolicyNeeds::prefill_chunk / prefill_tail: LocRet), so that a policy that evicts at
/// its chunk boundaries sees the same steps whatever --prefill-chunk is.
int prefill_step_tokens(int64_t pos, int64_t end, int chunk, const PolicyNeeds& needs);

/// Plans one step: for each sequence of `prefill` that is not done and has input left, in order,
/// the next prefill_step_tokens of its input (a query-agnostic request's context ends a prompt of
/// its own), while the step's prompt tokens stay within `max_prompt_tokens` (0 = no limit; whole
/// chunks only: a chunk that does not fit waits for the next step, the first always runs); then
/// one decode item per sequence of `decode`, feeding its `next` token. The plan points into the
/// sequences (input, history) and must not outlive them.
StepPlan plan_step(const std::vector<ScheduledSequence*>& prefill, const std::vector<ScheduledSequence*>& decode,
                   int prefill_chunk, int64_t max_prompt_tokens, const PolicyNeeds& needs = {});

/// The scheduler of one Engine::generate call (or of a test). Sequences are added to a waiting
/// queue in request order; schedule() admits, plans and preempts, and returns the next step.
/// Holds references to the manager, the events and the stats, which must outlive it. Not
/// thread-safe.
class Scheduler {
 public:
  /// Adds what it does to `stats` (the caller resets it); throws nothing.
  Scheduler(SchedulerConfig cfg, KVCacheManager& kv, SequenceEvents& events, ScheduleStats& stats);

  /// Queues `s` (not yet admitted) behind the waiting sequences. The scheduler does not own it.
  void add(ScheduledSequence& s);
  /// True while a sequence waits or runs unfinished.
  bool has_unfinished() const;
  /// Plans the next step: drops the finished sequences, admits waiting ones in order while the
  /// count (max_batch) and the pool allow (admission rule), plans the step (plan_step), and while
  /// the pool cannot hold its new pages (KVCacheManager::allocate_slots) preempts the most
  /// recently admitted preemptible sequence and plans again. The returned plan's pages stay
  /// reserved until the next call; it is empty only when nothing runs. Counts the step in the
  /// stats when it is not empty. Throws kvb::Error for a prompt longer than max_context, and
  /// (ErrorKind::kRuntime) when the pool cannot hold the next step of the sequences that can be
  /// preempted no further.
  StepPlan schedule();
  /// Ends `s` (finished): marks it done and frees its pages through the manager. It leaves the
  /// running list at the next schedule().
  void finish(ScheduledSequence& s);

  /// The running sequences, in admission order (finished ones until the next schedule()).
  const std::vector<ScheduledSequence*>& running() const { return running_; }
  /// The waiting sequences, in the order they will be admitted.
  const std::deque<ScheduledSequence*>& waiting() const { return waiting_; }
  /// Pages the pool must have free for `p` to run (Σ KVCacheManager::pages_to_grow of its items).
  int64_t pages_needed(const StepPlan& p) const;

 private:
  bool fits(const ScheduledSequence& s) const;
  int64_t reserved(const ScheduledSequence& s) const;
  void admit();
  StepPlan plan() const;
  bool allocate(const StepPlan& p);
  void preempt_newest(const StepPlan& p);

  SchedulerConfig cfg_;
  KVCacheManager& kv_;
  SequenceEvents& events_;
  ScheduleStats& stats_;
  std::deque<ScheduledSequence*> waiting_;
  std::vector<ScheduledSequence*> running_;
  int64_t next_order_ = 0;
};

}  // namespace kvb
