// kvb::cuda plan — host-side (no CUDA) planning of the CUDA backend's attention launches and
// page-table flattening. Kept free of CUDA headers so it builds everywhere and is unit-tested on
// the CPU (tests/engine/test_cuda_host.cpp).
//
// Attention work is cut into units. The rows of one (item, kv head) are its n new query tokens
// times the G query heads of the group (row r = token r / G, head g = r % G), in chunks of at
// most kAttnRows rows. A chunk's visible keys are a prefix [0, kend) of the head's cached tokens
// (keys are stored in position order and the item's n new tokens are the last n of the head), and
// long prefixes are split into ranges of `split_len` keys (split-KV, flash-decoding): each split
// writes an unnormalised partial (m, l, o) that a combine pass merges.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/backend/cuda/plan_types.h"

namespace kvb {
struct ModelConfig;  // engine/model/config.h (not included: .cu files include this header)
}

namespace kvb::cuda {

/// Throws kvb::Error ("--backend cuda: <model_type>: <what> is not implemented by the CUDA kernels;
/// use --backend cpu") when the CUDA backend's block does not implement what `cfg`'s architecture
/// (engine/model/architecture.h) needs, and ("--backend cuda: <model_type>: <what> is invalid") for
/// a negative or NaN soft-cap or a negative window (which ModelConfig::validate refuses on load).
/// Implemented: SiLU and GeLU-tanh MLPs, the √H embedding
/// scale, post-attention/post-MLP norms (both or neither), attention-logit and final-logit
/// soft-capping (≥ 0), sliding-window layers (windows ≥ 0) and query_pre_attn_scalar (through
/// ModelConfig::attention_scale); (1 + w) norms need nothing (Model folds them into the weights it
/// uploads). The backend calls it before opening a device.
void check_model_support(const ModelConfig& cfg);

/// Throws kvb::Error ("--backend cuda: policy '<policy>': a restore pass (...) is not implemented
/// by the CUDA backend; use --backend cpu") for a policy that asks for a restore pass
/// (PolicyNeeds::restore_pass: input-embedding rows through a LoRA adapter, RestoreKV): the CUDA
/// forward takes token ids only and applies no LoRA deltas. The engine calls it before it builds a
/// CUDA backend.
void check_policy_support(const std::string& policy, bool restore_pass);

/// The attention launch plan of one layer of one step.
struct AttnPlan {
  std::vector<AttnUnit> units;
  std::vector<AttnGroup> groups;  ///< only chunks with more than one split
  int32_t num_parts = 0;          ///< partial slots used (each kAttnRows rows)
  int32_t split_len = 0;          ///< keys per split chosen by the planner
};

/// Plans one layer's attention. `n[b]` new tokens of item b (≥ 1); `len[b * Hkv + h]` the cached
/// length of kv head h of item b after this step's append (≥ n[b]); G query heads per kv head;
/// `target_units` the number of blocks wanted to fill the device (e.g. 4 × SM count). The split
/// length is the smallest multiple of kAttnTile (≥ min_split) such that the units reach about
/// target_units. Throws kvb::Error on inconsistent input (len < n, G < 1, sizes mismatch).
AttnPlan plan_attention(std::span<const int32_t> n, std::span<const int32_t> len, int Hkv, int G, int64_t target_units,
                        int32_t min_split = 256);

/// Token ranges [begin, end) of one query head's keys (indices into its kv head's cache list).
using TokenSpans = std::vector<std::pair<int32_t, int32_t>>;

/// Plans one layer's attention when some decode items read only selected token ranges (read
/// selection, PolicyNeeds::read_select: Quest, SeerAttention-R; policy_driver::select_reads).
/// `spans[b]` empty: item b attends densely (as plan_attention; n[b] tokens, lengths len[b·Hkv +
/// h]); else item b is a decode item (n[b] == 1) and spans[b][hq] (Hkv·G query heads) are the
/// sorted, disjoint ranges query head hq reads of kv head hq / G. A ranged query head becomes one
/// chunk of one row (row0 = hq % G, nrows = 1) split into units of at most max(min_split,
/// kAttnTile) keys, one or more per range: a single unit writes the output directly (part −1),
/// several are a group merged by the combine pass, exactly as split-KV units (the attention
/// kernel needs nothing else). A query head with no range gets one empty unit [0, 0), whose output
/// is zeros (the CPU backend's convention for a query that reads nothing). Throws kvb::Error on
/// inconsistent input (as plan_attention; a ranged item with n ≠ 1, a span count ≠ Hkv·G, or a
/// range that is empty, unsorted, overlapping or outside [0, len)).
AttnPlan plan_attention_ranged(std::span<const int32_t> n, std::span<const int32_t> len, int Hkv, int G,
                               int64_t target_units, const std::vector<std::vector<TokenSpans>>& spans,
                               int32_t min_split = 256);

/// Upper bounds on what plan_attention(n, len, Hkv, G, target_units, ·) returns, for any lengths:
/// `units` bounds units.size() and num_parts, `groups` bounds groups.size(). With
/// chunks = Σ_b Hkv·⌈n[b]·G / kAttnRows⌉: when target_units ≤ chunks nothing is split (units =
/// chunks); otherwise the split length is at least ⌈total keys / target_units⌉, so
/// units ≤ Σ_chunks (kend/split + 1) ≤ target_units + chunks. A CUDA graph sizes its attention grid
/// by these (surplus blocks exit early), so one capture serves every step of the same batch shape.
struct AttnBound {
  int64_t units = 0, groups = 0;
};
AttnBound attention_bound(std::span<const int32_t> n, int Hkv, int G, int64_t target_units);

/// The request arrays of one layer's FlashInfer batch-prefill launch (attention_fi.h): request
/// r = h·B + b is (item b, kv head h), with one KV head and the G query heads of its group.
/// qo_indptr [R + 1]: request r's query rows start at row qo_indptr[r] of the per-kv-head packed
/// queries [Hkv][T][G][D] (= h·T + the item's first token; the last entry is Hkv·T);
/// kv_indptr [R + 1]: prefix sums of ⌈len / P⌉ pages; last_page_len [R]: tokens on the request's
/// last page (1 … P). `total_rows` = Hkv·T.
struct FiRequests {
  std::vector<int32_t> qo_indptr, kv_indptr, last_page_len;
  int32_t num_requests = 0, num_items = 0, tokens = 0;
  int64_t total_rows = 0;
};

/// Builds FiRequests for `n[b]` new tokens of item b (≥ 1) and head lengths `len[b·Hkv + h]`
/// (≥ n[b], after this step's append) with P-token pages. Throws kvb::Error on inconsistent
/// input (sizes, n < 1, len < n, Hkv or P < 1, more than 2³¹ − 1 rows or pages).
FiRequests fi_requests(std::span<const int32_t> n, std::span<const int32_t> len, int Hkv, int P);

/// Host bookkeeping of the CUDA backend's device-resident page tables: an image, kept equal to
/// the device table, of every (sequence, layer, kv head) page list, laid out
/// [row][layer][head][capacity] i32 (row = the sequence's slot), and, per head, how many leading
/// entries are known to equal the KVCache's list. KVCache page lists only grow at the tail or lose
/// pages at the tail (KVCache::page_list_shrinks), so a step normally copies only new pages
/// instead of re-uploading every table: O(new pages) host work and PCIe traffic per step.
class PageTableStore {
 public:
  /// A store for a model of `layers` layers and `kv_heads` KV heads. Throws kvb::Error when either
  /// is < 1.
  PageTableStore(int layers, int kv_heads);

