#include "engine/engine.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <deque>

#include "engine/backend/backend.h"
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

size_t peak_rss_bytes() {
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

struct Active {
  size_t req = 0;
  SeqId seq = 0;
  int64_t pos = 0;         // tokens in the sequence so far
  size_t prompt_done = 0;  // tokens of the current turn's input already prefilled
  size_t turn = 0;         // 0: the request's prompt; k: followups[k - 1]
  int64_t gen_start = 0;   // position of the current turn's first generated token
  QueryHistory history;
  Rng rng{0};
  int32_t next = -1;  // sampled, not yet fed
  clock_t_::time_point t0, t_first;
  bool done = false;
};
}  // namespace

std::vector<GenerationResult> Engine::generate(const std::vector<GenerationRequest>& reqs, const tok::Tokenizer* tok,
                                               const TokenCallback& cb) {
  std::vector<GenerationResult> out(reqs.size());
  const int V = static_cast<int>(model_->config().vocab_size);
  const int64_t max_ctx = model_->config().max_position_embeddings;
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
  // The current turn's input, result, cap and stop strings of a sequence.
  auto input_of = [&](const Active& a) -> const std::vector<int32_t>& {
    return a.turn == 0 ? reqs[a.req].prompt : reqs[a.req].followups[a.turn - 1].append;
  };
  auto result_of = [&](const Active& a) -> GenerationResult& {
    return a.turn == 0 ? out[a.req] : out[a.req].followups[a.turn - 1];
  };
  auto cap_of = [&](const Active& a) {
    return a.turn == 0 ? reqs[a.req].max_new_tokens : reqs[a.req].followups[a.turn - 1].max_new_tokens;
  };
  auto stops_of = [&](const Active& a) -> const std::vector<std::string>& {
    return a.turn == 0 ? reqs[a.req].stop_strings : reqs[a.req].followups[a.turn - 1].stop_strings;
  };
  std::deque<size_t> pending;
  for (size_t i = 0; i < reqs.size(); ++i) pending.push_back(i);
  std::vector<std::unique_ptr<Active>> active;
  std::vector<float> logits;
  std::vector<std::pair<float, int32_t>> scratch;
  ForwardStats fs;
  const PolicyNeeds needs = policy_ ? policy_->needs() : PolicyNeeds{};
  const PolicyNeeds* needs_ptr = policy_ ? &needs : nullptr;

  auto finish = [&](Active& a, FinishReason why) {
    GenerationResult& r = result_of(a);
    r.finish = why;
    r.kv_bytes_final = cache_->bytes(a.seq);
    r.kv_bytes_peak = cache_->peak_bytes(a.seq);
    r.evictions = cache_->evictions(a.seq);
    if (tok) {
      r.text = tok->decode(r.tokens, /*skip_special_tokens=*/true);
      if (why == FinishReason::kStopString) {
        size_t cut = std::string::npos;
        for (const auto& s : stops_of(a)) {
          size_t p = r.text.find(s);
          if (p != std::string::npos) cut = std::min(cut, p);
        }
        if (cut != std::string::npos) r.text.resize(cut);
      }
    }
    const auto& followups = reqs[a.req].followups;
    if (a.turn < followups.size()) {
      const auto& next = followups[a.turn];
      if (why != FinishReason::kContext && a.gen_start + static_cast<int64_t>(next.append.size()) < max_ctx) {
        // Next turn: drop the generated tokens' KV, then prefill the appended input after the
        // previous turn's input (see FollowupTurn).
        cache_->truncate_from(a.seq, static_cast<int32_t>(a.gen_start));
        forget_queries_from(a.history, a.gen_start);
        a.pos = a.gen_start;
        ++a.turn;
        a.prompt_done = 0;
        a.next = -1;
        a.t0 = clock_t_::now();
        a.t_first = {};
        return;
      }
      for (size_t t = a.turn; t < followups.size(); ++t) out[a.req].followups[t].finish = FinishReason::kContext;
    }
    if (policy_) policy_->on_sequence_end(a.seq);
    cache_->remove_sequence(a.seq);
    a.done = true;
  };

  // Accepts a sampled token for `a`: finishes the turn (and maybe the sequence) or queues it.
  auto accept = [&](Active& a, int32_t token) {
    GenerationResult& r = result_of(a);
    const GenerationRequest& q = reqs[a.req];
    r.tokens.push_back(token);
    if (cb) cb(a.req, token);
    if (std::find(q.stop_ids.begin(), q.stop_ids.end(), token) != q.stop_ids.end()) {
      finish(a, FinishReason::kEos);
      return;
    }
    const auto& stop_strings = stops_of(a);
    if (!stop_strings.empty()) {
      // Check the tail of the decoded text (stop strings may span tokens).
      size_t longest = 0;
      for (const auto& s : stop_strings) longest = std::max(longest, s.size());
      const size_t tail_tokens = std::min(r.tokens.size(), longest + 8);
      std::vector<int32_t> tail(r.tokens.end() - tail_tokens, r.tokens.end());
      const std::string text = tok->decode(tail, true);
      for (const auto& s : stop_strings)
        if (!s.empty() && text.find(s) != std::string::npos) {
          finish(a, FinishReason::kStopString);
          return;
        }
    }
    if (static_cast<int>(r.tokens.size()) >= cap_of(a)) {
      finish(a, FinishReason::kLength);
      return;
    }
    if (a.pos + 1 > max_ctx) {
      finish(a, FinishReason::kContext);
      return;
    }
    a.next = token;
  };

  // After a step of `a` (its KV step already closed): token peak, steady footprint once the
  // turn's input is done (`after_input`), the on_step hook.
  auto track_peak = [&](Active& a, bool after_input) {
    GenerationResult& r = result_of(a);
    r.kv_token_bytes_peak = std::max(r.kv_token_bytes_peak, cache_->token_bytes(a.seq));
    if (after_input) r.kv_bytes_steady = std::max(r.kv_bytes_steady, cache_->bytes(a.seq));
    if (on_step) on_step(*cache_, a.seq);
  };
  // One forward step: its sequences' frees count toward their KV peak until it ends
  // (KVCache::begin_step / end_step).
  auto step = [&](std::span<ForwardItem> items) {
    for (const auto& it : items) cache_->begin_step(it.seq);
    impl_->backend->forward(items, policy_.get(), logits, &fs);
    for (const auto& it : items) cache_->end_step(it.seq);
  };

  while (!pending.empty() || !active.empty()) {
    // Admit new sequences.
    while (!pending.empty() && static_cast<int>(active.size()) < opts_.max_batch) {
      auto a = std::make_unique<Active>();
      a->req = pending.front();
      pending.pop_front();
      a->seq = cache_->add_sequence();
      if (policy_) policy_->on_sequence_begin(a->seq, reqs[a->req].seed);
      a->rng = Rng(reqs[a->req].seed);
      a->t0 = clock_t_::now();
      if (static_cast<int64_t>(reqs[a->req].prompt.size()) > max_ctx)
        fail("generate: prompt of {} tokens exceeds the model's context of {}", reqs[a->req].prompt.size(), max_ctx);
      active.push_back(std::move(a));
    }
    // Prefill every sequence with input left (new sequences, and sequences entering their next
    // turn), chunked and batched across those sequences.
    while (true) {
      std::vector<ForwardItem> items;
      std::vector<Active*> owners;
      for (auto& up : active) {
        Active* a = up.get();
        if (a->done) continue;
        const auto& p = input_of(*a);
        if (a->prompt_done >= p.size()) continue;
        // The context of a query-agnostic request ends a prefill of its own (policy compresses).
        const size_t split = reqs[a->req].context_tokens;
        const size_t end = a->turn == 0 && split > 0 && split < p.size() && a->prompt_done < split ? split : p.size();
        ForwardItem it;
        it.seq = a->seq;
        it.tokens = p.data() + a->prompt_done;
        const int64_t end_pos = a->pos + static_cast<int64_t>(end - a->prompt_done);
        it.n = prefill_step_tokens(a->pos, end_pos, opts_.prefill_chunk, needs_ptr);
        it.start_pos = a->pos;
        it.prompt_end = end_pos;
        it.prefill = true;
        it.prefill_last = a->prompt_done + it.n == end;
        it.want_logits = a->prompt_done + it.n == p.size();
        it.history = &a->history;
        items.push_back(it);
        owners.push_back(a);
      }
      if (items.empty()) break;
      const auto t0 = clock_t_::now();
      step(items);
      const double dt = secs(t0, clock_t_::now());
      size_t li = 0;
      for (size_t k = 0; k < items.size(); ++k) {
        Active* a = owners[k];
        a->prompt_done += items[k].n;
        a->pos += items[k].n;
        result_of(*a).prefill_s += dt;
        result_of(*a).policy_s += fs.policy_s / items.size();
        track_peak(*a, items[k].want_logits);
        if (items[k].want_logits) {
          const int32_t t = sample_token(&logits[li * V], V, reqs[a->req].sampling, a->rng, scratch);
          ++li;
          a->gen_start = a->pos;
          a->t_first = clock_t_::now();
          result_of(*a).ttft_s = secs(a->t0, a->t_first);
          accept(*a, t);
        }
      }
    }
    active.erase(std::remove_if(active.begin(), active.end(), [](const auto& a) { return a->done; }), active.end());
    if (active.empty()) continue;
    // One batched decode step over every active sequence.
    std::vector<ForwardItem> items;
    std::vector<int32_t> toks(active.size());
    for (size_t k = 0; k < active.size(); ++k) {
      Active& a = *active[k];
      toks[k] = a.next;
      ForwardItem it;
      it.seq = a.seq;
      it.tokens = &toks[k];
      it.n = 1;
      it.start_pos = a.pos;
      it.history = &a.history;
      items.push_back(it);
    }
    // Device sampling when the backend supports every row's parameters (CUDA: no [B, V] logits
    // copy); one uniform draw per non-greedy row from the sequence's own RNG.
    bool on_device = true;
    for (const auto& up : active) on_device = on_device && impl_->backend->device_sampling(reqs[up->req].sampling);
    std::vector<int32_t> sampled;
    // The results this step's time goes to (accept() may move a sequence on to its next turn).
    std::vector<GenerationResult*> step_results;
    for (const auto& up : active) step_results.push_back(&result_of(*up));
    const auto t_step = clock_t_::now();
    if (on_device) {
      impl_->backend->defer_logits();
      step(items);
      std::vector<SamplingParams> sp(active.size());
      std::vector<float> u(active.size(), 0.0f);
      for (size_t k = 0; k < active.size(); ++k) {
        sp[k] = reqs[active[k]->req].sampling;
        if (!sp[k].greedy()) u[k] = std::min(static_cast<float>(active[k]->rng.uniform()), 0.99999994f);
      }
      sampled = impl_->backend->sample_rows(sp, u);
    } else {
      step(items);
    }
    for (size_t k = 0; k < active.size(); ++k) {
      Active& a = *active[k];
      a.pos += 1;
      result_of(a).policy_s += fs.policy_s / active.size();
      count_reads(result_of(a), fs, k, cache_->kv_bytes_per_token());
      track_peak(a, true);
      const int32_t t = on_device ? sampled[k] : sample_token(&logits[k * V], V, reqs[a.req].sampling, a.rng, scratch);
      accept(a, t);
    }
    const double dt = secs(t_step, clock_t_::now());
    for (GenerationResult* r : step_results) {
      r->decode_s += dt;
      r->decode_share_s += dt / static_cast<double>(step_results.size());
    }
    active.erase(std::remove_if(active.begin(), active.end(), [](const auto& a) { return a->done; }), active.end());
  }
  return out;
}

