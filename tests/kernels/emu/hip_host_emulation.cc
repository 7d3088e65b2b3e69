// Fibers switch with __builtin_setjmp / __builtin_longjmp: a few registers, no signal-mask
// system call (swapcontext's made switching 90% of an emulated run) and no sanitizer
// interception of longjmp; a fiber starts with setcontext once. AddressSanitizer is told of
// every switch (its fiber interface), and a fiber's stack is unpoisoned before it is reused.
#include "tests/kernels/emu/hip_host_emulation.h"

#include <ucontext.h>

#if defined(__SANITIZE_ADDRESS__)
#define MLAPS_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MLAPS_EMU_ASAN 1
#endif
#endif
#if defined(MLAPS_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <vector>

namespace mlaps_emu {
namespace {

constexpr int kLanes = 32;
constexpr size_t kSlotBytes = 64;
constexpr size_t kStackBytes = 256 * 1024;
constexpr int kWgThreads = 128;                       // a warpgroup
constexpr int kNamedBarriers = 16;                    // bar.sync ids (0 is __syncthreads')
constexpr uint32_t kPoisonF32 = ~0u;                  // in-flight accumulators read as this NaN
constexpr uint16_t kPoisonBf16 = 0xffff;              // poisoned shared memory as a bf16 operand
constexpr uint64_t kMbarTag = 0x6d6261725f656d75ull;  // "mbar_emu": an mbarrier's 8 bytes

struct Copy {
  uint8_t* dst;
  const uint8_t* src;
  bool valid;
};

// What a thread waits for (the deadlock report).
enum class WaitKind { kNone, kBlock, kWarp, kNamed, kWarpgroup, kMbarrier };

// A warpgroup collective's arguments from one thread.
enum class WgKind { kWgmma, kCommit, kWait };
struct WgArgs {
  WgKind kind = WgKind::kWgmma;
  uint64_t desc_a = 0, desc_b = 0;
  const uint32_t* a_regs = nullptr;  // register A: this thread's four A registers
  float* d = nullptr;
  int n = 0, pending = 0;
  bool trans_a = false, trans_b = false, accumulate = false, fenced = false;
  WgmmaType type = WgmmaType::kBf16;
};

struct Fiber {
  ucontext_t ctx;   // the entry (makecontext), run once with setcontext
  void* resume[5];  // where the fiber continues after its last yield (__builtin_setjmp)
  bool started = false;
  std::unique_ptr<char[]> stack;
  ThreadState state;
  bool done = false;
  std::vector<std::vector<Copy>> groups;  // committed cp.async groups, oldest first
  std::vector<Copy> open;                 // issued since the last commit
  bool wgmma_fenced = false;              // a wgmma.fence since the warpgroup's last wait
  WgArgs wg_args;
  WaitKind wait = WaitKind::kNone;
  uint32_t wait_a = 0, wait_b = 0;
};

struct Barrier {
  int count = 0;
  long generation = 0;
  int size = 0;  // named barriers: the thread count of the current generation
};

struct Mbarrier {
  int count = 0;    // arrivals per phase
  int pending = 0;  // arrivals the current phase still needs
  uint32_t phase = 0;
  int64_t tx = 0;  // transaction bytes the current phase still expects (expect_tx - landed)
  // Phases some wait has seen complete. An arrival while a completed phase was never waited for
  // is what compute-sanitizer's synccheck reports as "Missing wait" (and then stops the kernel).
  uint32_t observed = 0;
};

// A cp.async.mbarrier.arrive.noinc: the thread's copies, then one arrival on `bar`; or a TMA
// load (tx_bytes > 0): its copies, then tx_bytes of transactions completed on `bar`.
struct AsyncArrival {
  uint32_t bar;
  int thread;
  std::vector<Copy> copies;
  int64_t tx_bytes = 0;
};

// One issued wgmma of a warpgroup, until a wait retires it.
struct WgmmaOp {
  int n = 0;
  bool trans_a = false, trans_b = false, accumulate = false, a_from_regs = false;
  WgmmaType type = WgmmaType::kBf16;
  uint64_t desc_a = 0, desc_b = 0;
  std::array<const uint32_t*, kWgThreads> a_regs{};  // register A: each thread's registers
  std::array<std::array<uint32_t, 4>, kWgThreads> a_at_issue{};  // ... and their values then
  long group = -1;          // commit group, -1 before the commit
  std::vector<float> a, b;  // A[m][k] (64 x 16) and B^T[n][k] (n x 16) as read at issue
  std::array<float*, kWgThreads> d{};
  std::vector<float> input;                  // [thread][n / 2]: accumulators the wgmma adds to
  std::array<bool, kWgThreads> has_input{};  // false: an earlier wgmma's result, not yet there
};

struct Warpgroup {
  Barrier barrier;
  std::deque<WgmmaOp> ops;  // issue order
  long next_group = 0;
};

struct Runtime {
  std::vector<Fiber> fibers;
  int current = -1;
  ucontext_t scheduler;
  void* scheduler_resume[5];              // the scheduler's loop, where a yield returns to
  const void* scheduler_stack = nullptr;  // its stack (AddressSanitizer's fiber switches)
  size_t scheduler_stack_size = 0;
  Barrier block_barrier;
  std::vector<Barrier> warp_barriers;
  std::vector<uint8_t> warp_slots;
  std::vector<int> block_slots;  // one int per thread (__syncthreads_or)
  long progress = 0;  // barrier arrivals and finished threads: a pass without any = deadlock
  const std::function<void()>* body = nullptr;
  std::vector<uint8_t> smem;
  size_t smem_bytes = 0;
  long long clock = 0;
  std::array<Barrier, kNamedBarriers> named;
  std::map<uint32_t, Mbarrier> mbars;
  std::deque<AsyncArrival> in_flight;  // oldest first
  std::vector<Warpgroup> warpgroups;
};

Runtime* rt = nullptr;
ThreadState host_state;

[[noreturn]] void Die(const char* what, const void* p) {
  std::fprintf(stderr, "hip_host_emulation: %s (address %p)\n", what, p);
  std::abort();
}

[[noreturn]] void DieAt(const std::string& what) {
  std::fprintf(stderr, "hip_host_emulation: %s\n", what.c_str());
  std::abort();
}

std::string Hex(uint64_t x) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(x));
  return buf;
}

void CheckAligned(const void* p, uintptr_t alignment, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0) Die(what, p);
}