  /// Brings head (seq, layer, head) in line with `pages`: entries that differ from the image are
  /// written to it and appended to `writes` as (index, page id) pairs, to be applied to the device
  /// table — unless the capacity grew during this batch of syncs (take_grew()), when the whole
  /// image() must be uploaded instead. Compares from the first entry not known to be in sync.
  /// Throws kvb::Error when the table would exceed 2³¹ − 1 entries (the kernels' i32 offsets).
  void sync(int32_t seq, int layer, int head, std::span<const int32_t> pages, std::vector<int64_t>& writes);
  /// The head's page list now has at most `n` pages (a compaction the caller applied).
  void shrunk(int32_t seq, int layer, int head, size_t n);
  /// Forgets what is known to be in sync (page lists changed behind the store's back): the next
  /// sync of each head compares every entry.
  void invalidate();
  /// Frees the rows of sequences for which `dead(seq)` is true (their slots are reused).
  void release_if(const std::function<bool(int32_t)>& dead);
  /// Offset of the page list of (seq, layer, head) in the image (valid until the next growth).
  /// Throws kvb::Error for a sequence that was never synced.
  int32_t offset(int32_t seq, int layer, int head) const;
  /// True once after the image was re-laid out (capacity grew): upload it whole.
  bool take_grew() {
    const bool g = grew_;
    grew_ = false;
    return g;
  }
  const std::vector<int32_t>& image() const { return image_; }
  int64_t capacity() const { return cap_; }   ///< pages per head
  int64_t rows() const { return rows_cap_; }  ///< sequence slots

 private:
  int64_t row(int32_t seq);
  void relayout(int64_t rows_cap, int64_t cap);
  int L_, Hkv_;
  int64_t cap_ = 0, rows_cap_ = 0, rows_used_ = 0;
  std::vector<int32_t> image_;   // [rows_cap][L][Hkv][cap]
  std::vector<int64_t> synced_;  // [rows_cap][L][Hkv] leading entries equal to the KVCache list
  std::unordered_map<int32_t, int64_t> row_of_;
  std::vector<int64_t> free_rows_;
  bool grew_ = false;
};

/// Flattened page tables of one layer: the page list of (item b, head h) starts at
/// offsets[b * Hkv + h] in `pages`.
struct FlatPages {
  std::vector<int32_t> offsets;
  std::vector<int32_t> pages;
};

/// Device slot of key index i of a head whose pages are `pages` (page_size P): page[i / P]·P + i % P.
inline int64_t key_slot(std::span<const int32_t> pages, int32_t i, int P) {
  return static_cast<int64_t>(pages[i / P]) * P + i % P;
}

/// Copy pairs that mirror KVCache::compact(keep) on a device pool: for every kept index j with
/// keep[j] != j, (source slot, destination slot) under the head's page list *before* compaction
/// (compaction keeps a prefix of the pages, so destinations stay valid after it). Applied as a
/// gather of all sources then a scatter, so overlapping pairs are safe. Throws kvb::Error when
/// `keep` is not strictly increasing or out of [0, len).
void compaction_pairs(std::span<const int32_t> pages, int32_t len, int P, std::span<const int32_t> keep,
                      std::vector<int64_t>& src, std::vector<int64_t>& dst);

}  // namespace kvb::cuda
