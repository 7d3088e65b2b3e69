// Bit-exactness of sim/numerics against references written here, independently of the code
// under test, from the format definitions.
#include "sim/numerics.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mlaps::sim {
namespace {

constexpr Fp8Format kFormats[] = {Fp8Format::kE4m3fn, Fp8Format::kE4m3fnuz};

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

const char* Name(Fp8Format f) { return f == Fp8Format::kE4m3fn ? "e4m3fn" : "e4m3fnuz"; }

// ---- fp8 reference, from the format definition ----

bool RefIsNan(uint8_t code, Fp8Format f) {
  if (f == Fp8Format::kE4m3fn) return code == 0x7f || code == 0xff;
  return code == 0x80;
}

// Sign/exponent/mantissa formula in double with std::pow.
double RefDecode(uint8_t code, Fp8Format f) {
  const int bias = f == Fp8Format::kE4m3fn ? 7 : 8;
  const int s = code >> 7;
  const int e = (code >> 3) & 15;
  const int m = code & 7;
  const double sign = s ? -1.0 : 1.0;
  if (e == 0) return sign * (m / 8.0) * std::pow(2.0, 1 - bias);
  return sign * (1.0 + m / 8.0) * std::pow(2.0, e - bias);
}

// Reference encoder by exhaustive search: the nearest of all finite codes (in double, exact),
// ties to the even code, magnitudes beyond the maximum saturate, NaN -> the NaN code.
uint8_t RefEncode(float x, Fp8Format f) {
  if (std::isnan(x)) {
    if (f == Fp8Format::kE4m3fnuz) return 0x80;
    return std::signbit(x) ? 0xff : 0x7f;
  }
  const double max_finite = f == Fp8Format::kE4m3fn ? 448.0 : 240.0;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= max_finite) {
    return (std::signbit(x) ? 0x80 : 0x00) | (f == Fp8Format::kE4m3fn ? 0x7e : 0x7f);
  }
  int best = -1;
  double best_dist = 0;
  for (int c = 0; c < 128; ++c) {
    if (RefIsNan(static_cast<uint8_t>(c), f)) continue;
    const double d = std::fabs(RefDecode(static_cast<uint8_t>(c), f) - a);
    if (best < 0 || d < best_dist || (d == best_dist && c % 2 == 0)) {
      best = c;
      best_dist = d;
    }
  }
  if (best == 0 && f == Fp8Format::kE4m3fnuz) return 0x00;
  return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0x00) | best);
}

// Finite non-negative codes of a format in increasing value order (codes 0x00..max).
std::vector<uint8_t> PositiveFiniteCodes(Fp8Format f) {
  std::vector<uint8_t> codes;
  const int max_code = f == Fp8Format::kE4m3fn ? 0x7e : 0x7f;
  for (int c = 0; c <= max_code; ++c) codes.push_back(static_cast<uint8_t>(c));
  return codes;
}

TEST(Fp8Test, ReferenceSanity) {
  EXPECT_EQ(RefDecode(0x7e, Fp8Format::kE4m3fn), 448.0);
  EXPECT_EQ(RefDecode(0x7f, Fp8Format::kE4m3fnuz), 240.0);
  EXPECT_EQ(RefDecode(0x01, Fp8Format::kE4m3fn), std::ldexp(1.0, -9));
  EXPECT_EQ(RefDecode(0x01, Fp8Format::kE4m3fnuz), std::ldexp(1.0, -10));
  EXPECT_EQ(RefDecode(0x08, Fp8Format::kE4m3fn), std::ldexp(1.0, -6));
  EXPECT_EQ(RefDecode(0x08, Fp8Format::kE4m3fnuz), std::ldexp(1.0, -7));
  EXPECT_EQ(RefDecode(0x38, Fp8Format::kE4m3fn), 1.0);
  EXPECT_EQ(RefDecode(0x40, Fp8Format::kE4m3fnuz), 1.0);
  // Values increase strictly with the code over the positive finite codes.
  for (Fp8Format f : kFormats) {
    std::vector<uint8_t> codes = PositiveFiniteCodes(f);
    for (size_t i = 1; i < codes.size(); ++i) {
      EXPECT_LT(RefDecode(codes[i - 1], f), RefDecode(codes[i], f));
    }
  }
}