Fiber& Self() {
  if (rt == nullptr || rt->current < 0) Die("device primitive called outside a launch", nullptr);
  return rt->fibers[rt->current];
}

// AddressSanitizer's bookkeeping of a switch to the stack [bottom, bottom + size), and of its
// end on the new stack (which learns the previous stack's bounds).
void StartSwitch(const void* bottom, size_t size) {
#if defined(MLAPS_EMU_ASAN)
  __sanitizer_start_switch_fiber(nullptr, bottom, size);
#else
  (void)bottom, (void)size;
#endif
}
void FinishSwitch(const void** previous_bottom, size_t* previous_size) {
#if defined(MLAPS_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, previous_bottom, previous_size);
#else
  (void)previous_bottom, (void)previous_size;
#endif
}

// Continues at `where` (a __builtin_setjmp buffer), on its stack; never returns. Its own
// function: GCC wants __builtin_setjmp and __builtin_longjmp in different functions. Not
// instrumented, not [[noreturn]]: AddressSanitizer would precede the jump with its no-return
// handler (a system call and the unpoisoning of the whole stack, at every switch); it knows
// of the switch through StartSwitch instead.
// (The null test keeps GCC from inferring [[noreturn]] itself.)
__attribute__((noinline, no_sanitize_address)) void JumpTo(void** where) {
  if (where != nullptr) __builtin_longjmp(where, 1);
}

void Yield() {
  Fiber& f = Self();
  if (__builtin_setjmp(f.resume) == 0) {
    StartSwitch(rt->scheduler_stack, rt->scheduler_stack_size);
    JumpTo(rt->scheduler_resume);
  }
  FinishSwitch(nullptr, nullptr);
}

// Arrives on `b` (of `size` threads) and waits for the others; the last to arrive runs
// `last` first (a collective's work on the gathered arguments).
template <class Last>
void ArriveThen(Barrier& b, int size, WaitKind kind, uint32_t arg, Last&& last) {
  ++rt->progress;
  const long generation = b.generation;
  if (++b.count == size) {
    last();
    b.count = 0;
    ++b.generation;
  } else {
    Fiber& f = Self();
    f.wait = kind;
    f.wait_a = arg;
    while (b.generation == generation) Yield();
    f.wait = WaitKind::kNone;
  }
}

void Arrive(Barrier& b, int size, WaitKind kind, uint32_t arg = 0) {
  ArriveThen(b, size, kind, arg, [] {});
}

int LaneOf() { return static_cast<int>(Self().state.thread_idx.x % kLanes); }
int WarpOf() { return static_cast<int>(Self().state.thread_idx.x / kLanes); }

void FiberEntry() {
  FinishSwitch(&rt->scheduler_stack, &rt->scheduler_stack_size);
  (*rt->body)();
  rt->fibers[rt->current].done = true;
  ++rt->progress;
  StartSwitch(rt->scheduler_stack, rt->scheduler_stack_size);
  JumpTo(rt->scheduler_resume);  // never returns (uc_link is not used)
}

