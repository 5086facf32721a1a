// Dot-product kernels and matmul_nt on weights as stored (engine/kernels). Every weight type,
// every ISA the running CPU has, random blocks with ordinary and extreme scales:
//  1. SIMD == scalar (up to f32 summation order);
//  2. scalar == f64 dot of the dequantised weight row (dequantize_row, itself bit-identical to
//     gguf-py: tests/gguf) and the dequantised activation blocks — the integer arithmetic is exact;
//  3. against the f32 activations the error is within the activation rounding bound
//     Σ_blocks (d_a / 2)·Σ|w| (d_a = the block's activation scale);
//  4. matmul_nt (decode and prefill tilings, row index, bias) == dequantise-then-f64 matmul.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/forward.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/quants.h"

namespace kvb {
namespace {

const DType kAll[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                      DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

/// Half-precision bits of a random finite value: exponent field in [lo, hi] (0 = subnormal),
/// random mantissa and sign (sign forced + when `positive`).
uint16_t rand_f16(std::mt19937& rng, int lo, int hi, bool positive) {
  const uint16_t e = static_cast<uint16_t>(std::uniform_int_distribution<int>(lo, hi)(rng));
  const uint16_t m = static_cast<uint16_t>(rng() & 0x3ff);
  const uint16_t s = positive ? 0 : static_cast<uint16_t>(rng() & 0x8000);
  return static_cast<uint16_t>(s | (e << 10) | m);
}

/// Random bytes for `n` elements of `t`; the f16 scale fields get values with exponents in
/// [elo, ehi] (15 = 1.0). Everything else (quants, 6-bit scales, high bits) is uniform bytes.
std::vector<uint8_t> rand_row(DType t, int64_t n, std::mt19937& rng, int elo, int ehi) {
  std::vector<uint8_t> b(dtype_row_bytes(t, n));
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  auto put16 = [&](size_t off, uint16_t v) { std::memcpy(&b[off], &v, 2); };
  const DTypeTraits tr = dtype_traits(t);
  for (int64_t blk = 0; blk < n / tr.block; ++blk) {
    const size_t o = static_cast<size_t>(blk * tr.bytes);
    switch (t) {
      case DType::F32: {
        std::normal_distribution<float> nd(0.0f, std::ldexp(1.0f, ehi - 15));
        const float v = nd(rng);
        std::memcpy(&b[o], &v, 4);
        break;
      }
      case DType::F16: put16(o, rand_f16(rng, elo, ehi, false)); break;
      case DType::BF16: put16(o, f32_to_bf16_bits(std::ldexp(std::normal_distribution<float>()(rng), ehi - 15))); break;
      case DType::Q4_0:
      case DType::Q5_0:
      case DType::Q8_0: put16(o, rand_f16(rng, elo, ehi, false)); break;
      case DType::Q4_1:
      case DType::Q5_1:
      case DType::Q4_K:
      case DType::Q5_K:
        put16(o, rand_f16(rng, elo, ehi, false));
        put16(o + 2, rand_f16(rng, elo, ehi, false));
        break;
      case DType::Q6_K: put16(o + 208, rand_f16(rng, elo, ehi, false)); break;
    }
  }
  return b;
}

/// The activation row as the kernels see it: dequantised Q8 blocks (or the f32 row), and the
/// per-element rounding bound d_a / 2.
void act_view(DType w, const std::vector<uint8_t>& act, int64_t n, std::vector<double>& val,
              std::vector<double>& half_step) {
  val.assign(n, 0.0);
  half_step.assign(n, 0.0);
  const size_t bytes = act_row_bytes(w, n);
  if (bytes == static_cast<size_t>(n) * 4) {
    for (int64_t i = 0; i < n; ++i) {
      float f;
      std::memcpy(&f, &act[4 * i], 4);
      val[i] = f;
    }
    return;
  }
  const int64_t block = dtype_traits(w).block;
  const size_t bb = bytes / static_cast<size_t>(n / block);
  const size_t qoff = bb == 40 ? 8 : 4;  // Q8_1 has {d, s}; Q8_0 and Q8_K have {d}
  for (int64_t b = 0; b < n / block; ++b) {
    float d;
    std::memcpy(&d, &act[b * bb], 4);
    for (int64_t j = 0; j < block; ++j) {
      val[b * block + j] = double(d) * static_cast<int8_t>(act[b * bb + qoff + j]);
      half_step[b * block + j] = 0.5 * d;
    }
  }
}

struct Case {
  const char* what;
  int elo, ehi;     // weight scale exponents
  float act_scale;  // activations ~ N(0, act_scale²)
};
const Case kCases[] = {
    {"ordinary", 8, 14, 1.0f},         {"tiny scales (subnormal f16)", 0, 2, 1.0f}, {"huge scales", 24, 27, 1.0f},
    {"huge activations", 8, 14, 3e4f}, {"tiny activations", 8, 14, 1e-6f},
};

TEST(Kernels, EveryTypeEveryIsaMatchesScalarAndDequantisedReference) {
  std::mt19937 rng(1234);
  for (const DType t : kAll) {
    const int64_t n = dtype_traits(t).block == 256 ? 1024 : 576;
    for (const Case& c : kCases) {
      for (int rep = 0; rep < 20; ++rep) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + c.what + " rep " + std::to_string(rep));
        const std::vector<uint8_t> w = rand_row(t, n, rng, c.elo, c.ehi);
        std::vector<float> x(n);
        std::normal_distribution<float> nd(0.0f, c.act_scale);
        for (auto& v : x) v = nd(rng);
        if (rep == 0) x.assign(n, 0.0f);  // an all-zero row quantises to d = 0
        std::vector<uint8_t> act(act_row_bytes(t, n));
        quantize_act_row(t, x.data(), n, act.data());

        std::vector<float> wf(n);
        dequantize_row(t, w.data(), n, wf.data());
        std::vector<double> av, half;
        act_view(t, act, n, av, half);
        double ref = 0, mag = 0, bound = 0, exact = 0;
        for (int64_t i = 0; i < n; ++i) {
          ref += double(wf[i]) * av[i];
          mag += std::abs(double(wf[i]) * av[i]);
          bound += std::abs(double(wf[i])) * half[i];
          exact += double(wf[i]) * x[i];
        }
        const float scalar = vec_dot_fn(t, Isa::kScalar)(n, w.data(), act.data());
        // 2. the scalar kernel vs the dequantised reference (f32 rounding of the block sums only)
        EXPECT_NEAR(scalar, ref, 1e-5 * mag + 1e-30) << "scalar vs dequantised";
        // 3. vs the f32 activations: within the activation rounding bound
        EXPECT_NEAR(scalar, exact, bound + 1e-5 * mag + 1e-30) << "scalar vs f32 activations";
        // 1. every SIMD variant this CPU runs vs scalar
        for (const Isa isa : {Isa::kAvx2, Isa::kAvx512Vnni}) {
          if (!isa_supported(isa)) continue;
          const float simd = vec_dot_fn(t, isa)(n, w.data(), act.data());
          EXPECT_NEAR(simd, scalar, 1e-5 * mag + 1e-30) << isa_name(isa);
        }
      }
    }
  }
}

// The four-row kernels (batched decode) give every row the single-row kernel's bits, for every
// type and ISA build that has one, on all the scale cases above (a type without one returns
// nullptr, which matmul_nt handles by calling the single-row kernel).
TEST(Kernels, FourRowDotHasTheSingleRowBits) {
  std::mt19937 rng(99);
  int checked = 0;
  for (const DType t : kAll) {
    const int64_t n = dtype_traits(t).block == 256 ? 1024 : 576;
    for (const Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512Vnni}) {
      if (!isa_supported(isa)) continue;
      const VecDot4Fn dot4 = vec_dot4_fn(t, isa);
      if (!dot4) continue;
      ++checked;
      const VecDotFn dot = vec_dot_fn(t, isa);
      const size_t ab = act_row_bytes(t, n);
      for (const Case& c : kCases) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + isa_name(isa) + " " + c.what);
        const std::vector<uint8_t> w = rand_row(t, n, rng, c.elo, c.ehi);
        std::vector<uint8_t> act(ab * 4);
        std::normal_distribution<float> nd(0.0f, c.act_scale);
        for (int r = 0; r < 4; ++r) {
          std::vector<float> x(n);
          for (auto& v : x) v = r == 2 ? 0.0f : nd(rng);  // one all-zero row (d = 0)
          quantize_act_row(t, x.data(), n, act.data() + ab * r);
        }
        float y[4 * 3];
        std::fill(y, y + 12, -1.0f);
        dot4(n, w.data(), act.data(), ab, y, 3);
        for (int r = 0; r < 4; ++r) {
          const float one = dot(n, w.data(), act.data() + ab * r);
          EXPECT_EQ(0, std::memcmp(&one, &y[3 * r], sizeof(float))) << "row " << r << ": " << one << " vs " << y[3 * r];
        }
      }
    }
  }
  // Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 have one in the x86 builds.
  if (isa_supported(Isa::kAvx2)) EXPECT_GE(checked, 5);
}