TEST(Fp8Test, MaxFinite) {
  EXPECT_EQ(Fp8MaxFinite(Fp8Format::kE4m3fn), 448.0f);
  EXPECT_EQ(Fp8MaxFinite(Fp8Format::kE4m3fnuz), 240.0f);
}

TEST(Fp8Test, DecodeAll256Codes) {
  for (Fp8Format f : kFormats) {
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      const float v = Fp8BitsToFloat(code, f);
      SCOPED_TRACE(testing::Message() << Name(f) << " code 0x" << std::hex << c);
      if (RefIsNan(code, f)) {
        EXPECT_TRUE(std::isnan(v));
        continue;
      }
      EXPECT_FALSE(std::isnan(v));
      EXPECT_EQ(static_cast<double>(v), RefDecode(code, f));
      EXPECT_EQ(std::signbit(v), (c & 0x80) != 0);  // includes e4m3fn 0x80 == -0.0
    }
  }
  EXPECT_TRUE(std::signbit(Fp8BitsToFloat(0x80, Fp8Format::kE4m3fn)));
  EXPECT_EQ(Fp8BitsToFloat(0x80, Fp8Format::kE4m3fn), 0.0f);
  EXPECT_TRUE(std::signbit(Fp8BitsToFloat(0xff, Fp8Format::kE4m3fn)));  // NaN keeps sign
  EXPECT_FALSE(std::signbit(Fp8BitsToFloat(0x7f, Fp8Format::kE4m3fn)));
}

// encode(decode(code)) == code for every code. Every code round-trips: the only cases that
// could be ambiguous are the NaNs (e4m3fn decodes 0x7f/0xff to a NaN with the same sign,
// which encodes back to 0x7f/0xff; e4m3fnuz's single NaN 0x80 encodes back to 0x80) and
// zero (e4m3fn 0x80 is -0.0 which encodes back to 0x80; e4m3fnuz has only 0x00).
TEST(Fp8Test, EncodeDecodeRoundTripsEveryCode) {
  for (Fp8Format f : kFormats) {
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      EXPECT_EQ(FloatToFp8Bits(Fp8BitsToFloat(code, f), f), code)
          << Name(f) << " code 0x" << std::hex << c;
    }
  }
}

// Every value in [-max, max]: midpoints between adjacent values tie to the even code;
// the floats just above and below go up and down.
TEST(Fp8Test, MidpointsTieToEvenAndNeighborsRoundCorrectly) {
  for (Fp8Format f : kFormats) {
    std::vector<uint8_t> codes = PositiveFiniteCodes(f);
    for (size_t i = 1; i < codes.size(); ++i) {
      const uint8_t lo = codes[i - 1];
      const uint8_t hi = codes[i];
      const double mid_d = (RefDecode(lo, f) + RefDecode(hi, f)) / 2;
      const float mid = static_cast<float>(mid_d);
      ASSERT_EQ(static_cast<double>(mid), mid_d);  // midpoints have <= 5 significant bits
      const uint8_t even = (lo % 2 == 0) ? lo : hi;
      const float above = std::nextafter(mid, std::numeric_limits<float>::infinity());
      const float below = std::nextafter(mid, 0.0f);
      SCOPED_TRACE(testing::Message()
                   << Name(f) << " between 0x" << std::hex << int{lo} << " and 0x" << int{hi});
      EXPECT_EQ(FloatToFp8Bits(mid, f), even);
      EXPECT_EQ(FloatToFp8Bits(above, f), hi);
      EXPECT_EQ(FloatToFp8Bits(below, f), lo);
      // Negative side: same magnitude codes with the sign bit, except fnuz's zero.
      const auto neg = [f](uint8_t c) -> uint8_t {
        return (c == 0 && f == Fp8Format::kE4m3fnuz) ? 0x00 : static_cast<uint8_t>(c | 0x80);
      };
      EXPECT_EQ(FloatToFp8Bits(-mid, f), neg(even));
      EXPECT_EQ(FloatToFp8Bits(-above, f), neg(hi));
      EXPECT_EQ(FloatToFp8Bits(-below, f), neg(lo));
      // Values strictly between are also checked against the reference.
      const float quarter = static_cast<float>((3 * RefDecode(lo, f) + RefDecode(hi, f)) / 4);
      EXPECT_EQ(FloatToFp8Bits(quarter, f), lo);
      const float three_q = static_cast<float>((RefDecode(lo, f) + 3 * RefDecode(hi, f)) / 4);
      EXPECT_EQ(FloatToFp8Bits(three_q, f), hi);
    }
  }
}