// Runs fiber f until it yields or ends.
void RunFiber(Runtime& runtime, Fiber& f) {
  if (__builtin_setjmp(runtime.scheduler_resume) == 0) {
    StartSwitch(f.stack.get(), kStackBytes);
    if (!f.started) {
      f.started = true;
      setcontext(&f.ctx);  // does not return
    }
    JumpTo(f.resume);
  }
  FinishSwitch(nullptr, nullptr);
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

// IEEE half bits -> float, exact (subnormals, inf, NaN).
float HalfFloat(uint16_t h) {
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

float E4m3fnFloat(uint32_t byte) {
  const uint32_t e = (byte >> 3) & 0xfu, m = byte & 7u;
  if ((byte & 0x7fu) == 0x7fu) return BitsFloat(0x7fc00000u);
  const float mag =
      e == 0 ? static_cast<float>(m) * 0.001953125f : BitsFloat(((e + 120u) << 23) | (m << 20));
  return (byte & 0x80u) ? -mag : mag;
}

float ElementFloat(uint16_t bits, WgmmaType type) {
  return type == WgmmaType::kF16    ? HalfFloat(bits)
         : type == WgmmaType::kE4m3 ? E4m3fnFloat(bits)
                                    : Bf16Float(bits);
}
int ElementBytes(WgmmaType type) { return type == WgmmaType::kE4m3 ? 1 : 2; }
int WgmmaK(WgmmaType type) { return 32 / ElementBytes(type); }

void LandCopy(const Copy& c) {
  if (c.valid) {
    std::memcpy(c.dst, c.src, 16);
  } else {
    std::memset(c.dst, 0, 16);
  }
}

void RetireGroup(Fiber& f) {
  for (const Copy& c : f.groups.front()) LandCopy(c);
  f.groups.erase(f.groups.begin());
}

// ---- Hopper primitives: shared addresses, mbarriers, warpgroup MMAs ------------------------

std::string WhoAmI() {
  const ThreadState& s = Self().state;
  return "thread " + std::to_string(rt->current) + " of block " + std::to_string(s.block_idx.x);
}

uint8_t* SmemAt(uint32_t addr, size_t bytes, const char* what) {
  if (static_cast<size_t>(addr) + bytes > rt->smem_bytes) {
    DieAt(std::string(what) + ": shared address " + Hex(addr) + " (" + std::to_string(bytes) +
          " bytes) past the " + std::to_string(rt->smem_bytes) +
          " bytes of dynamic shared memory (" + WhoAmI() + ")");
  }
  return rt->smem.data() + addr;
}

Mbarrier& MbarAt(uint32_t bar, const char* what) {
  if (bar % 8 != 0) {
    DieAt(std::string(what) + ": mbarrier address " + Hex(bar) + " not 8-byte aligned");
  }
  const uint8_t* p = SmemAt(bar, 8, what);
  auto it = rt->mbars.find(bar);
  if (it == rt->mbars.end()) {
    DieAt(std::string(what) + ": mbarrier " + Hex(bar) + " used before mbarrier.init (" + WhoAmI() +
          ")");
  }
  uint64_t tag;
  std::memcpy(&tag, p, 8);
  if (tag != (kMbarTag ^ bar)) {
    DieAt(std::string(what) + ": the 8 bytes of shared memory of mbarrier " + Hex(bar) +
          " were overwritten while it is in use (" + WhoAmI() + ")");
  }
  return it->second;
}

// The phase completes once it has all its arrivals and the bytes it expects.
void MaybeCompletePhase(Mbarrier& m) {
  if (m.pending == 0 && m.tx == 0) {
    ++m.phase;
    m.pending = m.count;
  }
}

void MbarArrival(Mbarrier& m) {
  if (m.phase > m.observed) {
    DieAt("mbarrier: an arrival for phase " + std::to_string(m.phase) +
          " while no wait saw phase " + std::to_string(m.phase - 1) +
          " complete (compute-sanitizer synccheck: Missing wait; " + WhoAmI() + ")");
  }
  ++rt->progress;
  --m.pending;
  MaybeCompletePhase(m);
}

bool PhaseDone(const Mbarrier& m, uint32_t parity) { return (m.phase & 1u) != (parity & 1u); }

// The copies of a cp.async.mbarrier.arrive land, then its arrival (or a TMA load's bytes).
void Land(const AsyncArrival& a) {
  for (const Copy& c : a.copies) LandCopy(c);
  if (a.tx_bytes == 0) {
    MbarArrival(MbarAt(a.bar, "cp.async.mbarrier.arrive"));
    return;
  }
  Mbarrier& m = MbarAt(a.bar, "cp.async.bulk.tensor complete_tx");
  m.tx -= a.tx_bytes;
  if (m.tx < 0) {
    DieAt("cp.async.bulk.tensor: mbarrier " + Hex(a.bar) +
          " received more transaction bytes than its phase expected (expect_tx missing?)");
  }
  ++rt->progress;
  MaybeCompletePhase(m);
}

int WarpgroupOf(const char* what) {
  const int wg = rt->current / kWgThreads;
  if ((wg + 1) * kWgThreads > static_cast<int>(rt->fibers.size())) {
    DieAt(std::string(what) + ": the block's " + std::to_string(rt->fibers.size()) +
          " threads do not make whole warpgroups of 128");
  }
  return wg;
}

// A warpgroup collective: every thread of the calling warpgroup passes `args`; the last to
// arrive checks that they agree (.sync.aligned) and runs `last(warpgroup)`.
template <class Last>
void WarpgroupCollective(const WgArgs& args, const char* what, Last&& last) {
  const int wg = WarpgroupOf(what);
  Self().wg_args = args;
  ArriveThen(rt->warpgroups[wg].barrier, kWgThreads, WaitKind::kWarpgroup,
             static_cast<uint32_t>(wg), [&] {
               for (int t = 0; t < kWgThreads; ++t) {
                 const WgArgs& o = rt->fibers[wg * kWgThreads + t].wg_args;
                 if (o.kind != args.kind || o.desc_a != args.desc_a || o.desc_b != args.desc_b ||
                     o.n != args.n || o.pending != args.pending || o.trans_b != args.trans_b ||
                     o.trans_a != args.trans_a || o.accumulate != args.accumulate ||
                     o.type != args.type || (o.a_regs == nullptr) != (args.a_regs == nullptr)) {
                   DieAt(std::string(what) + ": thread " + std::to_string(wg * kWgThreads + t) +
                         " of warpgroup " + std::to_string(wg) +
                         " reached it with another instruction or other operands (.sync.aligned "
                         "needs the whole warpgroup on the same one)");
                 }
               }
               last(wg);
             });
}

// The bf16 matrix of `rows` x 16 (rows: M of A or N of B; 16: K) that a wgmma reads through
// matrix descriptor `desc`, K-major or MN-major, as the hardware addresses it (PTX ISA
// "Shared Memory Matrix Layout"; CUTLASS notation, T = 8 bf16 = 16 bytes, w = 8 / 4 / 2 for
// the 128 / 64 / 32-byte swizzles):
//   K-major, no swizzle:  ((8,m),(T,2k)):((1T,SBO),(1,LBO))
//   K-major, swizzled:    ((8,m),(T,2k)):((wT,SBO),(1,T))
//   MN-major, no swizzle: ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))
//   MN-major, swizzled:   ((T,w,m),(8,k)):((1,T,LBO),(wT,SBO))
// then the swizzle of the shared address: bits [4, 4 + log2 w) ^= bits [7, 7 + log2 w)
// (Swizzle<3,4,3> for 128B). At issue (`at_issue`), a poisoned element aborts.
std::vector<float> ReadOperand(uint64_t desc, bool mn_major, int rows, const char* name,
                               bool at_issue, WgmmaType type) {
  // A k step is 32 bytes of a row: 16 bf16 / f16 or 32 e4m3 (which wgmma reads K-major only).
  const int elem = ElementBytes(type), kk = WgmmaK(type), per_unit = 16 / elem;
  const uint32_t start = static_cast<uint32_t>(desc & 0x3fffu) << 4;
  const uint32_t lbo = static_cast<uint32_t>((desc >> 16) & 0x3fffu) << 4;
  const uint32_t sbo = static_cast<uint32_t>((desc >> 32) & 0x3fffu) << 4;
  const uint32_t base_offset = static_cast<uint32_t>((desc >> 49) & 7u);
  const uint32_t mode = static_cast<uint32_t>(desc >> 62);
  const std::string where = std::string("wgmma operand ") + name + " (descriptor " + Hex(desc) +
                            ", " + (mn_major ? "MN" : "K") + "-major, " + WhoAmI() + ")";
  constexpr uint64_t kReserved = (3ull << 14) | (3ull << 30) | (7ull << 46) | (0x3ffull << 52);
  if ((desc & kReserved) != 0) DieAt("reserved descriptor bits set in " + where);
  if (base_offset != 0) DieAt("matrix base offset (not emulated) in " + where);
  const int log2w = mode == 0 ? 0 : mode == 1 ? 3 : mode == 2 ? 2 : 1;
  const uint32_t w = 1u << log2w;
  if (log2w > 0) {
    // Swizzle atoms: 8 rows of 16 w bytes, on the grid of 128 w bytes of shared addresses (the
    // swizzle is a function of the address). The start may point inside an atom's first row.
    const uint32_t atom = 128u * w;
    auto check = [&](uint32_t origin) {
      if ((origin & ~(16u * w - 1u)) % atom != 0) {
        DieAt("swizzle atom at shared address " + Hex(origin) + " not on the " +
              std::to_string(atom) + "-byte grid in " + where);
      }
    };
    if (!mn_major) {
      for (int g = 0; g < (rows + 7) / 8; ++g) check(start + sbo * g);
    } else {
      for (uint32_t i = 0; i < (rows + 8 * w - 1) / (8 * w); ++i) {
        for (int j = 0; j < 2; ++j) check(start + lbo * i + sbo * j);
      }
    }
  }
  if (mn_major && elem != 2)
    DieAt("an e4m3 operand read MN-major (wgmma takes fp8 K-major) in " + where);
  std::vector<float> out(static_cast<size_t>(rows) * kk);
  for (int r = 0; r < rows; ++r) {
    for (int k = 0; k < kk; ++k) {
      uint32_t off;
      if (!mn_major) {
        const uint32_t in_unit = elem * (k % per_unit), unit = k / per_unit;
        off = log2w == 0 ? 16u * (r % 8) + sbo * (r / 8) + in_unit + lbo * unit
                         : 16u * w * (r % 8) + sbo * (r / 8) + in_unit + 16u * unit;
      } else {
        off = log2w == 0 ? 2u * (r % 8) + sbo * (r / 8) + 16u * (k % 8) + lbo * (k / 8)
                         : 2u * (r % 8) + 16u * ((r / 8) % w) + lbo * (r / (8 * w)) +
                               16u * w * (k % 8) + sbo * (k / 8);
      }
      uint32_t addr = start + off;
      addr ^= ((addr >> 7) & (w - 1u)) << 4;
      uint16_t v = 0;
      std::memcpy(&v, SmemAt(addr, elem, "wgmma operand"), elem);
      if (at_issue && v == (elem == 2 ? kPoisonBf16 : 0xffu)) {
        DieAt(
            "wgmma reads poisoned shared memory (never written, or cp.async copies not "
            "landed) at shared address " +
            Hex(addr) + ", element (" + std::to_string(r) + ", k " + std::to_string(k) + ") of " +
            where);
      }
      out[static_cast<size_t>(r) * kk + k] = ElementFloat(v, type);
    }
  }
  return out;
}

// The A operand (64 x 16) of a register-A wgmma from the warpgroup's threads' registers (the
// fragment layout of hip_host_emulation.h's WgmmaRegA); records them for the retire check.
std::vector<float> RegisterOperandA(int wg, WgmmaType type, WgmmaOp* op) {
  std::vector<float> a(64 * 16);
  for (int t = 0; t < kWgThreads; ++t) {
    const uint32_t* regs = rt->fibers[wg * kWgThreads + t].wg_args.a_regs;
    op->a_regs[t] = regs;
    const int row = 16 * (t / 32) + (t % 32) / 4, k = 2 * (t % 4);
    for (int i = 0; i < 4; ++i) {
      op->a_at_issue[t][i] = regs[i];
      const int r = row + 8 * (i & 1), kk = k + 8 * (i >> 1);
      for (int half = 0; half < 2; ++half) {
        const uint16_t bits = static_cast<uint16_t>(regs[i] >> (16 * half));
        if (bits == kPoisonBf16) {
          DieAt("register-A wgmma reads a poisoned element (0xffff) in register " +
                std::to_string(i) + " of thread " + std::to_string(wg * kWgThreads + t));
        }
        a[r * 16 + kk + half] = ElementFloat(bits, type);
      }
    }
  }
  return a;
}

// Issues the wgmma whose arguments the warpgroup's threads gathered.
void IssueWgmma(int wg) {
  Warpgroup& g = rt->warpgroups[wg];
  const WgArgs& args = rt->fibers[wg * kWgThreads].wg_args;
  WgmmaOp op;
  op.n = args.n;
  op.trans_a = args.trans_a;
  op.trans_b = args.trans_b;
  op.accumulate = args.accumulate;
  op.desc_a = args.desc_a;
  op.desc_b = args.desc_b;
  op.type = args.type;
  op.a_from_regs = args.a_regs != nullptr;
  if (op.a_from_regs && args.type == WgmmaType::kE4m3) {
    DieAt("register-A e4m3 wgmma (not emulated)");
  }
  if (op.a_from_regs) {
    op.a = RegisterOperandA(wg, args.type, &op);
  } else {
    op.a = ReadOperand(args.desc_a, args.trans_a, 64, "A", true, args.type);
  }
  op.b = ReadOperand(args.desc_b, args.trans_b, args.n, "B", true, args.type);
  const int frag = args.n / 2;  // accumulators a thread holds: 64 x n over 128 threads
  op.input.assign(static_cast<size_t>(kWgThreads) * frag, 0.0f);
  for (int t = 0; t < kWgThreads; ++t) {
    const WgArgs& mine = rt->fibers[wg * kWgThreads + t].wg_args;
    float* d = mine.d;
    op.d[t] = d;
    bool chained = false;  // an in-flight wgmma of this warpgroup accumulates into d already
    for (const WgmmaOp& o : g.ops) chained = chained || o.d[t] == d;
    if (chained) continue;
    if (!mine.fenced) {
      DieAt(
          "wgmma starts on accumulator registers without a wgmma.fence since the "
          "warpgroup's last wgmma wait (thread " +
          std::to_string(wg * kWgThreads + t) + ")");
    }
    std::memcpy(&op.input[static_cast<size_t>(t) * frag], d, sizeof(float) * frag);
    for (int e = 0; e < frag; ++e) std::memcpy(&d[e], &kPoisonF32, 4);
    op.has_input[t] = true;
  }
  g.ops.push_back(std::move(op));
}

// Retires the warpgroup's `count` oldest wgmmas: the operands must read as at issue; the
// results go to the next in-flight wgmma on the same accumulators or to the registers.
void RetireWgmmas(int wg, size_t count) {
  Warpgroup& g = rt->warpgroups[wg];
  for (size_t i = 0; i < count; ++i) {
    WgmmaOp& op = g.ops[i];
    const int n = op.n;
    if (op.a_from_regs) {
      for (int t = 0; t < kWgThreads; ++t) {
        for (int i = 0; i < 4; ++i) {
          if (op.a_regs[t][i] != op.a_at_issue[t][i]) {
            DieAt("A register " + std::to_string(i) + " of thread " +
                  std::to_string(wg * kWgThreads + t) +
                  " changed while a register-A wgmma on it was in flight (before the wait that "
                  "retires it)");
          }
        }
      }
    }
    const std::vector<float> a =
        op.a_from_regs ? op.a : ReadOperand(op.desc_a, op.trans_a, 64, "A", false, op.type);
    const std::vector<float> b = ReadOperand(op.desc_b, op.trans_b, n, "B", false, op.type);
    for (int which = 0; which < 2; ++which) {
      const std::vector<float>& now = which == 0 ? a : b;
      const std::vector<float>& then = which == 0 ? op.a : op.b;
      if (std::memcmp(now.data(), then.data(), sizeof(float) * now.size()) != 0) {
        size_t e = 0;
        while (FloatBits(now[e]) == FloatBits(then[e])) ++e;
        DieAt(std::string("shared memory under an in-flight wgmma was rewritten before the wait "
                          "that retires it: operand ") +
              (which == 0 ? "A" : "B") + " (descriptor " + Hex(which == 0 ? op.desc_a : op.desc_b) +
              "), element (" + std::to_string(e / WgmmaK(op.type)) + ", k " +
              std::to_string(e % WgmmaK(op.type)) + ") of warpgroup " + std::to_string(wg) +
              " in block " + std::to_string(Self().state.block_idx.x));
      }
    }
    // D = A B: exact products summed in fp32 (as Mma16816).
    const int kk = WgmmaK(op.type);
    std::vector<float> prod(static_cast<size_t>(64) * n);
    for (int m = 0; m < 64; ++m) {
      for (int c = 0; c < n; ++c) {
        float sum = 0.0f;
        for (int k = 0; k < kk; ++k) sum += op.a[m * kk + k] * op.b[c * kk + k];
        prod[static_cast<size_t>(m) * n + c] = sum;
      }
    }
    const int frag = n / 2;
    std::vector<float> out(frag);
    for (int t = 0; t < kWgThreads; ++t) {
      if (!op.has_input[t]) DieAt("internal: wgmma retired before the one it accumulates on");
      // Thread t: rows r0 and r0 + 8; element 4 j + 2 h + e is row r0 + 8 h, column
      // 8 j + 2 (t % 4) + e.
      const int r0 = 16 * (t / 32) + (t % 32) / 4;
      const float* in = &op.input[static_cast<size_t>(t) * frag];
      for (int j = 0; j < n / 8; ++j) {
        for (int h = 0; h < 2; ++h) {
          for (int e = 0; e < 2; ++e) {
            const int idx = 4 * j + 2 * h + e;
            const float p = prod[static_cast<size_t>(r0 + 8 * h) * n + 8 * j + 2 * (t % 4) + e];
            out[idx] = op.accumulate ? in[idx] + p : p;
          }
        }
      }
      WgmmaOp* next = nullptr;
      for (size_t k = i + 1; k < g.ops.size() && next == nullptr; ++k) {
        if (g.ops[k].d[t] == op.d[t]) next = &g.ops[k];
      }
      if (next != nullptr) {
        std::memcpy(&next->input[static_cast<size_t>(t) * frag], out.data(), sizeof(float) * frag);
        next->has_input[t] = true;
        continue;
      }
      for (int e = 0; e < frag; ++e) {
        if (FloatBits(op.d[t][e]) != kPoisonF32) {
          DieAt("accumulator register " + std::to_string(e) + " of thread " +
                std::to_string(wg * kWgThreads + t) +
                " written while a wgmma on it was in flight (before the wgmma wait)");
        }
      }
      std::memcpy(op.d[t], out.data(), sizeof(float) * frag);
    }
  }
  g.ops.erase(g.ops.begin(), g.ops.begin() + static_cast<long>(count));
}

std::string DescribeWait(const Fiber& f) {
  switch (f.wait) {
    case WaitKind::kNone:
      return f.done ? "done" : "running";
    case WaitKind::kBlock:
      return "__syncthreads";
    case WaitKind::kWarp:
      return "warp collective (warp " + std::to_string(f.wait_a) + ")";
    case WaitKind::kNamed:
      return "bar.sync " + std::to_string(f.wait_a);
    case WaitKind::kWarpgroup:
      return "warpgroup collective (warpgroup " + std::to_string(f.wait_a) + ")";
    case WaitKind::kMbarrier: {
      std::string s = "mbarrier " + Hex(f.wait_a) + " parity " + std::to_string(f.wait_b);
      auto it = rt->mbars.find(f.wait_a);
      if (it != rt->mbars.end()) {
        s += " (phase " + std::to_string(it->second.phase) + ", " +
             std::to_string(it->second.pending) + " of " + std::to_string(it->second.count) +
             " arrivals pending)";
      }
      return s;
    }
  }
  return "?";
}

// What every thread waits for, consecutive threads with the same wait merged.
std::string DescribeWaits() {
  std::string out;
  const int threads = static_cast<int>(rt->fibers.size());
  for (int i = 0; i < threads;) {
    const std::string what = DescribeWait(rt->fibers[i]);
    int j = i + 1;
    while (j < threads && DescribeWait(rt->fibers[j]) == what) ++j;
    out += (out.empty() ? "" : "; ") + std::string("threads ") + std::to_string(i) + "-" +
           std::to_string(j - 1) + ": " + what;
    i = j;
  }
  std::map<uint32_t, int> in_flight;
  for (const AsyncArrival& a : rt->in_flight) ++in_flight[a.bar];
  for (const auto& [bar, arrivals] : in_flight) {
    out += "; " + std::to_string(arrivals) + " cp.async arrivals in flight on mbarrier " + Hex(bar);
  }
  return out;
}

}  // namespace

dim3 g_block_dim;
dim3 g_grid_dim;

ThreadState& Current() {
  return rt != nullptr && rt->current >= 0 ? rt->fibers[rt->current].state : host_state;
}

void SyncThreads() {
  if (rt == nullptr || rt->current < 0) Die("__syncthreads outside a launch", nullptr);
  Arrive(rt->block_barrier, static_cast<int>(rt->fibers.size()), WaitKind::kBlock);
}

void SyncWarp() {
  const int warp = WarpOf();
  const int threads = static_cast<int>(rt->fibers.size());
  const int size = std::min(kLanes, threads - warp * kLanes);
  Arrive(rt->warp_barriers[warp], size, WaitKind::kWarp, static_cast<uint32_t>(warp));
}

int SyncThreadsCount(int predicate) {
  if (rt == nullptr || rt->current < 0) Die("__syncthreads_or / _count outside a launch", nullptr);
  rt->block_slots[rt->current] = predicate != 0;
  SyncThreads();
  int count = 0;
  for (int v : rt->block_slots) count += v;
  SyncThreads();  // nobody overwrites a slot before every thread has read them all
  return count;
}

int SyncThreadsOr(int predicate) { return SyncThreadsCount(predicate) > 0 ? 1 : 0; }

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

uint32_t SmemAddr(const void* p) {
  if (rt == nullptr) Die("SmemAddr outside a launch", p);
  const uintptr_t base = reinterpret_cast<uintptr_t>(rt->smem.data());
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  if (at < base || at > base + rt->smem_bytes) {
    Die("SmemAddr of an address outside the dynamic shared memory", p);
  }
  return static_cast<uint32_t>(at - base);
}

uint8_t* SmemBytes(uint32_t addr, int bytes) {
  Self();  // inside a launch
  if (addr % bytes != 0) {
    DieAt("shared access of " + std::to_string(bytes) + " bytes at shared address " + Hex(addr) +
          " not aligned to its size (" + WhoAmI() + ")");
  }
  return SmemAt(addr, bytes, "shared access");
}

void CheckMatrixDesc(uint32_t addr, uint32_t lbo, uint32_t sbo, uint32_t swizzle) {
  if (addr % 16 != 0 || lbo % 16 != 0 || sbo % 16 != 0 || addr >= (1u << 18) || lbo >= (1u << 18) ||
      sbo >= (1u << 18) || swizzle > 3) {
    DieAt("matrix descriptor of shared address " + Hex(addr) + ", lbo " + Hex(lbo) + ", sbo " +
          Hex(sbo) + ", swizzle " + std::to_string(swizzle) +
          ": address and strides must be 16-byte aligned and below 256 KB");
  }
}

void MbarInit(uint32_t bar, int count) {
  if (bar % 8 != 0) DieAt("mbarrier.init: address " + Hex(bar) + " not 8-byte aligned");
  if (count < 1 || count >= (1 << 20)) {
    DieAt("mbarrier.init: count " + std::to_string(count) + " outside [1, 2^20)");
  }
  const uint64_t tag = kMbarTag ^ bar;
  std::memcpy(SmemAt(bar, 8, "mbarrier.init"), &tag, 8);
  rt->mbars[bar] = Mbarrier{count, count, 0};
}

// A thread's arrival that completes a phase yields: the scheduler's pass goes on with the other
// threads of the arriving thread's tier, then starts over from the highest tier, and the
// arriving thread resumes only when its tier's turn comes again. So a waiter in a higher tier
// (under a warpgroup-priority schedule) or in the same tier runs first and reads what the
// arrival published while the arriving thread has not moved: a release that comes before the
// writes it should publish is then seen (the writes land under the waiter's reads; a waiter in
// a lower tier is not helped). Asynchronous arrivals (Land) do not yield: they run inside a
// waiter's test.
void ArriveAndLetWaitersRun(Mbarrier& m) {
  const uint32_t phase = m.phase;
  MbarArrival(m);
  if (m.phase != phase) Yield();
}

void MbarArrive(uint32_t bar) { ArriveAndLetWaitersRun(MbarAt(bar, "mbarrier.arrive")); }

// A wait that returns has seen every phase completed so far.
bool WaitSees(Mbarrier& m, uint32_t parity) {
  if (!PhaseDone(m, parity)) return false;
  m.observed = m.phase;
  return true;
}

// Lands `bar`'s in-flight cp.async / TMA arrivals, oldest first, until the phase with `parity`
// completes (as late as a waiter allows); whether it did.
bool LandUntilSeen(uint32_t bar, uint32_t parity, const char* what) {
  if (WaitSees(MbarAt(bar, what), parity)) return true;
  for (auto it = rt->in_flight.begin(); it != rt->in_flight.end();) {
    if (it->bar != bar) {
      ++it;
      continue;
    }
    const AsyncArrival a = std::move(*it);
    it = rt->in_flight.erase(it);
    Land(a);
    if (WaitSees(MbarAt(bar, what), parity)) return true;
  }
  return false;
}

bool MbarTest(uint32_t bar, uint32_t parity) {
  return LandUntilSeen(bar, parity, "mbarrier.test_wait.parity");
}

void MbarWait(uint32_t bar, uint32_t parity) {
  Fiber& f = Self();
  for (;;) {
    if (LandUntilSeen(bar, parity, "mbarrier.try_wait.parity")) return;
    f.wait = WaitKind::kMbarrier;
    f.wait_a = bar;
    f.wait_b = parity;
    Yield();
    f.wait = WaitKind::kNone;
  }
}

void CpAsyncArrive(uint32_t bar) {
  MbarAt(bar, "cp.async.mbarrier.arrive");
  Fiber& f = Self();
  AsyncArrival a{bar, rt->current, {}};
  for (const std::vector<Copy>& g : f.groups) a.copies.insert(a.copies.end(), g.begin(), g.end());
  a.copies.insert(a.copies.end(), f.open.begin(), f.open.end());
  f.groups.clear();
  f.open.clear();
  rt->in_flight.push_back(std::move(a));
  ++rt->progress;  // a waiter on `bar` may now complete its phase
}

// The emulated tensor map (in the 128 bytes of a CUtensorMap).
struct EmuTmaMap {
  uint64_t tag;
  const uint8_t* base;
  int64_t inner, rows, row_stride;
  int32_t elem_bytes, box_inner, box_rows, swizzle_bytes;
};
static_assert(sizeof(EmuTmaMap) <= 128, "fits a CUtensorMap");
constexpr uint64_t kTmaTag = 0x746d615f6d617032ull;  // "tma_map2"

void EncodeTmaMap2D(void* map, const void* base, int elem_bytes, int64_t inner, int64_t rows,
                    int64_t row_stride, int box_inner, int box_rows, int swizzle_bytes) {
  const int64_t box_row_bytes = int64_t{box_inner} * elem_bytes;
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0 || row_stride % 16 != 0 || inner < 1 ||
      rows < 1 || box_inner < 1 || box_rows < 1 || box_rows > 256 || box_row_bytes % 16 != 0 ||
      (swizzle_bytes != 0 && swizzle_bytes != 64 && swizzle_bytes != 128) ||
      (swizzle_bytes != 0 && box_row_bytes != swizzle_bytes) || inner * elem_bytes > row_stride) {
    Die("EncodeTmaMap2D: unsupported or misaligned tensor map", base);
  }
  EmuTmaMap m{kTmaTag,      static_cast<const uint8_t*>(base),
              inner,        rows,
              row_stride,   elem_bytes,
              box_inner,    box_rows,
              swizzle_bytes};
  std::memset(map, 0, 128);
  std::memcpy(map, &m, sizeof(m));
}

