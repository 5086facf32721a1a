#include "engine/engine.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <span>

#include "engine/backend/backend.h"
#include "engine/util/proc_status.h"
#include "engine/util/error.h"

namespace kvb {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kEos: return "eos";
    case FinishReason::kStopString: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kContext: return "context";
  }
  return "?";
}

std::optional<size_t> parse_vm_hwm(std::string_view status) {
  static constexpr std::string_view kKey = "VmHWM:";
  auto skip_blanks = [](std::string_view v) {
    const size_t at = v.find_first_not_of(" \t");
    return at == std::string_view::npos ? std::string_view() : v.substr(at);
  };
  for (size_t at = 0; at < status.size();) {
    size_t end = status.find('\n', at);
    if (end == std::string_view::npos) end = status.size();
    const std::string_view line = status.substr(at, end - at);
    at = end + 1;
    if (line.substr(0, kKey.size()) != kKey) continue;
    std::string_view rest = skip_blanks(line.substr(kKey.size()));
    size_t kib = 0, n = 0;
    for (; n < rest.size() && rest[n] >= '0' && rest[n] <= '9'; ++n) {
      if (kib > (SIZE_MAX / 1024 - 9) / 10) return std::nullopt;  // more bytes than size_t counts
      kib = kib * 10 + static_cast<size_t>(rest[n] - '0');
    }
    rest = skip_blanks(rest.substr(n));
    if (n == 0 || rest.substr(0, 2) != "kB" || !skip_blanks(rest.substr(2)).empty()) return std::nullopt;
    return kib * 1024;
  }
  return std::nullopt;
}

size_t peak_rss_bytes() {
  // VmHWM: the high-water mark of this process's own address space, which execve starts afresh.
  // ru_maxrss is not the process's own: Linux folds the replaced image's high-water mark into it
  // at execve, so a process started by a large parent (fork + exec) reports the parent's RSS.
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    std::string text;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    std::fclose(f);
    if (const std::optional<size_t> b = parse_vm_hwm(text)) return *b;
  }
  // No /proc (a container without it, a non-Linux system): ru_maxrss (KiB on Linux), which may
  // include the launching process's peak (docs/results.md, device_peak_bytes).
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<size_t>(ru.ru_maxrss) * 1024;
}

void check_engine_options(const EngineOptions& o) {
  if (o.prefill_chunk <= 0) fail("--prefill-chunk must be > 0, got {}", o.prefill_chunk);
  if (o.max_batch < 0) fail("--batch must be > 0, got {}", o.max_batch);
  if (o.max_step_tokens < 0) fail("--max-step-tokens must be >= 0, got {}", o.max_step_tokens);
  if (o.max_step_tokens > 0 && o.max_step_tokens < o.prefill_chunk)
    fail("--max-step-tokens {} is smaller than --prefill-chunk {}: a step must hold one prompt chunk",
         o.max_step_tokens, o.prefill_chunk);
}

struct Engine::Impl {
  std::unique_ptr<Backend> backend;
};

Engine::Engine(std::shared_ptr<const Model> model, EngineOptions opts, std::unique_ptr<Policy> policy)
    : model_(std::move(model)), opts_(opts), policy_(std::move(policy)), impl_(new Impl) {
  check_engine_options(opts_);
  KVCacheConfig kc = kv_cache_config(model_->config(), opts_.page_size);
  const PolicyNeeds needs = policy_ ? policy_->needs() : PolicyNeeds{};
  kc.num_scalars = needs.num_scalars;
  kc.max_pages = opts_.max_kv_pages;
  kc.payload = kv_payload_for(opts_.backend, needs);
  if (opts_.kv_pool_bytes < 0) fail("--memory must be > 0");
  if (opts_.kv_pool_bytes > 0) {
    if (opts_.max_kv_pages > 0) fail("give the KV page pool once: as bytes (--memory) or as pages, not both");
    // Priced at the backend's own page (f32 on the CPU, bf16 on CUDA): the pool every command's
    // --memory sizes (kv_page_geometry).
    const KvPageGeometry g = kv_page_geometry(opts_.backend, model_->config(), opts_.page_size, needs);
    const size_t page_bytes = g.bytes_per_page();
    opts_.max_kv_pages = g.pool_pages(opts_.kv_pool_bytes);
    if (opts_.max_kv_pages < 1) fail("--memory: {} bytes hold no KV page of {} bytes", opts_.kv_pool_bytes, page_bytes);
  }
  kc.max_pages = opts_.max_kv_pages;
  if (opts_.max_batch == 0 && opts_.max_kv_pages <= 0)
    fail("--batch: no count limit needs a page pool (--memory) to bound the batch");
  cache_ = std::make_unique<KVCache>(kc);
  impl_->backend = make_backend(opts_.backend, *model_, *cache_);
}

Engine::~Engine() = default;

std::string Engine::backend_report() const { return impl_->backend->report(); }

