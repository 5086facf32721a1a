// CudaBackend's decode graphs (cuda_impl.h DecodeGraphs; NOTES.md "Decode graphs"): a decode step
// that needs no host work between layers runs as one captured CUDA graph per batch shape. All host
// work (appends, page tables, attention plans) is done first, its results go up in one metadata
// block, and the attention grids are capacities (plan.h attention_bound) with the real unit counts
// read on the device, so one capture is replayed until a buffer moves or the batch changes.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "engine/backend/cuda/cuda_impl.h"
#include "engine/util/error.h"

namespace kvb {

using cuda::check;
using cuda::MetaLayout;

bool CudaBackend::Impl::graph_eligible(const Policy* policy, const PolicyNeeds& needs, bool decode) {
  if (!decode) return false;
  if (!policy) return true;
  return !needs.layer_hook && !needs.host_kv && needs.window_queries == 0 && !needs.keys_pre_rope &&
         !needs.queries_pre_rope && !needs.attention_colsum && !needs.layer_input && !needs.layer_residual &&
         !needs.read_select && !needs.writes_kv;
}

MetaLayout CudaBackend::Impl::meta_layout(int B, int T, const cuda::AttnBound& bound) const {
  MetaLayout ml;
  size_t o = 0;
  auto take = [&o](size_t bytes) {
    const size_t at = o;
    o = (o + bytes + 15) / 16 * 16;
    return at;
  };
  const size_t Ls = static_cast<size_t>(L);
  ml.tok = take(static_cast<size_t>(T) * 4);
  ml.pos = take(static_cast<size_t>(T) * 4);
  ml.items = take(static_cast<size_t>(B) * sizeof(cuda::AttnItem));
  ml.counts = take(Ls * 4 * 4);
  ml.dst = take(Ls * T * Hkv * 8);
  ml.ptoff = take(Ls * B * Hkv * 4);
  ml.units = take(Ls * bound.units * sizeof(cuda::AttnUnit));
  ml.groups = take(Ls * bound.groups * sizeof(cuda::AttnGroup));
  ml.total = o;
  ml.cap_units = bound.units;
  ml.cap_groups = bound.groups;
  return ml;
}

void CudaBackend::Impl::enqueue_decode(const MetaLayout& ml, int B, const std::vector<int>& rows) {
  const int T = B;
  const uint8_t* md = graph.meta.p;
  const auto* tok_d = reinterpret_cast<const int32_t*>(md + ml.tok);
  const auto* pos_d = reinterpret_cast<const int32_t*>(md + ml.pos);
  const auto* counts_d = reinterpret_cast<const int32_t*>(md + ml.counts);
  const auto* dst_d = reinterpret_cast<const int64_t*>(md + ml.dst);
  const auto* ptoff_d = reinterpret_cast<const int32_t*>(md + ml.ptoff);
  const auto* units_d0 = reinterpret_cast<const cuda::AttnUnit*>(md + ml.units);
  const auto* groups_d0 = reinterpret_cast<const cuda::AttnGroup*>(md + ml.groups);
  cuda::embed(tok_d, wts.embed.p, acts.x.p, T, H, stream, embed_scale);
  for (int l = 0; l < L; ++l) {
    qkv_block(l, T, pos_d, nullptr);
    cuda::kv_append(acts.qkv.p, T, Hq, Hkv, D, dst_d + static_cast<size_t>(l) * T * Hkv, pos_d, pool.k.p, pool.v.p,
                    pool.pos.p, stream);
    cuda::AttnArgs aa = attn_args(l);
    aa.items = reinterpret_cast<const cuda::AttnItem*>(md + ml.items);
    aa.units = units_d0 + static_cast<size_t>(l) * ml.cap_units;
    aa.num_units = static_cast<int>(ml.cap_units);
    aa.groups = groups_d0 + static_cast<size_t>(l) * ml.cap_groups;
    aa.num_groups = static_cast<int>(ml.cap_groups);
    aa.counts = counts_d + 4 * l;
    aa.pt_off = ptoff_d + static_cast<size_t>(l) * B * Hkv;
    aa.max_rows = std::min(G, cuda::kAttnRows);  // one token per item: a unit holds at most G rows
    cuda::attention(aa, stream);
    mlp_block(l, T);
  }
  logits_block(rows);
}

bool CudaBackend::Impl::capture_decode(const MetaLayout& ml, int B, const std::vector<int>& rows) {
  if (graph.exec) {
    cudaGraphExecDestroy(graph.exec);
    graph.exec = nullptr;
  }
  graph.key.clear();
  cudaGraph_t g = nullptr;
  try {
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin decode graph capture");
    try {
      enqueue_decode(ml, B, rows);
    } catch (...) {
      cudaStreamEndCapture(stream, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    check(cudaStreamEndCapture(stream, &g), "end decode graph capture");
    const cudaError_t e = cudaGraphInstantiate(&graph.exec, g, 0);
    cudaGraphDestroy(g);
    check(e, "instantiate decode graph");
    ++graph.captures;
    return true;
  } catch (const Error& e) {
    cudaGetLastError();
    graph.exec = nullptr;
    graph.on = false;
    std::fprintf(stderr, "kvbench: CUDA graphs switched off (%s); decode steps launch their kernels directly\n",
                 e.what());
    return false;
  }
}

/// A decode step as one CUDA graph (graph_eligible steps). Host work first: every layer's KVCache
/// append (no per-layer hook runs, so appending all layers up front is what the layer loop would
/// do), the pool, the page-table writes, and each layer's attention plan; all per-step data go into
/// one pinned metadata block and one upload. Then the graph captured for this batch shape and
/// these buffers is replayed, or captured again when any pointer or size it took changed (pool or
/// page-table growth, another batch size or logit rows).
void CudaBackend::Impl::decode_graph(std::span<ForwardItem> items, const std::vector<int32_t>& toks,
                                     const std::vector<int32_t>& poss, const std::vector<int>& rows,
                                     double& kv_read_bytes, std::vector<int64_t>& kv_read_items) {
  const int B = static_cast<int>(items.size()), T = B;
  const std::vector<int32_t> nvec(B, 1);
  const int64_t target = 4LL * prop.multiProcessorCount;
  const cuda::AttnBound bound = cuda::attention_bound(nvec, Hkv, G, target);
  const MetaLayout ml = meta_layout(B, T, bound);
  // The previous step synchronised: nothing reads the old block.
  graph.meta_host.grow(ml.total, "pinned decode metadata");
  uint8_t* hm = graph.meta_host.p;
  std::memcpy(hm + ml.tok, toks.data(), static_cast<size_t>(T) * 4);
  std::memcpy(hm + ml.pos, poss.data(), static_cast<size_t>(T) * 4);
  auto* it_h = reinterpret_cast<cuda::AttnItem*>(hm + ml.items);
  for (int b = 0; b < B; ++b) it_h[b] = {b, 1, poss[b], 0};

  auto* dst = reinterpret_cast<int64_t*>(hm + ml.dst);
  for (int l = 0; l < L; ++l)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < Hkv; ++h) {
        const int32_t idx = cache.append(items[b].seq, l, h, nullptr, nullptr, poss[b]);
        dst[(static_cast<size_t>(l) * T + b) * Hkv + h] = cuda::key_slot(cache.pages(items[b].seq, l, h), idx, P);
      }
  ensure_pool();
  for (int l = 0; l < L; ++l)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < Hkv; ++h) pt.store->sync(items[b].seq, l, h, cache.pages(items[b].seq, l, h), pt.writes);
  flush_pages();

  auto* counts = reinterpret_cast<int32_t*>(hm + ml.counts);
  auto* ptoff = reinterpret_cast<int32_t*>(hm + ml.ptoff);
  std::vector<int32_t> len_h(static_cast<size_t>(B) * Hkv), prev;
  cuda::AttnPlan plan;
  for (int l = 0; l < L; ++l) {
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < Hkv; ++h) {
        const size_t bh = static_cast<size_t>(b) * Hkv + h;
        len_h[bh] = cache.length(items[b].seq, l, h);
        ptoff[static_cast<size_t>(l) * B * Hkv + bh] = pt.store->offset(items[b].seq, l, h);
        kv_read_bytes += static_cast<double>(len_h[bh]) * D * 2 * 2;
        if (policy_driver::is_decode(items[b])) kv_read_items[b] += len_h[bh];
      }
    if (l == 0 || len_h != prev) {  // layers of a full cache share their lengths, hence their plan
      plan = cuda::plan_attention(nvec, len_h, Hkv, G, target);
      prev = len_h;
    }
    if (static_cast<int64_t>(plan.units.size()) > bound.units || static_cast<int64_t>(plan.groups.size()) > bound.groups)
      fail("CUDA decode graph: attention plan of {} units / {} groups exceeds its bound {} / {}", plan.units.size(),
           plan.groups.size(), bound.units, bound.groups);
    counts[4 * l] = static_cast<int32_t>(plan.units.size());
    counts[4 * l + 1] = static_cast<int32_t>(plan.groups.size());
    counts[4 * l + 2] = counts[4 * l + 3] = 0;
    std::memcpy(hm + ml.units + static_cast<size_t>(l) * bound.units * sizeof(cuda::AttnUnit), plan.units.data(),
                plan.units.size() * sizeof(cuda::AttnUnit));
    std::memcpy(hm + ml.groups + static_cast<size_t>(l) * bound.groups * sizeof(cuda::AttnGroup), plan.groups.data(),
                plan.groups.size() * sizeof(cuda::AttnGroup));
  }
  acts.part_o.grow(static_cast<size_t>(bound.units) * cuda::kAttnRows * D, "attention partials");
  acts.part_ml.grow(static_cast<size_t>(bound.units) * cuda::kAttnRows * 2, "attention partials");
  graph.meta.grow(ml.total, "decode metadata");
  check(cudaMemcpyAsync(graph.meta.p, hm, ml.total, cudaMemcpyHostToDevice, stream), "decode metadata");

  // Everything the captured kernels take by value or pointer.
  std::vector<uintptr_t> key = {static_cast<uintptr_t>(B), static_cast<uintptr_t>(bound.units),
                                static_cast<uintptr_t>(bound.groups)};
  for (const void* p : std::initializer_list<const void*>{
           graph.meta.p, acts.x.p, acts.xn.p, acts.qkv.p, acts.att.p, acts.gu.p, acts.act.p, acts.logits.p,
           acts.part_o.p, acts.part_ml.p, pool.k.p, pool.v.p, pool.pos.p, pt.table.p, acts.blk.p})
    key.push_back(reinterpret_cast<uintptr_t>(p));
  for (int r : rows) key.push_back(static_cast<uintptr_t>(r));
  if (!graph.exec || key != graph.key) {
    if (capture_decode(ml, B, rows)) graph.key = key;
  }
  if (graph.exec && key == graph.key) {
    check(cudaGraphLaunch(graph.exec, stream), "decode graph launch");
    ++graph.replays;
  } else {
    enqueue_decode(ml, B, rows);  // graphs are off (capture failed): the same kernels, directly
  }
}

}  // namespace kvb