void MbarArriveExpectTx(uint32_t bar, int bytes) {
  Mbarrier& m = MbarAt(bar, "mbarrier.arrive.expect_tx");
  if (bytes < 0) DieAt("mbarrier.arrive.expect_tx: negative byte count");
  m.tx += bytes;
  ArriveAndLetWaitersRun(m);  // completes the phase only with nothing (left) to land
}

void TmaLoad2D(uint32_t dst, const void* map, int x, int y, uint32_t bar) {
  MbarAt(bar, "cp.async.bulk.tensor");
  EmuTmaMap m;
  std::memcpy(&m, map, sizeof(m));
  if (m.tag != kTmaTag) DieAt("cp.async.bulk.tensor: not a tensor map (" + WhoAmI() + ")");
  const uint32_t align = m.swizzle_bytes != 0 ? 8u * m.swizzle_bytes : 128u;
  if (dst % align != 0) {
    DieAt("cp.async.bulk.tensor: shared destination " + Hex(dst) + " not " + std::to_string(align) +
          "-byte aligned");
  }
  const int row_bytes = m.box_inner * m.elem_bytes;
  AsyncArrival a{bar, rt->current, {}, int64_t{row_bytes} * m.box_rows};
  uint8_t* smem = SmemAt(dst, static_cast<int>(a.tx_bytes), "cp.async.bulk.tensor");
  for (int r = 0; r < m.box_rows; ++r) {
    for (int u = 0; u < row_bytes / 16; ++u) {
      // The box lands row after row; the 128-byte (64-byte) swizzle XORs a row's 16-byte units
      // by bits 7-9 (7-8) of the offset inside its 1024-byte (512-byte) atom (a function of the
      // shared address).
      uint32_t off = static_cast<uint32_t>(r * row_bytes + 16 * u);
      if (m.swizzle_bytes != 0) off ^= ((off >> 7) & (m.swizzle_bytes / 16u - 1u)) << 4;
      const int64_t gy = int64_t{y} + r, gx = int64_t{x} + int64_t{u} * 16 / m.elem_bytes;
      // Elements outside the tensor read as zeros (a 16-byte unit is in or out as a whole
      // here: the callers' boxes tile the inner dimension).
      const bool valid = gy >= 0 && gy < m.rows && gx >= 0 && gx < m.inner;
      const uint8_t* src = valid ? m.base + gy * m.row_stride + gx * m.elem_bytes : nullptr;
      std::memset(smem + off, 0xff, 16);
      a.copies.push_back({smem + off, src, valid});
    }
  }
  rt->in_flight.push_back(std::move(a));
  ++rt->progress;
}

