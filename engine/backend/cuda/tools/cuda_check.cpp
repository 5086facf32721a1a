// kvb_cuda_check — CUDA-vs-CPU checks for the lent GPU machine (run by tools/gpu_check.sh).
//
//   kvb_cuda_check equiv  [--shapes a,b,...] [--budget N]
//     For each random-weight model shape (Model::random, bf16 weights so both backends multiply
//     the same numbers; default shapes stories260k, smollm2-135m, qwen3-0.6b — the engine core's
//     test shapes), scores random prompts (lengths 37, 300 and 700 with --prefill-chunk 256, so
//     multi-chunk prefill and split-KV decode both run) plus 12 teacher-forced decode tokens with
//     Engine::score on `--backend cpu` and `--backend cuda`. Logits error per position:
//     max_i |cuda_i − cpu_i| / max_i |cpu_i| (pass ≤ 2e-2) and ‖cuda − cpu‖₂ / ‖cpu‖₂ (shown).
//     Then, for deterministic policies (snapkv, pyramidkv, streamingllm, h2o, keydiff, rkv, gkv;
//     budget default 64), the kept token positions of every (layer, kv head) after every step
//     (Engine::on_step) on both backends: the fraction of identical keep-sets is printed; random-
//     weight scores are nearly uniform, so ties within bf16 noise make some heads differ — the
//     check fails when fewer than 90 % agree, and the logits error is checked where all agree.
//     Learned policies run with random gates (trimkv, wgkv, foresightkv with sample=false): their
//     MLPs run on the device (LayerStep::head_mlp) and SnapKV-family scores are reduced and
//     pooled there (LayerStep::window_scores), so these rows check those primitives too.
//     Also greedy sampling on the device against kvb::argmax of the host logits, and Engine
//     generation with device sampling (greedy agreement with the CPU printed; a sampled run must
//     reproduce itself).
//   kvb_cuda_check primitives [--shapes a,b,...]
//     The device policy primitives against their host fallbacks on identical inputs, inside a real
//     CUDA forward pass (a probe policy; prompt 300 tokens in chunks of 128, then 8 decode steps):
//     LayerStep::window_scores for every GQA reduction × pooling (vs scoring::window_importance +
//     pool1d on the host K/V mirror and query ring) and LayerStep::head_mlp in its three modes
//     (shared hidden on the layer input, per head, one head) vs the host loop. Pass: max |dev −
//     host| / max |host| ≤ 1e-3 for every call (both are f32 on the same numbers).
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
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/engine.h"
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

