// CudaBackend's forward pass (see cuda_backend.h), an eager step per layer:
//   rmsnorm → fused QKV GEMM (+bias) → q/k norm + RoPE → host KVCache append (page ids, positions)
//   → device kv_append → [query history] → attention plan (plan.h) + paged attention → policy hook
//   (host; signals copied on demand; keep-sets compacted on host and device) → Wo GEMM accumulated
//   into the residual (β = 1) → rmsnorm → fused gate|up GEMM → SiLU·mul → down GEMM (β = 1).
// Then the final norm of the rows that want logits, the LM head and the policy's step-end hook.
// Page tables live on the device (plan.h PageTableStore): a step uploads only new page ids.
// Decode steps with no per-layer host work (full cache, or any policy that declares no per-layer
// hook, mirror, query history or signals) run as one CUDA graph per batch shape instead
// (cuda_graphs.cpp), with the same QKV, MLP and logits blocks defined here.

#include <algorithm>
#include <chrono>
#include <utility>

#include "engine/backend/cuda/cuda_impl.h"
#include "engine/util/error.h"

namespace kvb {

using cuda::check;
using cuda::DevLayer;

namespace {

inline float bf16_round(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }

}  // namespace

void CudaBackend::Impl::qkv_block(int l, int T, const int32_t* pos_d, float* kpre_d, float* qpre_d) {
  const DevLayer& w = wts.layers[l];
  cuda::rmsnorm_bf16(acts.x.p, H, w.attn_norm.p, acts.xn.p, T, H, eps, stream);
  gemm(acts.xn.p, w.wqkv.p, acts.qkv.p, T, H, QKV, 0.0f);
  if (w.has_bias) cuda::add_bias(acts.qkv.p, w.bqkv.p, T, QKV, stream);
  cuda::qk_norm_rope(acts.qkv.p, T, Hq, Hkv, D, pos_d, w.has_qk_norm ? w.q_norm.p : nullptr,
                     w.has_qk_norm ? w.k_norm.p : nullptr, eps, wts.inv_freq.p, m.rope_attention_scaling(), kpre_d,
                     stream, qpre_d);
}

void CudaBackend::Impl::mlp_block(int l, int T) {
  const DevLayer& w = wts.layers[l];
  if (w.has_post_norms) {
    acts.blk.grow(static_cast<size_t>(T) * H, "activations");
    gemm(acts.att.p, w.wo.p, acts.blk.p, T, Hq * D, H, 0.0f);
    cuda::rmsnorm_add(acts.blk.p, w.post_attn_norm.p, acts.x.p, T, H, eps, stream);
  } else {
    gemm(acts.att.p, w.wo.p, acts.x.p, T, Hq * D, H, 1.0f);
  }
  cuda::rmsnorm_bf16(acts.x.p, H, w.mlp_norm.p, acts.xn.p, T, H, eps, stream);
  gemm(acts.xn.p, w.wgu.p, acts.gu.p, T, H, 2 * I, 0.0f);
  if (gelu_tanh) cuda::gelu_tanh_mul(acts.gu.p, acts.act.p, T, I, stream);
  else cuda::silu_mul(acts.gu.p, acts.act.p, T, I, stream);
  if (w.has_post_norms) {
    gemm(acts.act.p, w.wd.p, acts.blk.p, T, I, H, 0.0f);
    cuda::rmsnorm_add(acts.blk.p, w.post_mlp_norm.p, acts.x.p, T, H, eps, stream);
  } else {
    gemm(acts.act.p, w.wd.p, acts.x.p, T, I, H, 1.0f);
  }
}

void CudaBackend::Impl::logits_block(const std::vector<int>& rows) {
  if (rows.empty()) return;
  for (size_t r = 0; r < rows.size(); ++r)
    cuda::rmsnorm_bf16(acts.x.p + static_cast<size_t>(rows[r]) * H, H, wts.final_norm.p, acts.xn.p + r * H, 1, H, eps,
                       stream);
  gemm(acts.xn.p, wts.lm_head, acts.logits.p, static_cast<int>(rows.size()), H, V, 0.0f);
  if (final_softcap > 0) cuda::soft_cap(acts.logits.p, static_cast<int64_t>(rows.size()) * V, final_softcap, stream);
}

cuda::AttnArgs CudaBackend::Impl::attn_args(int l) const {
  cuda::AttnArgs aa;
  aa.qkv = acts.qkv.p;
  aa.q_stride = QKV;
  aa.Hq = Hq;
  aa.Hkv = Hkv;
  aa.D = D;
  aa.G = G;
  aa.P = P;
  aa.scale = scale;
  aa.window = wts.layers[l].window;
  aa.softcap = attn_softcap;
  aa.pages = pt.table.p;
  aa.k_pool = pool.k.p;
  aa.v_pool = pool.v.p;
  aa.pos_pool = pool.pos.p;
  aa.out = acts.att.p;
  aa.part_o = acts.part_o.p;
  aa.part_ml = acts.part_ml.p;
  return aa;
}

bool CudaBackend::Impl::attention_prefill_fast(const cuda::AttnArgs& aa, const std::vector<int32_t>& n,
                                               const std::vector<int32_t>& len, int T) {
#ifdef KVB_HAVE_FLASHINFER
  if (!fi || aa.lse || aa.window > 0 || aa.softcap > 0.0f || T <= static_cast<int>(n.size())) return false;
  const cuda::FiRequests rq = cuda::fi_requests(n, len, Hkv, P);
  fi->plan(rq.qo_indptr.data(), rq.kv_indptr.data(), rq.last_page_len.data(), rq.num_items, Hkv, G, P, D, rq.tokens,
           stream);
  fi->run(aa, stream);
  return true;
#else
  (void)aa;
  (void)n;
  (void)len;
  (void)T;
  return false;
#endif
}

void CudaBackend::Impl::read_selection(std::span<ForwardItem> items, int l, const std::vector<int32_t>& row0,
                                       const policy_driver::Dims& dims, Policy& policy,
                                       std::vector<std::vector<cuda::TokenSpans>>& spans, bool& ranged,
                                       std::vector<int64_t>& kv_read_items, double& kv_read_bytes, double& policy_s) {
  std::vector<float> q(static_cast<size_t>(Hq) * D);
  for (size_t b = 0; b < items.size(); ++b) {
    if (!policy_driver::is_decode(items[b])) continue;
    check(cudaMemcpyAsync(q.data(), acts.qkv.p + static_cast<size_t>(row0[b]) * QKV, q.size() * 4,
                          cudaMemcpyDeviceToHost, stream),
          "queries for read selection");
    check(cudaStreamSynchronize(stream), "queries for read selection");
    const auto tp = std::chrono::steady_clock::now();
    const int64_t read = policy_driver::select_reads(policy, cache, items[b], l, dims, q.data(), spans[b]);
    policy_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - tp).count();
    kv_read_items[b] += read;
    kv_read_bytes += static_cast<double>(read) * D * 2 * 2;
    ranged = ranged || !spans[b].empty();
  }
}

