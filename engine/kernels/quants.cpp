// Types, reference dequantisation, activation quantisation, scalar dot products and run-time
// dispatch. See quants.h for the formats and references.
#include "engine/kernels/quants.h"
#include "engine/kernels/quants_blocks.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace kvb {

DTypeTraits dtype_traits(DType t) {
  switch (t) {
    case DType::F32: return {"F32", 1, 4};
    case DType::F16: return {"F16", 1, 2};
    case DType::BF16: return {"BF16", 1, 2};
    case DType::Q4_0: return {"Q4_0", 32, 18};
    case DType::Q4_1: return {"Q4_1", 32, 20};
    case DType::Q5_0: return {"Q5_0", 32, 22};
    case DType::Q5_1: return {"Q5_1", 32, 24};
    case DType::Q8_0: return {"Q8_0", 32, 34};
    case DType::Q4_K: return {"Q4_K", 256, 144};
    case DType::Q5_K: return {"Q5_K", 256, 176};
    case DType::Q6_K: return {"Q6_K", 256, 210};
  }
  return {"?", 0, 0};
}

bool dtype_is_quantised(DType t) { return t != DType::F32 && t != DType::F16 && t != DType::BF16; }

namespace {

inline uint16_t rd16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t rd32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

using kernels_detail::k_scale_min;

/// The 32 integer levels q of a 32-element block (Q4_0/Q4_1: nibbles; Q5_0/Q5_1: nibble | high
/// bit << 4), element order of ggml: qs[j] low nibble -> element j, high nibble -> j + 16.
inline void unpack_q4(const uint8_t* qs, int q[32]) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 0x0f;
    q[16 + j] = qs[j] >> 4;
  }
}
inline void unpack_q5(const uint8_t* qh4, const uint8_t* qs, int q[32]) {
  const uint32_t qh = rd32(qh4);
  unpack_q4(qs, q);
  for (int j = 0; j < 32; ++j) q[j] |= static_cast<int>((qh >> j) & 1u) << 4;
}
/// Q5_K element e of a 256 block: the nibble of sub-block e / 32 and high bit (qh[e % 32] >> (e / 32)).
inline void unpack_q45k(const uint8_t* qs, const uint8_t* qh, int q[256]) {
  for (int c = 0; c < 4; ++c)
    for (int s = 0; s < 2; ++s)
      for (int j = 0; j < 32; ++j) {
        const int sb = 2 * c + s;
        q[32 * sb + j] = ((qs[32 * c + j] >> (4 * s)) & 0x0f) | (qh ? ((qh[j] >> sb) & 1) << 4 : 0);
      }
}
/// Q6_K levels minus 32 (−32..31) of one 256 block.
inline void unpack_q6k(const uint8_t* ql, const uint8_t* qh, int q[256]) {
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, r = i % 128;
    const int lo = (ql[64 * h + (r % 64)] >> (4 * (r / 64))) & 0x0f;
    const int hi = (qh[32 * h + (r % 32)] >> (2 * (r / 32))) & 0x03;
    q[i] = (lo | (hi << 4)) - 32;
  }
}

}  // namespace

void dequantize_row(DType type, const void* data, int64_t n, float* out) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  const int64_t nb = n / dtype_traits(type).block;
  int q[256];
  switch (type) {
    case DType::F32: std::memcpy(out, p, static_cast<size_t>(n) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_bits_to_f32(rd16(p + 2 * i));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits_to_f32(rd16(p + 2 * i));
      return;
    case DType::Q8_0:
      for (int64_t b = 0; b < nb; ++b, p += 34, out += 32) {
        const float d = f16_bits_to_f32(rd16(p));
        for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<int8_t>(p[2 + j])) * d;
      }
      return;
    case DType::Q4_0:
    case DType::Q5_0:
      for (int64_t b = 0; b < nb; ++b, out += 32) {
        const float d = f16_bits_to_f32(rd16(p));
        if (type == DType::Q4_0) {
          unpack_q4(p + 2, q);
          p += 18;
          for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(q[j] - 8);
        } else {
          unpack_q5(p + 2, p + 6, q);
          p += 22;
          for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(q[j] - 16);
        }
      }
      return;
    case DType::Q4_1:
    case DType::Q5_1:
      for (int64_t b = 0; b < nb; ++b, out += 32) {
        const float d = f16_bits_to_f32(rd16(p));
        const float m = f16_bits_to_f32(rd16(p + 2));
        if (type == DType::Q4_1) {
          unpack_q4(p + 4, q);
          p += 20;
        } else {
          unpack_q5(p + 4, p + 8, q);
          p += 24;
        }
        for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(q[j]) + m;
      }
      return;
    case DType::Q4_K:
    case DType::Q5_K: {
      const bool five = type == DType::Q5_K;
      for (int64_t b = 0; b < nb; ++b, out += 256) {
        const float d = f16_bits_to_f32(rd16(p));
        const float dmin = f16_bits_to_f32(rd16(p + 2));
        uint8_t sc[8], mn[8];
        k_scale_min(p + 4, sc, mn);
        unpack_q45k(five ? p + 48 : p + 16, five ? p + 16 : nullptr, q);
        for (int sb = 0; sb < 8; ++sb) {
          const float ds = d * static_cast<float>(sc[sb]);
          const float dm = dmin * static_cast<float>(mn[sb]);
          for (int j = 0; j < 32; ++j) {
            const float prod = ds * static_cast<float>(q[32 * sb + j]);
            out[32 * sb + j] = prod - dm;
          }
        }
        p += five ? 176 : 144;
      }
      return;
    }
    case DType::Q6_K:
      for (int64_t b = 0; b < nb; ++b, p += 210, out += 256) {
        const int8_t* scales = reinterpret_cast<const int8_t*>(p + 192);
        const float d = f16_bits_to_f32(rd16(p + 208));
        unpack_q6k(p, p + 128, q);
        for (int i = 0; i < 256; ++i) {
          const float ds = d * static_cast<float>(scales[i / 16]);
          out[i] = ds * static_cast<float>(q[i]);
        }
      }
      return;
  }
}