TEST(Fp8Test, Saturation) {
  const float inf = std::numeric_limits<float>::infinity();
  const float fmax = std::numeric_limits<float>::max();
  // e4m3fn: 448 = 0x7e. The next value would be 480 (midpoint 464): all saturate.
  for (float v : {448.0f, 448.5f, 449.0f, 463.0f, 464.0f, 465.0f, 479.0f, 480.0f, 500.0f, 896.0f,
                  1e9f, fmax, inf}) {
    EXPECT_EQ(FloatToFp8Bits(v, Fp8Format::kE4m3fn), 0x7e) << v;
    EXPECT_EQ(FloatToFp8Bits(-v, Fp8Format::kE4m3fn), 0xfe) << v;
    EXPECT_EQ(RoundToFp8(v, Fp8Format::kE4m3fn), 448.0f) << v;
    EXPECT_EQ(RoundToFp8(-v, Fp8Format::kE4m3fn), -448.0f) << v;
  }
  // e4m3fnuz: 240 = 0x7f. The next value would be 256 (midpoint 248): all saturate.
  for (float v :
       {240.0f, 241.0f, 247.0f, 248.0f, 249.0f, 256.0f, 449.0f, 480.0f, 1e9f, fmax, inf}) {
    EXPECT_EQ(FloatToFp8Bits(v, Fp8Format::kE4m3fnuz), 0x7f) << v;
    EXPECT_EQ(FloatToFp8Bits(-v, Fp8Format::kE4m3fnuz), 0xff) << v;
    EXPECT_EQ(RoundToFp8(v, Fp8Format::kE4m3fnuz), 240.0f) << v;
    EXPECT_EQ(RoundToFp8(-v, Fp8Format::kE4m3fnuz), -240.0f) << v;
  }
  // Just below the maximum still rounds normally.
  EXPECT_EQ(FloatToFp8Bits(433.0f, Fp8Format::kE4m3fn), 0x7e);  // 416 | 448, nearer 448
  EXPECT_EQ(FloatToFp8Bits(432.0f, Fp8Format::kE4m3fn), 0x7e);  // tie 416(0x7d)/448(0x7e)
  EXPECT_EQ(FloatToFp8Bits(431.0f, Fp8Format::kE4m3fn), 0x7d);
  EXPECT_EQ(FloatToFp8Bits(232.0f, Fp8Format::kE4m3fnuz), 0x7e);  // tie 224(0x7e)/240(0x7f)
  EXPECT_EQ(FloatToFp8Bits(233.0f, Fp8Format::kE4m3fnuz), 0x7f);
}

TEST(Fp8Test, NanHandling) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float snan = std::numeric_limits<float>::signaling_NaN();
  const float payload_nan = FromBits(0x7fc12345u);
  for (float n : {qnan, snan, payload_nan}) {
    EXPECT_EQ(FloatToFp8Bits(n, Fp8Format::kE4m3fn), 0x7f);
    EXPECT_EQ(FloatToFp8Bits(-n, Fp8Format::kE4m3fn), 0xff);
    EXPECT_EQ(FloatToFp8Bits(n, Fp8Format::kE4m3fnuz), 0x80);
    EXPECT_EQ(FloatToFp8Bits(-n, Fp8Format::kE4m3fnuz), 0x80);
    for (Fp8Format f : kFormats) {
      EXPECT_TRUE(std::isnan(RoundToFp8(n, f)));
      EXPECT_TRUE(std::isnan(Fp8Quantize(n, 2.0f, f)));
    }
  }
  // e4m3fn: 0x7f / 0xff are NaN, but 0x7e / 0xfe and exponent-15 codes below are finite.
  EXPECT_EQ(Fp8BitsToFloat(0x78, Fp8Format::kE4m3fn), 256.0f);
  EXPECT_TRUE(std::isnan(Fp8BitsToFloat(0x7f, Fp8Format::kE4m3fn)));
  EXPECT_TRUE(std::isnan(Fp8BitsToFloat(0xff, Fp8Format::kE4m3fn)));
  // e4m3fnuz: 0x7f / 0xff are +-240, only 0x80 is NaN.
  EXPECT_EQ(Fp8BitsToFloat(0x7f, Fp8Format::kE4m3fnuz), 240.0f);
  EXPECT_EQ(Fp8BitsToFloat(0xff, Fp8Format::kE4m3fnuz), -240.0f);
  EXPECT_TRUE(std::isnan(Fp8BitsToFloat(0x80, Fp8Format::kE4m3fnuz)));
}