void CudaBackend::Impl::forward(std::span<ForwardItem> items, Policy* policy, std::vector<float>& out_logits,
                                ForwardStats* stats) {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  Step step;
  step.items = items;
  step.policy = policy;
  step.needs = policy ? policy->needs() : PolicyNeeds{};
  step.mirror = policy && step.needs.host_kv;
  if (step.mirror && !cache.host_kv())
    fail(
        "--backend cuda: policy '{}' reads cached keys/values on the host, but the KV cache was built "
        "with a device-held payload (kv_payload_for)",
        policy->name());
  const bool keep_logits_on_device = defer;
  defer = false;
  prepare_step(step);
  grow_activations(step);
  refresh_page_tables();

  step.dims = policy_driver::Dims{
      L, Hq, Hkv, D, H, scale, m.inv_freq().data(), m.rope_attention_scaling(), static_cast<float>(eps)};
  step.compact_fn = [this, &step](SeqId s, int layer, int h, const std::vector<int32_t>& keep) {
    return static_cast<int64_t>(compact(s, layer, h, keep, step.csrc_h, step.cdst_h));
  };
  step.write_fn = [this](SeqId s, int layer, const KvRowWrite& w) { write_rows(s, layer, w); };
  step.kv_read_items.assign(step.B, 0);
  const bool graph_step = graph.on && graph_eligible(policy, step.needs, step.decode);
  if (graph_step) {
    decode_graph(items, step.toks, step.poss, step.rows, step.kv_read_bytes, step.kv_read_items);
  } else {
    eager_step(step);
  }

  if (policy) {
    const auto tp = clock::now();
    step.evicted += policy_driver::run_step_end(*policy, cache, items, step.dims, step.compact_fn,
                                                [&] { flush_compaction(step.csrc_h, step.cdst_h); });
    step.policy_s += std::chrono::duration<double>(clock::now() - tp).count();
  }
  finish_step(step, keep_logits_on_device, t_start, out_logits, stats);
}

