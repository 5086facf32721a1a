// The scheduler alone, without a model (engine/scheduler/scheduler.h): a fake KV cache manager
// whose sequences hold the same tokens in every head, and fake sequences that "generate" a fixed
// token, drive admission order, the step plan and its token bound, reserve and optimistic
// admission, preemption and recomputation, and the page accounting; PagedKVCacheManager is
// checked against a real KVCache.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/scheduler/kv_cache_manager.h"
#include "engine/scheduler/scheduler.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

// A page pool of `heads` page lists per sequence (layers × kv heads), each holding every token of
// its sequence: pages_for_tokens(t) = heads · ⌈t / page⌉. grow() plays the backend's writes and
// checks that the pool is never exceeded.
class FakeKV final : public KVCacheManager {
 public:
  explicit FakeKV(int64_t pool, int page = 4, int heads = 2) : pool_(pool), page_(page), heads_(heads) {}
  int64_t num_pages() const override { return pool_; }
  int64_t pages_in_use() const override {
    int64_t n = 0;
    for (const auto& [seq, len] : len_) n += pages_for_tokens(len);
    return n;
  }
  int64_t peak_pages() const override { return peak_; }
  int64_t pages_of(SeqId seq) const override { return pages_for_tokens(len_.at(seq)); }
  int64_t pages_for_tokens(int64_t t) const override { return heads_ * ((t + page_ - 1) / page_); }
  int64_t pages_to_grow(SeqId seq, int64_t n) const override {
    const int64_t len = len_.at(seq);
    return pages_for_tokens(len + n) - pages_for_tokens(len);
  }
  SeqId add_sequence() override {
    len_[next_] = 0;
    return next_++;
  }
  void free(SeqId seq) override { ASSERT_EQ(len_.erase(seq), 1u) << "freed twice or unknown: " << seq; }
  void grow(SeqId seq, int64_t n) {
    len_.at(seq) += n;
    peak_ = std::max(peak_, pages_in_use());
    if (pool_ > 0) {
      EXPECT_LE(pages_in_use(), pool_) << "the pool was exceeded";
    }
  }
  bool holds(SeqId seq) const { return len_.count(seq) > 0; }

 private:
  int64_t pool_;
  int page_, heads_;
  int64_t peak_ = 0;
  SeqId next_ = 0;
  std::map<SeqId, int64_t> len_;
};

// A request: `prompt` tokens, then `max_new` generated tokens (each token 7). A recomputation after
// a preemption prefills the prompt and the tokens generated so far again (`full`).
struct FakeSeq final : ScheduledSequence {
  int id = 0;
  std::vector<int32_t> prompt, full;
  int max_new = 0, generated = 0;
  KvFootprint fp;
  bool can_preempt = true;
  int64_t prompt_tokens() const override { return static_cast<int64_t>(prompt.size()); }
  int64_t recompute_tokens() const override { return generated; }
  bool preemptible() const override { return can_preempt; }
  KvFootprint footprint() const override { return fp; }
};

struct Events final : SequenceEvents {
  std::vector<int> admitted, preempted;
  void on_admitted(ScheduledSequence& s) override {
    auto& f = static_cast<FakeSeq&>(s);
    admitted.push_back(f.id);
    f.full = f.prompt;
    f.full.insert(f.full.end(), static_cast<size_t>(f.generated), 7);
    f.input = &f.full;
  }
  void on_preempted(ScheduledSequence& s) override { preempted.push_back(static_cast<FakeSeq&>(s).id); }
};

// The sequences, the scheduler and a step loop that plays the backend and the sampler.
struct Harness {
  FakeKV kv;
  Events events;
  ScheduleStats stats;
  std::vector<std::unique_ptr<FakeSeq>> seqs;
  Scheduler sched;
  std::vector<StepPlan> steps;  // every non-empty plan, as scheduled
  int finished = 0;

  Harness(const SchedulerConfig& cfg, int64_t pool, int n, int prompt, int max_new, KvFootprint fp = {})
      : kv(pool), sched(cfg, kv, events, stats) {
    for (int i = 0; i < n; ++i) {
      auto s = std::make_unique<FakeSeq>();
      s->id = i;
      s->prompt.assign(static_cast<size_t>(prompt), 100 + i);
      s->max_new = max_new;
      s->fp = fp;
      seqs.push_back(std::move(s));
    }
    for (auto& s : seqs) sched.add(*s);
  }

