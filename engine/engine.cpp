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
#include "engine/backend/cuda/plan.h"
#include "engine/scheduler/kv_cache_manager.h"
#include "engine/scheduler/scheduler.h"
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
  if (const BackendInfo* bi = find_backend(opts_.backend); bi && bi->kind == BackendKind::kCuda && policy_)
    cuda::check_policy_support(policy_->name(), needs.restore_pass);
  cache_ = std::make_unique<KVCache>(kc);
  impl_->backend = make_backend(opts_.backend, *model_, *cache_);
}

Engine::~Engine() = default;

ScoringPrompts kvzip_scoring_prompts(const tok::Tokenizer& tok, const chat::ChatTemplate* chat) {
  ScoringPrompts p;
  p.from_template = true;
  p.repeat = tok.encode("\n\nRepeat the previous context exactly.", false);
  p.repeat_part = tok.encode("\n\nRepeat the part of the previous context exactly, starting with", false);
  if (!chat) {
    p.suffix = tok.encode("\n", false);
    return p;
  }
  const std::string dummy = "dummy context";
  std::string separator(dummy.size() + 1, '#');  // "\n" and as many '#' as dummy has characters
  separator[0] = '\n';
  chat::RenderOptions ro;
  ro.add_generation_prompt = true;
  ro.enable_thinking = false;
  const std::string text = chat->render({{"user", dummy + separator}}, ro);
  // kvpress: context, suffix = text.split(separator) (exactly two pieces); prefix = context.split(dummy)[0].
  const size_t at = text.find(separator);
  if (at == std::string::npos || text.find(separator, at + 1) != std::string::npos)
    fail("kvzip: the chat template's render of one user message does not hold its separator exactly once");
  const std::string context = text.substr(0, at);
  p.suffix = tok.encode(text.substr(at + separator.size()), false);
  p.prefix = static_cast<int64_t>(tok.encode(context.substr(0, context.find(dummy)), false).size());
  return p;
}

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

// A sequence as the engine runs it: the scheduler's view of it (its place in the cache, the input
// it prefills, the token it decodes next) and the result its steps are measured into.
struct RunSeq : ScheduledSequence {
  GenerationResult* result = nullptr;  // the result of the current turn (times, KV measurements)
};

// Runs the steps the scheduler plans (the model runner / executor of vLLM), shared by
// Engine::generate and Engine::score: one forward per StepPlan, and each step's bookkeeping in
// one place: the KV cache's step bracket (KVCache::begin_step / end_step, which the KV peak is
// measured by), the policy's sequence hooks, and every sequence's measurements (prefill and
// decode seconds, policy seconds, KV reads, KV peaks, Engine::on_step). What to do with the
// logits of a step — sample and apply stop rules, or keep them — is the caller's.
class StepRunner {
 public:
  StepRunner(KVCache& cache, Backend& backend, Policy* policy, int vocab, int hidden,
             const std::function<void(const KVCache&, SeqId)>& on_step, const ScoringPrompts& prompts)
      : cache_(cache),
        backend_(backend),
        policy_(policy),
        vocab_(vocab),
        hidden_(static_cast<size_t>(hidden)),
        on_step_(on_step),
        prompts_(prompts),
        scoring_(policy && policy->needs().scoring_pass) {}

  // Adds a sequence for `s` to the cache and starts it in the policy with `seed` (Engine::score;
  // Engine::generate's sequences are added by the scheduler, then started with start_policy).
  void begin_sequence(RunSeq& s, uint64_t seed) {
    s.seq = cache_.add_sequence();
    start_policy(s.seq, seed);
  }
  // Starts cache sequence `seq` in the policy with `seed`.
  void start_policy(SeqId seq, uint64_t seed) {
    if (policy_) policy_->on_sequence_begin(seq, seed);
  }
  // Ends cache sequence `seq` in the policy (before its pages are freed).
  void end_policy(SeqId seq) {
    if (policy_) policy_->on_sequence_end(seq);
  }
  // Writes the KV measurements of s's sequence as they are now (the end of a turn) into `r`:
  // bytes held, peak bytes, evictions.
  void record_kv(const RunSeq& s, GenerationResult& r) const {
    r.kv_bytes_final = cache_.bytes(s.seq);
    r.kv_bytes_peak = cache_.peak_bytes(s.seq);
    r.evictions = cache_.evictions(s.seq);
  }
  // Drops the KV (and the recorded queries) of s's positions >= pos; s continues at `pos`.
  void truncate(RunSeq& s, int64_t pos) {
    cache_.truncate_from(s.seq, static_cast<int32_t>(pos));
    forget_queries_from(s.history, pos);
    s.pos = pos;
  }
  // Ends s's sequence in the policy, removes it from the cache and marks `s` done (Engine::score).
  void end_sequence(RunSeq& s) {
    end_policy(s.seq);
    cache_.remove_sequence(s.seq);
    s.done = true;
  }