void NamedBarrierSync(int id, int threads) {
  Self();  // inside a launch
  const int block = static_cast<int>(rt->fibers.size());
  if (id < 0 || id >= kNamedBarriers || threads <= 0 || threads % kLanes != 0 || threads > block) {
    DieAt("bar.sync " + std::to_string(id) + ", " + std::to_string(threads) +
          ": id must be in [0, 16) and the count a multiple of 32 up to the block's " +
          std::to_string(block) + " threads");
  }
  if (id == 0 && threads != block) DieAt("bar.sync 0 (__syncthreads' barrier) with a count");
  Barrier& b = id == 0 ? rt->block_barrier : rt->named[id];
  if (b.count == 0) {
    b.size = threads;
  } else if (b.size != threads && id != 0) {
    DieAt("bar.sync " + std::to_string(id) + " reached with counts " + std::to_string(b.size) +
          " and " + std::to_string(threads));
  }
  Arrive(b, threads, WaitKind::kNamed, static_cast<uint32_t>(id));
}

void WgmmaFence() { Self().wgmma_fenced = true; }

void WgmmaCommit() {
  WgArgs args;
  args.kind = WgKind::kCommit;
  WarpgroupCollective(args, "wgmma.commit_group", [](int wg) {
    Warpgroup& g = rt->warpgroups[wg];
    for (WgmmaOp& op : g.ops) {
      if (op.group < 0) op.group = g.next_group;
    }
    ++g.next_group;
  });
}

