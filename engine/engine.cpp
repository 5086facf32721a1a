#include "engine/engine.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
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

struct Engine::Impl {
  std::unique_ptr<Backend> backend;
};

Engine::Engine(std::shared_ptr<const Model> model, EngineOptions opts, std::unique_ptr<Policy> policy)
    : model_(std::move(model)), opts_(opts), policy_(std::move(policy)), impl_(new Impl) {
  if (opts_.prefill_chunk <= 0) fail("--prefill-chunk must be > 0, got {}", opts_.prefill_chunk);
  if (opts_.max_batch <= 0) fail("--batch must be > 0, got {}", opts_.max_batch);
  KVCacheConfig kc = kv_cache_config(model_->config(), opts_.page_size);
  const PolicyNeeds needs = policy_ ? policy_->needs() : PolicyNeeds{};
  kc.num_scalars = needs.num_scalars;
  kc.max_pages = opts_.max_kv_pages;
  kc.payload = kv_payload_for(opts_.backend, needs);
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

// The engine's scheduler of forward steps, shared by Engine::generate and Engine::score. It runs
// the prefill steps (prompt chunks of at most --prefill-chunk tokens, batched across the sequences
// with input left) and the batched decode steps of a list of sequences, and keeps each step's
// bookkeeping in one place: the KV cache's step bracket (KVCache::begin_step / end_step, which the
// KV peak is measured by), the policy's sequence hooks, and every sequence's measurements (prefill
// and decode seconds, policy seconds, KV reads, KV peaks, Engine::on_step). What to do with the
// logits of a step — sample and apply stop rules, or keep them — is the caller's.
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

  // One prefill step over every sequence of `seqs` that is not done and has input left: the
  // next prefill_step_tokens of its input (a query-agnostic request's context ends a prompt of
  // its own). Each of them gets the step's seconds in prefill_s and its share of policy_s; then,
  // in order, `on_input_end(k, row)` for each sequence k whose input the step completed. Returns
  // false, running nothing, when no sequence has input left.
  bool prefill_step(const std::vector<SeqState*>& seqs, const StepRowFn& on_input_end) {
    std::vector<ForwardItem> items;
    std::vector<size_t> owners;
    for (size_t k = 0; k < seqs.size(); ++k) {
      SeqState& s = *seqs[k];
      if (s.done) continue;
      const auto& p = *s.input;
      if (s.prompt_done >= p.size()) continue;
      // The context of a query-agnostic request ends a prefill of its own (policy compresses).
      const size_t split = s.context_tokens;
      const size_t end = split > 0 && split < p.size() && s.prompt_done < split ? split : p.size();
      ForwardItem it;
      it.seq = s.seq;
      it.tokens = p.data() + s.prompt_done;
      const int64_t end_pos = s.pos + static_cast<int64_t>(end - s.prompt_done);
      it.n = prefill_step_tokens(s.pos, end_pos, prefill_chunk_, policy_ ? &needs_ : nullptr);
      it.start_pos = s.pos;
      it.prompt_end = end_pos;
      it.prefill = true;
      it.prefill_last = s.prompt_done + it.n == end;
      it.want_logits = s.prompt_done + it.n == p.size();
      it.history = &s.history;
      items.push_back(it);
      owners.push_back(k);
    }
    if (items.empty()) return false;
    const auto t0 = clock_t_::now();
    forward(items);
    const double dt = secs(t0, clock_t_::now());
    size_t li = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      SeqState& s = *seqs[owners[i]];
      s.prompt_done += items[i].n;
      s.pos += items[i].n;
      s.result->prefill_s += dt;
      s.result->policy_s += fs_.policy_s / items.size();
      after_step(s, items[i].want_logits);
      if (items[i].want_logits) on_input_end(owners[i], &logits_[li++ * vocab_]);
    }
    return true;
  }

  // One batched decode step over `seqs` (none done), each feeding its `next` token. With
  // `sample_on_device` the step's logits stay on the device (Backend::defer_logits) and it is
  // called right after the forward (the rows passed on are null). For each sequence in order:
  // its position advances, its share of policy_s, its KV reads and peaks are recorded, then
  // `on_token(k, row)`. The step's seconds (forward to the last on_token) go to decode_s and
  // decode_share_s of the results the sequences had when the step began.
  void decode_step(const std::vector<SeqState*>& seqs, const std::function<void()>& sample_on_device,
                   const StepRowFn& on_token) {
    std::vector<ForwardItem> items;
    std::vector<int32_t> toks(seqs.size());
    for (size_t k = 0; k < seqs.size(); ++k) {
      SeqState& s = *seqs[k];
      toks[k] = s.next;
      ForwardItem it;
      it.seq = s.seq;
      it.tokens = &toks[k];
      it.n = 1;
      it.start_pos = s.pos;
      it.history = &s.history;
      items.push_back(it);
    }
    // The results this step's time goes to (on_token may move a sequence on to its next turn).
    std::vector<GenerationResult*> step_results;
    for (const SeqState* s : seqs) step_results.push_back(s->result);
    const auto t_step = clock_t_::now();
    if (sample_on_device) {
      backend_.defer_logits();
      forward(items);
      sample_on_device();
    } else {
      forward(items);
    }
    for (size_t k = 0; k < seqs.size(); ++k) {
      SeqState& s = *seqs[k];
      s.pos += 1;
      s.result->policy_s += fs_.policy_s / seqs.size();
      count_reads(*s.result, fs_, k, cache_.kv_bytes_per_token());
      after_step(s, true);
      on_token(k, sample_on_device ? nullptr : &logits_[k * vocab_]);
    }
    const double dt = secs(t_step, clock_t_::now());
    for (GenerationResult* r : step_results) {
      r->decode_s += dt;
      r->decode_share_s += dt / static_cast<double>(step_results.size());
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
    if (after_input) r.kv_bytes_steady = std::max(r.kv_bytes_steady, cache_.bytes(s.seq));
    if (on_step_) on_step_(cache_, s.seq);
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

// One Engine::generate call: admits requests as sequences (at most max_batch at once), runs
// them through the step scheduler, samples their tokens and applies the stop rules and turns.
class Generation {
 public:
  Generation(const std::vector<GenerationRequest>& reqs, std::vector<GenerationResult>& out, const tok::Tokenizer* tok,
             const TokenCallback& cb, StepScheduler& sched, Backend& backend, int max_batch, int64_t max_ctx, int vocab)
      : reqs_(reqs),
        out_(out),
        tok_(tok),
        cb_(cb),
        sched_(sched),
        backend_(backend),
        max_batch_(max_batch),
        max_ctx_(max_ctx),
        V_(vocab) {
    for (size_t i = 0; i < reqs.size(); ++i) pending_.push_back(i);
  }

  // Generates until every request has finished.
  void run() {
    while (!pending_.empty() || !active_.empty()) {
      admit();
      // Prefill every sequence with input left (new sequences, and sequences entering their next
      // turn), chunked and batched across those sequences.
      const std::vector<SeqState*> seqs = active_states();
      while (sched_.prefill_step(seqs, [&](size_t k, const float* row) { first_token(*active_[k], row); })) {
      }
      remove_done();
      if (active_.empty()) continue;
      decode();
      remove_done();
    }
  }

 private:
  struct Active : SeqState {
    size_t req = 0;
    size_t turn = 0;        // 0: the request's prompt; k: followups[k - 1]
    int64_t gen_start = 0;  // position of the current turn's first generated token
    Rng rng{0};
    clock_t_::time_point t0, t_first;
  };

  // The current turn's cap and stop strings of a sequence.
  int cap_of(const Active& a) const {
    return a.turn == 0 ? reqs_[a.req].max_new_tokens : reqs_[a.req].followups[a.turn - 1].max_new_tokens;
  }
  const std::vector<std::string>& stops_of(const Active& a) const {
    return a.turn == 0 ? reqs_[a.req].stop_strings : reqs_[a.req].followups[a.turn - 1].stop_strings;
  }
  std::vector<SeqState*> active_states() const {
    std::vector<SeqState*> v;
    for (const auto& up : active_) v.push_back(up.get());
    return v;
  }
  void remove_done() {
    active_.erase(std::remove_if(active_.begin(), active_.end(), [](const auto& a) { return a->done; }), active_.end());
  }

  // Admits new sequences.
  void admit() {
    while (!pending_.empty() && static_cast<int>(active_.size()) < max_batch_) {
      auto a = std::make_unique<Active>();
      a->req = pending_.front();
      pending_.pop_front();
      const GenerationRequest& q = reqs_[a->req];
      a->input = &q.prompt;
      a->context_tokens = q.context_tokens;
      a->result = &out_[a->req];
      sched_.begin_sequence(*a, q.seed);
      a->rng = Rng(q.seed);
      a->t0 = clock_t_::now();
      if (static_cast<int64_t>(q.prompt.size()) > max_ctx_)
        fail("generate: prompt of {} tokens exceeds the model's context of {}", q.prompt.size(), max_ctx_);
      active_.push_back(std::move(a));
    }
  }

  // The prefill step that completed a's turn input gave `row` [V]: samples the turn's first token.
  void first_token(Active& a, const float* row) {
    const int32_t t = sample_token(row, V_, reqs_[a.req].sampling, a.rng, scratch_);
    a.gen_start = a.pos;
    a.t_first = clock_t_::now();
    a.result->ttft_s = secs(a.t0, a.t_first);
    accept(a, t);
  }

  // One batched decode step over every active sequence.
  void decode() {
    // Device sampling when the backend supports every row's parameters (CUDA: no [B, V] logits
    // copy); one uniform draw per non-greedy row from the sequence's own RNG.
    bool on_device = true;
    for (const auto& up : active_) on_device = on_device && backend_.device_sampling(reqs_[up->req].sampling);
    std::vector<int32_t> sampled;
    auto sample_rows = [&] {
      std::vector<SamplingParams> sp(active_.size());
      std::vector<float> u(active_.size(), 0.0f);
      for (size_t k = 0; k < active_.size(); ++k) {
        sp[k] = reqs_[active_[k]->req].sampling;
        if (!sp[k].greedy()) u[k] = std::min(static_cast<float>(active_[k]->rng.uniform()), 0.99999994f);
      }
      sampled = backend_.sample_rows(sp, u);
    };
    sched_.decode_step(
        active_states(), on_device ? std::function<void()>(sample_rows) : nullptr, [&](size_t k, const float* row) {
          Active& a = *active_[k];
          accept(a, on_device ? sampled[k] : sample_token(row, V_, reqs_[a.req].sampling, a.rng, scratch_));
        });
  }

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
  }

  const std::vector<GenerationRequest>& reqs_;
  std::vector<GenerationResult>& out_;
  const tok::Tokenizer* tok_;
  const TokenCallback& cb_;
  StepScheduler& sched_;
  Backend& backend_;
  const int max_batch_;
  const int64_t max_ctx_;
  const int V_;
  std::deque<size_t> pending_;
  std::vector<std::unique_ptr<Active>> active_;
  std::vector<std::pair<float, int32_t>> scratch_;
};
}  // namespace

std::vector<GenerationResult> Engine::generate(const std::vector<GenerationRequest>& reqs, const tok::Tokenizer* tok,
                                               const TokenCallback& cb) {
  std::vector<GenerationResult> out = results_for(reqs, tok);
  const int V = static_cast<int>(model_->config().vocab_size);
  StepScheduler sched(*cache_, *impl_->backend, policy_.get(), opts_.prefill_chunk, V, on_step);
  Generation(reqs, out, tok, cb, sched, *impl_->backend, opts_.max_batch, model_->config().max_position_embeddings, V).run();
  return out;
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
  auto keep = [&](size_t, const float* row) {
    all.insert(all.end(), row, row + V);
    if (fed < forced.size()) s.next = forced[fed++];
    else s.done = true;
  };
  const std::vector<SeqState*> seqs{&s};
  while (sched.prefill_step(seqs, keep)) {
  }
  while (!s.done) sched.decode_step(seqs, nullptr, keep);
  sched.record_kv(s, r);
  sched.end_sequence(s);
  if (stats) *stats = r;
  return all;
}

}  // namespace kvb
