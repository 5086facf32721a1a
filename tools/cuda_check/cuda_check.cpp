// kvb_cuda_check — CUDA-vs-CPU checks for the lent GPU machine (run by tools/gpu_check.sh).
//
//   kvb_cuda_check equiv  [--shapes a,b,...] [--policy-shapes a,b,...] [--budget N]
//     For each random-weight model shape (Model::random, bf16 weights so both backends multiply
//     the same numbers; default shapes stories260k, smollm2-135m, qwen3-0.6b, and the issue-30
//     shapes mistral-w160 (every layer a 160-token sliding window) and gemma2-w96 (Gemma 2's block:
//     alternating 96-token windows, soft-caps, √H embedding scale, query_pre_attn_scalar; see
//     check_shape)), scores random
//     prompts (lengths 37, 300 and 700 with --prefill-chunk 256, so multi-chunk prefill and
//     split-KV decode both run) plus 12 teacher-forced decode tokens with Engine::score on
//     `--backend cpu` (f32), `cpu-bf16` (the CPU forward rounding where the device stores bf16)
//     and `cuda`, for every registered policy on the --policy-shapes (default stories260k,
//     smollm2-135m; the full cache on every shape) (budget default 64; learned ones with random gates;
//     foresightkv with and without its seeded sampling; oracle excepted: it needs fidelity's
//     two-pass trace). Logits error per position: max_i |cuda_i − ref_i| / max_i |ref_i|; pass
//     ≤ 2e-2 against the f32 CPU for the full cache, and against cpu-bf16 wherever the keep-sets
//     agree. The kept token positions of every (layer, kv head) after every step (Engine::on_step)
//     are compared with cpu-bf16's: identical for the score-free policies; for the others the
//     agreement at the first compression must be ≥ min(95 %, the two CPU runs' (f32 vs cpu-bf16)
//     first-compression agreement − 10) and over the run within 10 points of the two CPU runs' —
//     random-weight attention is near-uniform, so the last bf16 bit flips top-k choices, and the
//     difference cascades over later layers and compressions (both CPU runs show it: on the
//     30-layer smollm2-135m shape the two CPU runs agree on 40–84 % of the sets at the first
//     compression for the score-based policies; H200 run of 2026-11-26, docs/gpu/). Decisions on
//     identical inputs are compared exactly by `decisions` and `primitives`.
//     Then a batch of three unequal prompts generating 64 greedy tokens each (device sampling in
//     the decode steps) must equal cpu-bf16's tokens, and a sampled run must reproduce itself;
//     and the device sampler against the CPU sampler: greedy == kvb::argmax, and for four
//     (temperature, top-p) settings a stratified grid of 2000 uniforms must pick the id-order
//     inverse CDF of kvb::sample_token's distribution (same kept set, same probabilities).
//     Read-selection policies (quest, seerattn_r) evict nothing (keep-sets 100 % required); their
//     logits are printed only, since their reads come from near-tied scores; the row
//     `readsel-probe` (a fixed selection, every shape) checks the ranged attention to <= 2e-2.
//   (equiv, decisions: --policies a,b restricts the policies to these registry names; default all.
//   equiv --backend cpu-bf16 is a dry run of the checks' own logic without a GPU: the backend under
//   test is the CPU, the device sampler part is skipped.)
//   kvb_cuda_check decisions [--shapes a,b,...] [--budget N] [--backend cuda|cpu]
//     Every registered policy but full, oracle and those with a restore pass (restorekv, which the
//     CUDA backend refuses) (policy_registry()), decisions on identical inputs
//     (read selections included): the engine runs the policy inside a
//     shadow wrapper that, at every call, also runs a second instance of the same spec on a copy of
//     the LayerStep without the device primitives, so that the host code computes the signals from
//     the host mirror of the same K/V, the same query ring and the same layer input (per-token
//     policy scalars saved and restored between the two). Pass: identical keep-sets at every call
//     and scalars within 1e-3 max rel; for policies that rewrite cached rows (PolicyNeeds::
//     writes_kv: think), the same written heads and tokens and rows within 1e-3 max rel, and only
//     the device run's writes are applied (host→device row copies, CudaBackend write_rows).
//     Prompts 300 and 700 (chunks of 256) + 40 forced decode tokens. `--backend cpu` runs the same wrapper on the CPU (both instances use host code).
//   kvb_cuda_check primitives [--shapes a,b,...]
//     The device policy primitives against their host fallbacks on identical inputs, inside a real
//     CUDA forward pass (a probe policy; prompt 300 tokens in chunks of 128, then 8 decode steps):
//     LayerStep::window_scores for every GQA reduction × pooling (vs scoring::window_importance +
//     pool1d on the host K/V mirror and query ring) and LayerStep::head_mlp in its three modes
//     (shared hidden on the layer input, per head, one head) vs the host loop. Pass: max |dev −
//     host| / max |host| ≤ 1e-3 for every call (both are f32 on the same numbers). Also the
//     pre-RoPE queries and keys (LayerStep::queries_pre_rope / keys_pre_rope: LocRet, Expected
//     Attention): host RoPE of the newest token's must give its post-RoPE q in the query ring
//     (≤ 1e-5) and its K row in the host mirror (≤ 1e-2, bf16).
//   kvb_cuda_check graphs [--shapes a,b,...]
//     Decode steps as CUDA graphs (the default for steps with no per-layer host work) against the
//     same steps launched directly (KVB_CUDA_GRAPHS=0), on one CudaBackend per mode driven by
//     the same teacher-forced script: ragged prompts (37, 300, 1100 tokens), 160 batched decode
//     steps crossing page boundaries and split-KV plan changes, a sequence joining (batch 3 → 4:
//     re-capture), one leaving (its page-table row is released) and a rollback behind the
//     backend (KVCache::truncate_from: page tables re-verified). Pass: logits of every step agree
//     to max |graph − direct| / max |direct| ≤ 1e-5 (the same kernels on the same data; expected
//     0), and the graph run captured at least twice and replayed the other steps.
//   kvb_cuda_check bandwidth [--mib N]
//     The copy-kernel HBM roofline (read + write bytes / time, median of 20).
// Exit status 0 when every check passes, 1 otherwise; errors as kvb::Error text, status 2.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/engine.h"
#include "engine/policies/resolved.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace {

using namespace kvb;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

struct Err {
  double max_rel = 0, l2_rel = 0;
};

Err compare(const std::vector<float>& a, const std::vector<float>& ref, int V) {
  Err e;
  for (size_t r = 0; r * V < ref.size(); ++r) {
    double mx = 0, md = 0, n2 = 0, d2 = 0;
    for (int i = 0; i < V; ++i) {
      const double x = a[r * V + i], y = ref[r * V + i];
      if (!std::isfinite(x)) return {INFINITY, INFINITY};
      mx = std::max(mx, std::fabs(y));
      md = std::max(md, std::fabs(x - y));
      n2 += y * y;
      d2 += (x - y) * (x - y);
    }
    e.max_rel = std::max(e.max_rel, mx > 0 ? md / mx : md);
    e.l2_rel = std::max(e.l2_rel, n2 > 0 ? std::sqrt(d2 / n2) : std::sqrt(d2));
  }
  return e;
}