namespace {
using clock_t_ = std::chrono::steady_clock;
double secs(clock_t_::time_point a, clock_t_::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Adds decode item k's K/V rows read in the step `fs` reports to r (GenerationResult::kv_read_bytes).
void count_reads(GenerationResult& r, const ForwardStats& fs, size_t k, size_t bytes_per_token) {
  if (k >= fs.kv_read_tokens.size()) fail("forward: the backend reported no KV reads for item {}", k);
  r.kv_read_bytes += fs.kv_read_tokens[k] * static_cast<int64_t>(bytes_per_token);
  ++r.decode_steps;
}

// Tokens of the next prefill step of a prompt at absolute position `pos` that ends at `end`:
// at most `chunk` (--prefill-chunk), and never across a boundary of the policy's own prompt
// chunking (PolicyNeeds::prefill_chunk / prefill_tail: LocRet), so that a policy that evicts at
// its chunk boundaries sees the same steps whatever --prefill-chunk is.
int prefill_step_tokens(int64_t pos, int64_t end, int chunk, const PolicyNeeds* needs) {
  int64_t stop = std::min<int64_t>(end, pos + chunk);
  if (needs && needs->prefill_chunk > 0) {
    const int64_t tail_start = end - needs->prefill_tail;
    if (pos < tail_start) {
      const int64_t next = (pos / needs->prefill_chunk + 1) * needs->prefill_chunk;
      stop = std::min({stop, next, tail_start});
    }
  }
  return static_cast<int>(stop - pos);
}

// Forgets the recorded queries of positions >= pos: the newest entries of each layer's ring
// (used when a turn's generated tokens are dropped).
void forget_queries_from(QueryHistory& h, int64_t pos) {
  const int w = h.window;
  if (w <= 0) return;
  for (size_t l = 0; l < h.count.size() && l < h.head.size() && l < h.pos.size(); ++l) {
    if (h.pos[l].size() < static_cast<size_t>(w)) continue;
    while (h.count[l] > 0) {
      const int last = (h.head[l] - 1 + w) % w;
      if (h.pos[l][last] < pos) break;
      h.head[l] = last;
      --h.count[l];
    }
  }
}

// A sequence as the step scheduler runs it: its place in the cache, the input it prefills and
// the result its steps are measured into.
struct SeqState {
  SeqId seq = 0;
  int64_t pos = 0;                              // tokens in the sequence so far
  const std::vector<int32_t>* input = nullptr;  // the current turn's input: the prompt or a turn's append
  size_t prompt_done = 0;                       // tokens of *input already prefilled
  // First turn of a query-agnostic request: GenerationRequest::context_tokens (the context ends a
  // prefill of its own); 0 otherwise.
  size_t context_tokens = 0;
  QueryHistory history;
  int32_t next = -1;                   // the next decode step's input: sampled (or forced), not yet fed
  bool done = false;                   // finished: it takes part in no further step
  GenerationResult* result = nullptr;  // the result of the current turn (times, KV measurements)
};

// Receives sequence k of a step's list after the step, with its logits row [V] f32: the
// prediction after its last token (nullptr when the step's logits stayed on the device).
using StepRowFn = std::function<void(size_t k, const float* row)>;

// One planned forward step: prompt chunks of the prefilling sequences, then one decode token of
// each decoding sequence (StepScheduler::plan).
struct StepPlan {
  std::vector<ForwardItem> items;
  std::vector<SeqState*> owner;  // items[i]'s sequence
  size_t n_prefill = 0;          // items [0, n_prefill) are prompt chunks, the rest decode tokens
  std::vector<int32_t> toks;     // the decode items' input tokens
  bool empty() const { return items.empty(); }
};

// The engine's scheduler of forward steps, shared by Engine::generate and Engine::score. It plans
// and runs steps that carry prompt chunks of the sequences with input left (at most
// --prefill-chunk tokens each, and at most max_prompt_tokens in all) together with one decode
// token of each decoding sequence, and keeps each step's bookkeeping in one place: the KV
// cache's step bracket (KVCache::begin_step / end_step, which the KV peak is measured by), the
// policy's sequence hooks, and every sequence's measurements (prefill and decode seconds, policy
// seconds, KV reads, KV peaks, Engine::on_step). What to do with the logits of a step — sample
// and apply stop rules, or keep them — is the caller's.
class StepScheduler {
 public:
  StepScheduler(KVCache& cache, Backend& backend, Policy* policy, int prefill_chunk, int vocab,
                const std::function<void(const KVCache&, SeqId)>& on_step)
      : cache_(cache),
        backend_(backend),
        policy_(policy),
        needs_(policy ? policy->needs() : PolicyNeeds{}),
        prefill_chunk_(prefill_chunk),
        vocab_(vocab),
        on_step_(on_step) {}

  // Adds a sequence for `s` to the cache and starts it in the policy with `seed`.
  void begin_sequence(SeqState& s, uint64_t seed) {
    s.seq = cache_.add_sequence();
    if (policy_) policy_->on_sequence_begin(s.seq, seed);
  }
  // Writes the KV measurements of s's sequence as they are now (the end of a turn) into `r`:
  // bytes held, peak bytes, evictions.
  void record_kv(const SeqState& s, GenerationResult& r) const {
    r.kv_bytes_final = cache_.bytes(s.seq);
    r.kv_bytes_peak = cache_.peak_bytes(s.seq);
    r.evictions = cache_.evictions(s.seq);
  }
  // Drops the KV (and the recorded queries) of s's positions >= pos; s continues at `pos`.
  void truncate(SeqState& s, int64_t pos) {
    cache_.truncate_from(s.seq, static_cast<int32_t>(pos));
    forget_queries_from(s.history, pos);
    s.pos = pos;
  }
  // Ends s's sequence in the policy, removes it from the cache and marks `s` done.
  void end_sequence(SeqState& s) {
    if (policy_) policy_->on_sequence_end(s.seq);
    cache_.remove_sequence(s.seq);
    s.done = true;
  }

  // Plans one step: for each sequence of `prefill` that is not done and has input left, in order,
  // the next prefill_step_tokens of its input (a query-agnostic request's context ends a prompt of
  // its own), while the step's prompt tokens stay within `max_prompt_tokens` (0 = no limit; a
  // chunk that does not fit waits for the next step, the first always runs); then one decode item
  // per sequence of `decode`, feeding its `next` token.
  StepPlan plan(const std::vector<SeqState*>& prefill, const std::vector<SeqState*>& decode,
                int64_t max_prompt_tokens) const {
    StepPlan p;
    int64_t prompt_tokens = 0;
    for (SeqState* sp : prefill) {
      SeqState& s = *sp;
      if (s.done) continue;
      const auto& in = *s.input;
      if (s.prompt_done >= in.size()) continue;
      // The context of a query-agnostic request ends a prefill of its own (policy compresses).
      const size_t split = s.context_tokens;
      const size_t end = split > 0 && split < in.size() && s.prompt_done < split ? split : in.size();
      ForwardItem it;
      it.seq = s.seq;
      it.tokens = in.data() + s.prompt_done;
      const int64_t end_pos = s.pos + static_cast<int64_t>(end - s.prompt_done);
      it.n = prefill_step_tokens(s.pos, end_pos, prefill_chunk_, policy_ ? &needs_ : nullptr);
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
      SeqState& s = *decode[k];
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

  // Pages the pool must have free for `p` to run: every (layer, kv head) of every item grows to
  // ⌈(length + n) / page_size⌉ pages. An upper bound (a compression inside the step frees pages
  // the later layers may reuse).
  int64_t pages_needed(const StepPlan& p) const {
    const KVCacheConfig& c = cache_.config();
    int64_t need = 0;
    for (const ForwardItem& it : p.items)
      for (int l = 0; l < c.num_layers; ++l)
        for (int h = 0; h < c.num_kv_heads; ++h) {
          const int64_t len = cache_.length(it.seq, l, h);
          const int64_t have = static_cast<int64_t>(cache_.pages(it.seq, l, h).size());
          need += std::max<int64_t>(0, (len + it.n + c.page_size - 1) / c.page_size - have);
        }
    return need;
  }

  // Runs planned step `p`. With `sample_on_device` the step's logits stay on the device
  // (Backend::defer_logits) and it is called right after the forward (the rows passed on are
  // null). Then, in item order: each prompt chunk's sequence advances, gets the step's seconds in
  // prefill_s and its share of policy_s, and `on_row(s, row)` when the chunk completed its input;
  // each decoded sequence advances, gets its share of policy_s, its KV reads and peaks, then
  // `on_row(s, row)`. The step's seconds (forward to the last on_row) go to decode_s and
  // decode_share_s of the results the decoded sequences had when the step began.
  void run(StepPlan& p, const std::function<void()>& sample_on_device,
           const std::function<void(SeqState&, const float*)>& on_row) {
    if (p.items.empty()) return;
    const size_t n_decode = p.items.size() - p.n_prefill;
    // The results this step's time goes to (on_row may move a sequence on to its next turn).
    std::vector<GenerationResult*> prefill_results, decode_results;
    for (size_t i = 0; i < p.items.size(); ++i)
      (i < p.n_prefill ? prefill_results : decode_results).push_back(p.owner[i]->result);
    const auto t0 = clock_t_::now();
    if (sample_on_device) {
      backend_.defer_logits();
      forward(p.items);
      sample_on_device();
    } else {
      forward(p.items);
    }
    const double dt_forward = secs(t0, clock_t_::now());
    size_t li = 0;  // logits row
    for (size_t i = 0; i < p.items.size(); ++i) {
      SeqState& s = *p.owner[i];
      const ForwardItem& it = p.items[i];
      const float* row = nullptr;
      if (it.want_logits) {
        if (!sample_on_device) row = &logits_[li * vocab_];
        ++li;
      }
      s.result->policy_s += fs_.policy_s / static_cast<double>(p.items.size());
      if (i < p.n_prefill) {
        s.prompt_done += it.n;
        s.pos += it.n;
        s.result->prefill_s += dt_forward;
        after_step(s, it.want_logits);
        if (it.want_logits) on_row(s, row);
      } else {
        s.pos += 1;
        count_reads(*s.result, fs_, i, cache_.kv_bytes_per_token());
        s.result->decode_batch_sum += static_cast<int64_t>(n_decode);
        after_step(s, true);
        on_row(s, row);
      }
    }
    const double dt = secs(t0, clock_t_::now());
    for (GenerationResult* r : decode_results) {
      r->decode_s += dt;
      r->decode_share_s += dt / static_cast<double>(decode_results.size());
    }
  }

 private:
  // One forward step: its sequences' frees count toward their KV peak until it ends
  // (KVCache::begin_step / end_step).
  void forward(std::span<ForwardItem> items) {
    for (const auto& it : items) cache_.begin_step(it.seq);
    backend_.forward(items, policy_, logits_, &fs_);
    for (const auto& it : items) cache_.end_step(it.seq);
  }
  // After a step of `s` (its KV step already closed): token peak, steady footprint once the
  // turn's input is done (`after_input`), the on_step hook.
  void after_step(SeqState& s, bool after_input) {
    GenerationResult& r = *s.result;
    r.kv_token_bytes_peak = std::max(r.kv_token_bytes_peak, cache_.token_bytes(s.seq));
    if (after_input) {
      r.kv_bytes_steady = std::max(r.kv_bytes_steady, cache_.bytes(s.seq));
      count_tokens(r, s.seq);
    }
    if (on_step_) on_step_(cache_, s.seq);
  }

  // The realised tokens per head after a step (GenerationResult::kv_tokens_mean / _peak).
  void count_tokens(GenerationResult& r, SeqId seq) const {
    int64_t total = 0, most = 0;
    for (int l = 0; l < cache_.config().num_layers; ++l)
      for (int h = 0; h < cache_.config().num_kv_heads; ++h) {
        const int64_t n = cache_.length(seq, l, h);
        total += n;
        most = std::max(most, n);
      }
    const double heads = static_cast<double>(cache_.config().num_layers) * cache_.config().num_kv_heads;
    ++r.kv_token_steps;
    r.kv_tokens_mean += (static_cast<double>(total) / heads - r.kv_tokens_mean) / static_cast<double>(r.kv_token_steps);
    r.kv_tokens_peak = std::max(r.kv_tokens_peak, most);
  }

  KVCache& cache_;
  Backend& backend_;
  Policy* policy_;
  const PolicyNeeds needs_;
  const int prefill_chunk_;
  const size_t vocab_;
  const std::function<void(const KVCache&, SeqId)>& on_step_;
  std::vector<float> logits_;  // the last step's logits [rows, V]
  ForwardStats fs_;
};

// Checks `reqs` (non-empty prompts and turns; a tokenizer for stop strings) and returns their
// results, sized and with prompt_tokens set.
std::vector<GenerationResult> results_for(const std::vector<GenerationRequest>& reqs, const tok::Tokenizer* tok) {
  std::vector<GenerationResult> out(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].prompt.empty()) fail("generate: request {} has an empty prompt", i);
    bool stops = !reqs[i].stop_strings.empty();
    out[i].prompt_tokens = static_cast<int64_t>(reqs[i].prompt.size());
    out[i].followups.resize(reqs[i].followups.size());
    for (size_t t = 0; t < reqs[i].followups.size(); ++t) {
      if (reqs[i].followups[t].append.empty()) fail("generate: request {} turn {} has no tokens", i, t + 1);
      stops |= !reqs[i].followups[t].stop_strings.empty();
      out[i].followups[t].prompt_tokens = static_cast<int64_t>(reqs[i].followups[t].append.size());
    }
    if (stops && !tok) fail("generate: stop strings need a tokenizer");
  }
  return out;
}

// What Generation needs to admit by pages: the pool, the rule, and the policy's projection.
struct PagePool {
  int64_t max_pages = 0;  // 0: unbounded (admission by count only, no preemption)
  Admission admission = Admission::kReserve;
  const Policy* policy = nullptr;  // null: the full cache
  FootprintQuery shape;            // page size, layers, kv heads, prefill chunk (context, gen per request)
};

// One Engine::generate call: admits requests as sequences (by count and, with a page pool, by
// pages), runs them through the step scheduler in steps that interleave prompt chunks with decode
// tokens, preempts the newest sequence when the pool cannot hold a step, samples their tokens and
// applies the stop rules and turns.
class Generation {
 public:
  Generation(const std::vector<GenerationRequest>& reqs, std::vector<GenerationResult>& out, const tok::Tokenizer* tok,
             const TokenCallback& cb, const FinishedCallback& on_finished, StepScheduler& sched, Backend& backend,
             KVCache& cache, const EngineOptions& opts, PagePool pool, int64_t max_ctx, int vocab, ScheduleStats& stats)
      : reqs_(reqs),
        out_(out),
        tok_(tok),
        cb_(cb),
        on_finished_(on_finished),
        sched_(sched),
        backend_(backend),
        cache_(cache),
        max_batch_(opts.max_batch),
        max_step_tokens_(opts.max_step_tokens),
        pool_(pool),
        max_ctx_(max_ctx),
        V_(vocab),
        stats_(stats) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      auto a = std::make_unique<Active>();
      a->req = i;
      a->rng = Rng(reqs[i].seed);
      pending_.push_back(std::move(a));
    }
  }