void WgmmaWait(int pending) {
  WgArgs args;
  args.kind = WgKind::kWait;
  args.pending = pending;
  WarpgroupCollective(args, "wgmma.wait_group", [pending](int wg) {
    Warpgroup& g = rt->warpgroups[wg];
    size_t count = 0;  // groups are in issue order; uncommitted wgmmas (group -1) last
    while (count < g.ops.size() && g.ops[count].group >= 0 &&
           g.ops[count].group < g.next_group - pending) {
      ++count;
    }
    RetireWgmmas(wg, count);
    for (int t = 0; t < kWgThreads; ++t) rt->fibers[wg * kWgThreads + t].wgmma_fenced = false;
  });
}

// The arguments both wgmma forms share (A comes from shared memory or from registers).
WgArgs WgmmaArgs(float* d, int n, uint64_t desc_b, bool trans_b, bool accumulate, WgmmaType type) {
  if (n % 8 != 0 || n < 8 || n > 256) DieAt("wgmma: N must be a multiple of 8 in [8, 256]");
  WgArgs args;
  args.kind = WgKind::kWgmma;
  args.d = d;
  args.n = n;
  args.desc_b = desc_b;
  args.trans_b = trans_b;
  args.accumulate = accumulate;
  args.type = type;
  args.fenced = Self().wgmma_fenced;
  return args;
}

