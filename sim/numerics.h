// Bit-exact emulation of the GPU kernels' low-precision number formats: bf16 and the two fp8
// e4m3 variants, plus the per-tensor fp8 scale convention. Pure functions, no state, no
// lookup tables; every conversion is computed arithmetically from the format definition.
//
// Formats (s = sign, e = 4- or 8-bit exponent field, m = mantissa field):
//
//   bf16:      the upper 16 bits of an IEEE-754 binary32 (1-8-7). Same exponent range as
//              float, so bf16 has subnormals, +-0, +-inf and NaNs exactly as float does.
//   e4m3fn:    OCP fp8 (gfx950, sm_90). 1-4-3, bias 7. No infinities; 0x7f and 0xff are NaN.
//              Normal:    (-1)^s * (1 + m/8) * 2^(e-7),  e in 1..15 (except e=15,m=7).
//              Subnormal: (-1)^s * (m/8) * 2^-6,         e == 0.
//              Max finite 448 (0x7e), min normal 2^-6, min subnormal 2^-9. Has -0 (0x80).
//   e4m3fnuz:  AMD gfx942 fp8. 1-4-3, bias 8. No infinities, no negative zero; the only NaN
//              is 0x80.
//              Normal:    (-1)^s * (1 + m/8) * 2^(e-8),  e in 1..15.
//              Subnormal: (-1)^s * (m/8) * 2^-7,         e == 0.
//              Max finite 240 (0x7f), min normal 2^-7, min subnormal 2^-10.
//
// Conversions from float round to nearest, ties to even (RNE), always; the current floating
// point rounding mode is not consulted.
//
// fp8 overflow policy: SATURATION. A finite value whose magnitude rounds beyond the largest
// finite fp8 value, and +-inf, convert to +-Fp8MaxFinite (448 for e4m3fn, 240 for e4m3fnuz).
// This is what the kernels' saturating conversions do (PTX cvt.rn.satfinite.e4m3x2.f32 on
// sm_90, the saturating v_cvt_pk_fp8_f32 on gfx942/gfx950). NaN converts to NaN: e4m3fn 0x7f
// with the input's sign bit (0x7f or 0xff), e4m3fnuz 0x80 (its only NaN).
//
// fp8 e4m3fnuz has no -0: -0.0 and negative values that round to zero convert to 0x00.
//
// Per-tensor fp8 scales (docs/design.md section 3): fp8 tensors are stored as
// q_fp8 = Fp8Quantize(q, q_scale), kv_fp8 = Fp8Quantize(kv, kv_scale); the kernels take the
// scales as descales: attention logits are multiplied by sm_scale * q_scale * kv_scale and
// the output O by kv_scale.
#ifndef MLAPS_SIM_NUMERICS_H_
#define MLAPS_SIM_NUMERICS_H_

#include <cstdint>

#include "metadata/types.h"

namespace mlaps::sim {

// ---- bf16 ----

// float -> bf16 bits, RNE. NaN -> 0x7fc0 | sign (quiet, payload dropped); +-inf -> 0x7f80 /
// 0xff80; finite values that round past the largest bf16 (0x7f7f) become +-inf, as IEEE
// overflow under RNE does (e.g. FLT_MAX -> inf). Subnormals round like any other value.
uint16_t FloatToBf16Bits(float x);

// bf16 bits -> float, exact (the bits become the float's upper half). NaN patterns stay NaN.
float Bf16BitsToFloat(uint16_t bits);

// Bf16BitsToFloat(FloatToBf16Bits(x)): x rounded to the nearest bf16 value.
float RoundToBf16(float x);

// ---- fp8 ----

// float -> fp8 bits in `format`, RNE with saturation (see the file comment). Subnormal fp8
// results and float subnormal inputs are handled exactly.
uint8_t FloatToFp8Bits(float x, Fp8Format format);

// fp8 bits -> float, exact (every fp8 value is a float). NaN codes decode to a quiet NaN (for
// e4m3fn with the code's sign); e4m3fn 0x80 decodes to -0.0.
float Fp8BitsToFloat(uint8_t bits, Fp8Format format);

// Fp8BitsToFloat(FloatToFp8Bits(x, format), format).
float RoundToFp8(float x, Fp8Format format);

// Largest finite value: 448 for e4m3fn, 240 for e4m3fnuz.
float Fp8MaxFinite(Fp8Format format);

// The value stored for x in an fp8 tensor with per-tensor scale `scale` (> 0, finite):
// RoundToFp8(x / scale, format), the quotient computed in float. The returned value is the
// fp8 code's value (not multiplied back by scale); the kernels apply the scale as a descale.
float Fp8Quantize(float x, float scale, Fp8Format format);

}  // namespace mlaps::sim

#endif  // MLAPS_SIM_NUMERICS_H_