// ---------------------------------------------------------------------------------------------
// activation quantisation
// ---------------------------------------------------------------------------------------------
namespace {

enum class ActKind { kF32, kQ8_0, kQ8_1, kQ8_K };
ActKind act_kind(DType w) {
  switch (w) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0: return ActKind::kQ8_0;
    case DType::Q4_1:
    case DType::Q5_1: return ActKind::kQ8_1;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return ActKind::kQ8_K;
    default: return ActKind::kF32;
  }
}

/// Symmetric 8-bit quantisation of x[n]: d = max|x| / 127, q = round(x / d) (0 when x is all 0).
/// Returns d; writes q[n] and their sum.
inline float quant8(const float* x, int n, int8_t* q, int* sum) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  int s = 0;
  for (int i = 0; i < n; ++i) {
    // round half away from zero (std::lround's rounding), exact and inline: |x·id| <= 127, so
    // the truncation and the remainder r are exact in f32.
    const float f = x[i] * id;
    const int ti = static_cast<int>(f);
    const float r = f - static_cast<float>(ti);
    const int v = ti + (r >= 0.5f) - (r <= -0.5f);
    q[i] = static_cast<int8_t>(v);
    s += v;
  }
  if (sum) *sum = s;
  return d;
}

}  // namespace

size_t act_row_bytes(DType w, int64_t n) {
  switch (act_kind(w)) {
    case ActKind::kQ8_0: return static_cast<size_t>(n / 32) * 36;
    case ActKind::kQ8_1: return static_cast<size_t>(n / 32) * 40;
    case ActKind::kQ8_K: return static_cast<size_t>(n / 256) * 292;
    case ActKind::kF32: break;
  }
  return static_cast<size_t>(n) * 4;
}

void quantize_act_row(DType w, const float* x, int64_t n, void* out) {
  uint8_t* o = static_cast<uint8_t*>(out);
  switch (act_kind(w)) {
    case ActKind::kQ8_0:
      for (int64_t b = 0; b < n / 32; ++b, o += 36, x += 32) {
        const float d = quant8(x, 32, reinterpret_cast<int8_t*>(o + 4), nullptr);
        std::memcpy(o, &d, 4);
      }
      return;
    case ActKind::kQ8_1:
      for (int64_t b = 0; b < n / 32; ++b, o += 40, x += 32) {
        int s = 0;
        const float d = quant8(x, 32, reinterpret_cast<int8_t*>(o + 8), &s);
        const float ds = d * static_cast<float>(s);
        std::memcpy(o, &d, 4);
        std::memcpy(o + 4, &ds, 4);
      }
      return;
    case ActKind::kQ8_K:
      for (int64_t b = 0; b < n / 256; ++b, o += 292, x += 256) {
        int8_t* q = reinterpret_cast<int8_t*>(o + 4);
        const float d = quant8(x, 256, q, nullptr);
        std::memcpy(o, &d, 4);
        for (int g = 0; g < 16; ++g) {
          int16_t s = 0;
          for (int j = 0; j < 16; ++j) s = static_cast<int16_t>(s + q[16 * g + j]);
          std::memcpy(o + 260 + 2 * g, &s, 2);
        }
      }
      return;
    case ActKind::kF32: std::memcpy(out, x, static_cast<size_t>(n) * 4); return;
  }
}