/// splitmix64: a platform-independent stream (std::normal_distribution is not), so the golden
/// hashes below are the same for every standard library.
uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The K-quant kernels (Q4_K, Q5_K, Q6_K against Q8_K) of every ISA build the CPU has, through
// every entry point (single row, four rows, the tile), on `rows` = 37 weight rows (odd) and
// T = 1, 4, 8 and 11 activation rows (a tail after two groups of four), give each element the
// bits of the AVX2 single-row kernel; and those bits are pinned by an FNV-1a hash recorded from
// the kernels of 159843d (before the AVX-512 VNNI K-quant rewrite of issue 44 item 6: vpdpwssd,
// 512-bit Q6_K), so a kernel change that moves any output bit fails here. Weights are random
// bytes with f16 scales of exponent 8..15; activations random Q8_K rows (|q| ≤ 127, f32 d,
// exact block sums), built without the f32 quantiser.
TEST(Kernels, KQuantKernelsKeepTheirBitsOnEveryIsaRowCountAndBatch) {
  if (!isa_supported(Isa::kAvx2)) {
    GTEST_SKIP() << "the golden bits are the AVX2 kernels'";
  }
  constexpr int kRows = 37;
  constexpr int64_t kN = 1536;  // six 256-blocks (Qwen2.5-1.5B's hidden size)
  const struct {
    DType t;
    uint64_t golden;
  } kTypes[] = {
      {DType::Q4_K, 0x4bd93bb5672e43f3ull}, {DType::Q5_K, 0x46c59d9403ddce10ull}, {DType::Q6_K, 0x82c4c80adaa89299ull}};
  for (const auto& tc : kTypes) {
    const DType t = tc.t;
    SCOPED_TRACE(dtype_name(t));
    uint64_t seed = 1234 + static_cast<uint64_t>(t);
    const DTypeTraits tr = dtype_traits(t);
    const size_t rb = dtype_row_bytes(t, kN), ab = act_row_bytes(t, kN);
    ASSERT_EQ(ab, static_cast<size_t>(kN / 256 * 292));
    std::vector<uint8_t> w(rb * kRows);
    for (auto& b : w) b = static_cast<uint8_t>(splitmix(seed));
    for (int64_t blk = 0; blk < kN / 256 * kRows; ++blk) {
      uint8_t* o = w.data() + blk * tr.bytes;
      const auto f16 = [&seed] {  // the two draws in sequence (not both in one expression)
        const uint64_t e = 8 + splitmix(seed) % 8;
        const uint64_t mant = splitmix(seed) & 0x3ff;
        return static_cast<uint16_t>((e << 10) | mant);
      };
      const uint16_t d = f16(), m = f16();
      if (t == DType::Q6_K) {
        std::memcpy(o + 208, &d, 2);
      } else {
        std::memcpy(o, &d, 2);
        std::memcpy(o + 2, &m, 2);
      }
    }
    constexpr int64_t kT = 11;
    std::vector<uint8_t> act(ab * kT);
    for (int64_t r = 0; r < kT; ++r)
      for (int64_t blk = 0; blk < kN / 256; ++blk) {
        uint8_t* o = act.data() + ab * r + 292 * blk;
        const float d = std::ldexp(1.0f + static_cast<float>(splitmix(seed) % 1024) / 1024.0f, -7);
        std::memcpy(o, &d, 4);
        int8_t q[256];
        for (auto& v : q) v = static_cast<int8_t>(static_cast<int>(splitmix(seed) % 255) - 127);
        std::memcpy(o + 4, q, 256);
        for (int g = 0; g < 16; ++g) {
          int16_t sum = 0;
          for (int i = 0; i < 16; ++i) sum = static_cast<int16_t>(sum + q[16 * g + i]);
          std::memcpy(o + 260 + 2 * g, &sum, 2);
        }
      }
    // The reference: the AVX2 single-row kernel, element by element.
    const VecDotFn ref = vec_dot_fn(t, Isa::kAvx2);
    std::vector<float> want(kT * kRows);
    for (int64_t r = 0; r < kT; ++r)
      for (int j = 0; j < kRows; ++j) want[r * kRows + j] = ref(kN, w.data() + rb * j, act.data() + ab * r);
    uint64_t h = 1469598103934665603ull;
    for (const float v : want) {
      uint32_t u;
      std::memcpy(&u, &v, 4);
      for (int k = 0; k < 4; ++k) h = (h ^ ((u >> (8 * k)) & 0xff)) * 1099511628211ull;
    }
    EXPECT_EQ(h, tc.golden) << std::hex << "0x" << h << " (the golden bits moved)";
    for (const Isa isa : {Isa::kAvx2, Isa::kAvx512Vnni}) {
      if (!isa_supported(isa)) continue;
      SCOPED_TRACE(isa_name(isa));
      const VecDotFn dot = vec_dot_fn(t, isa);
      const VecDot4Fn dot4 = vec_dot4_fn(t, isa);
      const VecDotTileFn tile = vec_dot_tile_fn(t, isa);
      for (const int64_t T : {1, 4, 8, 11}) {
        SCOPED_TRACE("T " + std::to_string(T));
        std::vector<float> y(T * kRows, -1.0f);
        for (int64_t r = 0; r < T; ++r)
          for (int j = 0; j < kRows; ++j) y[r * kRows + j] = dot(kN, w.data() + rb * j, act.data() + ab * r);
        EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << "single-row kernel";
        if (dot4) {  // four rows at a time, the tail row by row (as matmul_nt)
          std::fill(y.begin(), y.end(), -1.0f);
          int64_t r = 0;
          for (; r + 4 <= T; r += 4)
            for (int j = 0; j < kRows; ++j)
              dot4(kN, w.data() + rb * j, act.data() + ab * r, ab, &y[r * kRows + j], kRows);
          for (; r < T; ++r)
            for (int j = 0; j < kRows; ++j) y[r * kRows + j] = dot(kN, w.data() + rb * j, act.data() + ab * r);
          EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << "four-row kernel";
        }
        if (tile) {  // tiles of up to 16 weight rows: 16, 16, 5
          std::fill(y.begin(), y.end(), -1.0f);
          for (int j0 = 0; j0 < kRows; j0 += 16) {
            const void* wr[16];
            const int nw = std::min(16, kRows - j0);
            for (int j = 0; j < nw; ++j) wr[j] = w.data() + rb * (j0 + j);
            tile(kN, wr, nw, act.data(), ab, T, &y[j0], kRows);
          }
          EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << "tile kernel";
        }
      }
    }
  }
}