  // Generates until every request has finished.
  void run() {
    while (!pending_.empty() || !active_.empty()) {
      admit();
      std::vector<SeqState*> prefill, decode;
      split(prefill, decode);
      StepPlan plan = sched_.plan(prefill, decode, max_step_tokens_);
      while (pool_.max_pages > 0 && cache_.pages_in_use() + sched_.pages_needed(plan) > pool_.max_pages) {
        preempt_newest(plan);
        split(prefill, decode);
        plan = sched_.plan(prefill, decode, max_step_tokens_);
      }
      if (plan.empty()) continue;  // everything running finished in the previous step
      const size_t n_decode = plan.items.size() - plan.n_prefill;
      ++stats_.steps;
      if (n_decode > 0) {
        ++stats_.decode_steps;
        stats_.decoded_sequences += static_cast<int64_t>(n_decode);
        stats_.max_decode_batch = std::max(stats_.max_decode_batch, static_cast<int>(n_decode));
      }
      step(plan);
      remove_done();
    }
    stats_.peak_pages = static_cast<int64_t>(cache_.peak_bytes_total() / cache_.page_bytes());
  }

 private:
  struct Active : SeqState {
    size_t req = 0;
    size_t turn = 0;        // 0: the request's prompt; k: followups[k - 1]
    int64_t gen_start = 0;  // position of the current turn's first generated token
    int64_t order = 0;      // admission order (the newest is preempted first)
    size_t replayed = 0;    // after a preemption: tokens of the first turn fed again so far
    Rng rng{0};
    clock_t_::time_point t0, t_first;
    bool started = false;  // admitted once (t0 set)
    // Tokens of the first turn generated so far: what a recomputation after a preemption feeds
    // again (0 before the first admission).
    size_t replay_tokens() const { return turn == 0 && result ? result->tokens.size() : 0; }
  };

