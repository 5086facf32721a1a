// paged_attention's dispatcher and work split (attention.h); this file is also the baseline-ISA
// build of the row kernel (attention_impl.inc).
#include "engine/kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#define KVB_ATTN_FN attend_rows_scalar
#include "engine/kernels/attention_impl.inc"

namespace kvb {

namespace {

// Below this many multiply-adds a call runs on the calling thread: waking the team costs more.
constexpr int64_t kParallelWork = 1 << 16;
// Query rows per work item: their accumulators (32 · D f32) stay in L1 while a K/V page is
// streamed against them; prefill chunks split into many items, so every thread gets work.
constexpr int kRowBlock = 32;

kernels_detail::AttendRowsFn rows_fn(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512Vnni && isa_supported(Isa::kAvx512Vnni)) return kernels_detail::attend_rows_avx512;
  if ((isa == Isa::kAvx2 || isa == Isa::kAvx512Vnni) && isa_supported(Isa::kAvx2))
    return kernels_detail::attend_rows_avx2;
#endif
  (void)isa;
  return kernels_detail::attend_rows_scalar;
}

/// One work item: rows [r0, r1) of a task; a task with column sums is one item over all its
/// rows (blocks in order on one thread: the sums are not shared between threads).
struct Item {
  int32_t task, r0, r1;
};

}  // namespace

void paged_attention(const KVCache& cache, int layer, int G, float scale, std::span<const AttentionTask> tasks, Isa isa) {
  const kernels_detail::AttendRowsFn fn = rows_fn(isa);
  const int D = cache.config().head_dim;
  thread_local std::vector<Item> items;  // the caller's; reused across calls
  items.clear();
  // Rows per item: kRowBlock, fewer when the call has too few rows to give every thread several
  // items (batch-1 decode: Hkv tasks of G rows each; 3 tasks on 2 threads would leave one idle a
  // third of the time). A row's arithmetic is the same whatever block it is in.
  int64_t total_rows = 0;
  for (const AttentionTask& t : tasks) total_rows += static_cast<int64_t>(t.n) * G;
  // At least a GQA group's G rows (up to kRowBlock): the row kernel reads each K/V page once per
  // group of rows, so splitting a group over items multiplies the cache traffic.
  const int64_t min_block = std::min<int64_t>(std::max(G, 1), kRowBlock);
  const int block = static_cast<int>(
      std::clamp<int64_t>(total_rows / (8 * static_cast<int64_t>(omp_get_max_threads())), min_block, kRowBlock));
  int64_t work = 0;
  for (size_t k = 0; k < tasks.size(); ++k) {
    const AttentionTask& t = tasks[k];
    const int rows = t.n * G;
    work += static_cast<int64_t>(rows) * cache.length(t.seq, layer, t.head) * D;
    if (t.colsum) {
      items.push_back({static_cast<int32_t>(k), 0, rows});
      continue;
    }
    for (int r0 = 0; r0 < rows; r0 += block) items.push_back({static_cast<int32_t>(k), r0, std::min(rows, r0 + block)});
  }
  const int64_t n = static_cast<int64_t>(items.size());
  const Item* it = items.data();
#pragma omp parallel for schedule(dynamic) if (work > kParallelWork && n > 1)
  for (int64_t k = 0; k < n; ++k) {
    const AttentionTask& t = tasks[it[k].task];
    for (int r0 = it[k].r0; r0 < it[k].r1; r0 += kRowBlock)
      fn(cache, layer, G, scale, t, r0, std::min(it[k].r1, r0 + kRowBlock));
  }
}

}  // namespace kvb