TEST(Kernels, ActivationQuantisationRoundsToNearestLevel) {
  std::mt19937 rng(7);
  for (const DType t : {DType::Q4_0, DType::Q4_1, DType::Q4_K}) {
    const int64_t n = 512;
    std::vector<float> x(n);
    for (auto& v : x) v = std::normal_distribution<float>(0.0f, 2.0f)(rng);
    x[3] = 0.0f;
    std::vector<uint8_t> act(act_row_bytes(t, n));
    quantize_act_row(t, x.data(), n, act.data());
    std::vector<double> av, half;
    act_view(t, act, n, av, half);
    for (int64_t i = 0; i < n; ++i) EXPECT_LE(std::abs(av[i] - x[i]), half[i] * (1 + 1e-6) + 1e-12) << i;
    EXPECT_EQ(av[3], 0.0);
    // Q8_1 stores s = d·Σq per block; Q8_K stores the 16-element sums.
    if (t == DType::Q4_1) {
      for (int64_t b = 0; b < n / 32; ++b) {
        float d, s;
        std::memcpy(&d, &act[b * 40], 4);
        std::memcpy(&s, &act[b * 40 + 4], 4);
        int sum = 0;
        for (int j = 0; j < 32; ++j) sum += static_cast<int8_t>(act[b * 40 + 8 + j]);
        EXPECT_FLOAT_EQ(s, d * sum);
      }
    }
    if (t == DType::Q4_K) {
      for (int64_t b = 0; b < n / 256; ++b)
        for (int g = 0; g < 16; ++g) {
          int16_t s;
          std::memcpy(&s, &act[b * 292 + 260 + 2 * g], 2);
          int sum = 0;
          for (int j = 0; j < 16; ++j) sum += static_cast<int8_t>(act[b * 292 + 4 + 16 * g + j]);
          EXPECT_EQ(s, sum);
        }
    }
  }
}