// ---------------------------------------------------------------------------------------------
// scalar dot products (the portable reference the SIMD kernels are tested against)
// ---------------------------------------------------------------------------------------------
namespace {

inline float rdf(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

float dot_f32(int64_t n, const void* w, const void* a) {
  const float* x = static_cast<const float*>(w);
  const float* y = static_cast<const float*>(a);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}
/// Dot product of 16-bit weights (f16 or bf16 bits, decoded by `ToF32`) with f32 activations.
template <float (*ToF32)(uint16_t)>
float dot_16bit(int64_t n, const void* w, const void* a) {
  const uint8_t* x = static_cast<const uint8_t*>(w);
  const float* y = static_cast<const float*>(a);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += ToF32(rd16(x + 2 * i)) * y[i];
  return s;
}

template <DType T>
float dot_q32(int64_t n, const void* w, const void* a) {
  const uint8_t* x = static_cast<const uint8_t*>(w);
  const uint8_t* y = static_cast<const uint8_t*>(a);
  constexpr bool kQ81 = T == DType::Q4_1 || T == DType::Q5_1;
  constexpr int kWb = T == DType::Q4_0   ? 18
                      : T == DType::Q4_1 ? 20
                      : T == DType::Q5_0 ? 22
                      : T == DType::Q5_1 ? 24
                                         : 34;
  constexpr int kAb = kQ81 ? 40 : 36;
  float s = 0.0f;
  int q[32];
  for (int64_t b = 0; b < n / 32; ++b, x += kWb, y += kAb) {
    const int8_t* aq = reinterpret_cast<const int8_t*>(y + (kQ81 ? 8 : 4));
    const float d = f16_bits_to_f32(rd16(x));
    int off = 0;
    if constexpr (T == DType::Q4_0) unpack_q4(x + 2, q), off = 8;
    if constexpr (T == DType::Q4_1) unpack_q4(x + 4, q);
    if constexpr (T == DType::Q5_0) unpack_q5(x + 2, x + 6, q), off = 16;
    if constexpr (T == DType::Q5_1) unpack_q5(x + 4, x + 8, q);
    if constexpr (T == DType::Q8_0)
      for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(x[2 + j]);
    int acc = 0;
    for (int j = 0; j < 32; ++j) acc += (q[j] - off) * aq[j];
    s += d * rdf(y) * static_cast<float>(acc);
    if constexpr (kQ81) s += f16_bits_to_f32(rd16(x + 2)) * rdf(y + 4);
  }
  return s;
}

template <DType T>
float dot_k(int64_t n, const void* w, const void* a) {
  const uint8_t* x = static_cast<const uint8_t*>(w);
  const uint8_t* y = static_cast<const uint8_t*>(a);
  constexpr int kWb = T == DType::Q4_K ? 144 : T == DType::Q5_K ? 176 : 210;
  float s = 0.0f;
  int q[256];
  for (int64_t b = 0; b < n / 256; ++b, x += kWb, y += 292) {
    const float da = rdf(y);
    const int8_t* aq = reinterpret_cast<const int8_t*>(y + 4);
    if constexpr (T == DType::Q6_K) {
      unpack_q6k(x, x + 128, q);
      const int8_t* sc = reinterpret_cast<const int8_t*>(x + 192);
      int acc = 0;
      for (int g = 0; g < 16; ++g) {
        int gs = 0;
        for (int j = 0; j < 16; ++j) gs += q[16 * g + j] * aq[16 * g + j];
        acc += sc[g] * gs;
      }
      s += f16_bits_to_f32(rd16(x + 208)) * da * static_cast<float>(acc);
    } else {
      uint8_t sc[8], mn[8];
      k_scale_min(x + 4, sc, mn);
      unpack_q45k(T == DType::Q5_K ? x + 48 : x + 16, T == DType::Q5_K ? x + 16 : nullptr, q);
      int acc = 0, macc = 0;
      for (int sb = 0; sb < 8; ++sb) {
        int gs = 0, as = 0;
        for (int j = 0; j < 32; ++j) {
          gs += q[32 * sb + j] * aq[32 * sb + j];
          as += aq[32 * sb + j];
        }
        acc += sc[sb] * gs;
        macc += mn[sb] * as;
      }
      s += f16_bits_to_f32(rd16(x)) * da * static_cast<float>(acc) -
           f16_bits_to_f32(rd16(x + 2)) * da * static_cast<float>(macc);
    }
  }
  return s;
}

}  // namespace

namespace kernels_detail {
VecDotFn scalar_dot(DType w) {
  switch (w) {
    case DType::F32: return dot_f32;
    case DType::F16: return dot_16bit<f16_bits_to_f32>;
    case DType::BF16: return dot_16bit<bf16_bits_to_f32>;
    case DType::Q4_0: return dot_q32<DType::Q4_0>;
    case DType::Q4_1: return dot_q32<DType::Q4_1>;
    case DType::Q5_0: return dot_q32<DType::Q5_0>;
    case DType::Q5_1: return dot_q32<DType::Q5_1>;
    case DType::Q8_0: return dot_q32<DType::Q8_0>;
    case DType::Q4_K: return dot_k<DType::Q4_K>;
    case DType::Q5_K: return dot_k<DType::Q5_K>;
    case DType::Q6_K: return dot_k<DType::Q6_K>;
  }
  return nullptr;
}
}  // namespace kernels_detail

// ---------------------------------------------------------------------------------------------
// dispatch
// ---------------------------------------------------------------------------------------------
const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512Vnni: return "avx512vnni";
  }
  return "?";
}