void CudaBackend::Impl::prepare_step(Step& step) {
  const std::span<ForwardItem> items = step.items;
  const int B = static_cast<int>(items.size());
  step.B = B;
  std::vector<int32_t>& row0 = step.row0;
  row0.assign(B + 1, 0);
  for (int b = 0; b < B; ++b) {
    if (items[b].n <= 0) fail("forward: sequence {} has no tokens in this step", items[b].seq);
    row0[b + 1] = row0[b] + items[b].n;
  }
  const int T = row0.back();
  step.T = T;
  bool decode = true;
  std::vector<int32_t>&toks = step.toks, &poss = step.poss;
  toks.assign(T, 0);
  poss.assign(T, 0);
  for (int b = 0; b < B; ++b) {
    decode = decode && items[b].n == 1;
    for (int i = 0; i < items[b].n; ++i) {
      const int32_t t = items[b].tokens[i];
      if (t < 0 || t >= V) fail("forward: token id {} out of range [0, {})", t, V);
      toks[row0[b] + i] = t;
      poss[row0[b] + i] = static_cast<int32_t>(items[b].start_pos + i);
    }
  }
  step.decode = decode;
  for (int b = 0; b < B; ++b)
    if (items[b].want_logits) step.rows.push_back(row0[b + 1] - 1);
}

void CudaBackend::Impl::grow_activations(const Step& step) {
  const int T = step.T;
  const PolicyNeeds& needs = step.needs;
  acts.x.grow(static_cast<size_t>(T) * H, "activations");
  acts.xn.grow(static_cast<size_t>(T) * H, "activations");
  acts.qkv.grow(static_cast<size_t>(T) * QKV, "activations");
  acts.att.grow(static_cast<size_t>(T) * Hq * D, "activations");
  acts.gu.grow(static_cast<size_t>(T) * 2 * I, "activations");
  acts.act.grow(static_cast<size_t>(T) * I, "activations");
  if (needs.keys_pre_rope) acts.kpre.grow(static_cast<size_t>(T) * Hkv * D, "activations");
  if (needs.queries_pre_rope) acts.qpre.grow(static_cast<size_t>(T) * Hq * D, "activations");
  if (wts.layers.front().has_post_norms)
    acts.blk.grow(static_cast<size_t>(T) * H, "activations");  // before any graph capture
  if (needs.attention_colsum) acts.lse.grow(static_cast<size_t>(T) * Hq, "activations");
  if (!step.rows.empty()) acts.logits.grow(step.rows.size() * static_cast<size_t>(V), "logits");
}

