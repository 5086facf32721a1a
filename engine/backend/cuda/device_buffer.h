// kvb::cuda DevBuf, PinnedBuf, PinnedStaging — the CUDA backend's owners of device memory
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

/// A growable device buffer of `n` elements of T (cudaMalloc). grow() does not preserve the
/// contents; a growth that must keep them allocates a second DevBuf, copies, and move-assigns.
/// Errors of cudaMalloc / cudaFree in grow() throw kvb::Error naming `what`; the destructor
/// ignores them (it may run while an exception unwinds).
template <class T>
struct DevBuf {
  T* p = nullptr;  ///< device pointer, null while empty
  size_t n = 0;    ///< capacity in elements of T

  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : p(o.p), n(o.n) {
    o.p = nullptr;
    o.n = 0;
  }
  DevBuf& operator=(DevBuf&& o) noexcept {
    if (this != &o) {
      reset();
      p = o.p;
      n = o.n;
      o.p = nullptr;
      o.n = 0;
    }
    return *this;
  }
  ~DevBuf() { reset(); }

  /// Frees the buffer (unchecked) and leaves it empty.
  void reset() noexcept {
    if (p) cudaFree(p);
    p = nullptr;
    n = 0;
  }
  /// Makes room for at least `want` elements (at least one is allocated); the old contents are
  /// lost when it reallocates. Throws kvb::Error when device memory is short.
  void grow(size_t want, const char* what) {
    if (want <= n) return;
    if (p) check(cudaFree(p), what);
    p = nullptr;
    n = 0;
    check(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(want, 1) * sizeof(T)), what);
    n = want;
  }
  /// Grows to `count` and queues a host-to-device copy of src[0, count) on stream `s` (from
  /// pageable memory the copy waits for earlier work on `s`; src must outlive the copy).
  void upload(const T* src, size_t count, cudaStream_t s, const char* what) {
    grow(count, what);
    if (count) check(cudaMemcpyAsync(p, src, count * sizeof(T), cudaMemcpyHostToDevice, s), what);
  }
  /// upload(v.data(), v.size(), s, what).
  void upload(const std::vector<T>& v, cudaStream_t s, const char* what) { upload(v.data(), v.size(), s, what); }
};

/// A growable pinned (page-locked) host buffer of `n` elements of T (cudaMallocHost), for copies
/// that are queued on a stream without waiting. grow() does not preserve the contents, and the
/// caller must know that no pending copy still reads the old block. Errors as DevBuf.
template <class T>
struct PinnedBuf {
  T* p = nullptr;  ///< host pointer, null while empty
  size_t n = 0;    ///< capacity in elements of T

  PinnedBuf() = default;
  PinnedBuf(const PinnedBuf&) = delete;
  PinnedBuf& operator=(const PinnedBuf&) = delete;
  PinnedBuf(PinnedBuf&& o) noexcept : p(o.p), n(o.n) {
    o.p = nullptr;
    o.n = 0;
  }
  PinnedBuf& operator=(PinnedBuf&& o) noexcept {
    if (this != &o) {
      reset();
      p = o.p;
      n = o.n;
      o.p = nullptr;
      o.n = 0;
    }
    return *this;
  }
  ~PinnedBuf() { reset(); }

  /// Frees the buffer (unchecked) and leaves it empty.
  void reset() noexcept {
    if (p) cudaFreeHost(p);
    p = nullptr;
    n = 0;
  }
  /// Makes room for at least `want` elements; the old contents are lost when it reallocates.
  /// Throws kvb::Error when pinned memory cannot be allocated.
  void grow(size_t want, const char* what) {
    if (want <= n) return;
    if (p) check(cudaFreeHost(p), what);
    p = nullptr;
    n = 0;
    check(cudaMallocHost(reinterpret_cast<void**>(&p), std::max<size_t>(want, 1) * sizeof(T)), what);
    n = want;
  }
};

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