using Snapshot = std::vector<std::vector<int32_t>>;  // [layer * Hkv + h] kept positions

/// A deterministic read-selection policy (PolicyNeeds::read_select) for `equiv`: every decode step,
/// query head hq of layer l reads fixed ranges of its kv head's L keys that depend only on (l, hq,
/// L) — the first 8 keys, a long range from 32 (over 300 keys: several attention units and a
/// combine), every third 16-key block from 16·(hq % 3) and the last 5 keys — and in odd layers
/// query heads hq ≡ 3 (mod 4) read nothing (zero output). Unlike Quest or SeerAttention-R its
/// reads cannot differ between backends, so the logits test the ranged attention path exactly.
class ReadProbePolicy final : public Policy {
 public:
  std::string name() const override { return "readsel-probe"; }
  nlohmann::json resolved_params() const override { return nlohmann::json::object(); }
  PolicyNeeds needs() const override {
    PolicyNeeds n;
    n.read_select = true;
    n.layer_hook = false;
    return n;
  }
  void on_layer_step(LayerStep&) override {}
  void select_reads(ReadStep& st) override {
    const int G = st.num_q_heads / st.num_kv_heads;
    st.spans.assign(st.num_q_heads, {});
    for (int hq = 0; hq < st.num_q_heads; ++hq) {
      if (st.layer % 2 == 1 && hq % 4 == 3) continue;
      const int32_t L = st.cache->length(st.seq, st.layer, hq / G);
      std::vector<uint8_t> mark(L, 0);
      auto take = [&](int32_t lo, int32_t hi) {
        for (int32_t t = std::max(lo, 0); t < std::min(hi, L); ++t) mark[t] = 1;
      };
      take(0, 8);
      take(32, 32 + 300 + 7 * hq);
      for (int32_t b = 16 * (hq % 3); b < L; b += 48) take(b, b + 16);
      take(L - 5, L);
      auto& sp = st.spans[hq];
      for (int32_t t = 0; t < L; ++t) {
        if (!mark[t]) continue;
        if (!sp.empty() && sp.back().second == t) sp.back().second = t + 1;
        else sp.emplace_back(t, t + 1);
      }
    }
  }
};

/// The policy of a spec, or the read-selection probe for "readsel-probe".
std::unique_ptr<Policy> check_policy(const std::string& spec, int64_t budget) {
  if (spec == "readsel-probe") return std::make_unique<ReadProbePolicy>();
  return ResolvedPolicy::resolve(spec, budget).build();
}

std::vector<float> run_score(const std::shared_ptr<Model>& m, const std::string& backend, const std::string& policy,
                             int64_t budget, const std::vector<int32_t>& prompt, const std::vector<int32_t>& forced,
                             std::vector<Snapshot>* snaps) {
  EngineOptions eo;
  eo.backend = backend;
  eo.prefill_chunk = 256;
  Engine e(m, eo, check_policy(policy, budget));
  const ModelConfig& c = m->config();
  if (snaps)
    e.on_step = [&](const KVCache& kv, SeqId seq) {
      Snapshot s;
      for (int l = 0; l < c.num_layers; ++l)
        for (int h = 0; h < c.num_kv_heads; ++h) {
          std::vector<int32_t> p(kv.length(seq, l, h));
          for (int32_t i = 0; i < static_cast<int32_t>(p.size()); ++i) p[i] = kv.position(seq, l, h, i);
          s.push_back(std::move(p));
        }
      snaps->push_back(std::move(s));
    };
  return e.score(prompt, forced);
}

/// Check-scale parameters of some policies (appended to the registry's spec): settings that make a
/// policy act within the checks' short prompts (budget 64, prompts 300/700, 12–40 decode tokens).
/// Every policy of the registry runs whether or not it is listed here.
const char* check_params(const std::string& name) {
  if (name == "duoattention") return "sinks=4,recent=60";
  if (name == "adakv") return "window=16";  // kvpress's window 64 leaves nothing to compete for at budget 64
  if (name == "wgkv") return "window=16,obs_window=16";
  if (name == "foresightkv") return "sample=false,window=32,buffer=32";
  if (name == "locret") return "chunk_size=128,stabilizers=32,local_len=16,head_hidden=64";  // several chunks
  return "";
}

/// The policy specs `equiv` and `decisions` run: every registered policy but `oracle` (it needs
/// fidelity's two-pass trace, which Engine::score has none of), from policy_registry() — learned
/// ones with their random-weights parameter (LearnedWeightsInfo::random_param = 0), check-scale
/// settings from check_params — plus the SnapKV GQA/pooling variant, ForesightKV's seeded
/// sampling, and the options that rewrite cached rows (snapkv then=think, knorm merge=true and
/// rerotate=true).
std::vector<std::string> only_policies;  // --policies: restrict equiv/decisions to these names (empty: all)

std::vector<std::string> equiv_policies() {
  std::vector<std::string> out;
  for (const auto& info : policy_registry()) {
    const std::string& n = info.name;
    if (n == "oracle") continue;
    if (!only_policies.empty() && n != "full" &&
        std::find(only_policies.begin(), only_policies.end(), n) == only_policies.end())
      continue;
    std::string spec = n, sep = ":";
    if (info.learned) {
      spec += sep + info.learned->random_param + "=0";
      sep = ",";
    }
    if (const std::string extra = check_params(n); !extra.empty()) spec += sep + extra;
    // A restore pass (restorekv: input embeddings through a LoRA adapter) is not implemented by the
    // CUDA backend, which refuses the policy (cuda::check_policy_support): nothing to compare.
    if (make_policy(PolicySpec::parse(spec))->needs().restore_pass) continue;
    out.push_back(spec);
    if (n == "snapkv") out.push_back("snapkv:gqa=mean,pool=avg");
    if (n == "snapkv") out.push_back("snapkv:then=think");  // K/V row writes: ThinK after the keep-set
    if (n == "knorm") {                                     // K/V row writes: merged values, re-rotated keys
      out.push_back("knorm:merge=true");
      out.push_back("knorm:rerotate=true");
    }
    if (n == "foresightkv") out.push_back("foresightkv:random_scorer=0,sample=true,seed=3,window=32,buffer=32");
  }
  return out;
}

/// True for a spec whose policy selects reads at decode (PolicyNeeds::read_select).
bool reads_selected(const std::string& spec) { return check_policy(spec, 64)->needs().read_select; }