  // The current turn's cap and stop strings of a sequence.
  int cap_of(const Active& a) const {
    return a.turn == 0 ? reqs_[a.req].max_new_tokens : reqs_[a.req].followups[a.turn - 1].max_new_tokens;
  }
  const std::vector<std::string>& stops_of(const Active& a) const {
    return a.turn == 0 ? reqs_[a.req].stop_strings : reqs_[a.req].followups[a.turn - 1].stop_strings;
  }
  void remove_done() {
    active_.erase(std::remove_if(active_.begin(), active_.end(), [](const auto& a) { return a->done; }), active_.end());
  }
  // The running sequences with input left (prompt chunks) and those with a token to decode. A
  // backend without mixed steps (Backend::mixed_steps) prefills first, then decodes.
  void split(std::vector<SeqState*>& prefill, std::vector<SeqState*>& decode) const {
    prefill.clear();
    decode.clear();
    for (const auto& a : active_) {
      if (a->done) continue;
      if (a->prompt_done < a->input->size()) prefill.push_back(a.get());
      else if (a->next >= 0) decode.push_back(a.get());
    }
    if (!prefill.empty() && !backend_.mixed_steps()) decode.clear();
  }

  // What request `req` projects to hold (Policy::kv_footprint over all its turns).
  KvFootprint footprint(size_t req) const {
    const GenerationRequest& q = reqs_[req];
    FootprintQuery f = pool_.shape;
    f.context = static_cast<int64_t>(q.prompt.size());
    f.gen = q.max_new_tokens;
    for (const auto& t : q.followups) {
      f.context += static_cast<int64_t>(t.append.size());
      f.gen += t.max_new_tokens;
    }
    return pool_.policy ? pool_.policy->kv_footprint(f) : full_cache_footprint(f);
  }
  // Pages a sequence of `tokens` tokens in every head holds (the recompute of a preempted one).
  int64_t pages_of(int64_t tokens) const {
    const FootprintQuery& f = pool_.shape;
    return static_cast<int64_t>(f.num_layers) * f.num_kv_heads * ((tokens + f.page_size - 1) / f.page_size);
  }
  // Pages `a` reserves under Admission::kReserve: its projected peak while it has input left, its
  // steady state after.
  int64_t reserved(const Active& a) const {
    const KvFootprint fp = footprint(a.req);
    return a.prompt_done < a.input->size() ? fp.peak_pages : fp.steady_pages;
  }
  // True when pending request `a` may start now beside the running sequences.
  bool fits(const Active& a) const {
    if (pool_.max_pages <= 0) return true;
    if (active_.empty()) return true;  // alone it runs; a step it cannot hold fails with a clear error
    if (pool_.admission == Admission::kReserve) {
      int64_t used = 0;
      for (const auto& r : active_) used += reserved(*r);
      const int64_t need = std::max(footprint(a.req).peak_pages,
                                    pages_of(static_cast<int64_t>(reqs_[a.req].prompt.size() + a.replay_tokens())));
      return used + need <= pool_.max_pages;
    }
    // Optimistic, multi-turn: a sequence past its first turn cannot be preempted (its later turns
    // are not recomputed), so one with turns to come is admitted only when its whole projected
    // footprint fits beside those of the other multi-turn sequences running. They then never
    // outgrow the pool together, and single-turn sequences (and first turns) stay preemptible to
    // make room for them: optimistic admission never dead-ends (issue 46, item 2).
    if (!reqs_[a.req].followups.empty()) {
      int64_t multi = 0;
      for (const auto& r : active_)
        if (!reqs_[r->req].followups.empty()) multi += footprint(r->req).peak_pages;
      if (multi + footprint(a.req).peak_pages > pool_.max_pages) return false;
    }
    // Optimistic: its input (and, after a preemption, what it had generated) fits in the free pool,
    // beside what the sequences still prefilling will add to reach their prompts' ends.
    int64_t ahead = 0;
    for (const auto& r : active_)
      if (r->prompt_done < r->input->size())
        ahead += pages_of(r->pos + static_cast<int64_t>(r->input->size() - r->prompt_done)) - pages_of(r->pos);
    // Headroom: one more page in every head of every running sequence (their next growth), so that
    // an admission is not undone by the next decode step (vLLM's watermark plays this part).
    const int64_t headroom = static_cast<int64_t>(active_.size()) * pages_of(1);
    const int64_t need = pages_of(static_cast<int64_t>(reqs_[a.req].prompt.size() + a.replay_tokens()) + 1);
    return cache_.pages_in_use() + ahead + headroom + need <= pool_.max_pages;
  }

