#include "engine/scheduler/scheduler.h"

#include <algorithm>

#include "engine/util/error.h"

namespace kvb {

const char* admission_name(Admission a) { return a == Admission::kReserve ? "reserve" : "optimistic"; }

Admission parse_admission(const std::string& text) {
  if (text == "reserve") return Admission::kReserve;
  if (text == "optimistic") return Admission::kOptimistic;
  fail("--admission: expected reserve or optimistic, got '{}'", text);
}

int64_t StepPlan::prompt_tokens() const {
  int64_t n = 0;
  for (size_t i = 0; i < n_prefill && i < items.size(); ++i) n += items[i].n;
  return n;
}

int prefill_step_tokens(int64_t pos, int64_t end, int chunk, const PolicyNeeds& needs) {
  int64_t stop = std::min<int64_t>(end, pos + chunk);
  if (needs.prefill_chunk > 0) {
    const int64_t tail_start = end - needs.prefill_tail;
    if (pos < tail_start) {
      const int64_t next = (pos / needs.prefill_chunk + 1) * needs.prefill_chunk;
      stop = std::min({stop, next, tail_start});
    }
  }
  return static_cast<int>(stop - pos);
}

StepPlan plan_step(const std::vector<ScheduledSequence*>& prefill, const std::vector<ScheduledSequence*>& decode,
                   int prefill_chunk, int64_t max_prompt_tokens, const PolicyNeeds& needs) {
  StepPlan p;
  int64_t prompt_tokens = 0;
  for (ScheduledSequence* sp : prefill) {
    ScheduledSequence& s = *sp;
    if (s.done || !s.prefilling()) continue;
    const auto& in = *s.input;
    // The context of a query-agnostic request ends a prefill of its own (policy compresses).
    const size_t split = s.context_tokens;
    const size_t end = split > 0 && split < in.size() && s.prompt_done < split ? split : in.size();
    ForwardItem it;
    it.seq = s.seq;
    it.tokens = in.data() + s.prompt_done;
    const int64_t end_pos = s.pos + static_cast<int64_t>(end - s.prompt_done);
    it.n = prefill_step_tokens(s.pos, end_pos, prefill_chunk, needs);
    // Whole chunks only, so a sequence's chunk boundaries never depend on what shares its steps
    // (compress=chunked compresses at them); a chunk that does not fit waits for the next step.
    if (max_prompt_tokens > 0 && prompt_tokens > 0 && prompt_tokens + it.n > max_prompt_tokens) break;
    it.start_pos = s.pos;
    it.prompt_end = end_pos;
    it.prefill = true;
    it.prefill_last = s.prompt_done + it.n == end;
    it.want_logits = s.prompt_done + it.n == in.size();
    it.history = &s.history;
    prompt_tokens += it.n;
    p.items.push_back(it);
    p.owner.push_back(&s);
  }
  p.n_prefill = p.items.size();
  p.toks.resize(decode.size());
  for (size_t k = 0; k < decode.size(); ++k) {
    ScheduledSequence& s = *decode[k];
    p.toks[k] = s.next;
    ForwardItem it;
    it.seq = s.seq;
    it.n = 1;
    it.start_pos = s.pos;
    it.want_logits = true;
    it.history = &s.history;
    p.items.push_back(it);
    p.owner.push_back(&s);
  }
  // Pointers into p.toks once it no longer moves.
  for (size_t k = 0; k < decode.size(); ++k) p.items[p.n_prefill + k].tokens = &p.toks[k];
  return p;
}

Scheduler::Scheduler(SchedulerConfig cfg, KVCacheManager& kv, SequenceEvents& events, ScheduleStats& stats)
    : cfg_(std::move(cfg)), kv_(kv), events_(events), stats_(stats) {}

void Scheduler::add(ScheduledSequence& s) { waiting_.push_back(&s); }

bool Scheduler::has_unfinished() const {
  if (!waiting_.empty()) return true;
  return std::any_of(running_.begin(), running_.end(), [](const ScheduledSequence* s) { return !s->done; });
}

void Scheduler::finish(ScheduledSequence& s) {
  kv_.free(s.seq);
  s.done = true;
}

int64_t Scheduler::pages_needed(const StepPlan& p) const {
  int64_t need = 0;
  for (const ForwardItem& it : p.items) need += kv_.pages_to_grow(it.seq, it.n);
  return need;
}

// Pages `s` reserves under Admission::kReserve: its projected peak while it has input left, its
// steady state after.
int64_t Scheduler::reserved(const ScheduledSequence& s) const {
  const KvFootprint fp = s.footprint();
  return s.prefilling() ? fp.peak_pages : fp.steady_pages;
}

// True when waiting sequence `s` may start now beside the running sequences.
bool Scheduler::fits(const ScheduledSequence& s) const {
  const int64_t pool = kv_.num_pages();
  if (pool <= 0) return true;
  if (running_.empty()) return true;  // alone it runs; a step it cannot hold fails with a clear error
  const int64_t input = s.prompt_tokens() + s.recompute_tokens();
  if (cfg_.admission == Admission::kReserve) {
    int64_t used = 0;
    for (const ScheduledSequence* r : running_) used += reserved(*r);
    const int64_t need = std::max(s.footprint().peak_pages, kv_.pages_for_tokens(input));
    return used + need <= pool;
  }
  // Optimistic, multi-turn: a sequence past its first turn cannot be preempted (its later turns
  // are not recomputed), so one with turns to come is admitted only when its whole projected
  // footprint fits beside those of the other multi-turn sequences running. They then never
  // outgrow the pool together, and single-turn sequences (and first turns) stay preemptible to
  // make room for them: optimistic admission never dead-ends (issue 46, item 2).
  if (s.multi_turn()) {
    int64_t multi = 0;
    for (const ScheduledSequence* r : running_)
      if (r->multi_turn()) multi += r->footprint().peak_pages;
    if (multi + s.footprint().peak_pages > pool) return false;
  }
  // Optimistic: its input (and, after a preemption, what it had generated) fits in the free pool,
  // beside what the sequences still prefilling will add to reach their prompts' ends.
  int64_t ahead = 0;
  for (const ScheduledSequence* r : running_)
    if (r->prefilling())
      ahead += kv_.pages_for_tokens(r->pos + static_cast<int64_t>(r->input->size() - r->prompt_done)) -
               kv_.pages_for_tokens(r->pos);
  // Headroom: one more page in every head of every running sequence (their next growth), so that
  // an admission is not undone by the next decode step (vLLM's watermark plays this part).
  const int64_t headroom = static_cast<int64_t>(running_.size()) * kv_.pages_for_tokens(1);
  const int64_t need = kv_.pages_for_tokens(input + 1);
  return kv_.pages_in_use() + ahead + headroom + need <= pool;
}

// Admits waiting sequences in order while the count and the pool allow.
void Scheduler::admit() {
  while (!waiting_.empty()) {
    if (cfg_.max_batch > 0 && static_cast<int>(running_.size()) >= cfg_.max_batch) break;
    if (!fits(*waiting_.front())) break;
    ScheduledSequence& s = *waiting_.front();
    waiting_.pop_front();
    if (cfg_.max_context > 0 && s.prompt_tokens() > cfg_.max_context)
      fail("generate: prompt of {} tokens exceeds the model's context of {}", s.prompt_tokens(), cfg_.max_context);
    s.prompt_done = 0;
    s.pos = 0;
    s.next = -1;
    s.done = false;
    s.history = QueryHistory{};
    s.order = next_order_++;
    s.seq = kv_.add_sequence();
    events_.on_admitted(s);
    running_.push_back(&s);
    stats_.max_running = std::max(stats_.max_running, static_cast<int>(running_.size()));
  }
}

// The running sequences with input left (prompt chunks) and those with a token to decode, planned
// into one step. Without mixed steps (Backend::mixed_steps) prefill goes first, then decode.
StepPlan Scheduler::plan() const {
  std::vector<ScheduledSequence*> prefill, decode;
  for (ScheduledSequence* s : running_) {
    if (s->done) continue;
    if (s->prefilling()) prefill.push_back(s);
    else if (s->next >= 0) decode.push_back(s);
  }
  if (!prefill.empty() && !cfg_.mixed_steps) decode.clear();
  return plan_step(prefill, decode, cfg_.prefill_chunk, cfg_.max_step_tokens, cfg_.needs);
}

// Reserves the pages of every item of `p`; false (reserving nothing) when the pool cannot hold
// them all.
bool Scheduler::allocate(const StepPlan& p) {
  for (const ForwardItem& it : p.items)
    if (!kv_.allocate_slots(it.seq, it.n)) {
      kv_.release_slots();
      return false;
    }
  return true;
}

// Frees the newest preemptible running sequence and puts it back at the head of the queue; it
// is recomputed from its prompt and the tokens it had generated when it is admitted again
// (vLLM's recompute preemption). Throws kvb::Error when nothing else can be preempted.
void Scheduler::preempt_newest(const StepPlan& p) {
  ScheduledSequence* victim = nullptr;
  for (ScheduledSequence* s : running_)
    if (!s->done && s->preemptible() && (!victim || s->order > victim->order)) victim = s;
  if (!victim || running_.size() == 1) {
    const int64_t need = pages_needed(p);
    throw Error(fmt::format("generate: the KV page pool of {} pages cannot hold the next step ({} pages in use, {} "
                            "more needed) with {} sequence(s) running that can be preempted no further; give "
                            "more memory (--memory), or shorter prompts or --max-new-tokens",
                            kv_.num_pages(), kv_.pages_in_use(), need, running_.size()),
                ErrorKind::kRuntime);
  }
  ++stats_.preemptions;
  events_.on_preempted(*victim);
  kv_.free(victim->seq);
  victim->done = true;
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  waiting_.push_front(victim);
}

StepPlan Scheduler::schedule() {
  kv_.release_slots();
  running_.erase(std::remove_if(running_.begin(), running_.end(), [](const ScheduledSequence* s) { return s->done; }),
                 running_.end());
  admit();
  StepPlan p = plan();
  while (!allocate(p)) {
    preempt_newest(p);
    p = plan();
  }
  if (!p.empty()) {
    const size_t n_decode = p.items.size() - p.n_prefill;
    ++stats_.steps;
    if (n_decode > 0) {
      ++stats_.decode_steps;
      stats_.decoded_sequences += static_cast<int64_t>(n_decode);
      stats_.max_decode_batch = std::max(stats_.max_decode_batch, static_cast<int>(n_decode));
    }
  }
  return p;
}

}  // namespace kvb