std::vector<float> run_score(const std::shared_ptr<Model>& m, const std::string& backend, const std::string& policy,
                             int64_t budget, const std::vector<int32_t>& prompt, const std::vector<int32_t>& forced,
                             std::vector<Snapshot>* snaps) {
  EngineOptions eo;
  eo.backend = backend;
  eo.prefill_chunk = 256;
  Engine e(m, eo, make_policy(PolicySpec::parse(policy, budget)));
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

int equiv(const std::vector<std::string>& shapes, int64_t budget) {
  bool ok = true;
  std::printf("%-14s %-22s %6s %12s %12s %10s  %s\n", "shape", "policy", "prompt", "max_rel_err", "l2_rel_err",
              "keep_eq_%", "verdict");
  for (const auto& shape : shapes) {
    const ModelConfig cfg = model_shape(shape);
    auto m = Model::random(cfg, 7, WeightFormat::kBF16);
    const int V = static_cast<int>(cfg.vocab_size);
    std::mt19937 rng(11);
    std::uniform_int_distribution<int32_t> tokd(0, V - 1);
    for (int len : {37, 300, 700}) {
      if (len + 12 > cfg.max_position_embeddings) continue;
      std::vector<int32_t> prompt(len), forced(12);
      for (auto& t : prompt) t = tokd(rng);
      for (auto& t : forced) t = tokd(rng);
      for (const std::string pol : {"full", "snapkv", "pyramidkv", "streamingllm", "h2o", "keydiff", "rkv", "gkv",
                                    "snapkv:gqa=mean,pool=avg", "trimkv:random_gates=0", "wgkv:random_gates=0",
                                    "foresightkv:random_scorer=0,sample=false"}) {
        if (pol != "full" && len < 300) continue;  // policies compress only beyond the budget
        std::vector<Snapshot> sc, sg;
        const auto ref = run_score(m, "cpu", pol, pol == "full" ? 0 : budget, prompt, forced, &sc);
        const auto got = run_score(m, "cuda", pol, pol == "full" ? 0 : budget, prompt, forced, &sg);
        const Err e = compare(got, ref, V);
        size_t same = 0, total = 0;
        for (size_t s = 0; s < std::min(sc.size(), sg.size()); ++s)
          for (size_t h = 0; h < sc[s].size(); ++h) {
            ++total;
            same += sc[s][h] == sg[s][h];
          }
        const double eq = total ? 100.0 * same / total : 100.0;
        bool pass = sc.size() == sg.size() && eq >= 90.0;
        if (same == total) pass = pass && e.max_rel <= 2e-2;
        ok = ok && pass;
        std::printf("%-14s %-22s %6d %12.3e %12.3e %10.2f  %s\n", shape.c_str(), pol.c_str(), len, e.max_rel, e.l2_rel,
                    eq, pass ? "ok" : "FAIL");
        std::fflush(stdout);
      }
    }
    // Engine-level generation: decode steps sample on the device with --backend cuda. Greedy
    // tokens are compared with the CPU engine's (informational: near-uniform random-weight logits
    // can flip an argmax within the 2e-2 logits tolerance), and sampled runs must be reproducible.
    {
      std::vector<GenerationRequest> reqs(3);
      for (size_t r = 0; r < reqs.size(); ++r) {
        reqs[r].prompt.resize(40 + 20 * r);
        for (auto& t : reqs[r].prompt) t = tokd(rng);
        reqs[r].max_new_tokens = 24;
        reqs[r].seed = 100 + r;
      }
      reqs[2].sampling.temperature = 0.8f;
      reqs[2].sampling.top_p = 0.95f;
      auto gen = [&](const std::string& backend) {
        EngineOptions eo;
        eo.backend = backend;
        Engine e(m, eo, make_policy(PolicySpec::parse("full")));
        return e.generate(reqs, nullptr);
      };
      const auto ref = gen("cpu");
      const auto got = gen("cuda");
      const auto again = gen("cuda");
      size_t lead = 0;
      for (size_t r = 0; r < 2; ++r) {
        size_t i = 0;
        while (i < ref[r].tokens.size() && i < got[r].tokens.size() && ref[r].tokens[i] == got[r].tokens[i]) ++i;
        lead += i;
      }
      const bool repro = got[2].tokens == again[2].tokens && !got[2].tokens.empty();
      ok = ok && repro;
      std::printf("%-14s generate: greedy cuda == cpu for the first %zu of 48 tokens (info); sampled run reproducible: %s\n",
                  shape.c_str(), lead, repro ? "yes" : "NO");
    }
    // Device greedy sampling against the host argmax of the same logits.
    {
      KVCacheConfig kc;
      kc.num_layers = static_cast<int>(cfg.num_layers);
      kc.num_kv_heads = static_cast<int>(cfg.num_kv_heads);
      kc.head_dim = static_cast<int>(cfg.head_dim);
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
      std::vector<SamplingParams> tp(4);
      for (auto& p : tp) {
        p.temperature = 0.7f;
        p.top_p = 0.9f;
      }
      const auto drawn = be.sample_last(tp, {0.1f, 0.4f, 0.7f, 0.95f});
      bool in_range = true;
      for (int32_t t : drawn) in_range = in_range && t >= 0 && t < V;
      ok = ok && agree == 4 && in_range;
      std::printf("%-14s device sampling: greedy == host argmax %d/4, top-p draws in range: %s\n", shape.c_str(),
                  agree, in_range ? "yes" : "NO");
    }
  }
  std::printf("equivalence: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

/// The probe policy of `primitives`: keeps everything, compares device and host primitives.
class ProbePolicy final : public Policy {
 public:
  double worst_scores = 0, worst_mlp = 0;
  int64_t calls = 0;
  std::string name() const override { return "probe"; }
  nlohmann::json resolved_params() const override { return nlohmann::json::object(); }
  PolicyNeeds needs() const override {
    PolicyNeeds n;
    n.window_queries = 8;
    n.layer_input = true;
    n.host_kv = true;
    return n;
  }
  void on_layer_step(LayerStep& st) override {
    if (!st.window_scores || !st.head_mlp) kvb::fail("probe: the backend provides no device primitives");
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
    HeadMlp a{Hk, st.hidden_size, 32, true, HeadMlp::Act::kSilu, shared_.w1.data(), shared_.b1.data(),
              shared_.w2.data(), shared_.b2.data()};
    HeadMlp b{Hk, 2 * D, 24, false, HeadMlp::Act::kGeluErf, head_.w1.data(), head_.b1.data(), head_.w2.data(),
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
    const ModelConfig cfg = model_shape(shape);
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
    const bool pass = p->calls > 0 && p->worst_scores <= 1e-3 && p->worst_mlp <= 1e-3;
    ok = ok && pass;
    std::printf("%-14s primitives: %lld calls, window_scores max rel err %.3e, head_mlp max rel err %.3e  %s\n",
                shape.c_str(), static_cast<long long>(p->calls), p->worst_scores, p->worst_mlp, pass ? "ok" : "FAIL");
    std::fflush(stdout);
  }
  std::printf("primitives: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

/// One mode of `graphs`: the scripted workload on a fresh CudaBackend; logits of every step.
std::vector<std::vector<float>> graph_script(const Model& m, bool use_graphs, std::string* report) {
  setenv("KVB_CUDA_GRAPHS", use_graphs ? "1" : "0", 1);
  const ModelConfig& cfg = m.config();
  KVCacheConfig kc;
  kc.num_layers = static_cast<int>(cfg.num_layers);
  kc.num_kv_heads = static_cast<int>(cfg.num_kv_heads);
  kc.head_dim = static_cast<int>(cfg.head_dim);
  kc.page_size = 16;
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
    const ModelConfig cfg = model_shape(shape);
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
    if (at != std::string::npos) std::sscanf(rep_g.c_str() + at, "decode_graphs: on (%lld captures, %lld replays", &caps, &reps);
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
  const ModelConfig cfg = model_shape("stories260k");
  auto m = Model::random(cfg, 1, WeightFormat::kBF16);
  KVCacheConfig kc;
  kc.num_layers = static_cast<int>(cfg.num_layers);
  kc.num_kv_heads = static_cast<int>(cfg.num_kv_heads);
  kc.head_dim = static_cast<int>(cfg.head_dim);
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
      std::fprintf(stderr, "usage: kvb_cuda_check equiv [--shapes a,b] [--budget N] | primitives [--shapes a,b] | graphs [--shapes a,b] | bandwidth [--mib N]\n");
      return 2;
    }
    const std::string cmd = argv[1];
    std::vector<std::string> shapes = {"stories260k", "smollm2-135m", "qwen3-0.6b"};
    int64_t budget = 64;
    size_t mib = 2048;
    for (int i = 2; i + 1 < argc; i += 2) {
      const std::string k = argv[i], v = argv[i + 1];
      if (k == "--shapes") shapes = split(v);
      else if (k == "--budget") budget = std::stoll(v);
      else if (k == "--mib") mib = std::stoull(v);
      else kvb::fail("kvb_cuda_check: unknown option {}", k);
    }
    std::string why;
    if (!kvb::cuda_device_available(&why)) kvb::fail("{}", why);
    if (cmd == "equiv") return equiv(shapes, budget);
    if (cmd == "bandwidth") return bandwidth(mib);
    if (cmd == "primitives") return primitives(shapes);
    if (cmd == "graphs") return graphs(shapes);
    kvb::fail("kvb_cuda_check: unknown command '{}' (equiv | primitives | graphs | bandwidth)", cmd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvb_cuda_check: %s\n", e.what());
    return 2;
  }
}
