// The online-softmax steps the sm90 decode kernels share (mla_decode_sm90.h,
// mla_decode_sm90_bf16.h, mla_decode_sm90_f16pv.h) on the wgmma fp32 accumulator layout: row
// rescales, the block's mask and row max, P, and the running max's step (exact, or with a lazy
// reference). NVIDIA device pass and the CPU emulation (tests/kernels/emu), like sm90_primitives.h.
#ifndef MLAPS_KERNELS_DECODE_SM90_SOFTMAX_H_
#define MLAPS_KERNELS_DECODE_SM90_SOFTMAX_H_

#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/sm90_primitives.h"

#if defined(__CUDA_ARCH__) || defined(MLAPS_HOST_EMULATION)

namespace mlaps {
namespace mla {

// 2^x on the MUFU alone (ex2.approx.ftz.f32, relative error about 2^-22; a result below 2^-126
// flushes to 0, far under an f16 or bf16 P's quantum relative to the row's reference), where
// exp2f wraps it in a range fix-up of three more instructions. -inf gives 0, NaN stays NaN.
__device__ __forceinline__ float Exp2Fast(float x) {
#if defined(MLAPS_HOST_EMULATION)
  const float y = exp2f(x);
  return y < 1.17549435e-38f ? 0.0f : y;
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

// The larger score in one instruction (fmaxf: a NaN operand loses). A NaN score still makes its
// P, and so its row's O, NaN (exp2 of NaN). NaN scores' LSE class is not the reference's, with
// this max or the NaN-keeping one it replaced (notes.md, session 20): untested, not a contract.
__device__ __forceinline__ float ScoreMax(float a, float b) { return fmaxf(a, b); }

// Accumulator layout (wgmma m64nN, fp32): thread t of a warpgroup holds rows
// r0 = 16 (t / 32) + (t % 32) / 4 and r0 + 8; element 4 j + 2 h + e is row r0 + 8 h,
// column 8 j + 2 (t % 4) + e. ScaleRows multiplies row r0 by a0 and r0 + 8 by a1 in a
// 64 x 256 accumulator (half of O).
__device__ __forceinline__ void ScaleRows(float (&o)[128], float a0, float a1) {
#pragma unroll
  for (int e = 0; e < 128; ++e) o[e] *= (e & 2) ? a1 : a0;
}

// ScaleRows unless no row of the warp moved its max (every factor exactly 1: the usual case
// once the running max settled), which saves the warp 128 multiplies; exact either way.
__device__ __forceinline__ void ScaleRowsIfMoved(float (&o)[128], float a0, float a1) {
  if (__ballot64(a0 != 1.0f || a1 != 1.0f) != 0) ScaleRows(o, a0, a1);
}

// One block's S in that layout (kE = N / 2 elements a thread, N tokens), unscaled: masked (rows
// r0 + 8 h see the block's tokens [0, lim[h]), the others become -inf), and each row's max over
// the thread's elements scaled to base 2 into mx[h] (scale_log2 > 0 commutes with the max). The
// scores stay unscaled: BlockP scales each in the same instruction that subtracts the max. The
// mask is skipped when every row of the warp sees the whole block (all but an item's last
// blocks).
template <int kE>
__device__ __forceinline__ void MaskRowMax(float (&s)[kE], const int (&lim)[2], int quad,
                                           float scale_log2, float (&mx)[2]) {
  mx[0] = mx[1] = NegInf();
  if (__ballot64(lim[0] < 2 * kE || lim[1] < 2 * kE) == 0) {
#pragma unroll
    for (int e = 0; e < kE; ++e) mx[(e >> 1) & 1] = ScoreMax(mx[(e >> 1) & 1], s[e]);
  } else {
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      const int h = (e >> 1) & 1;
      if (8 * (e >> 2) + 2 * quad + (e & 1) >= lim[h]) s[e] = NegInf();
      mx[h] = ScoreMax(mx[h], s[e]);
    }
  }
  mx[0] *= scale_log2;
  mx[1] *= scale_log2;
}

// P of an unscaled score against the base-2 reference max: 2^(s scale_log2 - m_use), the scale
// and the subtraction one fused multiply-add (a masked -inf gives 0).
__device__ __forceinline__ float BlockP(float s, float scale_log2, float m_use) {
  return Exp2Fast(fmaf(s, scale_log2, -m_use));
}

// The online softmax's step of the running max m[h] (base 2) of rows r0 + 8 h by the block's
// row max (mx: the thread's part, reduced over the quad here): the max to exponentiate
// against (m_use: 0 for a row that saw nothing yet, so that masked scores give P = 0, not
// NaN), the rescale factor of what came before (alpha) and the row sums l scaled by it.
__device__ __forceinline__ void StepRunningMax(const float (&mx)[2], float (&m)[2], float (&l)[2],
                                               float (&m_use)[2], float (&alpha)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float m_new = MaxF(m[h], QuadMax(mx[h]));
    m_use[h] = m_new == NegInf() ? 0.0f : m_new;
    alpha[h] = Exp2Fast(m[h] - m_use[h]);
    m[h] = m_new;
    l[h] *= alpha[h];
  }
}

// How far (base 2) a block's row max may exceed the reference max before it moves
// (StepLazyRunningMax): P <= 2^8, exact in f16 P's 11 bits like any P <= 1.
constexpr float kLazyMaxSlack = 8.0f;

// One row's step of the lazy reference: the block's row max bmax (base 2, over all of the row's
// lanes) moves m only when it exceeds it by more than kLazyMaxSlack (from -inf, any finite bmax
// does); m_use, alpha and l as in StepRunningMax. Shared by StepLazyRunningMax and the narrow
// kernel's S^T layout.
__device__ __forceinline__ void LazyRowStep(float bmax, float& m, float& l, float& m_use,
                                            float& alpha) {
  const bool move = bmax > m + kLazyMaxSlack;
  const float m_new = move ? bmax : m;
  m_use = m_new == NegInf() ? 0.0f : m_new;
  alpha = move ? Exp2Fast(m - m_use) : 1.0f;
  m = m_new;
  l *= alpha;
}

// StepRunningMax with a lazy reference: m[h] moves only when the block's row max exceeds it by
// more than kLazyMaxSlack, so that past the first blocks of an item almost no block rescales
// what came before (alpha 1; FlashAttention-4's conditional rescaling). Exact: P and the row
// sums share the reference, and O = sum P V / sum P and LSE = m + ln(l) do not depend on it.
__device__ __forceinline__ void StepLazyRunningMax(const float (&mx)[2], float (&m)[2],
                                                   float (&l)[2], float (&m_use)[2],
                                                   float (&alpha)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) LazyRowStep(QuadMax(mx[h]), m[h], l[h], m_use[h], alpha[h]);
}

}  // namespace mla
}  // namespace mlaps

#endif  // __CUDA_ARCH__ || MLAPS_HOST_EMULATION

#endif  // MLAPS_KERNELS_DECODE_SM90_SOFTMAX_H_
