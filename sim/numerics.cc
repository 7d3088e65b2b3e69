#include "sim/numerics.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace mlaps::sim {
namespace {

uint32_t FloatBits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

float BitsFloat(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// Parameters of an e4m3 format.
struct E4m3 {
  int bias;
  uint8_t max_code;  // largest finite magnitude code (sign bit clear)
};

E4m3 Params(Fp8Format format) {
  return format == Fp8Format::kE4m3fn ? E4m3{7, 0x7e} : E4m3{8, 0x7f};
}

// Rounds a non-negative double to the nearest integer, ties to even, independent of the
// floating point rounding mode.
double RoundHalfEven(double n) {
  double lo = std::floor(n);
  double frac = n - lo;  // exact: n and lo share the binade or lo is 0
  if (frac > 0.5 || (frac == 0.5 && std::fmod(lo, 2.0) != 0.0)) lo += 1.0;
  return lo;
}

}  // namespace

uint16_t FloatToBf16Bits(float x) {
  const uint32_t u = FloatBits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if (std::isnan(x)) return static_cast<uint16_t>(0x7fc0u | sign);
  uint32_t upper = u >> 16;
  const uint32_t lower = u & 0xffffu;
  // Round the magnitude; a carry out of the mantissa bumps the exponent, and out of the
  // largest finite value gives exactly the inf pattern. inf itself has lower == 0.
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u) != 0)) ++upper;
  return static_cast<uint16_t>(upper);
}

float Bf16BitsToFloat(uint16_t bits) { return BitsFloat(static_cast<uint32_t>(bits) << 16); }

float RoundToBf16(float x) { return Bf16BitsToFloat(FloatToBf16Bits(x)); }

uint8_t FloatToFp8Bits(float x, Fp8Format format) {
  const E4m3 p = Params(format);
  const bool negative = std::signbit(x);
  if (std::isnan(x)) {
    if (format == Fp8Format::kE4m3fnuz) return 0x80;
    return negative ? 0xff : 0x7f;
  }
  const uint8_t sign = negative ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));  // exact
  uint8_t mag;
  if (a >= 2.0 * Fp8MaxFinite(format)) {  // also inf; keeps the arithmetic below small
    mag = p.max_code;
  } else {
    // Unbiased exponent of a (a = f * 2^e2, f in [0.5, 1)), clamped to the smallest normal
    // exponent so that subnormals share its quantum.
    const int min_exp = 1 - p.bias;
    int e2 = 0;
    std::frexp(a, &e2);
    int e = e2 - 1;
    if (a == 0.0 || e < min_exp) e = min_exp;
    // a in units of the quantum 2^(e-3): n in [8, 16) for normals, [0, 8) for subnormals.
    const double n = RoundHalfEven(std::ldexp(a, 3 - e));
    // Code (without sign) = (e - min_exp) * 8 + n. This is uniform: for normals the
    // exponent field is e + bias = e - min_exp + 1 and the mantissa n - 8; for subnormals
    // e == min_exp and the code is n; a round-up to n == 16 (or 8 for subnormals) lands on
    // the next binade's code exactly.
    const double code = (e - min_exp) * 8.0 + n;
    mag = code > p.max_code ? p.max_code : static_cast<uint8_t>(code);
  }
  if (format == Fp8Format::kE4m3fnuz && mag == 0) return 0x00;  // no -0 in fnuz
  return static_cast<uint8_t>(sign | mag);
}

float Fp8BitsToFloat(uint8_t bits, Fp8Format format) {
  const E4m3 p = Params(format);
  const bool negative = (bits & 0x80) != 0;
  const int exp_field = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  if (format == Fp8Format::kE4m3fnuz) {
    if (bits == 0x80) return std::numeric_limits<float>::quiet_NaN();
  } else if ((bits & 0x7f) == 0x7f) {
    return std::copysign(std::numeric_limits<float>::quiet_NaN(), negative ? -1.0f : 1.0f);
  }
  // Value = significand * 2^(exponent - 3) with significand the integer mantissa plus the
  // implicit 8 for normals.
  const int significand = exp_field == 0 ? mantissa : 8 + mantissa;
  const int exponent = (exp_field == 0 ? 1 : exp_field) - p.bias;
  const float magnitude = std::ldexp(static_cast<float>(significand), exponent - 3);
  return negative ? -magnitude : magnitude;
}

float RoundToFp8(float x, Fp8Format format) {
  return Fp8BitsToFloat(FloatToFp8Bits(x, format), format);
}

float Fp8MaxFinite(Fp8Format format) { return format == Fp8Format::kE4m3fn ? 448.0f : 240.0f; }

float Fp8Quantize(float x, float scale, Fp8Format format) { return RoundToFp8(x / scale, format); }

}  // namespace mlaps::sim
