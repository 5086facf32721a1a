// Block-wide max / sum reduction shared by the CUDA kernels (.cu files only).
#pragma once

#include <cuda_runtime.h>

#include <cfloat>

namespace kvb::cuda {

/// Max (is_max) or sum of `v` over every thread of the block; every thread gets the result.
/// `red` is __shared__ float[32]. Must be reached by all threads of the block (it synchronises);
/// blockDim.x a multiple of 32, at most 1024.
__device__ __forceinline__ float block_reduce(float v, float* red, bool is_max) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  const int wi = threadIdx.x / 32, l = threadIdx.x % 32;
  __syncthreads();
  if (l == 0) red[wi] = v;
  __syncthreads();
  const int nw = (blockDim.x + 31) / 32;
  if (wi == 0) {
    v = l < nw ? red[l] : (is_max ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
      const float w = __shfl_xor_sync(0xffffffffu, v, o);
      v = is_max ? fmaxf(v, w) : v + w;
    }
    if (l == 0) red[0] = v;
  }
  __syncthreads();
  return red[0];
}

}  // namespace kvb::cuda