void Wgmma(float* d, int n, uint64_t desc_a, uint64_t desc_b, bool trans_b, bool accumulate,
           WgmmaType type, bool trans_a) {
  WgArgs args = WgmmaArgs(d, n, desc_b, trans_b, accumulate, type);
  args.desc_a = desc_a;
  args.trans_a = trans_a;
  WarpgroupCollective(args, "wgmma.mma_async", [](int wg) { IssueWgmma(wg); });
}

void WgmmaRegA(float* d, int n, const uint32_t (&a)[4], uint64_t desc_b, bool trans_b,
               bool accumulate, WgmmaType type) {
  WgArgs args = WgmmaArgs(d, n, desc_b, trans_b, accumulate, type);
  args.a_regs = a;
  WarpgroupCollective(args, "wgmma.mma_async (register A)", [](int wg) { IssueWgmma(wg); });
}

uint32_t PackF16x2(float lo, float hi) {
  return static_cast<uint32_t>(FloatToHalfRne(lo)) |
         (static_cast<uint32_t>(FloatToHalfRne(hi)) << 16);
}

uint32_t E4m3x2ToF16x2(uint32_t two) {
  return static_cast<uint32_t>(FloatToHalfRne(E4m3fnFloat(two & 0xffu))) |
         (static_cast<uint32_t>(FloatToHalfRne(E4m3fnFloat((two >> 8) & 0xffu))) << 16);
}