TEST(Fp8Test, Subnormals) {
  // e4m3fn subnormals: m * 2^-9; fnuz: m * 2^-10.
  for (int m = 1; m < 8; ++m) {
    EXPECT_EQ(FloatToFp8Bits(std::ldexp(static_cast<float>(m), -9), Fp8Format::kE4m3fn), m);
    EXPECT_EQ(FloatToFp8Bits(std::ldexp(static_cast<float>(m), -10), Fp8Format::kE4m3fnuz), m);
    EXPECT_EQ(Fp8BitsToFloat(static_cast<uint8_t>(m), Fp8Format::kE4m3fn),
              std::ldexp(static_cast<float>(m), -9));
    EXPECT_EQ(Fp8BitsToFloat(static_cast<uint8_t>(m | 0x80), Fp8Format::kE4m3fnuz),
              -std::ldexp(static_cast<float>(m), -10));
  }
  // Largest subnormal rounding up into the smallest normal: 7.5 * 2^-9 ties to 8 * 2^-9.
  EXPECT_EQ(FloatToFp8Bits(std::ldexp(7.5f, -9), Fp8Format::kE4m3fn), 0x08);
  EXPECT_EQ(FloatToFp8Bits(std::ldexp(7.5f, -10), Fp8Format::kE4m3fnuz), 0x08);
  // Half of the smallest subnormal ties to zero (even); just above goes to 1.
  const float half_fn = std::ldexp(1.0f, -10);
  const float half_fnuz = std::ldexp(1.0f, -11);
  EXPECT_EQ(FloatToFp8Bits(half_fn, Fp8Format::kE4m3fn), 0x00);
  EXPECT_EQ(FloatToFp8Bits(-half_fn, Fp8Format::kE4m3fn), 0x80);
  EXPECT_EQ(FloatToFp8Bits(std::nextafter(half_fn, 1.0f), Fp8Format::kE4m3fn), 0x01);
  EXPECT_EQ(FloatToFp8Bits(half_fnuz, Fp8Format::kE4m3fnuz), 0x00);
  EXPECT_EQ(FloatToFp8Bits(-half_fnuz, Fp8Format::kE4m3fnuz), 0x00);
  EXPECT_EQ(FloatToFp8Bits(std::nextafter(half_fnuz, 1.0f), Fp8Format::kE4m3fnuz), 0x01);
  EXPECT_EQ(FloatToFp8Bits(-std::nextafter(half_fnuz, 1.0f), Fp8Format::kE4m3fnuz), 0x81);
  // 1.5 * 2^-10 ties between fn codes 0x01 and 0x02 -> 0x02 (even).
  EXPECT_EQ(FloatToFp8Bits(std::ldexp(1.5f, -9), Fp8Format::kE4m3fn), 0x02);
  EXPECT_EQ(FloatToFp8Bits(std::ldexp(2.5f, -9), Fp8Format::kE4m3fn), 0x02);
  // Float subnormal inputs flush to (signed, for fn) zero by rounding, not by DAZ.
  const float denorm_min = std::numeric_limits<float>::denorm_min();
  for (float v : {denorm_min, FromBits(0x007fffffu), std::numeric_limits<float>::min()}) {
    EXPECT_EQ(FloatToFp8Bits(v, Fp8Format::kE4m3fn), 0x00);
    EXPECT_EQ(FloatToFp8Bits(-v, Fp8Format::kE4m3fn), 0x80);
    EXPECT_EQ(FloatToFp8Bits(v, Fp8Format::kE4m3fnuz), 0x00);
    EXPECT_EQ(FloatToFp8Bits(-v, Fp8Format::kE4m3fnuz), 0x00);
  }
}