void CudaBackend::Impl::eager_step(Step& step) {
  const std::span<ForwardItem> items = step.items;
  const int B = step.B, T = step.T;
  const std::vector<int32_t>& row0 = step.row0;
  io.staging.used = 0;  // the previous forward ended with a stream synchronisation
  stage_upload(io.tok, step.toks, "tokens");
  stage_upload(io.pos, step.poss, "positions");
  cuda::embed(io.tok.p, wts.embed.p, acts.x.p, T, H, stream, embed_scale);

  std::vector<cuda::AttnItem> hitems(B);
  for (int b = 0; b < B; ++b) hitems[b] = {row0[b], items[b].n, static_cast<int32_t>(items[b].start_pos), 0};
  stage_upload(io.items_d, hitems, "attention items");

  EagerScratch e;
  e.dst_h.assign(static_cast<size_t>(T) * Hkv, 0);
  e.len_h.assign(static_cast<size_t>(B) * Hkv, 0);
  e.off_h.assign(static_cast<size_t>(B) * Hkv, 0);
  for (int l = 0; l < L; ++l) {
    layer_qkv_append(step, e, l);
    record_query_history(step, e, l);
    const cuda::AttnArgs aa = layer_attention(step, e, l);
    std::vector<std::vector<float>> colsum_h;
    if (step.needs.attention_colsum) colsum_h = layer_colsums(step, e, aa);
    if (step.policy && step.needs.layer_hook) policy_layer(step, l, colsum_h);
    // Output projection accumulated into the residual, then the MLP.
    mlp_block(l, T);
  }
  logits_block(step.rows);
}

void CudaBackend::Impl::host_append(Step& step, EagerScratch& e, int l) {
  const std::span<ForwardItem> items = step.items;
  const int B = step.B;
  const bool mirror = step.mirror;
  const std::vector<int32_t>&row0 = step.row0, &poss = step.poss;
  const std::vector<float>& kv_host = e.kv_host;
  std::vector<int64_t>& dst_h = e.dst_h;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < items[b].n; ++i) {
      const int t = row0[b] + i;
      for (int h = 0; h < Hkv; ++h) {
        const float* kk = mirror ? &kv_host[(static_cast<size_t>(t) * 2 * Hkv + h) * D] : nullptr;
        const float* vv = mirror ? &kv_host[(static_cast<size_t>(t) * 2 * Hkv + Hkv + h) * D] : nullptr;
        const int32_t idx = cache.append(items[b].seq, l, h, kk, vv, poss[t]);
        dst_h[static_cast<size_t>(t) * Hkv + h] = cuda::key_slot(cache.pages(items[b].seq, l, h), idx, P);
      }
    }
  ensure_pool();
  stage_upload(io.dst_slot, dst_h, "append slots");
}

void CudaBackend::Impl::layer_qkv_append(Step& step, EagerScratch& e, int l) {
  const int T = step.T;
  const bool mirror = step.mirror;
  const PolicyNeeds& needs = step.needs;
  std::vector<float>& kv_host = e.kv_host;
  // Without a mirror the host bookkeeping needs nothing from the device: it runs before this
  // layer's kernels are queued, while the device still works on the previous layer (a policy
  // hook that waits for the device then finds this host work already done).
  if (!mirror) host_append(step, e, l);
  qkv_block(l, T, io.pos.p, needs.keys_pre_rope ? acts.kpre.p : nullptr, needs.queries_pre_rope ? acts.qpre.p : nullptr);
  if (mirror) {
    kv_host.resize(static_cast<size_t>(T) * 2 * Hkv * D);
    check(cudaMemcpy2DAsync(kv_host.data(), 2 * Hkv * D * sizeof(float), acts.qkv.p + static_cast<size_t>(Hq) * D,
                            QKV * sizeof(float), 2 * Hkv * D * sizeof(float), T, cudaMemcpyDeviceToHost, stream),
          "copy new K/V to host");
    check(cudaStreamSynchronize(stream), "copy new K/V to host");
    for (float& f : kv_host) f = bf16_round(f);
    host_append(step, e, l);
  }
  cuda::kv_append(acts.qkv.p, T, Hq, Hkv, D, io.dst_slot.p, io.pos.p, pool.k.p, pool.v.p, pool.pos.p, stream);
}

