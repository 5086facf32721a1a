#include "engine/kernels/matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace kvb {

namespace {

// Loops with less work than this (multiply-adds) run on one thread: waking the team costs more
// than it saves.
constexpr int64_t kParallelWork = 1 << 15;
// Weight rows per tile of the dot-product GEMM (16 rows of 1536 Q4_1 weights = 15 KiB: in L1).
constexpr int64_t kTileRows = 16;

/// The dot-product path of matmul_nt / matmul_nt_many: each activation row quantised once per
/// weight type (quants.h), then tiles of kTileRows weight rows × all T rows, the tiles of every
/// product in one static split over `nthreads` threads. Each y element is one vec_dot, so its
/// bits depend neither on T, nor on the other products, nor on the thread count.
void dot_products(const float* x, int64_t T, int64_t in, std::span<const MatmulOut> outs, int nthreads) {
  struct Prod {
    VecDotFn dot;
    VecDot4Fn dot4;      ///< four activation rows per weight row (nullptr: dot per row)
    F32TileFn tile;      ///< f32 weights: the tile kernel (dot unused); nullptr otherwise
    VecDotTileFn qtile;  ///< register-blocked tile of the block types (nullptr: dot4 / dot per row)
    const uint8_t* act;
    size_t ab;
    int64_t tile0;  ///< first global tile index of this product
  };
  thread_local std::vector<std::vector<uint8_t>> act_bufs;
  if (act_bufs.size() < outs.size()) act_bufs.resize(outs.size());
  Prod prods[8];
  const size_t np = outs.size();
  if (np > 8) {  // never in the engine (at most Q, K, V); keeps the table on the stack
    for (const MatmulOut& o : outs) dot_products(x, T, in, std::span<const MatmulOut>(&o, 1), nthreads);
    return;
  }
  int64_t tiles = 0;
  for (size_t p = 0; p < np; ++p) {
    const Mat& w = *outs[p].w;
    Prod& pr = prods[p];
    pr.dot = vec_dot_fn(w.type, best_isa());
    pr.dot4 = vec_dot4_fn(w.type, best_isa());
    pr.tile = w.type == DType::F32 ? f32_tile_fn(best_isa()) : nullptr;
    pr.qtile = vec_dot_tile_fn(w.type, best_isa());
    pr.ab = act_row_bytes(w.type, in);
    pr.tile0 = tiles;
    tiles += (w.rows + kTileRows - 1) / kTileRows;
    if (!dtype_is_quantised(w.type)) {
      pr.act = reinterpret_cast<const uint8_t*>(x);  // f32 activations as they are
      continue;
    }
    size_t same = p;  // an earlier product of the same weight type shares its activation rows
    for (size_t q = 0; q < p; ++q)
      if (outs[q].w->type == w.type) {
        same = q;
        break;
      }
    if (same != p) {
      pr.act = prods[same].act;
      continue;
    }
    std::vector<uint8_t>& buf = act_bufs[p];
    buf.resize(pr.ab * static_cast<size_t>(T));
    uint8_t* a = buf.data();
#pragma omp parallel for schedule(static) num_threads(nthreads) if (T > 1)
    for (int64_t t = 0; t < T; ++t) quantize_act_row(w.type, x + t * in, in, a + pr.ab * t);
    pr.act = a;
  }
#pragma omp parallel for schedule(static) num_threads(nthreads)
  for (int64_t tile = 0; tile < tiles; ++tile) {
    size_t p = 0;
    while (p + 1 < np && prods[p + 1].tile0 <= tile) ++p;
    const Prod& pr = prods[p];
    const MatmulOut& o = outs[p];
    const int64_t out = o.w->rows;
    const int64_t j0 = (tile - pr.tile0) * kTileRows, j1 = std::min(out, j0 + kTileRows);
    if (pr.tile) {  // f32 weights: the tile's rows in register blocks (4 × 4; 1 × 8 at one row)
      const float* rows[kTileRows];
      for (int64_t j = j0; j < j1; ++j) rows[j - j0] = static_cast<const float*>(o.w->row(j));
      pr.tile(in, rows, static_cast<int>(j1 - j0), x, T, in, o.y + j0, out);
      if (o.bias)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = j0; j < j1; ++j) o.y[t * out + j] += o.bias[j];
      continue;
    }
    if (pr.qtile) {  // NW weight rows × 4 activation rows in registers (quants_x86.inc dot_tile)
      const void* rows[kTileRows];
      for (int64_t j = j0; j < j1; ++j) rows[j - j0] = o.w->row(j);
      pr.qtile(in, rows, static_cast<int>(j1 - j0), pr.act, pr.ab, T, o.y + j0, out);
      if (o.bias)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = j0; j < j1; ++j) o.y[t * out + j] += o.bias[j];
      continue;
    }
    int64_t t = 0;
    if (pr.dot4)  // batched decode: each weight block decoded once per four activation rows
      for (; t + 4 <= T; t += 4)
        for (int64_t j = j0; j < j1; ++j) pr.dot4(in, o.w->row(j), pr.act + pr.ab * t, pr.ab, o.y + t * out + j, out);
    if (o.bias && t > 0)
      for (int64_t tt = 0; tt < t; ++tt)
        for (int64_t j = j0; j < j1; ++j) o.y[tt * out + j] += o.bias[j];
    for (; t < T; ++t) {
      const uint8_t* at = pr.act + pr.ab * t;
      float* yt = o.y + t * out;
      for (int64_t j = j0; j < j1; ++j) yt[j] = pr.dot(in, o.w->row(j), at) + (o.bias ? o.bias[j] : 0.0f);
    }
  }
}

}  // namespace

Mat Mat::of_f32(const float* p, int64_t rows, int64_t cols) {
  Mat m = of(DType::F32, p, rows, cols);
  m.f32 = p;
  return m;
}
Mat Mat::of_bf16(const uint16_t* p, int64_t rows, int64_t cols) {
  Mat m = of(DType::BF16, p, rows, cols);
  m.bf16 = p;
  return m;
}
Mat Mat::of(DType type, const void* p, int64_t rows, int64_t cols, const int32_t* row_index) {
  Mat m;
  m.type = type;
  m.data = p;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = dtype_row_bytes(type, cols);
  m.row_index = row_index;
  if (!row_index && type == DType::F32) m.f32 = static_cast<const float*>(p);
  if (!row_index && type == DType::BF16) m.bf16 = static_cast<const uint16_t*>(p);
  return m;
}

void matmul_nt(const float* x, const Mat& w, const float* bias, float* y, int64_t T, int64_t in, int64_t out) {
  const MatmulOut one{&w, bias, y};
  dot_products(x, T, in, std::span<const MatmulOut>(&one, 1), T * in * out > kParallelWork ? omp_get_max_threads() : 1);
}

void matmul_nt_many(const float* x, int64_t T, int64_t in, std::span<const MatmulOut> outs) {
  int64_t rows = 0;
  for (const MatmulOut& o : outs) rows += o.w->rows;
  dot_products(x, T, in, outs, T * in * rows > kParallelWork ? omp_get_max_threads() : 1);
}

}  // namespace kvb