uint32_t Bf16x2ToF16x2(uint32_t two) {
  return static_cast<uint32_t>(FloatToHalfRne(Bf16Float(static_cast<uint16_t>(two)))) |
         (static_cast<uint32_t>(FloatToHalfRne(Bf16Float(static_cast<uint16_t>(two >> 16)))) << 16);
}

float HalfBitsToFloat(uint16_t h) { return HalfFloat(h); }

// The threads of a block in the schedule's tiers, highest priority first: round robin one tier
// of every thread; warpgroup priority a tier per warpgroup; kOneWarpLast every thread but warp
// `last_warp`'s, then those.
static std::vector<std::vector<int>> ScheduleTiers(Schedule schedule, int threads, int last_warp) {
  std::vector<std::vector<int>> tiers;
  if (schedule == Schedule::kRoundRobin || schedule == Schedule::kOneWarpLast) {
    tiers.resize(schedule == Schedule::kRoundRobin ? 1 : 2);
    for (int i = 0; i < threads; ++i) {
      tiers[schedule == Schedule::kOneWarpLast && i / warpSize == last_warp ? 1 : 0].push_back(i);
    }
    return tiers;
  }
  for (int lo = 0; lo < threads; lo += kWgThreads) {
    tiers.emplace_back();
    for (int i = lo; i < std::min(threads, lo + kWgThreads); ++i) tiers.back().push_back(i);
  }
  if (schedule == Schedule::kHighWarpgroupsFirst) std::reverse(tiers.begin(), tiers.end());
  return tiers;
}

std::string Launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()>& body,
                   Schedule schedule, int last_warp) {
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
  runtime.block_slots.assign(threads, 0);
  runtime.smem.assign(smem_bytes + 16, 0xff);
  runtime.smem_bytes = smem_bytes;
  std::string error;
  for (unsigned bz = 0; bz < grid.z && error.empty(); ++bz) {
    for (unsigned by = 0; by < grid.y && error.empty(); ++by) {
      for (unsigned bx = 0; bx < grid.x && error.empty(); ++bx) {
        runtime.block_barrier = Barrier();
        runtime.warp_barriers.assign(warps, Barrier());
        runtime.named.fill(Barrier());
        runtime.mbars.clear();
        runtime.in_flight.clear();
        runtime.warpgroups.clear();
        runtime.warpgroups.resize((threads + kWgThreads - 1) / kWgThreads);
        std::fill(runtime.smem.begin(), runtime.smem.end(), 0xff);
        for (int i = 0; i < threads; ++i) {
          Fiber& f = runtime.fibers[i];
          f.done = false;
          f.started = false;
          f.groups.clear();
          f.open.clear();
          f.wgmma_fenced = false;
          f.wait = WaitKind::kNone;
          f.state.thread_idx = dim3(i % block.x, (i / block.x) % block.y, i / (block.x * block.y));
          f.state.block_idx = dim3(bx, by, bz);
#if defined(MLAPS_EMU_ASAN)
          // The last block's frames ended with a jump, not a return: clear their redzones.
          ASAN_UNPOISON_MEMORY_REGION(f.stack.get(), kStackBytes);
#endif
          getcontext(&f.ctx);
          f.ctx.uc_stack.ss_sp = f.stack.get();
          f.ctx.uc_stack.ss_size = kStackBytes;
          f.ctx.uc_link = &runtime.scheduler;
          makecontext(&f.ctx, FiberEntry, 0);
        }
        // A pass runs the tiers in priority order and starts over after the first tier that
        // made progress, so lower tiers run only while the higher ones are all blocked.
        const std::vector<std::vector<int>> tiers = ScheduleTiers(schedule, threads, last_warp);
        while (error.empty()) {
          bool progressed = false;
          for (size_t k = 0; k < tiers.size() && !progressed; ++k) {
            const long before = runtime.progress;
            for (int i : tiers[k]) {
              Fiber& f = runtime.fibers[i];
              if (f.done) continue;
              runtime.current = i;
              RunFiber(runtime, f);
              runtime.current = -1;
            }
            progressed = runtime.progress != before;
          }
          bool all_done = true;
          for (const Fiber& f : runtime.fibers) all_done = all_done && f.done;
          if (all_done) break;
          if (!progressed) {
            error = "deadlock in block (" + std::to_string(bx) + ", " + std::to_string(by) +
                    "): threads wait at a barrier others never reach or an mbarrier phase "
                    "that never completes: " +
                    DescribeWaits();
          }
        }
        for (int i = 0; i < threads && error.empty(); ++i) {
          const Fiber& f = runtime.fibers[i];
          if (!f.groups.empty() || !f.open.empty()) {
            error = "thread " + std::to_string(i) + " of block " + std::to_string(bx) +
                    " ended with cp.async copies it never waited for";
          }
        }
        if (error.empty() && !runtime.in_flight.empty()) {
          error = "block " + std::to_string(bx) + " ended with cp.async copies of thread " +
                  std::to_string(runtime.in_flight.front().thread) +
                  " whose mbarrier arrival no thread waited for (mbarrier " +
                  Hex(runtime.in_flight.front().bar) + ")";
        }
        for (size_t wg = 0; wg < runtime.warpgroups.size() && error.empty(); ++wg) {
          if (!runtime.warpgroups[wg].ops.empty()) {
            error = "warpgroup " + std::to_string(wg) + " of block " + std::to_string(bx) +
                    " ended with wgmmas no wgmma.wait_group retired";
          }
        }
      }
    }
  }
  rt = nullptr;
  return error;
}

}  // namespace mlaps_emu