void CudaBackend::Impl::record_query_history(Step& step, EagerScratch& e, int l) {
  const std::span<ForwardItem> items = step.items;
  const PolicyNeeds& needs = step.needs;
  const std::vector<int32_t>& row0 = step.row0;
  std::vector<float>& tmp = e.tmp;
  if (needs.window_queries > 0) {
    for (int b = 0; b < step.B; ++b) {
      QueryHistory* qh = &policy_driver::history_of(items[b], *step.policy, needs, L, Hq, D);
      const int first = policy_driver::first_recorded(*qh, items[b].n);
      const int cnt = items[b].n - first;
      tmp.resize(static_cast<size_t>(cnt) * Hq * D);
      check(cudaMemcpy2DAsync(tmp.data(), Hq * D * sizeof(float), acts.qkv.p + static_cast<size_t>(row0[b] + first) * QKV,
                              QKV * sizeof(float), Hq * D * sizeof(float), cnt, cudaMemcpyDeviceToHost, stream),
            "copy queries to host");
      check(cudaStreamSynchronize(stream), "copy queries to host");
      policy_driver::record_queries(*qh, l, items[b], tmp.data(), Hq, D);
    }
  }
}

cuda::AttnArgs CudaBackend::Impl::layer_attention(Step& step, EagerScratch& e, int l) {
  const std::span<ForwardItem> items = step.items;
  const int B = step.B, T = step.T;
  const PolicyNeeds& needs = step.needs;
  std::vector<int32_t>&len_h = e.len_h, &off_h = e.off_h;
  std::vector<int64_t>& kv_read_items = step.kv_read_items;
  // Read selection (Quest, SeerAttention-R): each decode item's query heads read the token
  // ranges the policy picks from the new token's post-RoPE queries (as the CPU backend);
  // reads are counted per item as the CPU counts them (policy_driver::select_reads).
  std::vector<std::vector<cuda::TokenSpans>> spans(B);
  bool ranged = false;
  if (needs.read_select)
    read_selection(items, l, step.row0, step.dims, *step.policy, spans, ranged, kv_read_items, step.kv_read_bytes,
                   step.policy_s);
  // Attention over the paged pool (page tables: the device-resident store, new pages only).
  int max_len = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hkv; ++h) {
      const size_t bh = static_cast<size_t>(b) * Hkv + h;
      len_h[bh] = cache.length(items[b].seq, l, h);
      max_len = std::max(max_len, len_h[bh]);
      pt.store->sync(items[b].seq, l, h, cache.pages(items[b].seq, l, h), pt.writes);
      if (needs.read_select && policy_driver::is_decode(items[b])) continue;  // counted by read_selection
      step.kv_read_bytes += static_cast<double>(len_h[bh]) * D * 2 * 2;
      if (policy_driver::is_decode(items[b])) kv_read_items[b] += len_h[bh];
    }
  e.max_len = max_len;
  flush_pages();
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hkv; ++h) off_h[static_cast<size_t>(b) * Hkv + h] = pt.store->offset(items[b].seq, l, h);
  std::vector<int32_t> nvec(B);
  for (int b = 0; b < B; ++b) nvec[b] = items[b].n;
  stage_upload(io.pt_off, off_h, "page tables");
  cuda::AttnArgs aa = attn_args(l);
  aa.items = io.items_d.p;
  aa.pt_off = io.pt_off.p;
  aa.lse = needs.attention_colsum ? acts.lse.p : nullptr;
  if (ranged || !attention_prefill_fast(aa, nvec, len_h, T)) {
    const cuda::AttnPlan plan =
        ranged ? cuda::plan_attention_ranged(nvec, len_h, Hkv, G, 4LL * prop.multiProcessorCount, spans)
               : cuda::plan_attention(nvec, len_h, Hkv, G, 4LL * prop.multiProcessorCount);
    stage_upload(io.units_d, plan.units, "attention plan");
    stage_upload(io.groups_d, plan.groups, "attention plan");
    acts.part_o.grow(static_cast<size_t>(std::max(plan.num_parts, 1)) * cuda::kAttnRows * D, "attention partials");
    acts.part_ml.grow(static_cast<size_t>(std::max(plan.num_parts, 1)) * cuda::kAttnRows * 2, "attention partials");
    aa.part_o = acts.part_o.p;  // after the growth (attn_args() read the old pointers)
    aa.part_ml = acts.part_ml.p;
    aa.units = io.units_d.p;
    aa.num_units = static_cast<int>(plan.units.size());
    aa.groups = io.groups_d.p;
    aa.num_groups = static_cast<int>(plan.groups.size());
    for (const cuda::AttnUnit& u : plan.units) aa.max_rows = std::max(aa.max_rows, static_cast<int>(u.nrows));
    cuda::attention(aa, stream);
  }
  return aa;
}

