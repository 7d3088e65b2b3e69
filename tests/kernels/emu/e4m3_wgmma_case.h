// One e4m3 wgmma case (QGMMA m64n64k32), shared by the CPU emulation's test
// (hip_host_emulation_test.cc) and the GPU test (tests/kernels/decode/sm90_wgmma_test.hip), so
// both run the same operand bytes against the same expected fragments: A (64 x 32) and B
// (32 x 64), both K-major in 128-byte-swizzled rows of 128 e4m3 values (A at byte 0, B at
// byte 8192), the k32 slice at byte 32 of the rows; small integers, so every product and sum
// is exact. Plain host code (no emulation, no device dialect).
#ifndef MLAPS_TESTS_KERNELS_EMU_E4M3_WGMMA_CASE_H_
#define MLAPS_TESTS_KERNELS_EMU_E4M3_WGMMA_CASE_H_

#include <cstdint>

namespace mlaps_test {

constexpr int kE4m3TileBytes = 8192;                // one operand: 64 rows of 128 bytes
constexpr int kE4m3CaseBytes = 2 * kE4m3TileBytes;  // A, then B
constexpr uint32_t kE4m3SliceByte = 32;             // where the k32 slice starts in a row

// e4m3fn byte of a small integer (|x| <= 7 is exact: 1.mmm x 2^e).
inline uint8_t E4m3Byte(float x) {
  if (x == 0.0f) return 0;
  const uint8_t sign = x < 0 ? 0x80 : 0;
  float m = x < 0 ? -x : x;
  int e = 0;
  while (m >= 2.0f) m *= 0.5f, ++e;
  return static_cast<uint8_t>(sign | ((e + 7) << 3) | static_cast<int>((m - 1.0f) * 8.0f));
}

inline float E4m3CaseA(int m, int k) { return static_cast<float>((m * 3 + k * 5) % 7 - 3); }
inline float E4m3CaseB(int n, int k) { return static_cast<float>((n * 2 + k * 7) % 5 - 2); }

// The operand bytes (kE4m3CaseBytes) as the kernel's tiles hold them: row r at 128 r, its
// 16-byte unit u at (u ^ (r % 8)) * 16; values outside the slice are filler.
inline void FillE4m3Case(uint8_t* bytes) {
  for (int r = 0; r < 64; ++r) {
    for (int u = 0; u < 8; ++u) {
      for (int x = 0; x < 16; ++x) {
        const int off = r * 128 + ((u ^ (r & 7)) << 4) + x;
        const int k = 16 * u + x - static_cast<int>(kE4m3SliceByte);
        const bool in = k >= 0 && k < 32;
        bytes[off] = E4m3Byte(in ? E4m3CaseA(r, k) : 5.0f);
        bytes[kE4m3TileBytes + off] = E4m3Byte(in ? E4m3CaseB(r, k) : 6.0f);
      }
    }
  }
}

// Accumulator e of warpgroup thread t (m64n64 fp32 fragment: element 4 j + 2 h + x is row
// 16 (t / 32) + (t % 32) / 4 + 8 h, column 8 j + 2 (t % 4) + x).
inline float E4m3CaseExpected(int t, int e) {
  const int j = e / 4, h = (e / 2) % 2, x = e % 2;
  const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * h, col = 8 * j + 2 * (t % 4) + x;
  float want = 0.0f;
  for (int k = 0; k < 32; ++k) want += E4m3CaseA(row, k) * E4m3CaseB(col, k);
  return want;
}

}  // namespace mlaps_test

#endif  // MLAPS_TESTS_KERNELS_EMU_E4M3_WGMMA_CASE_H_