TEST(Kernels, MatmulOnStoredWeightsEqualsDequantisedProduct) {
  std::mt19937 rng(99);
  for (const DType t : kAll) {
    const int64_t in = dtype_traits(t).block == 256 ? 512 : 96, out = 37;
    std::vector<uint8_t> w;
    for (int64_t r = 0; r < out; ++r) {
      auto row = rand_row(t, in, rng, 10, 14);
      w.insert(w.end(), row.begin(), row.end());
    }
    std::vector<int32_t> index(out);
    for (int64_t r = 0; r < out; ++r) index[r] = static_cast<int32_t>((r * 11) % out);  // a permutation
    std::vector<float> bias(out);
    for (auto& b : bias) b = std::normal_distribution<float>()(rng);
    const Mat m = Mat::of(t, w.data(), out, in, index.data());
    for (const int64_t T : {1, 3, 40}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " T=" + std::to_string(T));
      std::vector<float> x(T * in), y(T * out);
      for (auto& v : x) v = std::normal_distribution<float>()(rng);
      matmul_nt(x.data(), m, bias.data(), y.data(), T, in, out);
      std::vector<float> wr(in);
      for (int64_t j = 0; j < out; ++j) {
        dequantize_row(t, w.data() + static_cast<size_t>(index[j]) * m.row_bytes, in, wr.data());
        for (int64_t r = 0; r < T; ++r) {
          // Reference on this row's quantised activations (f32 rows as they are for f32/f16/bf16
          // weights): every row count takes the same kernels (matmul.h).
          std::vector<double> av(x.begin() + r * in, x.begin() + (r + 1) * in), half;
          {
            std::vector<uint8_t> act(act_row_bytes(t, in));
            quantize_act_row(t, &x[r * in], in, act.data());
            act_view(t, act, in, av, half);
          }
          double ref = bias[j], mag = std::abs(bias[j]);
          for (int64_t i = 0; i < in; ++i) {
            ref += double(wr[i]) * av[i];
            mag += std::abs(double(wr[i]) * av[i]);
          }
          EXPECT_NEAR(y[r * out + j], ref, 1e-5 * mag) << "row " << j << " token " << r;
        }
      }
    }
  }
}

