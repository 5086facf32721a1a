// CudaBackend's KV side on the device (cuda_impl.h KvPool, DevPageTables): the pool of bf16 K/V
// slots addressed by the host KVCache's page ids, the device-resident page tables (plan.h
// PageTableStore: a step uploads only new page ids), and keep-set compaction mirrored from the host
// cache onto the pool (plan.h compaction_pairs + kernels.h compact_pairs), and policies' K/V row
// writes (write_rows: host→device copies of the changed bf16 rows).
#include <algorithm>
#include <utility>

#include "engine/backend/cuda/cuda_impl.h"
#include "engine/kernels/quants.h"
#include "engine/util/error.h"

namespace kvb {

using cuda::check;
using cuda::DevBuf;

void CudaBackend::Impl::ensure_pool() {
  const int64_t need = cache.pages_allocated();
  meas.peak_pool_pages = std::max(meas.peak_pool_pages, cache.pages_in_use());
  if (need <= pool.pages) return;
  int64_t cap = std::max<int64_t>(need, pool.pages + pool.pages / 2);
  cap = std::max<int64_t>(cap, 64);
  // A page limit (EngineOptions::max_kv_pages, `bench --memory`): reserve it whole at the first
  // allocation, so the pool never grows (a growth holds the old and the new pool at once).
  if (cache.config().max_pages > 0) cap = std::max<int64_t>(need, cache.config().max_pages);
  // A device page: bf16 K and V rows and i32 positions (the policy's scalars stay on the host).
  const size_t page_bytes = pool_geometry().bytes_per_page();
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "memory info");
  // Old and new pools coexist during the copy: cap the growth by what is free.
  const int64_t afford = static_cast<int64_t>(free_b * 0.9 / page_bytes);
  if (cap > afford) cap = std::max(need, afford);
  if (cap > afford)
    fail("--backend cuda: KV pool needs {} pages of {} tokens ({:.1f} GiB) but only {:.1f} GiB of device memory is free",
         need, P, need * static_cast<double>(page_bytes) / 1073741824.0, free_b / 1073741824.0);
  const size_t slots = static_cast<size_t>(cap) * P, old = static_cast<size_t>(pool.pages) * P;
  DevBuf<uint16_t> nk, nv;
  DevBuf<int32_t> np;
  nk.grow(slots * D, "KV pool (keys)");
  nv.grow(slots * D, "KV pool (values)");
  np.grow(slots, "KV pool (positions)");
  if (old) {
    check(cudaMemcpyAsync(nk.p, pool.k.p, old * D * 2, cudaMemcpyDeviceToDevice, stream), "grow pool");
    check(cudaMemcpyAsync(nv.p, pool.v.p, old * D * 2, cudaMemcpyDeviceToDevice, stream), "grow pool");
    check(cudaMemcpyAsync(np.p, pool.pos.p, old * 4, cudaMemcpyDeviceToDevice, stream), "grow pool");
    check(cudaStreamSynchronize(stream), "grow pool");
  }
  pool.k = std::move(nk);  // frees the old pools
  pool.v = std::move(nv);
  pool.pos = std::move(np);
  pool.pages = cap;
}

int32_t CudaBackend::Impl::compact(SeqId seq, int layer, int h, const std::vector<int32_t>& keep,
                                   std::vector<int64_t>& src, std::vector<int64_t>& dst) {
  const std::vector<int32_t>& pg = cache.pages(seq, layer, h);
  cuda::compaction_pairs(pg, cache.length(seq, layer, h), P, keep, src, dst);
  const uint64_t before = cache.page_list_shrinks();
  const int32_t evicted = cache.compact(seq, layer, h, keep);
  if (before == pt.seen_shrinks) pt.seen_shrinks = cache.page_list_shrinks();  // ours, reported below
  pt.store->shrunk(seq, layer, h, cache.pages(seq, layer, h).size());
  return evicted;
}

void CudaBackend::Impl::write_rows(SeqId seq, int layer, const KvRowWrite& w) {
  if (w.index.empty()) return;
  if (cache.host_kv()) policy_driver::write_host_rows(cache, seq, layer, w, /*round_bf16=*/true);
  const std::vector<int32_t>& pg = cache.pages(seq, layer, w.head);
  std::vector<uint16_t> bits(w.rows.size());
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = f32_to_bf16_bits(w.rows[i]);
  uint16_t* base = w.values ? pool.v.p : pool.k.p;
  const size_t n = w.index.size();
  for (size_t j = 0; j < n;) {
    // A run of rows j … e − 1 whose tokens are consecutive in one page: consecutive pool slots.
    const int32_t t0 = w.index[j];
    size_t e = j + 1;
    while (e < n && w.index[e] == t0 + static_cast<int32_t>(e - j) && w.index[e] / P == t0 / P) ++e;
    const size_t slot = static_cast<size_t>(pg[t0 / P]) * P + t0 % P;
    check(cudaMemcpyAsync(base + slot * D, bits.data() + j * D, (e - j) * D * sizeof(uint16_t), cudaMemcpyHostToDevice,
                          stream),
          "policy K/V row write");
    j = e;
  }
  check(cudaStreamSynchronize(stream), "policy K/V row write");  // `bits` is freed on return
}

void CudaBackend::Impl::flush_pages() {
  if (pt.store->take_grew()) {
    stage_upload(pt.table, pt.store->image(), "device page tables");
  } else if (!pt.writes.empty()) {
    stage_upload(pt.writes_d, pt.writes, "page table writes");
    cuda::set_entries(pt.writes_d.p, static_cast<int>(pt.writes.size() / 2), pt.table.p, stream);
  }
  pt.writes.clear();
}

void CudaBackend::Impl::flush_compaction(std::vector<int64_t>& src, std::vector<int64_t>& dst) {
  if (src.empty()) return;
  const int n = static_cast<int>(src.size());
  pool.csrc.upload(src, stream, "compaction");
  pool.cdst.upload(dst, stream, "compaction");
  pool.scratch_kv.grow(static_cast<size_t>(2) * n * D, "compaction scratch");
  pool.scratch_pos.grow(n, "compaction scratch");
  cuda::compact_pairs(pool.csrc.p, pool.cdst.p, n, D, pool.k.p, pool.v.p, pool.pos.p, pool.scratch_kv.p,
                      pool.scratch_pos.p, stream);
  check(cudaStreamSynchronize(stream), "compaction");  // src/dst host vectors are reused
  src.clear();
  dst.clear();
}

void CudaBackend::Impl::refresh_page_tables() {
  pt.store->release_if([this](int32_t s) { return !cache.has_sequence(s); });
  if (cache.page_list_shrinks() != pt.seen_shrinks) {
    pt.store->invalidate();
    pt.seen_shrinks = cache.page_list_shrinks();
  }
}

}  // namespace kvb