  // Admits pending requests in order while the count and the pool allow.
  void admit() {
    while (!pending_.empty()) {
      if (max_batch_ > 0 && static_cast<int>(active_.size()) >= max_batch_) break;
      if (!fits(*pending_.front())) break;
      std::unique_ptr<Active> a = std::move(pending_.front());
      pending_.pop_front();
      const GenerationRequest& q = reqs_[a->req];
      if (static_cast<int64_t>(q.prompt.size()) > max_ctx_)
        fail("generate: prompt of {} tokens exceeds the model's context of {}", q.prompt.size(), max_ctx_);
      a->input = &q.prompt;
      a->context_tokens = q.context_tokens;
      a->result = &out_[a->req];
      a->prompt_done = 0;
      a->pos = 0;
      a->next = -1;
      a->done = false;
      a->history = QueryHistory{};
      a->order = next_order_++;
      sched_.begin_sequence(*a, q.seed);
      if (!a->started) {
        a->started = true;
        a->t0 = clock_t_::now();
      }
      active_.push_back(std::move(a));
      stats_.max_running = std::max(stats_.max_running, static_cast<int>(active_.size()));
    }
  }

  // Frees the newest preemptible running sequence and puts it back at the head of the queue; it
  // is recomputed from its prompt and the tokens it had generated when it is admitted again
  // (vLLM's recompute preemption). Throws kvb::Error when nothing else can be preempted.
  void preempt_newest(const StepPlan& plan) {
    Active* victim = nullptr;
    for (const auto& a : active_)
      if (!a->done && a->turn == 0 && (!victim || a->order > victim->order)) victim = a.get();
    if (!victim || active_.size() == 1) {
      const int64_t need = sched_.pages_needed(plan);
      throw Error(fmt::format("generate: the KV page pool of {} pages cannot hold the next step ({} pages in use, {} "
                              "more needed) with {} sequence(s) running that can be preempted no further; give "
                              "more memory (--memory), or shorter prompts or --max-new-tokens",
                              pool_.max_pages, cache_.pages_in_use(), need, active_.size()),
                  ErrorKind::kRuntime);
    }
    ++stats_.preemptions;
    GenerationResult& r = *victim->result;
    ++r.preemptions;
    // The recomputation measures the KV again from scratch (times keep accumulating).
    r.kv_bytes_peak = r.kv_bytes_final = r.kv_bytes_steady = r.kv_token_bytes_peak = 0;
    r.kv_read_bytes = r.decode_steps = r.decode_batch_sum = 0;
    r.evictions = 0;
    sched_.end_sequence(*victim);
    victim->replayed = 0;
    auto it = std::find_if(active_.begin(), active_.end(), [&](const auto& a) { return a.get() == victim; });
    std::unique_ptr<Active> moved = std::move(*it);
    active_.erase(it);
    pending_.push_front(std::move(moved));
  }