TEST(Kernels, F32DotOfAnyLengthMatchesF64OnEveryIsa) {
  // The AVX-512 f32 dot runs 64-element steps, then 16-element steps with a masked tail.
  std::mt19937 rng(5);
  for (const int64_t n : {1, 15, 16, 17, 63, 64, 100, 577, 1536}) {
    std::vector<float> w(n), x(n);
    for (auto& v : w) v = std::normal_distribution<float>()(rng);
    for (auto& v : x) v = std::normal_distribution<float>()(rng);
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      ref += double(w[i]) * x[i];
      mag += std::abs(double(w[i]) * x[i]);
    }
    for (const Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512Vnni}) {
      if (!isa_supported(isa)) continue;
      EXPECT_NEAR(vec_dot_fn(DType::F32, isa)(n, w.data(), x.data()), ref, 1e-6 * mag) << isa_name(isa) << " n=" << n;
    }
  }
}

TEST(Kernels, F32TileMatchesF64AndItsBitsDoNotDependOnBlocking) {
  // matmul_nt's f32 kernel at decode row counts: every ISA vs an f64 reference, and each
  // element's bits the same whether its activation row comes alone or with others (T) and
  // whatever number of weight rows share the call (nw) — batch composition never changes a row.
  std::mt19937 rng(23);
  for (const int64_t in : {16, 100, 576, 1536}) {
    const int nw = 16, T = 7;
    std::vector<float> w(nw * in), x(T * in);
    for (auto& v : w) v = std::normal_distribution<float>()(rng);
    for (auto& v : x) v = std::normal_distribution<float>()(rng);
    const float* rows[16];
    for (int r = 0; r < nw; ++r) rows[r] = &w[r * in];
    for (const Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512Vnni}) {
      if (!isa_supported(isa)) continue;
      SCOPED_TRACE(std::string(isa_name(isa)) + " in=" + std::to_string(in));
      const F32TileFn tile = f32_tile_fn(isa);
      std::vector<float> all(T * nw, NAN);
      tile(in, rows, nw, x.data(), T, in, all.data(), nw);
      for (int t = 0; t < T; ++t)
        for (int r = 0; r < nw; ++r) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < in; ++k) {
            ref += double(w[r * in + k]) * x[t * in + k];
            mag += std::abs(double(w[r * in + k]) * x[t * in + k]);
          }
          ASSERT_NEAR(all[t * nw + r], ref, 1e-6 * mag) << "t=" << t << " r=" << r;
        }
      // One activation row at a time, weight rows in groups of 3 (odd blocks): the same bits.
      for (int t = 0; t < T; ++t)
        for (int r = 0; r < nw; r += 3) {
          const int n = std::min(3, nw - r);
          float one[3];
          tile(in, rows + r, n, &x[t * in], 1, in, one, n);
          for (int i = 0; i < n; ++i) ASSERT_EQ(one[i], all[t * nw + r + i]) << "t=" << t << " r=" << r + i;
        }
    }
  }
}

