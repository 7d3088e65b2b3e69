// The emulated Hopper primitives (hip_host_emulation.h) on small hand-made cases: wgmma
// fragments against a plain matrix product for the operand layouts the sm90 kernels use
// (K-major 128B-swizzled A and B, K-major unswizzled A, MN-major 128B-swizzled B or A; e4m3 A
// and B K-major 128B-swizzled), written here with the kernel's own style of addressing (16-byte
// unit XOR row); mbarrier phases and the deadlock report; cp.async and TMA landing at the
// mbarrier wait; the aborts for poisoned operands, e4m3 read MN-major and accumulators
// touched in flight.
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/emu/e4m3_wgmma_case.h"

// Last: the emulation defines the device dialect.
#include "tests/kernels/emu/hip_host_emulation.h"

namespace {

using mlaps_emu::Launch;

constexpr uint64_t kSw128 = 1ull << 62;

uint64_t Desc(uint32_t addr, uint32_t lbo, uint32_t sbo, uint64_t swizzle) {
  mlaps_emu::CheckMatrixDesc(addr, lbo, sbo, static_cast<uint32_t>(swizzle >> 62));
  return (addr >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | swizzle;
}

uint16_t Bf16(float x) {  // exact for the small integers used here
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);
}

void Put(uint32_t offset, float x) {
  const uint16_t b = Bf16(x);
  std::memcpy(mlaps_emu::DynamicSmem() + offset, &b, 2);
}

// Small integer values: every product and sum is exact, so the fragments compare exactly.
float ValA(int m, int k) { return static_cast<float>((m * 3 + k * 5) % 7 - 3); }
float ValB(int n, int k) { return static_cast<float>((n * 2 + k * 7) % 5 - 2); }

// Thread t's accumulator element e of an m64nN product D: row r0 + 8 h, column
// 8 j + 2 (t % 4) + x for e = 4 j + 2 h + x, r0 = 16 (t / 32) + (t % 32) / 4.
float Expected(int t, int e, bool twice) {
  const int j = e / 4, h = (e / 2) % 2, x = e % 2;
  const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * h, col = 8 * j + 2 * (t % 4) + x;
  float sum = 0.0f;
  for (int k = 0; k < 16; ++k) sum += ValA(row, k) * ValB(col, k);
  return twice ? 2.0f * sum : sum;
}

// A (64 x 16) and B (32 x 16, K-major) in 128B-swizzled 64-element-wide tiles at 0 and 8192,
// the k16 slice at element offset 16 (byte 32) of the rows, as the kernel's S = Q K^T.
TEST(HipHostEmulationTest, WgmmaKMajorSwizzled128) {
  std::vector<float> got(128 * 16);
  const std::string error = Launch(dim3(1), dim3(128), 16384, [&] {
    const int t = threadIdx.x;
    if (t == 0) {
      for (int r = 0; r < 64; ++r) {
        for (int u = 0; u < 8; ++u) {  // 16-byte units of the row's 64 elements
          for (int x = 0; x < 8; ++x) {
            const uint32_t off = r * 128 + ((u ^ (r & 7)) << 4) + 2 * x;
            const int k = 8 * u + x - 16;  // the slice k = 0..15 is elements 16..31
            Put(off, k >= 0 && k < 16 ? ValA(r, k) : 99.0f);
            if (r < 32) Put(8192 + off, k >= 0 && k < 16 ? ValB(r, k) : 99.0f);
          }
        }
      }
    }
    __syncthreads();
    float d[16];
    for (float& x : d) x = 0.0f;
    mlaps_emu::WgmmaFence();
    const uint64_t a = Desc(32, 16, 1024, kSw128), b = Desc(8192 + 32, 16, 1024, kSw128);
    mlaps_emu::Wgmma(d, 32, a, b, false, false);
    mlaps_emu::Wgmma(d, 32, a, b, false, true);  // chained on the same accumulators: 2 A B
    mlaps_emu::WgmmaCommit();
    mlaps_emu::WgmmaWait(0);
    for (int e = 0; e < 16; ++e) got[t * 16 + e] = d[e];
  });
  ASSERT_EQ(error, "");
  for (int t = 0; t < 128; ++t) {
    for (int e = 0; e < 16; ++e) ASSERT_EQ(got[t * 16 + e], Expected(t, e, true)) << t << " " << e;
  }
}

// A (64 x 16) K-major without swizzle (8 x 8 core matrices: lbo 128 along k, sbo 256 along
// rows) and B MN-major 128B-swizzled (k rows of 64 n elements, 4 chunks 1024 bytes apart:
// lbo 2048 (n / 64), sbo 1024 (k / 8)), as the kernel's O += P V.
TEST(HipHostEmulationTest, WgmmaKMajorPlainTimesMnMajorSwizzled128) {
  std::vector<float> got(128 * 128);
  const std::string error = Launch(dim3(1), dim3(128), 16384 + 4096, [&] {
    const int t = threadIdx.x;
    if (t == 0) {
      for (int m = 0; m < 64; ++m) {
        for (int k = 0; k < 16; ++k) {
          Put((m / 8) * 256 + (k / 8) * 128 + (m % 8) * 16 + (k % 8) * 2, ValA(m, k));
        }
      }
      for (int k = 0; k < 16; ++k) {  // B^T stored with n contiguous: row k of each n chunk
        for (int n = 0; n < 256; ++n) {
          const int chunk = n / 64, u = (n % 64) / 8;
          Put(4096 + chunk * 2048 + k * 128 + ((u ^ (k & 7)) << 4) + (n % 8) * 2, ValB(n, k));
        }
      }
    }
    __syncthreads();
    float d[128];
    for (float& x : d) x = 0.0f;
    mlaps_emu::WgmmaFence();
    mlaps_emu::Wgmma(d, 256, Desc(0, 128, 256, 0), Desc(4096, 2048, 1024, kSw128), true, true);
    mlaps_emu::WgmmaCommit();
    mlaps_emu::WgmmaWait(0);
    for (int e = 0; e < 128; ++e) got[t * 128 + e] = d[e];
  });
  ASSERT_EQ(error, "");
  for (int t = 0; t < 128; ++t) {
    for (int e = 0; e < 128; ++e) {
      ASSERT_EQ(got[t * 128 + e], Expected(t, e, false)) << t << " " << e;
    }
  }
}

// A (64 x 16) MN-major 128B-swizzled (k rows of the 64 m elements, one 128-byte row a k, 8-row
// groups 1024 bytes apart) and B (16 x 16) K-major 128B-swizzled, as the narrow kernel's
// O^T += V^T P^T (m64n16k16, trans-a).
TEST(HipHostEmulationTest, WgmmaMnMajorASwizzled128TimesKMajorB) {
  std::vector<float> got(128 * 8);
  const std::string error = Launch(dim3(1), dim3(128), 8192, [&] {
    const int t = threadIdx.x;
    if (t == 0) {
      for (int k = 0; k < 16; ++k) {
        for (int m = 0; m < 64; ++m) {
          Put(k * 128 + (((m / 8) ^ (k & 7)) << 4) + (m % 8) * 2, ValA(m, k));
        }
      }
      for (int n = 0; n < 16; ++n) {
        for (int u = 0; u < 8; ++u) {
          for (int x = 0; x < 8; ++x) {
            const int k = 8 * u + x;  // the slice k = 0..15 is elements 0..15 of the row
            Put(4096 + n * 128 + ((u ^ (n & 7)) << 4) + 2 * x, k < 16 ? ValB(n, k) : 99.0f);
          }
        }
      }
    }
    __syncthreads();
    float d[8];
    for (float& x : d) x = 0.0f;
    mlaps_emu::WgmmaFence();
    mlaps_emu::Wgmma(d, 16, Desc(0, 8192, 1024, kSw128), Desc(4096, 16, 1024, kSw128),
                     /*trans_b=*/false, /*accumulate=*/false, mlaps_emu::WgmmaType::kBf16,
                     /*trans_a=*/true);
    mlaps_emu::WgmmaCommit();
    mlaps_emu::WgmmaWait(0);
    for (int e = 0; e < 8; ++e) got[t * 8 + e] = d[e];
  });
  ASSERT_EQ(error, "");
  for (int t = 0; t < 128; ++t) {
    for (int e = 0; e < 8; ++e) ASSERT_EQ(got[t * 8 + e], Expected(t, e, false)) << t << " " << e;
  }
}

// A TMA load of a 4-row x 64-element bf16 box, 128B-swizzled, whose last row is past the
// tensor: poison until the mbarrier wait, then the rows at their swizzled units and zeros for
// the missing row; a phase that expects more bytes than land never completes (deadlock).
TEST(HipHostEmulationTest, TmaLoadSwizzlesZeroFillsAndCompletesOnBytes) {
  constexpr int kRows = 3, kInner = 80;  // a tensor of 3 rows of 80 bf16 (row stride 160 B)
  alignas(16) static uint16_t tensor[kRows * kInner];
  for (int i = 0; i < kRows * kInner; ++i) tensor[i] = static_cast<uint16_t>(i + 1);
  alignas(64) unsigned char map[128];
  mlaps_emu::EncodeTmaMap2D(map, tensor, 2, kInner, kRows, kInner * 2, 64, 4, 128);
  uint8_t before = 0;
  std::vector<uint16_t> got(4 * 64);
  const std::string error = Launch(dim3(1), dim3(32), 2048, [&] {
    if (threadIdx.x != 0) return;
    mlaps_emu::MbarInit(0, 1);
    mlaps_emu::MbarArriveExpectTx(0, 4 * 128);
    mlaps_emu::TmaLoad2D(1024, map, 8, 1, 0);  // rows 1, 2, 3 (past the end), elements 8..71
    before = mlaps_emu::DynamicSmem()[1024];
    mlaps_emu::MbarWait(0, 0);
    for (int r = 0; r < 4; ++r) {
      for (int x = 0; x < 64; ++x) {
        const uint32_t off = 1024 + r * 128 + ((((x / 8) ^ r) & 7) << 4) + 2 * (x % 8);
        std::memcpy(&got[r * 64 + x], mlaps_emu::DynamicSmem() + off, 2);
      }
    }
  });
  ASSERT_EQ(error, "");
  EXPECT_EQ(before, 0xff);
  for (int r = 0; r < 4; ++r) {
    for (int x = 0; x < 64; ++x) {
      const uint16_t want = r + 1 < kRows ? tensor[(r + 1) * kInner + 8 + x] : 0;
      ASSERT_EQ(got[r * 64 + x], want) << "row " << r << " element " << x;
    }
  }
  const std::string short_of_bytes = Launch(dim3(1), dim3(32), 2048, [&] {
    if (threadIdx.x != 0) return;
    mlaps_emu::MbarInit(0, 1);
    mlaps_emu::MbarArriveExpectTx(0, 4 * 128 + 16);
    mlaps_emu::TmaLoad2D(1024, map, 8, 1, 0);
    mlaps_emu::MbarWait(0, 0);
  });
  EXPECT_NE(short_of_bytes.find("deadlock"), std::string::npos) << short_of_bytes;
}

// The 64-byte swizzle (raw e4m3 rows for fp8 wgmma operands): 16-byte unit u of box row r lands
// at unit u ^ ((r / 2) % 4) of the row's 64 bytes; a 512-byte-aligned destination.
TEST(HipHostEmulationTest, TmaLoadSwizzles64ByteRows) {
  constexpr int kRows = 10, kInner = 96;  // bytes: 10 rows of 96 (row stride 96 B)
  alignas(16) static uint8_t tensor[kRows * kInner];
  for (int i = 0; i < kRows * kInner; ++i) tensor[i] = static_cast<uint8_t>(i * 7 + 1);
  alignas(64) unsigned char map[128];
  mlaps_emu::EncodeTmaMap2D(map, tensor, 1, kInner, kRows, kInner, 64, 8, 64);
  std::vector<uint8_t> got(8 * 64);
  const std::string error = Launch(dim3(1), dim3(32), 2048, [&] {
    if (threadIdx.x != 0) return;
    mlaps_emu::MbarInit(0, 1);
    mlaps_emu::MbarArriveExpectTx(0, 8 * 64);
    mlaps_emu::TmaLoad2D(512, map, 32, 1, 0);  // rows 1..8, bytes 32..95
    mlaps_emu::MbarWait(0, 0);
    for (int r = 0; r < 8; ++r) {
      for (int x = 0; x < 64; ++x) {
        const uint32_t off = 512 + r * 64 + ((((x / 16) ^ (r / 2)) & 3) << 4) + x % 16;
        got[r * 64 + x] = mlaps_emu::DynamicSmem()[off];
      }
    }
  });
  ASSERT_EQ(error, "");
  for (int r = 0; r < 8; ++r) {
    for (int x = 0; x < 64; ++x) {
      ASSERT_EQ(got[r * 64 + x], tensor[(r + 1) * kInner + 32 + x]) << "row " << r << " byte " << x;
    }
  }
}

TEST(HipHostEmulationDeathTest, TmaLoadSwizzled64OffTheAtomGridAborts) {
  alignas(16) static uint8_t tensor[8 * 64] = {};
  alignas(64) unsigned char map[128];
  mlaps_emu::EncodeTmaMap2D(map, tensor, 1, 64, 8, 64, 64, 8, 64);
  EXPECT_DEATH(Launch(dim3(1), dim3(32), 2048,
                      [&] {
                        if (threadIdx.x != 0) return;
                        mlaps_emu::MbarInit(0, 1);
                        mlaps_emu::MbarArriveExpectTx(0, 8 * 64);
                        mlaps_emu::TmaLoad2D(256, map, 0, 0, 0);
                        mlaps_emu::MbarWait(0, 0);
                      }),
               "not 512-byte aligned");
}

// The shared e4m3 case (e4m3_wgmma_case.h; the GPU test runs the same bytes): A and B
// K-major in 128B-swizzled tiles of 128 e4m3 a row, the k32 slice at byte 32 (the second k
// step of a 128-value chunk): the byte geometry of a bf16 k16 step, 16 values a unit.
TEST(HipHostEmulationTest, WgmmaE4m3KMajorSwizzled128) {
  std::vector<float> got(128 * 32);
  const std::string error = Launch(dim3(1), dim3(128), 16384, [&] {
    const int t = threadIdx.x;
    if (t == 0) mlaps_test::FillE4m3Case(mlaps_emu::DynamicSmem());
    __syncthreads();
    float d[32];
    for (float& x : d) x = 0.0f;
    mlaps_emu::WgmmaFence();
    const uint32_t slice = mlaps_test::kE4m3SliceByte;
    const uint64_t a = Desc(slice, 16, 1024, kSw128);
    const uint64_t b = Desc(mlaps_test::kE4m3TileBytes + slice, 16, 1024, kSw128);
    mlaps_emu::Wgmma(d, 64, a, b, false, false, mlaps_emu::WgmmaType::kE4m3);
    mlaps_emu::WgmmaCommit();
    mlaps_emu::WgmmaWait(0);
    for (int e = 0; e < 32; ++e) got[t * 32 + e] = d[e];
  });
  ASSERT_EQ(error, "");
  for (int t = 0; t < 128; ++t) {
    for (int e = 0; e < 32; ++e) {
      ASSERT_EQ(got[t * 32 + e], mlaps_test::E4m3CaseExpected(t, e)) << t << " " << e;
    }
  }
}

// Phase parity: a wait for parity 1 passes on a fresh barrier (the preceding phase), a wait
// for parity 0 needs `count` arrivals; waiting for a phase that never completes is reported.
TEST(HipHostEmulationTest, MbarrierPhasesAndDeadlockReport) {
  int after = 0;
  std::string error = Launch(dim3(1), dim3(64), 64, [&] {
    if (threadIdx.x == 0) mlaps_emu::MbarInit(8, 32);
    __syncthreads();
    mlaps_emu::MbarWait(8, 1);
    if (threadIdx.x >= 32) mlaps_emu::MbarArrive(8);
    mlaps_emu::MbarWait(8, 0);  // warp 0 waits for warp 1's 32 arrivals
    if (threadIdx.x == 0) after = 1;
  });
  EXPECT_EQ(error, "");
  EXPECT_EQ(after, 1);
  error = Launch(dim3(1), dim3(64), 64, [&] {
    if (threadIdx.x == 0) mlaps_emu::MbarInit(16, 64);
    __syncthreads();
    if (threadIdx.x != 5) mlaps_emu::MbarArrive(16);
    mlaps_emu::MbarWait(16, 0);
  });
  EXPECT_NE(error.find("deadlock"), std::string::npos) << error;
  EXPECT_NE(error.find("mbarrier 0x10 parity 0 (phase 0, 1 of 64 arrivals pending)"),
            std::string::npos)
      << error;
}

// Schedule::kOneWarpLast: the warp held back runs only while every other thread is blocked, so
// the parity wait of a warp that nothing waits for finds its phase two completions old (and
// waits for good: a deadlock), where round robin lets it keep up.
TEST(HipHostEmulationTest, OneWarpLastLetsAnUnwaitedWarpFallTwoPhasesBehind) {
  const auto kernel = [] {
    if (threadIdx.x == 0) mlaps_emu::MbarInit(8, 64);
    __syncthreads();
    if (threadIdx.x / warpSize == 1) {
      mlaps_emu::MbarWait(8, 0);  // phase 0 complete
      return;
    }
    for (uint32_t k = 0; k < 2; ++k) {  // warps 0 and 2: two phases, not waiting for warp 1
      mlaps_emu::MbarArrive(8);
      mlaps_emu::MbarWait(8, k & 1);
    }
  };
  EXPECT_EQ(Launch(dim3(1), dim3(96), 64, kernel), "");
  const std::string error =
      Launch(dim3(1), dim3(96), 64, kernel, mlaps_emu::Schedule::kOneWarpLast, /*last_warp=*/1);
  EXPECT_NE(error.find("deadlock"), std::string::npos) << error;
  EXPECT_NE(error.find("threads 32-63: mbarrier 0x8 parity 0 (phase 2, 64 of 64 arrivals pending)"),
            std::string::npos)
      << error;
}

// A thread's arrival that completes a phase lets the waiters run before the thread goes on
// (mbarrier.arrive, and arrive.expect_tx with no bytes to wait for): with the waiting warpgroup
// first, a release placed before the write it should publish shows (the waiter reads the old
// value); with the write first, the waiter reads the new one.
TEST(HipHostEmulationTest, AnArrivalThatCompletesAPhaseLetsTheWaitersRunFirst) {
  const auto Store = [](int v) { std::memcpy(mlaps_emu::SmemBytes(16, 4), &v, 4); };
  for (const bool write_first : {false, true}) {
    for (const bool expect_tx : {false, true}) {
      SCOPED_TRACE(expect_tx ? "arrive.expect_tx 0 bytes" : "arrive");
      int seen = -1;
      const std::string error = Launch(
          dim3(1), dim3(256), 64,
          [&] {
            if (threadIdx.x == 0) {
              mlaps_emu::MbarInit(8, 1);
              Store(1);
            }
            __syncthreads();
            if (threadIdx.x == 128) {  // warpgroup 1 publishes
              if (write_first) Store(2);
              if (expect_tx) {
                mlaps_emu::MbarArriveExpectTx(8, 0);
              } else {
                mlaps_emu::MbarArrive(8);
              }
              if (!write_first) Store(2);
            } else if (threadIdx.x == 0) {  // warpgroup 0 waits
              mlaps_emu::MbarWait(8, 0);
              std::memcpy(&seen, mlaps_emu::SmemBytes(16, 4), 4);
            }
          },
          mlaps_emu::Schedule::kLowWarpgroupsFirst);
      EXPECT_EQ(error, "");
      EXPECT_EQ(seen, write_first ? 2 : 1) << write_first;
    }
  }
}

// mbarrier.test_wait: false while arrivals are missing (it never blocks), true once the phase
// completed; a cp.async arrival in flight lands at a test as at a wait.
TEST(HipHostEmulationTest, MbarTestNeverBlocksAndLandsInFlightCopies) {
  alignas(16) static const uint8_t src[16] = {1, 2,  3,  4,  5,  6,  7,  8,
                                              9, 10, 11, 12, 13, 14, 15, 16};
  int tests[4] = {-1, -1, -1, -1};
  uint8_t landed = 0;
  const std::string error = Launch(dim3(1), dim3(32), 64, [&] {
    if (threadIdx.x == 0) {
      mlaps_emu::MbarInit(0, 2);
      mlaps_emu::MbarInit(8, 1);
      tests[0] = mlaps_emu::MbarTest(0, 0);  // no arrival yet
      tests[1] = mlaps_emu::MbarTest(0, 1);  // the phase before a fresh barrier's first
      mlaps_emu::MbarArrive(0);
      tests[2] = mlaps_emu::MbarTest(0, 0);  // one of two arrivals
      mlaps_emu::MbarArrive(0);
      mlaps_emu::CpAsync16(mlaps_emu::DynamicSmem() + 16, src, true);
      mlaps_emu::CpAsyncArrive(8);
      tests[3] = mlaps_emu::MbarTest(0, 0) && mlaps_emu::MbarTest(8, 0);
      landed = mlaps_emu::DynamicSmem()[31];
    }
  });
  EXPECT_EQ(error, "");
  EXPECT_EQ(tests[0], 0);
  EXPECT_EQ(tests[1], 1);
  EXPECT_EQ(tests[2], 0);
  EXPECT_EQ(tests[3], 1);
  EXPECT_EQ(landed, 16);
}

// __syncthreads_count / _or: a barrier that returns, in every thread, how many threads (or
// whether any) passed a nonzero predicate; back to back, each sees its own round's values.
TEST(HipHostEmulationTest, SyncThreadsCountAndOr) {
  int counts[128][2] = {}, ors[128][2] = {};
  const std::string error = Launch(dim3(1), dim3(128), 0, [&] {
    const int t = threadIdx.x;
    counts[t][0] = __syncthreads_count(t % 3 == 0 ? 7 : 0);  // nonzero counts once
    counts[t][1] = __syncthreads_count(t == 5);
    ors[t][0] = __syncthreads_or(t == 127);
    ors[t][1] = __syncthreads_or(0);
  });
  EXPECT_EQ(error, "");
  for (int t = 0; t < 128; ++t) {
    EXPECT_EQ(counts[t][0], 43) << t;
    EXPECT_EQ(counts[t][1], 1) << t;
    EXPECT_EQ(ors[t][0], 1) << t;
    EXPECT_EQ(ors[t][1], 0) << t;
  }
}

// cp.async copies arriving on an mbarrier land when a waiter needs them: the destination reads
// as poison before the wait, the data after it.
TEST(HipHostEmulationTest, CpAsyncLandsAtTheMbarrierWait) {
  alignas(16) static const uint8_t src[16] = {1, 2,  3,  4,  5,  6,  7,  8,
                                              9, 10, 11, 12, 13, 14, 15, 16};
  uint8_t before = 0, after = 0;
  const std::string error = Launch(dim3(1), dim3(32), 64, [&] {
    if (threadIdx.x == 0) {
      mlaps_emu::MbarInit(0, 1);
      mlaps_emu::CpAsync16(mlaps_emu::DynamicSmem() + 16, src, true);
      mlaps_emu::CpAsyncArrive(0);
      before = mlaps_emu::DynamicSmem()[16];
      mlaps_emu::MbarWait(0, 0);
      after = mlaps_emu::DynamicSmem()[31];
    }
  });
  EXPECT_EQ(error, "");
  EXPECT_EQ(before, 0xff);
  EXPECT_EQ(after, 16);
}

TEST(HipHostEmulationDeathTest, WgmmaOnPoisonedSharedMemoryAborts) {
  EXPECT_DEATH(Launch(dim3(1), dim3(128), 16384,
                      [] {
                        float d[16] = {};
                        mlaps_emu::WgmmaFence();
                        mlaps_emu::Wgmma(d, 32, Desc(0, 16, 1024, kSw128),
                                         Desc(8192, 16, 1024, kSw128), false, false);
                      }),
               "wgmma reads poisoned shared memory");
}

// fp8 wgmma has no MN-major operands: the emulation refuses one.
TEST(HipHostEmulationDeathTest, WgmmaE4m3MnMajorAborts) {
  EXPECT_DEATH(Launch(dim3(1), dim3(128), 16384,
                      [] {
                        std::memset(mlaps_emu::DynamicSmem(), 0, 16384);
                        float d[32] = {};
                        mlaps_emu::WgmmaFence();
                        mlaps_emu::Wgmma(d, 64, Desc(0, 16, 1024, kSw128),
                                         Desc(8192, 2048, 1024, kSw128), true, false,
                                         mlaps_emu::WgmmaType::kE4m3);
                      }),
               "e4m3 operand read MN-major");
}

// The emulation has no register-A e4m3 fragment layout: it refuses the instruction.
TEST(HipHostEmulationDeathTest, WgmmaE4m3RegisterAAborts) {
  EXPECT_DEATH(Launch(dim3(1), dim3(128), 16384,
                      [] {
                        std::memset(mlaps_emu::DynamicSmem(), 0, 16384);
                        float d[32] = {};
                        const uint32_t a[4] = {0, 0, 0, 0};
                        mlaps_emu::WgmmaFence();
                        mlaps_emu::WgmmaRegA(d, 64, a, Desc(8192, 16, 1024, kSw128), false, false,
                                             mlaps_emu::WgmmaType::kE4m3);
                      }),
               "register-A e4m3 wgmma");
}

TEST(HipHostEmulationDeathTest, SwizzleAtomOffTheGridAborts) {
  EXPECT_DEATH(Launch(dim3(1), dim3(128), 16384,
                      [] {
                        std::memset(mlaps_emu::DynamicSmem(), 0, 16384);
                        float d[16] = {};
                        mlaps_emu::WgmmaFence();
                        mlaps_emu::Wgmma(d, 32, Desc(512, 16, 1024, kSw128),
                                         Desc(8192, 16, 1024, kSw128), false, false);
                      }),
               "not on the 1024-byte grid");
}

TEST(HipHostEmulationDeathTest, AccumulatorsWrittenInFlightAbort) {
  EXPECT_DEATH(Launch(dim3(1), dim3(128), 16384,
                      [] {
                        std::memset(mlaps_emu::DynamicSmem(), 0, 16384);
                        float d[16] = {};
                        mlaps_emu::WgmmaFence();
                        mlaps_emu::Wgmma(d, 32, Desc(0, 16, 1024, kSw128),
                                         Desc(8192, 16, 1024, kSw128), false, false);
                        mlaps_emu::WgmmaCommit();
                        d[3] = 1.0f;  // before the wait
                        mlaps_emu::WgmmaWait(0);
                      }),
               "written while a wgmma on it was in flight");
}

TEST(HipHostEmulationDeathTest, OperandRewrittenInFlightAborts) {
  EXPECT_DEATH(Launch(dim3(1), dim3(128), 16384,
                      [] {
                        std::memset(mlaps_emu::DynamicSmem(), 0, 16384);
                        float d[16] = {};
                        mlaps_emu::WgmmaFence();
                        mlaps_emu::Wgmma(d, 32, Desc(0, 16, 1024, kSw128),
                                         Desc(8192, 16, 1024, kSw128), false, false);
                        mlaps_emu::WgmmaCommit();
                        if (threadIdx.x == 0) Put(8192, 1.0f);  // B, before the wait
                        mlaps_emu::WgmmaWait(0);
                      }),
               "rewritten before the wait");
}

// An arrival on an mbarrier whose completed phase no thread has waited for: what
// compute-sanitizer's synccheck reports ("Missing wait") and then stops the kernel for. A wait
// in between (by any thread) makes the same arrivals legal.
TEST(HipHostEmulationTest, ArrivalAfterAWaitedPhaseIsFine) {
  const std::string error = Launch(dim3(1), dim3(32), 64, [] {
    if (threadIdx.x != 0) return;
    mlaps_emu::MbarInit(8, 1);
    mlaps_emu::MbarArrive(8);   // phase 0 completes
    mlaps_emu::MbarWait(8, 0);  // and is seen
    mlaps_emu::MbarArrive(8);   // phase 1
  });
  EXPECT_EQ(error, "");
}

TEST(HipHostEmulationDeathTest, ArrivalWithoutAWaitForThePhaseBeforeAborts) {
  EXPECT_DEATH(Launch(dim3(1), dim3(32), 64,
                      [] {
                        if (threadIdx.x != 0) return;
                        mlaps_emu::MbarInit(8, 1);
                        mlaps_emu::MbarArrive(8);  // phase 0 completes, nobody waits
                        mlaps_emu::MbarArrive(8);
                      }),
               "Missing wait");
}

}  // namespace