std::vector<float> Engine::score(const std::vector<int32_t>& prompt, const std::vector<int32_t>& forced,
                                 GenerationResult* stats) {
  if (prompt.empty()) fail("score: empty prompt");
  const int V = static_cast<int>(model_->config().vocab_size);
  std::vector<float> all, logits;
  ForwardStats fs;
  QueryHistory hist;
  const PolicyNeeds needs = policy_ ? policy_->needs() : PolicyNeeds{};
  const PolicyNeeds* needs_ptr = policy_ ? &needs : nullptr;
  const SeqId seq = cache_->add_sequence();
  if (policy_) policy_->on_sequence_begin(seq, 0);
  GenerationResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  int64_t pos = 0;
  const auto t0 = clock_t_::now();
  for (size_t done = 0; done < prompt.size();) {
    ForwardItem it;
    it.seq = seq;
    it.tokens = prompt.data() + done;
    it.n = prefill_step_tokens(pos, static_cast<int64_t>(prompt.size()), opts_.prefill_chunk, needs_ptr);
    it.start_pos = pos;
    it.prompt_end = static_cast<int64_t>(prompt.size());
    it.prefill = true;
    it.prefill_last = done + it.n == prompt.size();
    it.want_logits = it.prefill_last;
    it.history = &hist;
    std::vector<ForwardItem> items{it};
    cache_->begin_step(seq);
    impl_->backend->forward(items, policy_.get(), logits, &fs);
    cache_->end_step(seq);
    r.policy_s += fs.policy_s;
    done += it.n;
    pos += it.n;
    r.kv_token_bytes_peak = std::max(r.kv_token_bytes_peak, cache_->token_bytes(seq));
    if (it.prefill_last) r.kv_bytes_steady = cache_->bytes(seq);
    if (on_step) on_step(*cache_, seq);
  }
  r.prefill_s = secs(t0, clock_t_::now());
  all.insert(all.end(), logits.begin(), logits.end());
  const auto t1 = clock_t_::now();
  for (int32_t t : forced) {
    ForwardItem it;
    it.seq = seq;
    it.tokens = &t;
    it.n = 1;
    it.start_pos = pos++;
    it.history = &hist;
    std::vector<ForwardItem> items{it};
    cache_->begin_step(seq);
    impl_->backend->forward(items, policy_.get(), logits, &fs);
    cache_->end_step(seq);
    r.policy_s += fs.policy_s;
    count_reads(r, fs, 0, cache_->kv_bytes_per_token());
    r.kv_token_bytes_peak = std::max(r.kv_token_bytes_peak, cache_->token_bytes(seq));
    r.kv_bytes_steady = std::max(r.kv_bytes_steady, cache_->bytes(seq));
    if (on_step) on_step(*cache_, seq);
    all.insert(all.end(), logits.begin(), logits.begin() + V);
  }
  r.decode_s = secs(t1, clock_t_::now());
  r.decode_share_s = r.decode_s;
  r.evictions = cache_->evictions(seq);
  r.kv_bytes_peak = cache_->peak_bytes(seq);
  r.kv_bytes_final = cache_->bytes(seq);
  if (policy_) policy_->on_sequence_end(seq);
  cache_->remove_sequence(seq);
  if (stats) *stats = r;
  return all;
}

}  // namespace kvb