TEST(Kernels, ActivationRoundingIsHalfAwayFromZero) {
  // amax 127 gives d = 1: the levels are x rounded, ties away from zero (std::lround).
  std::vector<float> x = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 0.49999997f, -0.49999997f, 3.4999998f, -126.5f};
  x.resize(32, 1.5f);
  std::vector<uint8_t> act(act_row_bytes(DType::Q8_0, 32));
  quantize_act_row(DType::Q8_0, x.data(), 32, act.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(static_cast<int8_t>(act[4 + i]), std::lround(x[i])) << "x = " << x[i];
}

TEST(Kernels, MatmulManyEqualsMatmulPerProductBitwise) {
  // Q, K, V of mixed types (Q4_K_M stores V as Q6_K), bias on one: one parallel region gives
  // each product exactly matmul_nt's bits, at decode and batched-decode row counts.
  std::mt19937 rng(17);
  const int64_t in = 512;
  const DType types[] = {DType::Q4_K, DType::Q4_K, DType::Q6_K, DType::F32, DType::Q8_0};
  const int64_t outs[] = {96, 40, 40, 33, 17};
  std::vector<std::vector<uint8_t>> store(5);
  std::vector<Mat> mats;
  for (int p = 0; p < 5; ++p) {
    for (int64_t r = 0; r < outs[p]; ++r) {
      auto row = rand_row(types[p], in, rng, 10, 14);
      store[p].insert(store[p].end(), row.begin(), row.end());
    }
    mats.push_back(Mat::of(types[p], store[p].data(), outs[p], in));
  }
  std::vector<float> bias(40);
  for (auto& b : bias) b = std::normal_distribution<float>()(rng);
  for (const int64_t T : {1, 8, 31}) {
    std::vector<float> x(T * in);
    for (auto& v : x) v = std::normal_distribution<float>()(rng);
    std::vector<std::vector<float>> many(5), one(5);
    std::vector<MatmulOut> prods;
    for (int p = 0; p < 5; ++p) {
      many[p].assign(T * outs[p], 0.0f);
      one[p].assign(T * outs[p], 0.0f);
      prods.push_back({&mats[p], p == 1 ? bias.data() : nullptr, many[p].data()});
      matmul_nt(x.data(), mats[p], p == 1 ? bias.data() : nullptr, one[p].data(), T, in, outs[p]);
    }
    matmul_nt_many(x.data(), T, in, prods);
    for (int p = 0; p < 5; ++p) EXPECT_EQ(many[p], one[p]) << "product " << p << " T=" << T;
  }
}