  // Runs planned step `p`: each item's tokens are written, a completed prompt or a decode token
  // yields the next token, and a sequence that has all its tokens finishes.
  void run(StepPlan& p) {
    for (size_t i = 0; i < p.items.size(); ++i) {
      auto& s = static_cast<FakeSeq&>(*p.owner[i]);
      const ForwardItem& it = p.items[i];
      kv.grow(s.seq, it.n);
      s.pos += it.n;
      if (i < p.n_prefill) s.prompt_done += static_cast<size_t>(it.n);
      if (!it.want_logits) continue;
      // A recomputed sequence's prompt ends with its generated tokens: the next one is new.
      ++s.generated;
      if (s.generated >= s.max_new) {
        sched.finish(s);
        ++finished;
      } else {
        s.next = 7;
      }
    }
  }

  // Schedules and runs steps until every sequence has finished (at most `cap` steps).
  void run_all(int cap = 10000) {
    for (int k = 0; k < cap && sched.has_unfinished(); ++k) {
      StepPlan p = sched.schedule();
      if (p.empty()) continue;
      steps.push_back(std::move(p));
      run(steps.back());
    }
    ASSERT_FALSE(sched.has_unfinished()) << "not done after " << cap << " steps";
  }
};

SchedulerConfig config(int batch, Admission adm = Admission::kReserve, int chunk = 512, int64_t step_tokens = 0) {
  SchedulerConfig c;
  c.max_batch = batch;
  c.admission = adm;
  c.prefill_chunk = chunk;
  c.max_step_tokens = step_tokens;
  return c;
}

KvFootprint pages(int64_t peak, int64_t steady) {
  KvFootprint f;
  f.peak_pages = peak;
  f.steady_pages = steady;
  return f;
}

