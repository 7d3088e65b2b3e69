#include "tests/kernels/emu/hip_host_emulation.h"

#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

namespace mlaps_emu {
namespace {

constexpr int kLanes = 32;
constexpr size_t kSlotBytes = 64;
constexpr size_t kStackBytes = 256 * 1024;

struct Copy {
  uint8_t* dst;
  const uint8_t* src;
  bool valid;
};

struct Fiber {
  ucontext_t ctx;
  std::unique_ptr<char[]> stack;
  ThreadState state;
  bool done = false;
  std::vector<std::vector<Copy>> groups;  // committed cp.async groups, oldest first
  std::vector<Copy> open;                 // issued since the last commit
};

struct Barrier {
  int count = 0;
  long generation = 0;
};

struct Runtime {
  std::vector<Fiber> fibers;
  int current = -1;
  ucontext_t scheduler;
  Barrier block_barrier;
  std::vector<Barrier> warp_barriers;
  std::vector<uint8_t> warp_slots;
  long progress = 0;  // barrier arrivals and finished threads: a pass without any = deadlock
  const std::function<void()>* body = nullptr;
  std::vector<uint8_t> smem;
  long long clock = 0;
};

Runtime* rt = nullptr;
ThreadState host_state;

[[noreturn]] void Die(const char* what, const void* p) {
  std::fprintf(stderr, "hip_host_emulation: %s (address %p)\n", what, p);
  std::abort();
}

void CheckAligned(const void* p, uintptr_t alignment, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0) Die(what, p);
}

Fiber& Self() {
  if (rt == nullptr || rt->current < 0) Die("device primitive called outside a launch", nullptr);
  return rt->fibers[rt->current];
}

void Yield() {
  Fiber& f = Self();
  swapcontext(&f.ctx, &rt->scheduler);
}

void Arrive(Barrier& b, int size) {
  ++rt->progress;
  const long generation = b.generation;
  if (++b.count == size) {
    b.count = 0;
    ++b.generation;
  } else {
    while (b.generation == generation) Yield();
  }
}

int LaneOf() { return static_cast<int>(Self().state.thread_idx.x % kLanes); }
int WarpOf() { return static_cast<int>(Self().state.thread_idx.x / kLanes); }

void FiberEntry() {
  (*rt->body)();
  rt->fibers[rt->current].done = true;
  ++rt->progress;
}

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// float -> IEEE half bits, round to nearest even (subnormals, overflow to inf, NaN kept).
uint16_t FloatToHalfRne(float value) {
  uint32_t x = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (x < 0x38800000u) {                        // below 2^-14: subnormal half (or 0)
    // Adding 0.5 aligns the value's bits to the half subnormal quantum 2^-24 with the FPU's
    // round-to-nearest-even; the low mantissa bits are then the result.
    const float sum = BitsFloat(x) + 0.5f;
    return sign | static_cast<uint16_t>(FloatBits(sum) - FloatBits(0.5f));
  }
  const uint32_t odd = (x >> 13) & 1u;
  x += 0xc8000fffu + odd;  // rebias the exponent by -112 and round the 13 dropped bits
  return sign | static_cast<uint16_t>(x >> 13);
}

float Bf16Float(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

float E4m3fnFloat(uint32_t byte) {
  const uint32_t e = (byte >> 3) & 0xfu, m = byte & 7u;
  if ((byte & 0x7fu) == 0x7fu) return BitsFloat(0x7fc00000u);
  const float mag =
      e == 0 ? static_cast<float>(m) * 0.001953125f : BitsFloat(((e + 120u) << 23) | (m << 20));
  return (byte & 0x80u) ? -mag : mag;
}

void RetireGroup(Fiber& f) {
  for (const Copy& c : f.groups.front()) {
    if (c.valid) {
      std::memcpy(c.dst, c.src, 16);
    } else {
      std::memset(c.dst, 0, 16);
    }
  }
  f.groups.erase(f.groups.begin());
}

}  // namespace

dim3 g_block_dim;
dim3 g_grid_dim;

ThreadState& Current() {
  return rt != nullptr && rt->current >= 0 ? rt->fibers[rt->current].state : host_state;
}

void SyncThreads() { Arrive(rt->block_barrier, static_cast<int>(rt->fibers.size())); }

void SyncWarp() {
  const int warp = WarpOf();
  const int threads = static_cast<int>(rt->fibers.size());
  const int size = std::min(kLanes, threads - warp * kLanes);
  Arrive(rt->warp_barriers[warp], size);
}

long long Clock() { return rt != nullptr ? ++rt->clock : 0; }

uint8_t* DynamicSmem() { return rt->smem.data(); }

void WarpExchange(const void* mine, size_t bytes, void* all) {
  if (bytes > kSlotBytes) Die("warp exchange of more than 64 bytes", mine);
  const int warp = WarpOf(), lane = LaneOf();
  uint8_t* slots = rt->warp_slots.data() + warp * kLanes * kSlotBytes;
  std::memcpy(slots + lane * kSlotBytes, mine, bytes);
  SyncWarp();
  for (int l = 0; l < kLanes; ++l) {
    std::memcpy(static_cast<uint8_t*>(all) + l * bytes, slots + l * kSlotBytes, bytes);
  }
  SyncWarp();  // nobody overwrites a slot before every lane has read it
}

void LdMatrixX4(uint32_t (&r)[4], const void* row, bool trans) {
  CheckAligned(row, 16, "ldmatrix row address not 16-byte aligned");
  const uint8_t* rows[32];
  WarpAllGather(static_cast<const uint8_t*>(row), rows);
  const int lane = LaneOf();
  for (int j = 0; j < 4; ++j) {
    if (!trans) {
      // Thread t: row t / 4, elements 2 (t % 4) and 2 (t % 4) + 1.
      std::memcpy(&r[j], rows[j * 8 + lane / 4] + (lane % 4) * 4, 4);
    } else {
      // Transposed: elements (2 (t % 4), t / 4) and (2 (t % 4) + 1, t / 4).
      uint16_t lo, hi;
      std::memcpy(&lo, rows[j * 8 + 2 * (lane % 4)] + (lane / 4) * 2, 2);
      std::memcpy(&hi, rows[j * 8 + 2 * (lane % 4) + 1] + (lane / 4) * 2, 2);
      r[j] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
    }
  }
}

void Mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool f16) {
  struct Operands {
    uint32_t a[4];
    uint32_t b[2];
  };
  Operands mine{{a[0], a[1], a[2], a[3]}, {b0, b1}};
  Operands all[32];
  WarpAllGather(mine, all);
  auto lo = [&](uint32_t x) {
    return f16 ? HalfBitsToFloat(static_cast<uint16_t>(x)) : Bf16Float(static_cast<uint16_t>(x));
  };
  auto hi = [&](uint32_t x) {
    return f16 ? HalfBitsToFloat(static_cast<uint16_t>(x >> 16))
               : Bf16Float(static_cast<uint16_t>(x >> 16));
  };
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    const Operands& o = all[l];
    A[g][2 * t] = lo(o.a[0]);
    A[g][2 * t + 1] = hi(o.a[0]);
    A[g + 8][2 * t] = lo(o.a[1]);
    A[g + 8][2 * t + 1] = hi(o.a[1]);
    A[g][2 * t + 8] = lo(o.a[2]);
    A[g][2 * t + 9] = hi(o.a[2]);
    A[g + 8][2 * t + 8] = lo(o.a[3]);
    A[g + 8][2 * t + 9] = hi(o.a[3]);
    B[2 * t][g] = lo(o.b[0]);
    B[2 * t + 1][g] = hi(o.b[0]);
    B[2 * t + 8][g] = lo(o.b[1]);
    B[2 * t + 9][g] = hi(o.b[1]);
  }
  const int lane = LaneOf(), g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e / 2), col = 2 * t + (e % 2);
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];  // exact products
    c[e] += sum;
  }
}