TEST(Kernels, MatmulRowsHaveOneReductionOrderWhateverTheCall) {
  // Issue 38: every output element of matmul_nt has one fixed reduction order, so a row's bits
  // depend only on its own activations and W — not on how many rows share the call (prefill
  // chunk, batch, the MLP's row pieces), on where the row sits in the call, or on the thread
  // count. Checked for every weight type against the row multiplied alone (T = 1, one thread),
  // for row counts around every blocking of the kernels (4-row groups, 16-row weight tiles, the
  // old 32/64-row thresholds) and at several offsets.
  std::mt19937 rng(29);
  const int64_t out = 45;  // 2 full 16-row weight tiles + a partial one
  for (const DType t : kAll) {
    const int64_t n = dtype_traits(t).block == 256 ? 512 : 96;
    std::vector<uint8_t> store;
    for (int64_t r = 0; r < out; ++r) {
      auto row = rand_row(t, n, rng, 10, 14);
      store.insert(store.end(), row.begin(), row.end());
    }
    const Mat w = Mat::of(t, store.data(), out, n);
    const int64_t total = 140;
    std::vector<float> x(total * n), bias(out);
    for (auto& v : x) v = std::normal_distribution<float>()(rng);
    for (auto& v : bias) v = std::normal_distribution<float>()(rng);
    // The reference: each row alone, on one thread.
    std::vector<float> alone(total * out);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    for (int64_t r = 0; r < total; ++r) matmul_nt(&x[r * n], w, bias.data(), &alone[r * out], 1, n, out);
    omp_set_num_threads(std::max(2, threads));
    for (const int64_t T : {1, 3, 7, 8, 31, 32, 33, 37, 63, 64, 65, 100, 129}) {
      for (const int64_t r0 : {int64_t{0}, int64_t{1}, int64_t{5}, total - T}) {
        if (r0 + T > total) continue;
        SCOPED_TRACE(std::string(dtype_name(t)) + " T=" + std::to_string(T) + " from row " + std::to_string(r0));
        std::vector<float> y(T * out);
        matmul_nt(&x[r0 * n], w, bias.data(), y.data(), T, n, out);
        EXPECT_TRUE(std::equal(y.begin(), y.end(), alone.begin() + r0 * out));
      }
    }
    omp_set_num_threads(threads);
  }
}

TEST(Kernels, PrefillRowsDoNotDependOnTheMlpPieces) {
  // The CPU forward runs a prefill chunk's MLP in mlp_pieces(T) row pieces; with one reduction
  // order per element (above) the split cannot change a row's bits. At the model's widths.
  std::mt19937 rng(29);
  const int64_t in = 576, out = 160;
  for (const DType t : {DType::F32, DType::BF16, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q6_K}) {
    const int64_t n = dtype_traits(t).block == 256 ? 768 : in;
    std::vector<uint8_t> store;
    for (int64_t r = 0; r < out; ++r) {
      auto row = rand_row(t, n, rng, 10, 14);
      store.insert(store.end(), row.begin(), row.end());
    }
    const Mat w = Mat::of(t, store.data(), out, n);
    for (const int64_t T : {129, 300, 515}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " T=" + std::to_string(T));
      std::vector<float> x(T * n), whole(T * out), split(T * out);
      for (auto& v : x) v = std::normal_distribution<float>()(rng);
      matmul_nt(x.data(), w, nullptr, whole.data(), T, n, out);
      const int64_t p = mlp_pieces(T);
      ASSERT_GT(p, 1);
      for (int64_t i = 0; i < p; ++i) {
        const int64_t t0 = T * i / p, rows = T * (i + 1) / p - t0;
        ASSERT_LE(rows, kMlpPieceRows);
        matmul_nt(&x[t0 * n], w, nullptr, &split[t0 * out], rows, n, out);
      }
      EXPECT_EQ(split, whole);
      const int64_t r0 = 13, nr = 77;
      std::vector<float> part(nr * out);
      matmul_nt(&x[r0 * n], w, nullptr, part.data(), nr, n, out);
      EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + r0 * out));
    }
  }
  EXPECT_EQ(mlp_pieces(1), 1);
  EXPECT_EQ(mlp_pieces(kMlpPieceRows), 1);
}

TEST(Kernels, BestIsaIsSupportedAndKvbIsaLowersIt) {
  EXPECT_TRUE(isa_supported(best_isa()));
  EXPECT_TRUE(isa_supported(Isa::kScalar));
  for (const DType t : kAll) EXPECT_NE(vec_dot_fn(t, best_isa()), nullptr) << dtype_name(t);
}

}  // namespace
}  // namespace kvb