/// A model shape of the checks: kvb::model_shape's names, plus random-weight shapes of the
/// sliding-window and Gemma 2 architectures (issue 30):
///   mistral-w160: Mistral block, D = 128, every layer slides with window 160 (so prompts of 300
///     and 700 tokens, and split-KV decode with 256-key splits, see keys outside the window);
///   gemma2-w96: Gemma 2 block (GeLU-tanh, post-attention/post-MLP norms, √H embedding scale,
///     (1 + w) norms), D = 256, even layers slide with window 96, query_pre_attn_scalar 144 (a scale
///     that differs from 1/√D), attention-logit soft-cap 1 and final-logit soft-cap 5 (small
///     enough to bite on random weights, whose scores are O(1)).
ModelConfig check_shape(const std::string& name) {
  if (name == "mistral-w160") {
    ModelConfig c = shape_config("mistral", 2048, 512, 1024, 4, 4, 2, 128, 10000, true);
    c.layer_window.assign(static_cast<size_t>(c.num_layers), 160);
    return c;
  }
  if (name == "gemma2-w96") {
    ModelConfig c = shape_config("gemma2", 2048, 512, 1024, 4, 4, 2, 256, 10000, true);
    c.layer_window.assign(static_cast<size_t>(c.num_layers), 0);
    for (size_t l = 0; l < c.layer_window.size(); l += 2) c.layer_window[l] = 96;
    c.query_pre_attn_scalar = 144;
    c.attn_logit_softcap = 1.0;
    c.final_logit_softcap = 5.0;
    return c;
  }
  return model_shape(name);
}

