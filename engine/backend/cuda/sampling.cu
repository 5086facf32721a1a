// Device sampling: one block (1024 threads) per row of logits [R, V] f32.
//
// Greedy (temperature ≤ 0): block argmax, lowest id on ties (torch.argmax / kvb::argmax).
// Otherwise: p_i = softmax(logits / temperature); top-p keeps {i : p_i ≥ τ} with τ the largest
// threshold whose kept mass is ≥ top_p, found by 32 bisection steps on τ ∈ [0, 1] (ties at τ are
// all kept, a superset of transformers' sorted cut); then the token is drawn with u ∈ [0, 1) by
// an id-order inverse CDF: each thread owns a contiguous segment, segment sums are prefix-summed
// in shared memory, and the owning thread scans its segment. top_k and min_p are not applied on
// the device (the host sampler, kvb::sample_token, implements the full set).
#include <cfloat>
#include <climits>

#include "engine/backend/cuda/block_reduce.cuh"
#include "engine/backend/cuda/kernels.h"

namespace kvb::cuda {

namespace {

constexpr int kThreads = 1024;

__global__ void __launch_bounds__(kThreads)
    sample_k(const float* logits, int V, const float* temperature, const float* top_p, const float* u, int32_t* out) {
  __shared__ float red[32];
  __shared__ float seg_sum[kThreads];
  __shared__ unsigned long long best;
  __shared__ int found, last_kept;
  const int r = blockIdx.x, tid = threadIdx.x;
  const float* x = logits + static_cast<int64_t>(r) * V;
  const float temp = temperature[r];
  if (temp <= 0.0f) {
    // Pack (order-preserving key of the value, inverted id) so a max picks the lowest id on ties.
    if (tid == 0) best = 0;
    __syncthreads();
    unsigned long long mine = 0;
    for (int i = tid; i < V; i += kThreads) {
      uint32_t b = __float_as_uint(x[i]);
      b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
      const unsigned long long key =
          (static_cast<unsigned long long>(b) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
      if (key > mine) mine = key;
    }
    atomicMax(&best, mine);
    __syncthreads();
    if (tid == 0) out[r] = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(best & 0xffffffffu));
    return;
  }
  const float inv_t = 1.0f / temp;
  float mx = -INFINITY;
  for (int i = tid; i < V; i += kThreads) mx = fmaxf(mx, x[i] * inv_t);
  mx = block_reduce(mx, red, true);
  float z = 0.0f;
  for (int i = tid; i < V; i += kThreads) z += expf(x[i] * inv_t - mx);
  z = block_reduce(z, red, false);
  const float inv_z = 1.0f / z;
  const float tp = top_p[r];
  float tau = 0.0f;
  if (tp < 1.0f) {
    float lo = 0.0f, hi = 1.0f;
    for (int it = 0; it < 32; ++it) {
      const float mid = 0.5f * (lo + hi);
      float mass = 0.0f;
      for (int i = tid; i < V; i += kThreads) {
        const float p = expf(x[i] * inv_t - mx) * inv_z;
        if (p >= mid) mass += p;
      }
      mass = block_reduce(mass, red, false);
      if (mass >= tp) lo = mid;
      else hi = mid;
    }
    tau = lo;
  }
  const int seg = (V + kThreads - 1) / kThreads;
  const int b0 = min(V, tid * seg), b1 = min(V, b0 + seg);
  float s = 0.0f;
  int my_last = -1;
  for (int i = b0; i < b1; ++i) {
    const float p = expf(x[i] * inv_t - mx) * inv_z;
    if (p >= tau) {
      s += p;
      my_last = i;
    }
  }
  seg_sum[tid] = s;
  if (tid == 0) {
    found = INT_MAX;
    last_kept = -1;
  }
  __syncthreads();
  if (my_last >= 0) atomicMax(&last_kept, my_last);
  if (tid == 0) {
    float acc = 0.0f;
    for (int i = 0; i < kThreads; ++i) {
      const float v = seg_sum[i];
      seg_sum[i] = acc;  // exclusive prefix
      acc += v;
    }
    red[0] = acc;
  }
  __syncthreads();
  const float target = u[r] * red[0];
  const float pref = seg_sum[tid];
  if (s > 0.0f && target >= pref && target < pref + s) {
    float c = pref;
    int pick = my_last;
    for (int i = b0; i < b1; ++i) {
      const float p = expf(x[i] * inv_t - mx) * inv_z;
      if (p < tau) continue;
      c += p;
      if (target < c) {
        pick = i;
        break;
      }
    }
    atomicMin(&found, pick);
  }
  __syncthreads();
  if (tid == 0) out[r] = found != INT_MAX ? found : last_kept;
}

}  // namespace

void sample(const float* logits, int R, int V, const float* temperature, const float* top_p, const float* u,
            int32_t* out, cudaStream_t s) {
  if (R == 0) return;
  sample_k<<<R, kThreads, 0, s>>>(logits, V, temperature, top_p, u, out);
  check_launch("sample");
}

}  // namespace kvb::cuda