TEST(SchedulerUnit, AdmitsInRequestOrderUpToTheBatch) {
  Harness h(config(2), /*pool=*/0, /*n=*/4, /*prompt=*/6, /*max_new=*/3);
  StepPlan first = h.sched.schedule();
  EXPECT_EQ(h.events.admitted, (std::vector<int>{0, 1}));
  ASSERT_EQ(first.items.size(), 2u);
  EXPECT_EQ(first.n_prefill, 2u);
  EXPECT_EQ(first.items[0].n, 6);
  EXPECT_TRUE(first.items[0].prefill && first.items[0].prefill_last && first.items[0].want_logits);
  EXPECT_EQ(h.sched.waiting().size(), 2u);
  h.run(first);
  h.run_all();
  EXPECT_EQ(h.events.admitted, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(h.finished, 4);
  EXPECT_EQ(h.stats.max_running, 2);
  EXPECT_EQ(h.stats.preemptions, 0);
  for (const StepPlan& p : h.steps) EXPECT_LE(p.items.size(), 2u);
  for (const auto& s : h.seqs) EXPECT_EQ(s->generated, 3);
  EXPECT_EQ(h.kv.pages_in_use(), 0);  // every finished sequence's pages were freed
}

TEST(SchedulerUnit, StepCarriesAtMostMaxStepTokensOfPromptInWholeChunks) {
  Harness h(config(4, Admission::kReserve, /*chunk=*/4, /*step_tokens=*/8), 0, 3, /*prompt=*/10, /*max_new=*/2);
  h.run_all();
  ASSERT_FALSE(h.steps.empty());
  EXPECT_EQ(h.steps[0].n_prefill, 2u);  // two chunks of 4; the third waits
  EXPECT_EQ(h.steps[0].prompt_tokens(), 8);
  std::map<SeqId, int64_t> next_start;
  for (const StepPlan& p : h.steps) {
    EXPECT_LE(p.prompt_tokens(), 8);
    for (size_t i = 0; i < p.items.size(); ++i) {
      const ForwardItem& it = p.items[i];
      if (i < p.n_prefill) {
        EXPECT_LE(it.n, 4);
        EXPECT_EQ(it.start_pos % 4, 0) << "a chunk starts where the previous whole chunk ended";
        EXPECT_EQ(it.start_pos, next_start[it.seq]);
        next_start[it.seq] = it.start_pos + it.n;
      } else {
        EXPECT_EQ(it.n, 1);
        EXPECT_EQ(*it.tokens, 7);
      }
    }
  }
  EXPECT_EQ(h.finished, 3);
  EXPECT_GT(h.stats.decode_steps, 0);
}

TEST(SchedulerUnit, PrefillChunksFollowThePolicysOwnChunking) {
  PolicyNeeds needs;
  needs.prefill_chunk = 6;
  needs.prefill_tail = 2;
  EXPECT_EQ(prefill_step_tokens(0, 20, 512, needs), 6);
  EXPECT_EQ(prefill_step_tokens(12, 20, 512, needs), 6);  // stops at the tail's start, 18
  EXPECT_EQ(prefill_step_tokens(18, 20, 512, needs), 2);  // the tail is a step of its own
  EXPECT_EQ(prefill_step_tokens(0, 20, 4, needs), 4);     // --prefill-chunk only splits further
  EXPECT_EQ(prefill_step_tokens(4, 20, 4, needs), 2);
  EXPECT_EQ(prefill_step_tokens(0, 20, 512, PolicyNeeds{}), 20);
}

TEST(SchedulerUnit, WithoutMixedStepsPrefillAndDecodeRunApart) {
  SchedulerConfig c = config(4);
  c.mixed_steps = false;
  Harness h(c, 0, 2, 6, 4);
  // The second request waits behind the batch of one until the first has decoded a step.
  h.run_all();
  for (const StepPlan& p : h.steps) EXPECT_TRUE(p.n_prefill == 0 || p.n_prefill == p.items.size());
  SchedulerConfig m = config(4);
  Harness mixed(m, 0, 2, 6, 4);
  mixed.run_all();
  EXPECT_EQ(h.finished, 2);
  EXPECT_EQ(mixed.finished, 2);
}

TEST(SchedulerUnit, ReserveAdmitsOnlyWhatThePoolHolds) {
  // Peak 8 pages while prefilling, steady 6 after: a pool of 20 takes two prefilling sequences.
  Harness h(config(0), /*pool=*/20, 4, /*prompt=*/6, /*max_new=*/3, pages(8, 6));
  StepPlan first = h.sched.schedule();
  EXPECT_EQ(h.events.admitted, (std::vector<int>{0, 1}));
  EXPECT_EQ(h.sched.running().size(), 2u);
  EXPECT_LE(h.kv.reserved_pages(), 20);
  h.run(first);
  h.run_all();
  EXPECT_EQ(h.finished, 4);
  EXPECT_EQ(h.stats.preemptions, 0);
  EXPECT_LE(h.kv.peak_pages(), 20);
  for (const auto& s : h.seqs) EXPECT_EQ(s->generated, 3);
}

TEST(SchedulerUnit, OptimisticAdmitsWhileThePromptsFitInTheFreePool) {
  // Prompts of 6 tokens: 4 pages each with the next token, plus 2 pages of headroom per running
  // sequence. A pool of 16: 0 + 4 (first), 4 + 2 + 4 (second), 8 + 4 + 4 (third) fit; a fourth
  // (12 + 6 + 4) does not.
  Harness h(config(0, Admission::kOptimistic), 16, 4, 6, 2);
  h.sched.schedule();
  EXPECT_EQ(h.events.admitted, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(h.sched.waiting().size(), 1u);
}

TEST(SchedulerUnit, PreemptsTheNewestAndRecomputesItLater) {
  // Three sequences of 4 prompt tokens that grow to 16 (8 pages each) in a pool of 12: the pool
  // runs short while they decode; the newest is preempted first and recomputed afterwards.
  Harness h(config(0, Admission::kOptimistic), 12, 3, 4, 12);
  h.run_all();
  ASSERT_FALSE(h.events.preempted.empty());
  EXPECT_EQ(h.events.preempted.front(), 2);
  EXPECT_EQ(h.stats.preemptions, static_cast<int64_t>(h.events.preempted.size()));
  EXPECT_EQ(h.finished, 3);
  for (const auto& s : h.seqs) EXPECT_EQ(s->generated, 12) << "sequence " << s->id;
  // Sequence 2 was admitted again, and its recomputation prefilled from position 0 its prompt
  // and the tokens it had generated.
  EXPECT_GE(std::count(h.events.admitted.begin(), h.events.admitted.end(), 2), 2);
  bool recomputed = false;
  for (const StepPlan& p : h.steps)
    for (size_t i = 0; i < p.n_prefill; ++i)
      if (static_cast<FakeSeq*>(p.owner[i])->id == 2 && p.items[i].start_pos == 0 && p.items[i].n > 4)
        recomputed = true;
  EXPECT_TRUE(recomputed);
  EXPECT_LE(h.kv.peak_pages(), 12);
  EXPECT_EQ(h.kv.pages_in_use(), 0);
}

TEST(SchedulerUnit, ASequenceThatCannotBePreemptedIsPassedOver) {
  Harness h(config(0, Admission::kOptimistic), 12, 2, 4, 12);
  h.seqs[1]->can_preempt = false;  // e.g. a multi-turn sequence past its first turn
  h.run_all();
  ASSERT_FALSE(h.events.preempted.empty());
  for (int id : h.events.preempted) EXPECT_EQ(id, 0);
  EXPECT_EQ(h.finished, 2);
}

TEST(SchedulerUnit, APoolThatCannotHoldOneSequenceIsARuntimeError) {
  Harness h(config(0, Admission::kOptimistic), /*pool=*/2, 1, /*prompt=*/12, 2);
  try {
    h.sched.schedule();
    FAIL() << "expected kvb::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRuntime);
    EXPECT_NE(std::string(e.what()).find("KV page pool of 2 pages"), std::string::npos) << e.what();
  }
}

TEST(SchedulerUnit, APromptLongerThanTheContextIsRefused) {
  SchedulerConfig c = config(1);
  c.max_context = 8;
  Harness h(c, 0, 1, 9, 1);
  EXPECT_THROW(h.sched.schedule(), Error);
}

TEST(KVCacheManager, PagedManagerCountsTheRealPool) {
  KVCacheConfig cfg(2, 3, 8, /*page_size=*/4);
  cfg.max_pages = 15;
  KVCache cache(cfg);
  PagedKVCacheManager m(cache);
  EXPECT_EQ(m.num_pages(), 15);
  EXPECT_EQ(m.pages_for_tokens(5), 12);  // 2 layers × 3 heads × 2 pages
  const SeqId s = m.add_sequence();
  EXPECT_EQ(m.pages_to_grow(s, 5), 12);
  std::vector<float> k(8, 1.0f), v(8, 2.0f);
  for (int t = 0; t < 5; ++t)
    for (int l = 0; l < 2; ++l)
      for (int hd = 0; hd < 3; ++hd) cache.append(s, l, hd, k.data(), v.data(), t);
  EXPECT_EQ(m.pages_in_use(), 12);
  EXPECT_EQ(m.pages_of(s), 12);
  EXPECT_EQ(m.pages_to_grow(s, 3), 0);  // the second page of every head has room for 3
  EXPECT_EQ(m.pages_to_grow(s, 4), 6);
  // A compacted head needs pages by its own length: head (0, 0) keeps 1 token.
  const std::vector<int32_t> keep{4};
  cache.compact(s, 0, 0, keep);
  EXPECT_EQ(m.pages_in_use(), 11);
  EXPECT_EQ(m.pages_to_grow(s, 3), 0);
  EXPECT_EQ(m.pages_to_grow(s, 4), 6);  // its 1 page grows to 2, as every other head's 2 to 3
  EXPECT_EQ(m.pages_to_grow(s, 8), 12);
  // allocate_slots reserves within the pool: 11 + 6 > 15 is refused, 11 + 0 is not.
  EXPECT_FALSE(m.allocate_slots(s, 4));
  EXPECT_EQ(m.reserved_pages(), 0);
  EXPECT_TRUE(m.allocate_slots(s, 3));
  EXPECT_TRUE(m.can_allocate(4));
  EXPECT_FALSE(m.can_allocate(5));
  m.release_slots();
  EXPECT_EQ(m.reserved_pages(), 0);
  m.free(s);
  EXPECT_EQ(m.pages_in_use(), 0);
  EXPECT_EQ(m.peak_pages(), 12);
}

}  // namespace
}  // namespace kvb