  // Runs planned step `plan`, then samples (or replays) each completed row's token.
  void step(StepPlan& plan) {
    // Device sampling when the backend supports every row's parameters (CUDA: no [B, V] logits
    // copy); one uniform draw per non-greedy row from the sequence's own RNG. A row that replays
    // a preempted sequence's token draws nothing.
    std::vector<Active*> rows;
    for (size_t i = 0; i < plan.items.size(); ++i)
      if (plan.items[i].want_logits) rows.push_back(static_cast<Active*>(plan.owner[i]));
    bool on_device = !rows.empty();
    for (const Active* a : rows) on_device = on_device && backend_.device_sampling(reqs_[a->req].sampling);
    std::vector<int32_t> sampled;
    std::map<const SeqState*, size_t> row_of;
    auto sample_rows = [&] {
      std::vector<SamplingParams> sp(rows.size());
      std::vector<float> u(rows.size(), 0.0f);
      for (size_t k = 0; k < rows.size(); ++k) {
        row_of[rows[k]] = k;
        if (replaying(*rows[k])) continue;  // greedy, no draw: the row is ignored
        sp[k] = reqs_[rows[k]->req].sampling;
        if (!sp[k].greedy()) u[k] = std::min(static_cast<float>(rows[k]->rng.uniform()), 0.99999994f);
      }
      sampled = backend_.sample_rows(sp, u);
    };
    sched_.run(plan, on_device ? std::function<void()>(sample_rows) : nullptr, [&](SeqState& s, const float* row) {
      Active& a = static_cast<Active&>(s);
      if (replaying(a)) {  // a recomputed sequence feeds its own tokens again: no draw, no callback
        if (a.replayed == 0) a.gen_start = a.pos;
        a.next = a.result->tokens[a.replayed++];
        return;
      }
      const int32_t t =
          on_device ? sampled[row_of.at(&s)] : sample_token(row, V_, reqs_[a.req].sampling, a.rng, scratch_);
      if (a.next < 0) {  // the turn's first token
        a.gen_start = a.pos;
        a.t_first = clock_t_::now();
        a.result->ttft_s = secs(a.t0, a.t_first);
      }
      accept(a, t);
    });
  }