  // Runs planned step `p`. With `sample_on_device` the step's logits stay on the device
  // (Backend::defer_logits) and it is called right after the forward (the rows passed on are
  // null). Then, in item order: each prompt chunk's sequence advances, gets the step's seconds in
  // prefill_s and its share of policy_s, and `on_row(s, row)` when the chunk completed its input;
  // each decoded sequence advances, gets its share of policy_s, its KV reads and peaks, then
  // `on_row(s, row)`. The step's seconds (forward to the last on_row) go to decode_s and
  // decode_share_s of the results the decoded sequences had when the step began.
  void run(StepPlan& p, const std::function<void()>& sample_on_device,
           const std::function<void(RunSeq&, const float*)>& on_row) {
    if (p.items.empty()) return;
    const size_t n_decode = p.items.size() - p.n_prefill;
    // The results this step's time goes to (on_row may move a sequence on to its next turn).
    std::vector<GenerationResult*> prefill_results, decode_results;
    for (size_t i = 0; i < p.items.size(); ++i)
      (i < p.n_prefill ? prefill_results : decode_results).push_back(static_cast<RunSeq*>(p.owner[i])->result);
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
      RunSeq& s = static_cast<RunSeq&>(*p.owner[i]);
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
        if (it.prefill_last && scoring_) scoring_passes(s);
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
  // The policy's scoring passes at the end of s's prompt (PolicyNeeds::scoring_pass;
  // docs/architecture.md#scoring-passes): each pass one prefill step of its own at the positions
  // after the prompt, then every head truncated back to the prompt; then the policy's keep-sets
  // (Policy::on_scoring_passes_end) applied through the backend. Each pass is a KV step of its own
  // (its pages count toward the sequence's peak; the truncation after it frees them at once, so the
  // next pass reuses them). Its seconds go to prefill_s.
  void scoring_passes(RunSeq& s) {
    const auto t0 = clock_t_::now();
    const int64_t P = s.pos;
    const int64_t input_pos = s.pos - static_cast<int64_t>(s.prompt_done);  // position of (*s.input)[0]
    ScoringPassRequest rq;
    rq.cache = &cache_;
    rq.seq = s.seq;
    rq.num_layers = cache_.config().num_layers;
    rq.num_kv_heads = cache_.config().num_kv_heads;
    rq.seq_len = P;
    rq.prompts = &prompts_;
    if (input_pos == 0 && s.input && static_cast<int64_t>(s.input->size()) >= P)
      rq.tokens = std::span<const int32_t>(s.input->data(), static_cast<size_t>(P));
    const std::vector<std::vector<int32_t>> passes = policy_->scoring_passes(rq);
    if (passes.empty()) return;
    std::vector<float> no_logits;
    ForwardStats fs;
    for (size_t k = 0; k < passes.size(); ++k) {
      if (passes[k].empty()) fail("policy '{}' asked for an empty scoring pass", policy_->name());
      ForwardItem f;
      f.seq = s.seq;
      f.tokens = passes[k].data();
      f.n = static_cast<int>(passes[k].size());
      f.start_pos = P;
      f.prefill = true;
      f.prompt_end = P + f.n;
      f.want_logits = false;
      f.history = &s.history;
      f.scoring_pass = static_cast<int>(k);
      cache_.begin_step(s.seq);
      backend_.forward(std::span<ForwardItem>(&f, 1), policy_, no_logits, &fs);
      cache_.end_step(s.seq);
      s.result->policy_s += fs.policy_s;
      cache_.truncate_from(s.seq, static_cast<int32_t>(P));
      forget_queries_from(s.history, P);
    }
    const int64_t restored = restore_pass(s, rq);
    StepEnd se;
    se.cache = &cache_;
    se.seq = s.seq;
    se.num_layers = rq.num_layers;
    se.num_kv_heads = rq.num_kv_heads;
    se.seq_len = P + restored;
    se.prefill = true;
    se.prefill_last = true;
    const auto tp = clock_t_::now();
    policy_->on_scoring_passes_end(se);
    s.result->policy_s += secs(tp, clock_t_::now());
    for (const StepEnd::Keep& k : se.keeps)
      if (k.layer < 0 || k.layer >= se.num_layers || k.head < 0 || k.head >= se.num_kv_heads)
        fail("policy '{}' returned a keep-set for layer {} head {}", policy_->name(), k.layer, k.head);
    backend_.compact_heads(s.seq, se.keeps);
    s.result->prefill_s += secs(t0, clock_t_::now());
  }

  // The policy's restore pass after s's scoring passes (PolicyNeeds::restore_pass, Policy::restore_pass;
  // docs/architecture.md#scoring-passes): its embedding rows as one prefill step of its own at the
  // positions after the prompt, through the pass's LoRA adapter, without the policy's hooks; its K/V
  // are kept and s continues after them. Returns the rows run (0: none asked for).
  int64_t restore_pass(RunSeq& s, const ScoringPassRequest& rq) {
    if (!policy_->needs().restore_pass) return 0;
    const RestorePass rp = policy_->restore_pass(rq);
    if (rp.n <= 0) return 0;
    if (rp.n > (int64_t{1} << 20) || rp.embeddings.size() != hidden_ * static_cast<size_t>(rp.n))
      fail("policy '{}' asked for a restore pass of {} rows with {} embedding values (the model's hidden size is {})",
           policy_->name(), rp.n, rp.embeddings.size(), hidden_);
    ForwardItem f;
    f.seq = s.seq;
    f.embeddings = rp.embeddings.data();
    f.lora = rp.lora;
    f.n = static_cast<int>(rp.n);
    f.start_pos = rq.seq_len;
    f.prefill = true;
    f.prompt_end = rq.seq_len + f.n;
    f.want_logits = false;
    f.history = &s.history;
    std::vector<float> no_logits;
    ForwardStats fs;
    cache_.begin_step(s.seq);
    backend_.forward(std::span<ForwardItem>(&f, 1), nullptr, no_logits, &fs);
    cache_.end_step(s.seq);
    s.pos += rp.n;
    return rp.n;
  }

  // After a step of `s` (its KV step already closed): token peak, steady footprint once the
  // turn's input is done (`after_input`), the on_step hook.
  void after_step(RunSeq& s, bool after_input) {
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
  const size_t vocab_;
  const size_t hidden_;  // the model's hidden size (a restore pass's embedding rows)
  const std::function<void(const KVCache&, SeqId)>& on_step_;
  const ScoringPrompts& prompts_;  // EngineOptions::scoring_prompts
  const bool scoring_;             // the policy asks for scoring passes
  std::vector<float> logits_;      // the last step's logits [rows, V]
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

// What a sequence's projected footprint is asked of: the policy (null: the full cache) and the
// cache's shape (page size, layers, kv heads, prefill chunk; context and gen are per request).
struct FootprintSource {
  const Policy* policy = nullptr;
  FootprintQuery shape;
};

// What request `q` projects to hold (Policy::kv_footprint over all its turns).
KvFootprint request_footprint(const GenerationRequest& q, const FootprintSource& src) {
  FootprintQuery f = src.shape;
  f.context = static_cast<int64_t>(q.prompt.size());
  f.gen = q.max_new_tokens;
  for (const auto& t : q.followups) {
    f.context += static_cast<int64_t>(t.append.size());
    f.gen += t.max_new_tokens;
  }
  return src.policy ? src.policy->kv_footprint(f) : full_cache_footprint(f);
}

// One Engine::generate call: the requests' sequences, their sampling, stop rules and turns. The
// Scheduler decides which of them run each step (admission by count and pages, the step plan,
// preemption; this class answers its events), the StepRunner runs the steps, and this class
// samples each sequence's tokens and applies its stop rules and turns.
class Generation final : public SequenceEvents {
 public:
  Generation(const std::vector<GenerationRequest>& reqs, std::vector<GenerationResult>& out, const tok::Tokenizer* tok,
             const TokenCallback& cb, const FinishedCallback& on_finished, StepRunner& runner, Backend& backend,
             KVCacheManager& kv, const SchedulerConfig& cfg, FootprintSource fp, int vocab, ScheduleStats& stats)
      : reqs_(reqs),
        out_(out),
        tok_(tok),
        cb_(cb),
        on_finished_(on_finished),
        runner_(runner),
        backend_(backend),
        kv_(kv),
        fp_(std::move(fp)),
        max_ctx_(cfg.max_context),
        V_(vocab),
        stats_(stats),
        sched_(cfg, kv, *this, stats) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      auto a = std::make_unique<Active>();
      a->req = i;
      a->q = &reqs[i];
      a->fp = &fp_;
      a->rng = Rng(reqs[i].seed);
      seqs_.push_back(std::move(a));
    }
  }

  // Generates until every request has finished.
  void run() {
    for (const auto& a : seqs_) sched_.add(*a);
    while (sched_.has_unfinished()) {
      StepPlan plan = sched_.schedule();
      if (plan.empty()) continue;  // everything running finished in the previous step
      step(plan);
    }
    stats_.peak_pages = kv_.peak_pages();
  }

  // The scheduler admitted `s`: its input is the request's prompt, and the policy starts it.
  void on_admitted(ScheduledSequence& s) override {
    Active& a = static_cast<Active&>(s);
    const GenerationRequest& q = reqs_[a.req];
    a.input = &q.prompt;
    a.context_tokens = q.context_tokens;
    a.result = &out_[a.req];
    runner_.start_policy(a.seq, q.seed);
    if (!a.started) {
      a.started = true;
      a.t0 = clock_t_::now();
    }
  }

  // The scheduler preempts `s`: its result is measured again from scratch when it is recomputed
  // (times keep accumulating), and the policy ends its sequence.
  void on_preempted(ScheduledSequence& s) override {
    Active& a = static_cast<Active&>(s);
    GenerationResult& r = *a.result;
    ++r.preemptions;
    r.kv_bytes_peak = r.kv_bytes_final = r.kv_bytes_steady = r.kv_token_bytes_peak = 0;
    r.kv_read_bytes = r.decode_steps = r.decode_batch_sum = 0;
    r.evictions = 0;
    runner_.end_policy(a.seq);
    a.replayed = 0;
  }

 private:
  struct Active : RunSeq {
    size_t req = 0;
    const GenerationRequest* q = nullptr;
    const FootprintSource* fp = nullptr;
    size_t turn = 0;        // 0: the request's prompt; k: followups[k - 1]
    int64_t gen_start = 0;  // position of the current turn's first generated token
    size_t replayed = 0;    // after a preemption: tokens of the first turn fed again so far
    Rng rng{0};
    clock_t_::time_point t0, t_first;
    bool started = false;  // admitted once (t0 set)
    // Tokens of the first turn generated so far: what a recomputation after a preemption feeds
    // again (0 before the first admission).
    size_t replay_tokens() const { return turn == 0 && result ? result->tokens.size() : 0; }
    int64_t prompt_tokens() const override { return static_cast<int64_t>(q->prompt.size()); }
    int64_t recompute_tokens() const override { return static_cast<int64_t>(replay_tokens()); }
    bool preemptible() const override { return turn == 0; }
    bool multi_turn() const override { return !q->followups.empty(); }
    KvFootprint footprint() const override { return request_footprint(*q, *fp); }
  };

  // The current turn's cap and stop strings of a sequence.
  int cap_of(const Active& a) const {
    return a.turn == 0 ? reqs_[a.req].max_new_tokens : reqs_[a.req].followups[a.turn - 1].max_new_tokens;
  }
  const std::vector<std::string>& stops_of(const Active& a) const {
    return a.turn == 0 ? reqs_[a.req].stop_strings : reqs_[a.req].followups[a.turn - 1].stop_strings;
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
    std::map<const ScheduledSequence*, size_t> row_of;
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
    runner_.run(plan, on_device ? std::function<void()>(sample_rows) : nullptr, [&](RunSeq& s, const float* row) {
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
    runner_.record_kv(a, r);
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
        runner_.truncate(a, a.gen_start);
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
    runner_.end_policy(a.seq);
    sched_.finish(a);
    if (on_finished_) on_finished_(a.req);
  }

  const std::vector<GenerationRequest>& reqs_;
  std::vector<GenerationResult>& out_;
  const tok::Tokenizer* tok_;
  const TokenCallback& cb_;
  const FinishedCallback& on_finished_;
  StepRunner& runner_;
  Backend& backend_;
  KVCacheManager& kv_;
  const FootprintSource fp_;
  const int64_t max_ctx_;
  const int V_;
  ScheduleStats& stats_;
  std::vector<std::unique_ptr<Active>> seqs_;  // one per request, in request order
  Scheduler sched_;
  std::vector<std::pair<float, int32_t>> scratch_;
};
}  // namespace

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
  StepRunner runner(*cache_, *impl_->backend, policy_.get(), V, static_cast<int>(model_->config().hidden_size), on_step,
                    opts_.scoring_prompts);
  PagedKVCacheManager kv(*cache_);
  SchedulerConfig cfg;
  cfg.max_batch = opts_.max_batch;
  cfg.prefill_chunk = opts_.prefill_chunk;
  cfg.max_step_tokens = opts_.max_step_tokens;
  cfg.admission = opts_.admission;
  cfg.mixed_steps = impl_->backend->mixed_steps();
  cfg.max_context = model_->config().max_position_embeddings;
  if (policy_) cfg.needs = policy_->needs();
  FootprintSource fp;
  fp.policy = policy_.get();
  fp.shape.prefill_chunk = opts_.prefill_chunk;
  fp.shape.page_size = opts_.page_size;
  fp.shape.num_layers = cache_->config().num_layers;
  fp.shape.num_kv_heads = cache_->config().num_kv_heads;
  Generation(reqs, out, tok, cb, on_finished, runner, *impl_->backend, kv, cfg, fp, V, stats_).run();
}

std::vector<float> Engine::score(const std::vector<int32_t>& prompt, const std::vector<int32_t>& forced,
                                 GenerationResult* stats) {
  if (prompt.empty()) fail("score: empty prompt");
  const int V = static_cast<int>(model_->config().vocab_size);
  StepRunner runner(*cache_, *impl_->backend, policy_.get(), V, static_cast<int>(model_->config().hidden_size), on_step,
                    opts_.scoring_prompts);
  const PolicyNeeds needs = policy_ ? policy_->needs() : PolicyNeeds{};
  const int chunk = opts_.prefill_chunk;
  GenerationResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  RunSeq s;
  s.input = &prompt;
  s.result = &r;
  runner.begin_sequence(s, 0);
  std::vector<float> all;
  size_t fed = 0;  // forced tokens fed so far
  // After the prompt and after each forced token: keep the logits row, feed the next forced token.
  auto keep = [&](RunSeq&, const float* row) {
    all.insert(all.end(), row, row + V);
    if (fed < forced.size()) s.next = forced[fed++];
    else s.done = true;
  };
  const std::vector<ScheduledSequence*> seqs{&s};
  for (StepPlan p = plan_step(seqs, {}, chunk, 0, needs); !p.empty(); p = plan_step(seqs, {}, chunk, 0, needs))
    runner.run(p, nullptr, keep);
  while (!s.done) {
    StepPlan p = plan_step({}, seqs, chunk, 0, needs);
    runner.run(p, nullptr, keep);
  }
  runner.record_kv(s, r);
  runner.end_sequence(s);
  if (stats) *stats = r;
  return all;
}

}  // namespace kvb
