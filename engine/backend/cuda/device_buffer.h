// kvb::cuda Buffer, DevBuf, PinnedBuf, PinnedStaging — the CUDA backend's owners of device memory
// (cudaMalloc / cudaFree) and pinned host memory (cudaMallocHost / cudaFreeHost). Every device and
// pinned buffer of the backend (cuda_backend.cpp and its parts, attention_fi.cu) is one of these:
// move-only, freed in the destructor, so that no cudaFree / cudaFreeHost is written by hand.
// Header-only and C++17 (nvcc compiles the .cu files that include it as C++17).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/backend/cuda/kernels.h"

namespace kvb::cuda {

/// Device memory for Buffer: cudaMalloc / cudaFree.
struct DeviceMemory {
  static cudaError_t allocate(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
  static cudaError_t release(void* p) { return cudaFree(p); }
};

/// Pinned (page-locked) host memory for Buffer: cudaMallocHost / cudaFreeHost. Copies from it are
/// queued on a stream without waiting.
struct PinnedMemory {
  static cudaError_t allocate(void** p, size_t bytes) { return cudaMallocHost(p, bytes); }
  static cudaError_t release(void* p) { return cudaFreeHost(p); }
};

/// A growable buffer of `n` elements of T in the memory `Mem` allocates (DeviceMemory or
/// PinnedMemory). grow() does not preserve the contents (the caller must know that no pending copy
/// or kernel still reads the old block); a growth that must keep them allocates a second buffer,
/// copies, and move-assigns. Errors of the allocation or release in grow() throw kvb::Error naming
/// `what`; reset() and the destructor ignore them (they may run while an exception unwinds).
template <class T, class Mem>
struct Buffer {
  T* p = nullptr;  ///< the memory, null while empty
  size_t n = 0;    ///< capacity in elements of T

  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : p(o.p), n(o.n) {
    o.p = nullptr;
    o.n = 0;
  }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      p = o.p;
      n = o.n;
      o.p = nullptr;
      o.n = 0;
    }
    return *this;
  }
  ~Buffer() { reset(); }

  /// Frees the buffer (unchecked) and leaves it empty.
  void reset() noexcept {
    if (p) Mem::release(p);
    p = nullptr;
    n = 0;
  }
  /// Makes room for at least `want` elements (at least one is allocated); the old contents are
  /// lost when it reallocates. Throws kvb::Error when memory is short.
  void grow(size_t want, const char* what) {
    if (want <= n) return;
    if (p) check(Mem::release(p), what);
    p = nullptr;
    n = 0;
    check(Mem::allocate(reinterpret_cast<void**>(&p), std::max<size_t>(want, 1) * sizeof(T)), what);
    n = want;
  }
};

/// A device buffer of T (Buffer in DeviceMemory) with host-to-device uploads.
template <class T>
struct DevBuf : Buffer<T, DeviceMemory> {
  /// Grows to `count` and queues a host-to-device copy of src[0, count) on stream `s` (from
  /// pageable memory the copy waits for earlier work on `s`; src must outlive the copy).
  void upload(const T* src, size_t count, cudaStream_t s, const char* what) {
    this->grow(count, what);
    if (count) check(cudaMemcpyAsync(this->p, src, count * sizeof(T), cudaMemcpyHostToDevice, s), what);
  }
  /// upload(v.data(), v.size(), s, what).
  void upload(const std::vector<T>& v, cudaStream_t s, const char* what) { upload(v.data(), v.size(), s, what); }
};

/// A pinned host buffer of T (Buffer in PinnedMemory).
template <class T>
using PinnedBuf = Buffer<T, PinnedMemory>;

/// Pinned host staging for a step's small uploads (plans, page tables, slots). A copy from
/// pageable memory makes cudaMemcpyAsync wait for all earlier work on the stream, which
/// serialises the host's per-layer bookkeeping with the device's kernels; a copy from pinned
/// memory is queued and returns at once. Bump allocation, reset at the start of each forward
/// (the previous forward ended with a stream synchronisation); when full, the stream is
/// synchronised and the arena starts over (grown to fit the request).
struct PinnedStaging {
  PinnedBuf<uint8_t> buf;  ///< the arena; buf.n is its capacity in bytes
  size_t used = 0;         ///< bytes handed out since the last reset

  /// Copies `bytes` from `src` into the arena and returns the pinned copy (16-byte aligned).
  /// Throws kvb::Error when pinned memory cannot be allocated.
  const void* put(const void* src, size_t bytes, cudaStream_t s) {
    const size_t at = (used + 15) & ~size_t(15);
    if (at + bytes > buf.n) {
      check(cudaStreamSynchronize(s), "staging");
      used = 0;
      if (bytes > buf.n) buf.grow(std::max<size_t>(bytes * 2, size_t(8) << 20), "pinned staging");
      return put(src, bytes, s);
    }
    std::memcpy(buf.p + at, src, bytes);
    used = at + bytes;
    return buf.p + at;
  }
};

}  // namespace kvb::cuda