std::vector<std::vector<float>> CudaBackend::Impl::layer_colsums(Step& step, EagerScratch& e, const cuda::AttnArgs& aa) {
  const int B = step.B;
  const std::vector<int32_t>& len_h = e.len_h;
  std::vector<float>& tmp = e.tmp;
  std::vector<std::vector<float>> colsum_h;
  std::vector<int64_t> coff(static_cast<size_t>(B) * Hkv);
  int64_t total = 0;
  for (size_t bh = 0; bh < coff.size(); ++bh) {
    coff[bh] = total;
    total += len_h[bh];
  }
  io.colsum.grow(std::max<int64_t>(total, 1), "colsum");
  stage_upload(io.colsum_off, coff, "colsum");
  stage_upload(io.head_len, len_h, "colsum");
  cuda::attention_colsum(aa, B, io.head_len.p, io.colsum_off.p, e.max_len, io.colsum.p, stream);
  tmp.resize(total);
  check(cudaMemcpyAsync(tmp.data(), io.colsum.p, total * sizeof(float), cudaMemcpyDeviceToHost, stream), "colsum");
  check(cudaStreamSynchronize(stream), "colsum");
  colsum_h.resize(coff.size());
  for (size_t bh = 0; bh < coff.size(); ++bh)
    colsum_h[bh].assign(tmp.begin() + coff[bh], tmp.begin() + coff[bh] + len_h[bh]);
  return colsum_h;
}

void CudaBackend::Impl::finish_step(Step& step, bool keep_logits_on_device, std::chrono::steady_clock::time_point t_start,
                                    std::vector<float>& out_logits, ForwardStats* stats) {
  using clock = std::chrono::steady_clock;
  const std::vector<int>& rows = step.rows;
  rows_last = static_cast<int>(rows.size());
  out_logits.resize(keep_logits_on_device ? 0 : rows.size() * static_cast<size_t>(V));
  if (!rows.empty() && !keep_logits_on_device)
    check(cudaMemcpyAsync(out_logits.data(), acts.logits.p, out_logits.size() * 4, cudaMemcpyDeviceToHost, stream),
          "logits");
  check(cudaStreamSynchronize(stream), "forward");
  const double total = std::chrono::duration<double>(clock::now() - t_start).count();
  if (step.decode) {
    meas.decode_s += total;
    meas.decode_bytes += static_cast<double>(wts.step_bytes) + step.kv_read_bytes;
    ++meas.decode_steps;
  } else {
    meas.prefill_s += total;
    meas.prefill_tokens += step.T;
  }
  meas.peak_pool_pages = std::max(meas.peak_pool_pages, cache.pages_in_use());
  if (stats) {
    stats->total_s = total;
    stats->policy_s = step.policy_s;
    stats->evicted = step.evicted;
    stats->kv_read_tokens = std::move(step.kv_read_items);
  }
}

}  // namespace kvb
