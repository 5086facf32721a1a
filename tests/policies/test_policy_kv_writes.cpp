// The policies' cache-write primitive (policy.h: LayerStep::write_keys / write_values,
// PolicyNeeds::writes_kv; engine/backend/policy_driver.h run_layer) on the CPU backend: a write
// lands in the host pages before the step's keep-sets (pre-compaction indices), the next step's
// attention reads the written rows, a write of the rows already cached changes nothing, and bad
// writes are refused naming the policy. The CUDA side (host→device copies of the written rows) is
// checked on a GPU by `kvb_cuda_check decisions`, which compares the writes of every policy that
// makes them.
#include <gtest/gtest.h>

#include <functional>
#include <numeric>

#include "engine/util/error.h"
#include "tests/policies/harness.h"

namespace kvb {
namespace {

/// A policy whose layer hook is `fn` (called with the step and the hook's call count), with
/// window queries, host K/V and writes declared unless `declare_writes` is false.
class WritePolicy : public Policy {
 public:
  using Fn = std::function<void(LayerStep&, int call)>;
  explicit WritePolicy(Fn fn, bool declare_writes = true) : fn_(std::move(fn)), writes_(declare_writes) {}
  std::string name() const override { return "write-test"; }
  nlohmann::json resolved_params() const override { return nlohmann::json::object(); }
  PolicyNeeds needs() const override { return {.window_queries = 1, .host_kv = true, .writes_kv = writes_}; }
  void on_layer_step(LayerStep& st) override { fn_(st, calls_++); }

 private:
  Fn fn_;
  bool writes_;
  int calls_ = 0;
};

std::vector<int32_t> tokens(int n, int offset) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 1 + (i * 7 + offset) % 200;
  return t;
}

/// Runs `fn` under the CPU engine on stories260K (prompt of 24 tokens in one step, 3 forced decode
/// tokens) and returns the logits; `check`, when given, is called after every engine step.
std::vector<float> run(WritePolicy::Fn fn, std::function<void(const KVCache&, SeqId, int step)> check = {}) {
  EngineOptions eo;
  eo.prefill_chunk = 64;
  Engine e(test::stories(), eo, std::make_unique<WritePolicy>(std::move(fn)));
  int step = 0;
  if (check) e.on_step = [&](const KVCache& kv, SeqId s) { check(kv, s, step++); };
  return e.score(tokens(24, 0), tokens(3, 5));
}

TEST(PolicyKvWrites, ValueWriteLandsBeforeTheKeepSet) {
  KVB_REQUIRE_STORIES();
  // At the prompt's end, every head writes value row 5 (pre-compaction index) as 0, 1, ..., D − 1
  // and key row 5 as its negation, then keeps tokens 3.. (so the written token becomes index 2).
  run(
      [](LayerStep& st, int) {
        if (!st.prefill_last) return;
        const int D = st.head_dim;
        for (int h = 0; h < st.num_kv_heads; ++h) {
          std::vector<float> v(D), k(D);
          std::iota(v.begin(), v.end(), 0.0f);
          const float* old = st.cache->key(st.seq, st.layer, h, 5);
          for (int d = 0; d < D; ++d) k[d] = -old[d];
          st.write_values(h, {5}, v);
          st.write_keys(h, {5}, k);
          std::vector<int32_t> keep(st.cache->length(st.seq, st.layer, h) - 3);
          std::iota(keep.begin(), keep.end(), 3);
          st.keep(h, keep);
        }
      },
      [](const KVCache& kv, SeqId s, int step) {
        if (step != 0) return;
        for (int l = 0; l < kv.config().num_layers; ++l)
          for (int h = 0; h < kv.config().num_kv_heads; ++h) {
            ASSERT_EQ(kv.position(s, l, h, 2), 5);
            for (int d = 0; d < kv.config().head_dim; ++d) ASSERT_EQ(kv.value(s, l, h, 2)[d], static_cast<float>(d));
          }
      });
}

TEST(PolicyKvWrites, NextStepAttentionReadsTheWrittenKeys) {
  KVB_REQUIRE_STORIES();
  // Zeroing every cached key of the prompt at its end makes the next step's query see logit 0 on
  // each of them: its window attention is uniform over the prompt's tokens. A copy of the cached
  // rows changes no logit; the zeroed keys change them.
  auto zero_keys = [](bool zero) {
    return [zero](LayerStep& st, int) {
      if (st.prefill_last) {
        for (int h = 0; h < st.num_kv_heads; ++h) {
          const int32_t L = st.cache->length(st.seq, st.layer, h);
          std::vector<int32_t> idx(L);
          std::iota(idx.begin(), idx.end(), 0);
          std::vector<float> rows(static_cast<size_t>(L) * st.head_dim, 0.0f);
          if (!zero)
            for (int32_t i = 0; i < L; ++i)
              std::copy_n(st.cache->key(st.seq, st.layer, h, i), st.head_dim, rows.begin() + i * st.head_dim);
          st.write_keys(h, idx, rows);
        }
        return;
      }
      if (!zero || st.seq_len != 25) return;  // the first decode step: 24 prompt tokens + 1
      for (int h = 0; h < st.num_kv_heads; ++h) {
        int w = 0;
        const std::vector<float>& a = st.window_attention(h, &w);
        const int32_t L = st.cache->length(st.seq, st.layer, h);
        const int G = st.num_q_heads / st.num_kv_heads;
        for (int g = 0; g < G; ++g) {
          const float* row = a.data() + (static_cast<size_t>(g) * w + (w - 1)) * L;  // the newest query
          for (int32_t i = 1; i < L - 1; ++i) EXPECT_NEAR(row[i], row[0], 1e-6f) << "layer " << st.layer << " h" << h;
        }
      }
    };
  };
  const std::vector<float> none = run([](LayerStep&, int) {});
  const std::vector<float> copied = run(zero_keys(false));
  const std::vector<float> zeroed = run(zero_keys(true));
  ASSERT_EQ(none.size(), copied.size());
  EXPECT_EQ(none, copied) << "writing the cached rows back must change nothing";
  double diff = 0;
  for (size_t i = 0; i < none.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(none[i] - zeroed[i])));
  EXPECT_GT(diff, 1e-3) << "zeroed keys must change the decode logits";
}

TEST(PolicyKvWrites, BadWritesAreRefused) {
  KVB_REQUIRE_STORIES();
  auto expect_error = [](WritePolicy::Fn fn, bool declare, const std::string& what) {
    EngineOptions eo;
    Engine e(test::stories(), eo, std::make_unique<WritePolicy>(std::move(fn), declare));
    try {
      e.score(tokens(8, 0), {});
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& ex) {
      EXPECT_NE(std::string(ex.what()).find(what), std::string::npos) << ex.what();
    }
  };
  auto one_row = [](int32_t index, int floats, int head = 0) {
    return [=](LayerStep& st, int) { st.write_values(head, {index}, std::vector<float>(floats, 1.0f)); };
  };
  expect_error(one_row(0, 8), false, "without declaring PolicyNeeds::writes_kv");
  expect_error([&](LayerStep& st, int c) { one_row(st.cache->length(st.seq, st.layer, 0), st.head_dim)(st, c); }, true,
               "wrote token");
  expect_error([&](LayerStep& st, int c) { one_row(0, st.head_dim + 1)(st, c); }, true, "floats for 1 rows");
  expect_error([&](LayerStep& st, int c) { one_row(0, st.head_dim, st.num_kv_heads)(st, c); }, true,
               "wrote rows of kv head");
}

}  // namespace
}  // namespace kvb