TEST(Fp8Test, FnuzHasNoNegativeZero) {
  EXPECT_EQ(FloatToFp8Bits(-0.0f, Fp8Format::kE4m3fnuz), 0x00);
  EXPECT_EQ(FloatToFp8Bits(0.0f, Fp8Format::kE4m3fnuz), 0x00);
  EXPECT_FALSE(std::signbit(RoundToFp8(-0.0f, Fp8Format::kE4m3fnuz)));
  EXPECT_FALSE(std::signbit(RoundToFp8(-1e-30f, Fp8Format::kE4m3fnuz)));
  // e4m3fn keeps -0.
  EXPECT_EQ(FloatToFp8Bits(-0.0f, Fp8Format::kE4m3fn), 0x80);
  EXPECT_TRUE(std::signbit(RoundToFp8(-0.0f, Fp8Format::kE4m3fn)));
  EXPECT_TRUE(std::signbit(RoundToFp8(-1e-30f, Fp8Format::kE4m3fn)));
}

TEST(Fp8Test, RandomFloatsMatchExhaustiveSearchReference) {
  std::mt19937 rng(20240611);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-16, 10);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (Fp8Format f : kFormats) {
    for (int i = 0; i < 200000; ++i) {
      float x;
      if (i % 4 == 3) {
        x = FromBits(any_bits(rng));  // anything, including NaN/inf/subnormal/huge
      } else {
        x = std::ldexp(mant(rng), expo(rng));
        if (i % 2) x = -x;
      }
      const uint8_t got = FloatToFp8Bits(x, f);
      ASSERT_EQ(got, RefEncode(x, f)) << Name(f) << " x=" << x << " bits 0x" << std::hex << Bits(x);
      const float r = RoundToFp8(x, f);
      const float d = Fp8BitsToFloat(got, f);
      if (std::isnan(x)) {
        ASSERT_TRUE(std::isnan(r));
      } else {
        ASSERT_EQ(Bits(r), Bits(d));
      }
    }
  }
}

TEST(Fp8Test, QuantizeDividesByScaleThenRounds) {
  // 1000 / 4 = 250: e4m3fn neighbours 240 / 256 -> 256; fnuz saturates to 240.
  EXPECT_EQ(Fp8Quantize(1000.0f, 4.0f, Fp8Format::kE4m3fn), 256.0f);
  EXPECT_EQ(Fp8Quantize(1000.0f, 4.0f, Fp8Format::kE4m3fnuz), 240.0f);
  EXPECT_EQ(Fp8Quantize(-3.3f, 0.5f, Fp8Format::kE4m3fn), -6.5f);  // -6.6 -> -6.5
  EXPECT_EQ(Fp8Quantize(1e6f, 1e-3f, Fp8Format::kE4m3fn), 448.0f);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> val(-1000.0f, 1000.0f);
  std::uniform_real_distribution<float> scale(0.01f, 10.0f);
  for (Fp8Format f : kFormats) {
    for (int i = 0; i < 10000; ++i) {
      const float x = val(rng);
      const float s = scale(rng);
      const float q = x / s;
      ASSERT_EQ(Bits(Fp8Quantize(x, s, f)), Bits(RoundToFp8(q, f)));
      ASSERT_EQ(FloatToFp8Bits(Fp8Quantize(x, s, f), f), RefEncode(q, f));
    }
  }
}

// ---- bf16 ----