  // True while a preempted sequence feeds again the tokens it had generated.
  static bool replaying(const Active& a) { return a.turn == 0 && a.replayed < a.replay_tokens(); }

  // True when the decoded tail of `tokens` contains one of `stop_strings` (stop strings may span
  // tokens).
  bool hits_stop_string(const std::vector<int32_t>& tokens, const std::vector<std::string>& stop_strings) const {
    size_t longest = 0;
    for (const auto& s : stop_strings) longest = std::max(longest, s.size());
    const size_t tail_tokens = std::min(tokens.size(), longest + 8);
    std::vector<int32_t> tail(tokens.end() - tail_tokens, tokens.end());
    const std::string text = tok_->decode(tail, true);
    for (const auto& s : stop_strings)
      if (!s.empty() && text.find(s) != std::string::npos) return true;
    return false;
  }

  // Accepts a sampled token for `a`: finishes the turn (and maybe the sequence) or queues it.
  void accept(Active& a, int32_t token) {
    GenerationResult& r = *a.result;
    const GenerationRequest& q = reqs_[a.req];
    r.tokens.push_back(token);
    if (a.turn == 0) a.replayed = r.tokens.size();
    if (cb_) cb_(a.req, token);
    if (std::find(q.stop_ids.begin(), q.stop_ids.end(), token) != q.stop_ids.end()) {
      finish(a, FinishReason::kEos);
      return;
    }
    const auto& stop_strings = stops_of(a);
    if (!stop_strings.empty() && hits_stop_string(r.tokens, stop_strings)) {
      finish(a, FinishReason::kStopString);
      return;
    }
    if (static_cast<int>(r.tokens.size()) >= cap_of(a)) {
      finish(a, FinishReason::kLength);
      return;
    }
    if (a.pos + 1 > max_ctx_) {
      finish(a, FinishReason::kContext);
      return;
    }
    a.next = token;
  }