namespace {
/// isa_supported's answer, computed once (cpuid traps to the hypervisor in a VM: microseconds).
bool isa_supported_uncached(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return avx2;
    case Isa::kAvx512Vnni:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}
}  // namespace

bool isa_supported(Isa isa) {
  static const bool has[3] = {isa_supported_uncached(Isa::kScalar), isa_supported_uncached(Isa::kAvx2),
                              isa_supported_uncached(Isa::kAvx512Vnni)};
  const int i = static_cast<int>(isa);
  return i >= 0 && i < 3 && has[i];
}

Isa best_isa() {
  static const Isa best = [] {
    Isa b = isa_supported(Isa::kAvx512Vnni) ? Isa::kAvx512Vnni : isa_supported(Isa::kAvx2) ? Isa::kAvx2 : Isa::kScalar;
    if (const char* e = std::getenv("KVB_ISA")) {
      const std::string_view v(e);
      const Isa want = v == "scalar" ? Isa::kScalar : v == "avx2" ? Isa::kAvx2 : Isa::kAvx512Vnni;
      if (static_cast<int>(want) < static_cast<int>(b)) b = want;
    }
    return b;
  }();
  return best;
}

VecDotFn vec_dot_fn(DType w, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512Vnni)
    if (VecDotFn f = kernels_detail::avx512vnni_dot(w)) return f;
  if (isa == Isa::kAvx2 || isa == Isa::kAvx512Vnni)
    if (VecDotFn f = kernels_detail::avx2_dot(w)) return f;
#endif
  return kernels_detail::scalar_dot(w);
}

#if defined(__x86_64__)
namespace {

/// `vnni(w)` or `avx2(w)`: the multi-row kernel of `w` from the build (AVX-512 VNNI or AVX2) that
/// vec_dot_fn takes the single-row kernel from for `isa`, so that the bits agree; null where
/// vec_dot_fn takes the scalar kernel.
template <class Fn>
Fn multi_row_kernel(DType w, Isa isa, Fn (*vnni)(DType), Fn (*avx2)(DType)) {
  if (isa == Isa::kAvx512Vnni && kernels_detail::avx512vnni_dot(w)) return vnni(w);
  if ((isa == Isa::kAvx2 || isa == Isa::kAvx512Vnni) && kernels_detail::avx2_dot(w)) return avx2(w);
  return nullptr;
}

}  // namespace
#endif

VecDot4Fn vec_dot4_fn(DType w, Isa isa) {
#if defined(__x86_64__)
  return multi_row_kernel(w, isa, kernels_detail::avx512vnni_dot4, kernels_detail::avx2_dot4);
#else
  (void)w;
  (void)isa;
  return nullptr;
#endif
}

VecDotTileFn vec_dot_tile_fn(DType w, Isa isa) {
#if defined(__x86_64__)
  return multi_row_kernel(w, isa, kernels_detail::avx512vnni_dot_tile, kernels_detail::avx2_dot_tile);
#else
  (void)w;
  (void)isa;
  return nullptr;
#endif
}

F32TileFn f32_tile_fn(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512Vnni && isa_supported(Isa::kAvx512Vnni)) return kernels_detail::f32_tile_avx512;
  if ((isa == Isa::kAvx2 || isa == Isa::kAvx512Vnni) && isa_supported(Isa::kAvx2)) return kernels_detail::f32_tile_avx2;
#endif
  (void)isa;
  return kernels_detail::f32_tile_scalar;
}

}  // namespace kvb

#define KVB_F32_TILE_FN f32_tile_scalar
#include "engine/kernels/gemm_f32_impl.inc"