void CpAsync16(void* dst, const void* src, bool valid) {
  CheckAligned(dst, 16, "cp.async shared address not 16-byte aligned");
  if (valid) CheckAligned(src, 16, "cp.async global address not 16-byte aligned");
  std::memset(dst, 0xff, 16);
  Self().open.push_back({static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), valid});
}

void CpAsyncCommit() {
  Fiber& f = Self();
  f.groups.push_back(std::move(f.open));
  f.open.clear();
}

void CpAsyncWait(int pending) {
  Fiber& f = Self();
  while (static_cast<int>(f.groups.size()) > pending) RetireGroup(f);
}

uint32_t PackF16x2(float lo, float hi) {
  return static_cast<uint32_t>(FloatToHalfRne(lo)) |
         (static_cast<uint32_t>(FloatToHalfRne(hi)) << 16);
}

uint32_t E4m3x2ToF16x2(uint32_t two) {
  return static_cast<uint32_t>(FloatToHalfRne(E4m3fnFloat(two & 0xffu))) |
         (static_cast<uint32_t>(FloatToHalfRne(E4m3fnFloat((two >> 8) & 0xffu))) << 16);
}

float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float mag;
  if (e == 0) {
    mag = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24
  } else if (e == 31) {
    mag = BitsFloat(m ? 0x7fc00000u : 0x7f800000u);
  } else {
    mag = BitsFloat(((e + 112u) << 23) | (m << 13));
  }
  return BitsFloat(FloatBits(mag) | sign);
}