  // Ends a's current turn with `why`: its KV measurements and text; then the next turn, or the
  // end of the sequence.
  void finish(Active& a, FinishReason why) {
    GenerationResult& r = *a.result;
    r.finish = why;
    sched_.record_kv(a, r);
    if (tok_) {
      r.text = tok_->decode(r.tokens, /*skip_special_tokens=*/true);
      if (why == FinishReason::kStopString) {
        size_t cut = std::string::npos;
        for (const auto& s : stops_of(a)) {
          size_t p = r.text.find(s);
          if (p != std::string::npos) cut = std::min(cut, p);
        }
        if (cut != std::string::npos) r.text.resize(cut);
      }
    }
    const auto& followups = reqs_[a.req].followups;
    if (a.turn < followups.size()) {
      const auto& next = followups[a.turn];
      if (why != FinishReason::kContext && a.gen_start + static_cast<int64_t>(next.append.size()) < max_ctx_) {
        // Next turn: drop the generated tokens' KV, then prefill the appended input after the
        // previous turn's input (see FollowupTurn).
        sched_.truncate(a, a.gen_start);
        ++a.turn;
        a.input = &next.append;
        a.context_tokens = 0;
        a.result = &out_[a.req].followups[a.turn - 1];
        a.prompt_done = 0;
        a.next = -1;
        a.t0 = clock_t_::now();
        a.t_first = {};
        return;
      }
      for (size_t t = a.turn; t < followups.size(); ++t) out_[a.req].followups[t].finish = FinishReason::kContext;
    }
    sched_.end_sequence(a);
    if (on_finished_) on_finished_(a.req);
  }

  const std::vector<GenerationRequest>& reqs_;
  std::vector<GenerationResult>& out_;
  const tok::Tokenizer* tok_;
  const TokenCallback& cb_;
  const FinishedCallback& on_finished_;
  StepScheduler& sched_;
  Backend& backend_;
  KVCache& cache_;
  const int max_batch_;
  const int64_t max_step_tokens_;
  const PagePool pool_;
  const int64_t max_ctx_;
  const int V_;
  ScheduleStats& stats_;
  std::deque<std::unique_ptr<Active>> pending_;
  std::vector<std::unique_ptr<Active>> active_;
  int64_t next_order_ = 0;
  std::vector<std::pair<float, int32_t>> scratch_;
};
}  // namespace

const char* admission_name(Admission a) { return a == Admission::kReserve ? "reserve" : "optimistic"; }

Admission parse_admission(const std::string& text) {
  if (text == "reserve") return Admission::kReserve;
  if (text == "optimistic") return Admission::kOptimistic;
  fail("--admission: expected reserve or optimistic, got '{}'", text);
}

std::vector<GenerationResult> Engine::generate(const std::vector<GenerationRequest>& reqs, const tok::Tokenizer* tok,
                                               const TokenCallback& cb, const FinishedCallback& on_finished) {
  std::vector<GenerationResult> out;
  generate_into(reqs, tok, out, cb, on_finished);
  return out;
}

void Engine::generate_into(const std::vector<GenerationRequest>& reqs, const tok::Tokenizer* tok,
                           std::vector<GenerationResult>& out, const TokenCallback& cb,
                           const FinishedCallback& on_finished) {
  out = results_for(reqs, tok);
  stats_ = ScheduleStats{};
  const int V = static_cast<int>(model_->config().vocab_size);
  StepScheduler sched(*cache_, *impl_->backend, policy_.get(), opts_.prefill_chunk, V, on_step);
  PagePool pool;
  pool.max_pages = opts_.max_kv_pages;
  pool.admission = opts_.admission;
  pool.policy = policy_.get();
  pool.shape.prefill_chunk = opts_.prefill_chunk;
  pool.shape.page_size = opts_.page_size;
  pool.shape.num_layers = cache_->config().num_layers;
  pool.shape.num_kv_heads = cache_->config().num_kv_heads;
  Generation(reqs, out, tok, cb, on_finished, sched, *impl_->backend, *cache_, opts_, pool,
             model_->config().max_position_embeddings, V, stats_)
      .run();
}

std::vector<float> Engine::score(const std::vector<int32_t>& prompt, const std::vector<int32_t>& forced,
                                 GenerationResult* stats) {
  if (prompt.empty()) fail("score: empty prompt");
  const int V = static_cast<int>(model_->config().vocab_size);
  StepScheduler sched(*cache_, *impl_->backend, policy_.get(), opts_.prefill_chunk, V, on_step);
  GenerationResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  SeqState s;
  s.input = &prompt;
  s.result = &r;
  sched.begin_sequence(s, 0);
  std::vector<float> all;
  size_t fed = 0;  // forced tokens fed so far
  // After the prompt and after each forced token: keep the logits row, feed the next forced token.
  auto keep = [&](SeqState&, const float* row) {
    all.insert(all.end(), row, row + V);
    if (fed < forced.size()) s.next = forced[fed++];
    else s.done = true;
  };
  const std::vector<SeqState*> seqs{&s};
  for (StepPlan p = sched.plan(seqs, {}, 0); !p.empty(); p = sched.plan(seqs, {}, 0)) sched.run(p, nullptr, keep);
  while (!s.done) {
    StepPlan p = sched.plan({}, seqs, 0);
    sched.run(p, nullptr, keep);
  }
  sched.record_kv(s, r);
  sched.end_sequence(s);
  if (stats) *stats = r;
  return all;
}

}  // namespace kvb