/// The CPU sampler's distribution (kvb::sample_token: softmax(logits / T) in double, the smallest
/// descending prefix with mass ≥ top_p) as kept probabilities in id order, normalised.
std::vector<double> cpu_sampler_dist(const float* lg, int V, float T, float top_p) {
  std::vector<std::pair<float, int32_t>> sc(V);
  for (int i = 0; i < V; ++i) sc[i] = {lg[i] / T, i};
  std::sort(sc.begin(), sc.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  std::vector<double> p(V, 0.0), sorted(V);
  double z = 0;
  for (int i = 0; i < V; ++i) z += (sorted[i] = std::exp(static_cast<double>(sc[i].first - sc[0].first)));
  int keep = V;
  if (top_p < 1.0f) {
    double cum = 0;
    for (int i = 0; i < V; ++i)
      if ((cum += sorted[i] / z) >= top_p) {
        keep = i + 1;
        break;
      }
  }
  double kept = 0;
  for (int i = 0; i < keep; ++i) kept += sorted[i];
  for (int i = 0; i < keep; ++i) p[sc[i].second] = sorted[i] / kept;
  return p;
}

/// Keep-set agreement of two runs' snapshots: percent of identical (step, layer, head) sets, and
/// the same at the first step where a compression shows (some head's kept positions are not
/// 0..n−1), before any earlier difference can have cascaded.
struct KeepAgreement {
  double all = 100.0, first = 100.0;
  bool same_steps = true;
};
KeepAgreement agreement(const std::vector<Snapshot>& a, const std::vector<Snapshot>& b) {
  KeepAgreement r;
  r.same_steps = a.size() == b.size();
  size_t same = 0, total = 0;
  bool seen_first = false;
  for (size_t st = 0; st < std::min(a.size(), b.size()); ++st) {
    size_t s_same = 0;
    bool compressed = false;
    for (size_t h = 0; h < a[st].size(); ++h) {
      ++total;
      s_same += a[st][h] == b[st][h];
      const auto& p = a[st][h];
      compressed = compressed || (!p.empty() && p.back() + 1 != static_cast<int32_t>(p.size()));
    }
    same += s_same;
    if (compressed && !seen_first) {
      seen_first = true;
      r.first = a[st].empty() ? 100.0 : 100.0 * s_same / a[st].size();
    }
  }
  r.all = total ? 100.0 * same / total : 100.0;
  return r;
}

/// One `equiv` row: policy `pol` (budget `budget`; "full" runs without one) on `prompt` then
/// `forced`, on the f32 CPU, cpu-bf16 and `dev`: logits and keep-set agreement printed as one table
/// row. Returns whether the row passes (the criteria of equiv's header); an exception is a FAIL row.
bool equiv_row(const std::shared_ptr<Model>& m, const std::string& shape, const std::string& pol, int64_t budget,
               const std::vector<int32_t>& prompt, const std::vector<int32_t>& forced, const std::string& dev, int V) {
  const int len = static_cast<int>(prompt.size());
  const int64_t b = pol == "full" ? 0 : budget;
  const bool score_free = pol == "full" || pol == "streamingllm" || pol == "random";
  const bool selects = pol != "readsel-probe" && reads_selected(pol);
  try {
    std::vector<Snapshot> sc, sg, sf;
    const auto f32 = run_score(m, "cpu", pol, b, prompt, forced, &sf);
    const auto ref = run_score(m, "cpu-bf16", pol, b, prompt, forced, &sc);
    const auto got = run_score(m, dev, pol, b, prompt, forced, &sg);
    const Err ef = compare(got, f32, V), eb = compare(got, ref, V);
    const KeepAgreement ka = agreement(sg, sc), floor = agreement(sf, sc);
    bool pass = ka.same_steps;
    if (score_free) pass = pass && ka.all == 100.0;
    else pass = pass && ka.first >= std::min(95.0, floor.first - 10.0) && ka.all >= floor.all - 10.0;
    if (selects) pass = ka.same_steps && ka.all == 100.0;  // nothing is evicted; reads: see the header
    else if (ka.all == 100.0) pass = pass && eb.max_rel <= 2e-2;
    if (pol == "full") pass = pass && ef.max_rel <= 2e-2;
    std::printf("%-14s %-58s %6d %11.3e %11.3e %8.2f %8.2f %8.2f %8.2f  %s\n", shape.c_str(), pol.c_str(), len,
                ef.max_rel, eb.max_rel, ka.first, ka.all, floor.first, floor.all, pass ? "ok" : "FAIL");
    return pass;
  } catch (const std::exception& e) {
    std::printf("%-14s %-58s %6d  FAIL: %s\n", shape.c_str(), pol.c_str(), len, e.what());
    return false;
  }
}

/// `equiv`'s engine-level generation of `shape` (tokens drawn from `rng` through `tokd`): prints
/// its row and returns whether it passes.
bool equiv_generation(const std::shared_ptr<Model>& m, const std::string& shape, const std::string& dev,
                      std::mt19937& rng, std::uniform_int_distribution<int32_t>& tokd) {
  // Engine-level generation, a batch of three unequal prompts, 64 greedy tokens each, decode
  // steps sampling on the device: tokens must equal cpu-bf16's (f32 CPU agreement printed);
  // a sampled run must reproduce itself.
  std::vector<GenerationRequest> reqs(4);
  for (size_t r = 0; r < reqs.size(); ++r) {
    reqs[r].prompt.resize(40 + 37 * r);
    for (auto& t : reqs[r].prompt) t = tokd(rng);
    reqs[r].max_new_tokens = 64;
    reqs[r].seed = 100 + r;
  }
  reqs[3].sampling.temperature = 0.8f;
  reqs[3].sampling.top_p = 0.95f;
  auto gen = [&](const std::string& backend) {
    EngineOptions eo;
    eo.backend = backend;
    Engine e(m, eo, make_policy(PolicySpec::parse("full")));
    return e.generate(reqs, nullptr);
  };
  const auto f32 = gen("cpu");
  const auto ref = gen("cpu-bf16");
  const auto got = gen(dev);
  const auto again = gen(dev);
  size_t lead = 0, lead32 = 0, n = 0;
  for (size_t r = 0; r < 3; ++r) {
    auto common = [](const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
      size_t i = 0;
      while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
      return i;
    };
    lead += common(ref[r].tokens, got[r].tokens);
    lead32 += common(f32[r].tokens, got[r].tokens);
    n += ref[r].tokens.size();
  }
  const bool repro = got[3].tokens == again[3].tokens && !got[3].tokens.empty();
  const bool same = lead == n && n == 3 * 64;
  std::printf(
      "%-14s generate (prompts 40/77/114, batched): greedy cuda == cpu-bf16 for %zu of %zu tokens, == f32 cpu "
      "for %zu (info); sampled run reproducible: %s  %s\n",
      shape.c_str(), lead, n, lead32, repro ? "yes" : "NO", repro && same ? "ok" : "FAIL");
  return repro && same;
}

/// `equiv`'s device-sampling check of `shape` (config `cfg`; tokens drawn from `rng` through
/// `tokd`): prints its row and returns whether it passes.
bool equiv_sampling(const std::shared_ptr<Model>& m, const ModelConfig& cfg, const std::string& shape,
                    std::mt19937& rng, std::uniform_int_distribution<int32_t>& tokd) {
  const int V = static_cast<int>(cfg.vocab_size);
  // Device sampling against the CPU sampler: greedy against kvb::argmax of the same logits;
  // temperature + top-p: for a stratified grid of uniforms u, the device's pick must be the
  // id-order inverse CDF of the CPU sampler's distribution (kvb::sample_token's kept set and
  // probabilities) at u — i.e. the same distribution; misses are allowed only where u lies
  // within 1e-4 of a CDF step (f32 vs double rounding).
  KVCacheConfig kc = kv_cache_config(cfg);
  kc.payload = kv_payload_for("cuda", PolicyNeeds{});  // full cache: no host K/V
  KVCache cache(kc);
  CudaBackend be(*m, cache);
  std::vector<int32_t> toks(64);
  for (auto& t : toks) t = tokd(rng);
  std::vector<ForwardItem> items(4);
  for (int b = 0; b < 4; ++b) {
    items[b].seq = cache.add_sequence();
    items[b].tokens = toks.data() + 16 * b;
    items[b].n = 16;
    items[b].prefill = items[b].prefill_last = true;
  }
  std::vector<float> logits;
  be.forward(items, nullptr, logits);
  std::vector<SamplingParams> sp(4);
  const auto dev = be.sample_last(sp, std::vector<float>(4, 0.5f));
  int agree = 0;
  for (int b = 0; b < 4; ++b) agree += dev[b] == argmax(&logits[static_cast<size_t>(b) * V], V);
  const float temps[4] = {0.05f, 0.2f, 0.7f, 1.0f}, tops[4] = {1.0f, 0.9f, 0.5f, 0.95f};
  std::vector<SamplingParams> tp(4);
  std::vector<std::vector<double>> cdf(4);
  for (int b = 0; b < 4; ++b) {
    tp[b].temperature = temps[b];
    tp[b].top_p = tops[b];
    const auto p = cpu_sampler_dist(&logits[static_cast<size_t>(b) * V], V, temps[b], tops[b]);
    cdf[b].resize(V);
    double c = 0;
    for (int i = 0; i < V; ++i) cdf[b][i] = (c += p[i]);
  }
  const int N = 2000;
  int match = 0, near = 0, bad = 0;
  for (int k = 0; k < N; ++k) {
    const float uu = (k + 0.5f) / N;
    const auto drawn = be.sample_last(tp, std::vector<float>(4, uu));
    for (int b = 0; b < 4; ++b) {
      const auto& C = cdf[b];
      const int exp = static_cast<int>(std::upper_bound(C.begin(), C.end(), static_cast<double>(uu)) - C.begin());
      const int e = std::min(exp, V - 1);
      if (drawn[b] == e) ++match;
      else if (drawn[b] >= 0 && drawn[b] < V &&
               (std::fabs(C[drawn[b]] - uu) < 1e-4 || (drawn[b] > 0 && std::fabs(C[drawn[b] - 1] - uu) < 1e-4)))
        ++near;
      else ++bad;
    }
  }
  const bool pass = agree == 4 && bad == 0;
  std::printf(
      "%-14s device sampling: greedy == host argmax %d/4; T/top-p (0.05/1, 0.2/0.9, 0.7/0.5, 1/0.95) "
      "picks == CPU sampler's inverse CDF %d/%d, at a CDF step (rounding) %d, wrong %d  %s\n",
      shape.c_str(), agree, match, 4 * N, near, bad, pass ? "ok" : "FAIL");
  return pass;
}

int equiv(const std::vector<std::string>& shapes, int64_t budget, const std::vector<std::string>& policy_shapes,
          const std::string& dev) {
  bool ok = true;
  auto policies = equiv_policies();
  policies.push_back("readsel-probe");
  std::printf(
      "Logits: CUDA vs the f32 CPU engine (bf16 weights and KV on the device; pass max_rel <= 2e-2 for the full\n"
      "cache) and vs cpu-bf16 (the CPU engine rounding where the device stores bf16; pass <= 2e-2 where the\n"
      "keep-sets agree). Keep-sets of every (layer, kv_head) after every step, CUDA vs cpu-bf16: 'first' at\n"
      "the first compression, 'all' over the run; 'floor' is the same agreement between the two CPU runs\n"
      "(f32 vs cpu-bf16), i.e. what storage rounding alone does to a policy on near-uniform random-weight\n"
      "attention; 'ffirst' the same at the first compression. Pass: 100%% for score-free policies (full,\n"
      "streamingllm, random); otherwise first >= min(95, ffirst - 10) and all >= floor - 10. Decisions on\n"
      "identical inputs are checked exactly in `decisions` and `primitives`. Read-selection policies (quest,\n"
      "seerattn_r) keep every token: keep-sets 100%%; their logits are informational (their reads come from\n"
      "near-tied scores on random weights); 'readsel-probe' reads fixed ranges and must match <= 2e-2.\n");
  std::printf("%-14s %-58s %6s %11s %11s %8s %8s %8s %8s  %s\n", "shape", "policy", "prompt", "rel_vs_f32",
              "rel_vs_bf16", "first_%", "all_%", "ffirst_%", "floor_%", "verdict");
  for (const auto& shape : shapes) {
    const bool all_policies = std::find(policy_shapes.begin(), policy_shapes.end(), shape) != policy_shapes.end();
    const ModelConfig cfg = check_shape(shape);
    auto m = Model::random(cfg, 7, WeightFormat::kBF16);
    const int V = static_cast<int>(cfg.vocab_size);
    std::mt19937 rng(11);
    std::uniform_int_distribution<int32_t> tokd(0, V - 1);
    for (int len : {37, 300, 700}) {
      if (len + 12 > cfg.max_position_embeddings) continue;
      std::vector<int32_t> prompt(len), forced(12);
      for (auto& t : prompt) t = tokd(rng);
      for (auto& t : forced) t = tokd(rng);
      for (const std::string& pol : policies) {
        // Policies compress only beyond the budget; the read-selection probe runs on every shape
        // (sliding windows and soft-caps with ranged reads).
        if (pol != "full" && (len < 300 || (!all_policies && pol != "readsel-probe"))) continue;
        ok = equiv_row(m, shape, pol, budget, prompt, forced, dev, V) && ok;
        std::fflush(stdout);
      }
    }
    ok = equiv_generation(m, shape, dev, rng, tokd) && ok;
    if (dev != "cuda") continue;  // a dry run of the checks on a CPU backend (--backend): no device sampler
    ok = equiv_sampling(m, cfg, shape, rng, tokd) && ok;
  }
  std::printf("equivalence: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

/// The probe policy of `primitives`: keeps everything, compares device and host primitives.
class ProbePolicy final : public Policy {
 public:
  double worst_scores = 0, worst_mlp = 0, worst_qpre = 0, worst_kpre = 0;
  int64_t calls = 0, select_calls = 0, select_same = 0, pre_rope_calls = 0;
  std::string name() const override { return "probe"; }
  nlohmann::json resolved_params() const override { return nlohmann::json::object(); }
  PolicyNeeds needs() const override {
    PolicyNeeds n;
    n.window_queries = 8;
    n.layer_input = true;
    n.host_kv = true;
    n.keys_pre_rope = true;     // LocRet
    n.queries_pre_rope = true;  // LocRet, Expected Attention
    return n;
  }
  void on_layer_step(LayerStep& st) override {
    if (!st.window_scores || !st.head_mlp) kvb::fail("probe: the backend provides no device primitives");
    if (!st.queries_pre_rope || !st.keys_pre_rope) kvb::fail("probe: the backend provides no pre-RoPE queries/keys");
    check_pre_rope(st);
    LayerStep host = st;
    host.window_scores = nullptr;
    host.head_mlp = nullptr;
    host.window_attention = nullptr;
    for (auto gqa : {scoring::Gqa::kMaxLogits, scoring::Gqa::kMax, scoring::Gqa::kMean})
      for (auto pool : {scoring::Pool::kNone, scoring::Pool::kMax, scoring::Pool::kAvg})
        for (int h = 0; h < st.num_kv_heads; ++h) {
          const WindowScoreSpec sp{gqa, pool, 5};
          int wd = 0, wh = 0;
          const auto dev = st.window_scores(h, sp, &wd);
          const auto ref = scoring::window_scores(host, h, sp, &wh);
          if (wd != wh || dev.size() != ref.size()) kvb::fail("probe: window_scores sizes differ");
          worst_scores = std::max(worst_scores, rel(dev, ref));
          ++calls;
          // The decision the SnapKV family takes from these scores (policies' shared selection,
          // scoring::top_k_indices semantics: the k largest, lowest index on ties), k = a quarter.
          if (dev.size() >= 8) {
            const size_t k = dev.size() / 4;
            auto top = [k](const std::vector<float>& v) {
              std::vector<int32_t> idx(v.size());
              for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
              std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                                [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
              idx.resize(k);
              std::sort(idx.begin(), idx.end());
              return idx;
            };
            ++select_calls;
            select_same += top(dev) == top(ref);
          }
        }
    // The three head_mlp modes on random weights of the step's shapes.
    const int Hk = st.num_kv_heads, D = st.head_dim, n = st.n_new;
    if (shared_.w1.empty()) {
      std::mt19937 g(3);
      std::normal_distribution<float> nd(0.f, 0.05f);
      auto fill = [&](std::vector<float>& v, size_t k) {
        v.resize(k);
        for (float& f : v) f = nd(g);
      };
      fill(shared_.w1, static_cast<size_t>(32) * st.hidden_size);
      fill(shared_.b1, 32);
      fill(shared_.w2, static_cast<size_t>(Hk) * 32);
      fill(shared_.b2, Hk);
      fill(head_.w1, static_cast<size_t>(Hk) * 24 * 2 * D);
      fill(head_.b1, static_cast<size_t>(Hk) * 24);
      fill(head_.w2, static_cast<size_t>(Hk) * 24);
      fill(head_.b2, Hk);
    }
    HeadMlp a{Hk,
              st.hidden_size,
              32,
              true,
              HeadMlp::Act::kSilu,
              shared_.w1.data(),
              shared_.b1.data(),
              shared_.w2.data(),
              shared_.b2.data()};
    HeadMlp b{Hk,
              2 * D,
              24,
              false,
              HeadMlp::Act::kGeluErf,
              head_.w1.data(),
              head_.b1.data(),
              head_.w2.data(),
              head_.b2.data()};
    std::vector<float> x(static_cast<size_t>(n) * Hk * 2 * D);
    std::mt19937 g(static_cast<uint32_t>(st.layer * 7919 + st.seq_len));
    std::normal_distribution<float> nd(0.f, 1.f);
    for (float& f : x) f = nd(g);
    std::vector<float> od(static_cast<size_t>(n) * Hk), oh(od.size());
    st.head_mlp(a, nullptr, n, -1, od.data());
    scoring::head_mlp(host, a, nullptr, n, -1, oh.data());
    worst_mlp = std::max(worst_mlp, rel(od, oh));
    st.head_mlp(b, x.data(), n, -1, od.data());
    scoring::head_mlp(host, b, x.data(), n, -1, oh.data());
    worst_mlp = std::max(worst_mlp, rel(od, oh));
    od.resize(n);
    oh.resize(n);
    st.head_mlp(b, x.data(), n, Hk - 1, od.data());
    scoring::head_mlp(host, b, x.data(), n, Hk - 1, oh.data());
    worst_mlp = std::max(worst_mlp, rel(od, oh));
    calls += 3;
  }

 private:
  /// The pre-RoPE signals (LayerStep::queries_pre_rope / keys_pre_rope, device copies) against
  /// what the forward stored after RoPE: the host RoPE (kvb::apply_rope) of the newest token's
  /// pre-RoPE query must give its post-RoPE query in the query ring (f32 on both sides), and of
  /// its pre-RoPE key the K row in the host mirror (bf16-rounded there).
  void check_pre_rope(LayerStep& st) {
    const int Hq = st.num_q_heads, Hk = st.num_kv_heads, D = st.head_dim, n = st.n_new;
    int w = 0;
    const float* ring = st.window_queries(&w);  // [Hq, w, D], newest query last
    if (w < 1) return;
    std::vector<float> q(st.queries_pre_rope + static_cast<size_t>(n - 1) * Hq * D,
                         st.queries_pre_rope + static_cast<size_t>(n) * Hq * D);
    std::vector<float> k(st.keys_pre_rope + static_cast<size_t>(n - 1) * Hk * D,
                         st.keys_pre_rope + static_cast<size_t>(n) * Hk * D);
    const int64_t pos = st.seq_len - 1;
    kvb::apply_rope(q.data(), Hq, D, pos, st.rope_inv_freq, st.rope_mscale);
    kvb::apply_rope(k.data(), Hk, D, pos, st.rope_inv_freq, st.rope_mscale);
    std::vector<float> ref_q(q.size()), ref_k(k.size());
    for (int hq = 0; hq < Hq; ++hq)
      std::copy_n(ring + (static_cast<size_t>(hq) * w + (w - 1)) * D, D, &ref_q[static_cast<size_t>(hq) * D]);
    for (int h = 0; h < Hk; ++h) {
      const int32_t L = st.cache->length(st.seq, st.layer, h);
      std::copy_n(st.cache->key(st.seq, st.layer, h, L - 1), D, &ref_k[static_cast<size_t>(h) * D]);
    }
    worst_qpre = std::max(worst_qpre, rel(q, ref_q));
    worst_kpre = std::max(worst_kpre, rel(k, ref_k));
    ++pre_rope_calls;
  }

  static double rel(const std::vector<float>& a, const std::vector<float>& b) {
    double mx = 0, md = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!std::isfinite(a[i]) && a[i] != b[i]) return INFINITY;
      if (!std::isfinite(b[i])) continue;
      mx = std::max(mx, std::fabs(static_cast<double>(b[i])));
      md = std::max(md, std::fabs(static_cast<double>(a[i]) - b[i]));
    }
    return mx > 1e-6 ? md / mx : md;
  }
  struct W {
    std::vector<float> w1, b1, w2, b2;
  } shared_, head_;
};

int primitives(const std::vector<std::string>& shapes) {
  bool ok = true;
  for (const auto& shape : shapes) {
    const ModelConfig cfg = check_shape(shape);
    auto m = Model::random(cfg, 7, WeightFormat::kBF16);
    std::mt19937 rng(13);
    std::uniform_int_distribution<int32_t> tokd(0, static_cast<int32_t>(cfg.vocab_size) - 1);
    std::vector<int32_t> prompt(300), forced(8);
    for (auto& t : prompt) t = tokd(rng);
    for (auto& t : forced) t = tokd(rng);
    EngineOptions eo;
    eo.backend = "cuda";
    eo.prefill_chunk = 128;
    auto probe = std::make_unique<ProbePolicy>();
    ProbePolicy* p = probe.get();
    Engine e(m, eo, std::move(probe));
    e.score(prompt, forced);
    const double same_pct = p->select_calls ? 100.0 * p->select_same / p->select_calls : 0.0;
    const bool pass = p->calls > 0 && p->worst_scores <= 1e-3 && p->worst_mlp <= 1e-3 && same_pct >= 99.0 &&
                      p->pre_rope_calls > 0 && p->worst_qpre <= 1e-5 && p->worst_kpre <= 1e-2;
    ok = ok && pass;
    std::printf(
        "%-14s primitives: %lld calls, window_scores max rel err %.3e, head_mlp max rel err %.3e, top-25%% "
        "keep-sets from device vs host scores identical in %lld/%lld; pre-RoPE q/k (%lld calls) vs host RoPE "
        "of the stored q/k: max rel err %.3e (<= 1e-5) / %.3e (<= 1e-2, bf16 K)  %s\n",
        shape.c_str(), static_cast<long long>(p->calls), p->worst_scores, p->worst_mlp,
        static_cast<long long>(p->select_same), static_cast<long long>(p->select_calls),
        static_cast<long long>(p->pre_rope_calls), p->worst_qpre, p->worst_kpre, pass ? "ok" : "FAIL");
    std::fflush(stdout);
  }
  std::printf("primitives: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

/// The policy wrapper of `decisions`: every call runs the wrapped policy (A, on the engine's
/// LayerStep with the device primitives) and a second instance of the same spec (B, on a copy of
/// the step with the primitives removed, so that its host code computes the signals from the host
/// mirror of the same K/V, the same query ring and the same layer input). The per-token policy
/// scalars of the layer are saved before B, restored before A, and compared afterwards; keep-sets
/// must be identical. Only A's keep-sets are applied, so the run is the engine's own.
class ShadowPolicy final : public CompositePolicy {
 public:
  explicit ShadowPolicy(const std::string& spec, int64_t budget)
      : ShadowPolicy(ResolvedPolicy::resolve(spec, budget)) {}
  explicit ShadowPolicy(const ResolvedPolicy& p) : a_(p.build()), b_(p.build()) {
    forward_sequences_to({a_.get(), b_.get()});
  }
  int64_t calls = 0, keep_calls = 0, keep_same = 0;
  double worst_scalar = 0;
  std::string first_diff;
  std::string name() const override { return a_->name(); }
  nlohmann::json resolved_params() const override { return a_->resolved_params(); }
  PolicyNeeds needs() const override {
    PolicyNeeds n = a_->needs();
    n.host_kv = true;               // B's host fallbacks read cached keys/values
    n.layer_input_via_mlp = false;  // ... and the layer input on the host
    return n;
  }
  void on_layer_step(LayerStep& st) override {
    ++calls;
    const int S = st.cache->config().num_scalars;
    auto save = [&] {
      std::vector<std::vector<float>> v(st.num_kv_heads);
      if (S == 0) return v;
      for (int h = 0; h < st.num_kv_heads; ++h) {
        const int32_t L = st.cache->length(st.seq, st.layer, h);
        for (int32_t i = 0; i < L; ++i) {
          const float* x = st.cache->scalars(st.seq, st.layer, h, i);
          v[h].insert(v[h].end(), x, x + S);
        }
      }
      return v;
    };
    auto restore = [&](const std::vector<std::vector<float>>& v) {
      if (S == 0) return;
      for (int h = 0; h < st.num_kv_heads; ++h)
        for (int32_t i = 0; i < st.cache->length(st.seq, st.layer, h); ++i)
          std::memcpy(st.cache->scalars(st.seq, st.layer, h, i), &v[h][static_cast<size_t>(i) * S], S * sizeof(float));
    };
    const auto before = save();
    LayerStep host = st;
    host.window_scores = nullptr;
    host.head_mlp = nullptr;
    host.window_attention = nullptr;
    // host.out_proj_head stays: both backends hand out W_o from the host Model (criticalkv).
    b_->on_layer_step(host);
    const auto after_b = save();
    restore(before);
    a_->on_layer_step(st);
    const auto after_a = save();
    for (int h = 0; h < st.num_kv_heads; ++h) {
      double mx = 0, md = 0;
      for (size_t i = 0; i < after_a[h].size(); ++i) {
        mx = std::max(mx, static_cast<double>(std::fabs(after_b[h][i])));
        md = std::max(md, static_cast<double>(std::fabs(after_a[h][i] - after_b[h][i])));
      }
      worst_scalar = std::max(worst_scalar, mx > 0 ? md / mx : md);
    }
    compare_keeps(st.keeps, host.keeps, "layer " + std::to_string(st.layer));
    compare_writes(st.writes, host.writes, "writes, layer " + std::to_string(st.layer));
  }
  void on_step_end(StepEnd& se) override {
    StepEnd other = se;
    b_->on_step_end(other);
    a_->on_step_end(se);
    auto flat = [](const std::vector<StepEnd::Keep>& k) {
      std::vector<std::tuple<int, int, std::vector<int32_t>>> out;
      for (const auto& x : k) out.emplace_back(x.layer, x.head, x.indices);
      return out;
    };
    compare_keeps(flat(se.keeps), flat(other.keeps), "step end");
  }
  /// Scoring passes (PolicyNeeds::scoring_pass, kvzip): both instances plan them (they must ask
  /// for the same tokens); the engine runs A's, whose layer steps reach both through
  /// on_layer_step; then both cut, and the cuts must be equal.
  std::vector<std::vector<int32_t>> scoring_passes(const ScoringPassRequest& r) override {
    std::vector<std::vector<int32_t>> pb = b_->scoring_passes(r), pa = a_->scoring_passes(r);
    compare_keeps(pa, pb, "scoring passes");
    return pa;
  }
  void on_scoring_passes_end(StepEnd& se) override {
    StepEnd other = se;
    b_->on_scoring_passes_end(other);
    a_->on_scoring_passes_end(se);
    std::vector<std::tuple<int, int, std::vector<int32_t>>> fa, fb;
    for (const auto& x : se.keeps) fa.emplace_back(x.layer, x.head, x.indices);
    for (const auto& x : other.keeps) fb.emplace_back(x.layer, x.head, x.indices);
    compare_keeps(fa, fb, "scoring passes' cut");
  }
  void select_reads(ReadStep& rs) override {
    ++calls;
    ReadStep other = rs;
    b_->select_reads(other);
    a_->select_reads(rs);
    compare_keeps(rs.spans, other.spans, "reads, layer " + std::to_string(rs.layer));
  }

 private:
  template <typename K>
  void compare_keeps(const std::vector<K>& a, const std::vector<K>& b, const std::string& where) {
    ++keep_calls;
    const bool same = a == b;
    keep_same += same;
    if (!same && first_diff.empty()) first_diff = where + " (call " + std::to_string(calls) + ")";
  }
  /// K/V row writes (PolicyNeeds::writes_kv) of A and B: the same heads, kinds and token indices,
  /// rows within 1e-3 of the largest magnitude of B's rows (worst_scalar takes the error). Counted
  /// as a keep-set call, so a differing write fails the policy.
  void compare_writes(const std::vector<KvRowWrite>& a, const std::vector<KvRowWrite>& b, const std::string& where) {
    if (a.empty() && b.empty()) return;
    ++keep_calls;
    bool same = a.size() == b.size();
    for (size_t i = 0; same && i < a.size(); ++i) {
      same = a[i].head == b[i].head && a[i].values == b[i].values && a[i].index == b[i].index &&
             a[i].rows.size() == b[i].rows.size();
      double mx = 0, md = 0;
      for (size_t j = 0; same && j < a[i].rows.size(); ++j) {
        mx = std::max(mx, static_cast<double>(std::fabs(b[i].rows[j])));
        md = std::max(md, static_cast<double>(std::fabs(a[i].rows[j] - b[i].rows[j])));
      }
      if (same) worst_scalar = std::max(worst_scalar, mx > 0 ? md / mx : md);
    }
    keep_same += same;
    if (!same && first_diff.empty()) first_diff = where + " (call " + std::to_string(calls) + ")";
  }
  std::unique_ptr<Policy> a_, b_;
};

int decisions(const std::vector<std::string>& shapes, int64_t budget, const std::string& backend) {
  bool ok = true;
  std::printf(
      "Policy decisions on identical inputs: each policy call on the %s backend runs twice, with the\n"
      "device primitives and with the host code on the same mirrored K/V, queries and layer input;\n"
      "pass: identical keep-sets (and K/V row writes' heads and tokens) at every call, scalars and\n"
      "written rows within 1e-3 (max rel).\n",
      backend.c_str());
  std::printf("%-14s %-58s %6s %8s %12s %12s  %s\n", "shape", "policy", "prompt", "calls", "keep_same", "scalar_err",
              "verdict");
  for (const auto& shape : shapes) {
    const ModelConfig cfg = check_shape(shape);
    auto m = Model::random(cfg, 7, WeightFormat::kBF16);
    std::mt19937 rng(19);
    std::uniform_int_distribution<int32_t> tokd(0, static_cast<int32_t>(cfg.vocab_size) - 1);
    for (int len : {300, 700}) {
      std::vector<int32_t> prompt(len), forced(40);
      for (auto& t : prompt) t = tokd(rng);
      for (auto& t : forced) t = tokd(rng);
      for (const std::string& pol : equiv_policies()) {
        if (pol == "full") continue;
        try {
          EngineOptions eo;
          eo.backend = backend;
          eo.prefill_chunk = 256;
          auto shadow = std::make_unique<ShadowPolicy>(pol, budget);
          ShadowPolicy* sp = shadow.get();
          Engine e(m, eo, std::move(shadow));
          e.score(prompt, forced);
          const bool pass = sp->keep_calls > 0 && sp->keep_same == sp->keep_calls && sp->worst_scalar <= 1e-3;
          ok = ok && pass;
          std::printf("%-14s %-58s %6d %8lld %6lld/%-5lld %12.3e  %s%s\n", shape.c_str(), pol.c_str(), len,
                      static_cast<long long>(sp->calls), static_cast<long long>(sp->keep_same),
                      static_cast<long long>(sp->keep_calls), sp->worst_scalar, pass ? "ok" : "FAIL",
                      sp->first_diff.empty() ? "" : ("  first difference: " + sp->first_diff).c_str());
        } catch (const std::exception& ex) {
          ok = false;
          std::printf("%-14s %-58s %6d  FAIL: %s\n", shape.c_str(), pol.c_str(), len, ex.what());
        }
        std::fflush(stdout);
      }
    }
  }
  std::printf("decisions: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

/// One mode of `graphs`: the scripted workload on a fresh CudaBackend; logits of every step.
std::vector<std::vector<float>> graph_script(const Model& m, bool use_graphs, std::string* report) {
  setenv("KVB_CUDA_GRAPHS", use_graphs ? "1" : "0", 1);
  const ModelConfig& cfg = m.config();
  KVCacheConfig kc = kv_cache_config(cfg);
  kc.payload = kv_payload_for("cuda", PolicyNeeds{});  // full cache: no host K/V
  KVCache cache(kc);
  CudaBackend be(m, cache);
  std::mt19937 rng(17);
  std::uniform_int_distribution<int32_t> tokd(0, static_cast<int32_t>(cfg.vocab_size) - 1);
  struct Live {
    SeqId id;
    int64_t pos;
  };
  std::vector<Live> live;
  std::vector<std::vector<float>> out;
  std::vector<float> logits;
  auto add = [&](int len) {
    std::vector<int32_t> prompt(len);
    for (auto& t : prompt) t = tokd(rng);
    std::vector<ForwardItem> it(1);
    it[0].seq = cache.add_sequence();
    it[0].tokens = prompt.data();
    it[0].n = len;
    it[0].prefill = it[0].prefill_last = true;
    be.forward(it, nullptr, logits);
    out.push_back(logits);
    live.push_back({it[0].seq, len});
  };
  for (int len : {37, 300, 1100}) add(len);
  for (int step = 0; step < 160; ++step) {
    if (step == 40) add(500);
    if (step == 80) {
      cache.remove_sequence(live.front().id);
      live.erase(live.begin());
    }
    if (step == 120) {
      live.back().pos -= 20;
      cache.truncate_from(live.back().id, static_cast<int32_t>(live.back().pos));
    }
    std::vector<int32_t> toks(live.size());
    std::vector<ForwardItem> items(live.size());
    for (size_t b = 0; b < live.size(); ++b) {
      toks[b] = tokd(rng);
      items[b].seq = live[b].id;
      items[b].tokens = &toks[b];
      items[b].n = 1;
      items[b].start_pos = live[b].pos++;
    }
    be.forward(items, nullptr, logits);
    out.push_back(logits);
  }
  *report = be.report();
  return out;
}

int graphs(const std::vector<std::string>& shapes) {
  bool ok = true;
  for (const auto& shape : shapes) {
    const ModelConfig cfg = check_shape(shape);
    if (cfg.max_position_embeddings < 1300) continue;
    auto m = Model::random(cfg, 7, WeightFormat::kBF16);
    std::string rep_g, rep_d;
    const auto g = graph_script(*m, true, &rep_g);
    const auto d = graph_script(*m, false, &rep_d);
    double worst = g.size() == d.size() ? 0.0 : INFINITY;
    for (size_t i = 0; i < std::min(g.size(), d.size()); ++i) {
      if (g[i].size() != d[i].size()) {
        worst = INFINITY;
        continue;
      }
      worst = std::max(worst, compare(g[i], d[i], static_cast<int>(cfg.vocab_size)).max_rel);
    }
    long long caps = 0, reps = 0;
    const size_t at = rep_g.find("decode_graphs: on (");
    if (at != std::string::npos)
      std::sscanf(rep_g.c_str() + at, "decode_graphs: on (%lld captures, %lld replays", &caps, &reps);
    const bool pass = worst <= 1e-5 && caps >= 2 && reps > caps;
    ok = ok && pass;
    std::printf("%-14s graphs: %zu steps, max rel err graph vs direct %.3e, %lld captures, %lld replays  %s\n",
                shape.c_str(), g.size(), worst, caps, reps, pass ? "ok" : "FAIL");
    std::fflush(stdout);
  }
  std::printf("graphs: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

int bandwidth(size_t mib) {
  const ModelConfig cfg = check_shape("stories260k");
  auto m = Model::random(cfg, 1, WeightFormat::kBF16);
  KVCacheConfig kc = kv_cache_config(cfg);
  kc.payload = kv_payload_for("cuda", PolicyNeeds{});  // full cache: no host K/V
  KVCache cache(kc);
  CudaBackend be(*m, cache);
  const double gbps = be.copy_bandwidth_gbps(mib << 20, 20);
  std::printf("copy roofline: %.1f GB/s (buffer %zu MiB, read + write bytes, median of 20)\n", gbps, mib);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2) {
      std::fprintf(stderr,
                   "usage: kvb_cuda_check equiv [--shapes a,b] [--policy-shapes a,b] [--budget N] [--policies a,b] | "
                   "decisions [--shapes a,b] [--budget N] [--policies a,b] [--backend cuda|cpu] | primitives "
                   "[--shapes a,b] | graphs [--shapes a,b] | bandwidth [--mib N]\n");
      return 2;
    }
    const std::string cmd = argv[1];
    std::vector<std::string> shapes = {"stories260k", "smollm2-135m", "qwen3-0.6b"};
    if (cmd == "equiv") shapes.insert(shapes.end(), {"mistral-w160", "gemma2-w96"});
    std::vector<std::string> policy_shapes = {"stories260k", "smollm2-135m"};
    int64_t budget = 64;
    size_t mib = 2048;
    for (int i = 2; i + 1 < argc; i += 2) {
      const std::string k = argv[i], v = argv[i + 1];
      if (k == "--shapes") shapes = split(v);
      else if (k == "--policy-shapes") policy_shapes = split(v);
      else if (k == "--backend") continue;
      else if (k == "--budget") budget = std::stoll(v);
      else if (k == "--policies") only_policies = split(v);
      else if (k == "--mib") mib = std::stoull(v);
      else kvb::fail("kvb_cuda_check: unknown option {}", k);
    }
    std::string backend = "cuda";
    for (int i = 2; i + 1 < argc; i += 2)
      if (std::string(argv[i]) == "--backend") backend = argv[i + 1];
    std::string why;
    if (backend == "cuda" && !kvb::cuda_device_available(&why)) kvb::fail("{}", why);
    if (cmd == "decisions") return decisions(shapes, budget, backend);
    if (cmd == "equiv") return equiv(shapes, budget, policy_shapes, backend);
    if (backend != "cuda") kvb::fail("kvb_cuda_check: --backend applies to `decisions` and `equiv` only");
    if (cmd == "bandwidth") return bandwidth(mib);
    if (cmd == "primitives") return primitives(shapes);
    if (cmd == "graphs") return graphs(shapes);
    kvb::fail("kvb_cuda_check: unknown command '{}' (equiv | decisions | primitives | graphs | bandwidth)", cmd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvb_cuda_check: %s\n", e.what());
    return 2;
  }
}