std::string Launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()>& body) {
  Runtime runtime;
  rt = &runtime;
  g_block_dim = block;
  g_grid_dim = grid;
  const int threads = static_cast<int>(block.x * block.y * block.z);
  const int warps = (threads + kLanes - 1) / kLanes;
  runtime.body = &body;
  runtime.fibers.resize(threads);
  for (Fiber& f : runtime.fibers) f.stack.reset(new char[kStackBytes]);
  runtime.warp_slots.assign(static_cast<size_t>(warps) * kLanes * kSlotBytes, 0);
  runtime.smem.assign(smem_bytes + 16, 0xff);
  std::string error;
  for (unsigned bz = 0; bz < grid.z && error.empty(); ++bz) {
    for (unsigned by = 0; by < grid.y && error.empty(); ++by) {
      for (unsigned bx = 0; bx < grid.x && error.empty(); ++bx) {
        runtime.block_barrier = Barrier();
        runtime.warp_barriers.assign(warps, Barrier());
        std::fill(runtime.smem.begin(), runtime.smem.end(), 0xff);
        for (int i = 0; i < threads; ++i) {
          Fiber& f = runtime.fibers[i];
          f.done = false;
          f.groups.clear();
          f.open.clear();
          f.state.thread_idx = dim3(i % block.x, (i / block.x) % block.y, i / (block.x * block.y));
          f.state.block_idx = dim3(bx, by, bz);
          getcontext(&f.ctx);
          f.ctx.uc_stack.ss_sp = f.stack.get();
          f.ctx.uc_stack.ss_size = kStackBytes;
          f.ctx.uc_link = &runtime.scheduler;
          makecontext(&f.ctx, FiberEntry, 0);
        }
        while (error.empty()) {
          const long before = runtime.progress;
          bool all_done = true;
          for (int i = 0; i < threads; ++i) {
            Fiber& f = runtime.fibers[i];
            if (f.done) continue;
            runtime.current = i;
            swapcontext(&runtime.scheduler, &f.ctx);
            runtime.current = -1;
            if (!f.done) all_done = false;
          }
          if (all_done) break;
          if (runtime.progress == before) {
            error = "deadlock in block (" + std::to_string(bx) + ", " + std::to_string(by) +
                    "): threads wait at a barrier others never reach";
          }
        }
        for (int i = 0; i < threads && error.empty(); ++i) {
          const Fiber& f = runtime.fibers[i];
          if (!f.groups.empty() || !f.open.empty()) {
            error = "thread " + std::to_string(i) + " of block " + std::to_string(bx) +
                    " ended with cp.async copies it never waited for";
          }
        }
      }
    }
  }
  rt = nullptr;
  return error;
}

}  // namespace mlaps_emu