// Independent reference 1: the usual uint32 formula (add 0x7fff plus the kept lsb).
uint16_t RefBf16Formula(float x) {
  const uint32_t u = Bits(x);
  if (std::isnan(x)) return static_cast<uint16_t>(0x7fc0u | ((u >> 16) & 0x8000u));
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Independent reference 2: compare distances (in double, exactly) to the two bf16 values
// bracketing |x|; the one above the largest finite bf16 is 2^128 (rounding there is
// overflow to inf, as in IEEE).
uint16_t RefBf16Distance(float x) {
  const uint32_t u = Bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if (std::isnan(x)) return static_cast<uint16_t>(0x7fc0u | sign);
  if (std::isinf(x)) return static_cast<uint16_t>(0x7f80u | sign);
  const double a = std::fabs(static_cast<double>(x));
  const uint32_t lo_mag = (u & 0x7fffffffu) >> 16;
  const double lo = std::fabs(static_cast<double>(FromBits(lo_mag << 16)));
  const double hi = lo_mag + 1 == 0x7f80u ? std::ldexp(1.0, 128)
                                          : static_cast<double>(FromBits((lo_mag + 1) << 16));
  const double dlo = a - lo;
  const double dhi = hi - a;
  uint32_t mag = lo_mag;
  if (dhi < dlo || (dhi == dlo && (lo_mag & 1u))) mag = lo_mag + 1;
  return static_cast<uint16_t>(sign | mag);
}

TEST(Bf16Test, AllBitPatternsRoundTrip) {
  for (uint32_t p = 0; p < 65536; ++p) {
    const uint16_t bits = static_cast<uint16_t>(p);
    const float v = Bf16BitsToFloat(bits);
    ASSERT_EQ(Bits(v), p << 16);
    const bool is_nan = (p & 0x7f80u) == 0x7f80u && (p & 0x7fu) != 0;
    ASSERT_EQ(std::isnan(v), is_nan) << std::hex << p;
    if (is_nan) {
      ASSERT_EQ(FloatToBf16Bits(v), 0x7fc0u | (p & 0x8000u)) << std::hex << p;
      ASSERT_TRUE(std::isnan(RoundToBf16(v)));
    } else {
      ASSERT_EQ(FloatToBf16Bits(v), bits) << std::hex << p;
      ASSERT_EQ(Bits(RoundToBf16(v)), p << 16);
    }
  }
}

TEST(Bf16Test, RandomFloatsMatchReferences) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_int_distribution<uint32_t> low(0, 0xffff);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = any_bits(rng);
    // Every 8th sample: force the low half to a tie or a neighbour of a tie.
    if (i % 8 == 0) u = (u & 0xffff0000u) | (0x8000u + (low(rng) % 3) - 1);
    const float x = FromBits(u);
    const uint16_t got = FloatToBf16Bits(x);
    ASSERT_EQ(got, RefBf16Formula(x)) << std::hex << u;
    ASSERT_EQ(got, RefBf16Distance(x)) << std::hex << u;
    if (!std::isnan(x)) {
      ASSERT_EQ(Bits(RoundToBf16(x)), static_cast<uint32_t>(got) << 16);
    }
  }
}

TEST(Bf16Test, TiesToEven) {
  // 1 + 2^-8 is halfway between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81): -> 0x3f80.
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f808000u)), 0x3f80);
  // Halfway between 0x3f81 (odd) and 0x3f82 (even): -> 0x3f82.
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f818000u)), 0x3f82);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f817fffu)), 0x3f81);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0xbf818000u)), 0xbf82);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0xbf808000u)), 0xbf80);
  // Mantissa carry into the exponent: 0x3fff8000 (tie, odd lsb) -> 0x4000 = 2.0.
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3fff8000u)), 0x4000);
  EXPECT_EQ(RoundToBf16(FromBits(0x3fff8000u)), 2.0f);
  // Subnormals: tie at the smallest bf16 subnormal 0x0001 (odd) -> 0x0002; from 0 -> 0.
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x00018000u)), 0x0002);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x00008000u)), 0x0000);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x80008000u)), 0x8000);
  EXPECT_EQ(FloatToBf16Bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  // Largest float subnormal rounds up to the smallest normal bf16.
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x007fffffu)), 0x0080);
}

TEST(Bf16Test, InfinityNanAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToBf16Bits(inf), 0x7f80);
  EXPECT_EQ(FloatToBf16Bits(-inf), 0xff80);
  EXPECT_EQ(RoundToBf16(inf), inf);
  // Largest finite bf16 is 0x7f7f; a tie above it (odd lsb) overflows to inf.
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x7f7f8000u)), 0x7f80);
  EXPECT_EQ(FloatToBf16Bits(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBf16Bits(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(FloatToBf16Bits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16Bits(0.0f), 0x0000);
  // NaN -> quiet NaN keeping the sign, payload dropped; signalling NaN is quieted.
  EXPECT_EQ(FloatToBf16Bits(std::numeric_limits<float>::quiet_NaN()), 0x7fc0);
  EXPECT_EQ(FloatToBf16Bits(-std::numeric_limits<float>::quiet_NaN()), 0xffc0);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x7f800001u)), 0x7fc0);  // would round to inf by formula
  EXPECT_EQ(FloatToBf16Bits(FromBits(0xff80ffffu)), 0xffc0);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x7fffffffu)), 0x7fc0);
  EXPECT_TRUE(std::isnan(RoundToBf16(std::numeric_limits<float>::signaling_NaN())));
}

}  // namespace
}  // namespace mlaps::sim
