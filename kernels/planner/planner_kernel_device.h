// Device code of the GPU planner (contract: planner_kernel.h): AssignGreedyPayload +
// PlanDecodeInto's layout (metadata/planner.cc) in one thread block, byte-identical to the
// host. HIP dialect, included by planner_kernel.hip after kernels/platform/hip_runtime.h. A
// header so that tests/kernels/planner/planner_kernel_emu_test.cc can also compile it for the
// CPU on top of tests/kernels/emu (MLAPS_HOST_EMULATION) and run the same walk and layout in
// `bazel test`.
//
// The host walk, restated on a cost axis. Qo tiles with kv are laid end to end: tile k
// occupies [C[k], C[k+1]) where C is the exclusive prefix of cost = blocks + overhead. A piece
// that starts inside a tile pays the overhead again; writing a start at kv token b of tile j as
// the position C[j] + b / granularity makes "the rest of tile j costs C[j+1] - position" exact,
// so CU c owns the range [S[c], S[c+1]) of the axis and the walk is a map S[c] -> S[c+1]
// (PlanStep): with E = S[c] + payload and j the tile holding E, the next CU starts where the
// host's split of tile j ends (on j's quantum grid, at most j's tail limit), at C[j] when
// nothing of j fits, at C[j+1] when an empty CU took the rest of j whole, or at the end.
//
// Phases (one block; all data in shared memory):
//  1. Load + validate the batch (one request per thread), per-request tile counts and costs,
//     one block scan, the tiles laid out on the cost axis: C[k], request, tail limit. With kv
//     lanes (KvLanes: every request with kv has m tiles, L | m, L | num_cu), a second scan
//     lays out the reference tiles instead (RefShape) and the walk covers num_cu / L CUs.
//  2. The CU walk, from guesses S[c] = c * (payload - overhead). A round evaluates every CU's
//     step at its guess: if each lands on the next CU's guess, the guesses are the walk (by
//     induction from S[0] = 0) and one barrier says so. Else the steps, as moves "add d" or
//     "reset to x" (almost every step moves S by a constant or resets it to a tile-determined
//     position), are composed by one block scan into new guesses, exact up to the first index
//     that changed. After max_scan_iterations rounds one warp finishes, window by window (the
//     same composition over warpSize CUs, keeping the exact prefix). A uniform batch defeats
//     the rounds (each CU that ends exactly at a tile's end shifts every later start; a round
//     fixes one such reset), so when the cost axis fits the jump tables (jump_positions) and
//     the rounds did not settle, pointer doubling walks instead (JumpWalk: no guesses). max_split
//     >= 2 makes a step depend on the pieces its tile already has: then one thread walks.
//  3. Layout from the CU starts: each CU finds its first and last tile; in CU order the pieces
//     of split tiles come in the host's tile order, so one scan over CUs gives every CU its
//     work rows, reduce entries and partial rows; capacity checks; then each CU writes all of
//     its pieces.
//
// What it costs (H200, planner_kernel_bench): the code runs as single warps' dependent chains,
// so instruction count on the critical path is time (~4 cycles each); a barrier is ~30 cycles,
// a global load ~400. Hence: few barriers (a converged walk is checked with one; the layout
// needs one scan), 32-bit scan payloads where values allow, a move packed in one int64, the
// hot helpers inlined with the context in registers, and host-computed constants.
#ifndef MLAPS_KERNELS_PLANNER_PLANNER_KERNEL_DEVICE_H_
#define MLAPS_KERNELS_PLANNER_PLANNER_KERNEL_DEVICE_H_

#include <algorithm>
#include <climits>
#include <cstring>

#include "kernels/planner/planner_kernel.h"

namespace mlaps {
namespace gpu_planner {

using i64 = long long;
using u64 = unsigned long long;

constexpr int kThreads = 512;         // the most threads a launch may ask for (registers: 128)
constexpr int kMaxWarps = 16;         // kThreads / the smallest warp (32 lanes)
constexpr int kDefaultThreads = 256;  // enough lanes; more only add barrier and issue cost
// Jump tables of at most this many positions a thread are cheap: about as much as 3 rounds
// of the parallel walk on the H200 (planner_kernel_bench).
constexpr int kSmallJumpPerThread = 4;
constexpr i64 kInt32Max = INT_MAX;
constexpr u64 kNoError = ~0ull;
constexpr int kNoPartialRow = -1;  // work_info's partial_qo_loc of a whole tile (kNoPartial)
// The kernel's static shared memory stays below this (checked by the launch's opt-in rule:
// static + dynamic bytes above 48 KiB need the dynamic size opted in).
constexpr i64 kStaticSmemBound = 4096;

// ---- Small integer math ----------------------------------------------------------------------

// ceil(a / n) for a >= 0, n >= 1 without a 64-bit integer division (slow on GPUs): the
// quotient by the host's reciprocal 1 / n, corrected to the exact integer.
__device__ inline i64 CeilDivByCount(i64 a, int n, double inv_n) {
  i64 q = static_cast<i64>(static_cast<double>(a) * inv_n);
  while (q * n < a) ++q;
  while (q > 0 && (q - 1) * n >= a) --q;
  return q;
}

// floor(x / 2^s) * 2^s for any sign: clearing the low bits of a two's complement number
// rounds toward -infinity.
__device__ inline i64 RoundDownPow2(i64 x, i64 pow2) { return x & ~(pow2 - 1); }

// a + b for a, b in [0, 2^31], saturating at 2^31 (associative: a running total that only
// needs to say "above INT32_MAX").
__device__ inline unsigned SatAdd31(unsigned a, unsigned b) {
  const unsigned s = a + b;
  return s < a || s > (1u << 31) ? (1u << 31) : s;
}

// HIP declares wall_clock64() in its device pass only.
__device__ inline long long WallClock() {
#if defined(MLAPS_GPU_ROCM) && !defined(__HIP_DEVICE_COMPILE__)
  return 0;
#else
  return wall_clock64();
#endif
}

// ---- Shared memory layout ----------------------------------------------------------------------
// Per tile: its cost-axis start C (and C[K] = total), its request, its tail limit and its
// (head group, token tile). Per request: qlen, kv length, first tile, token tiles, qo_indptr
// and kv_indptr entries. Per CU: start S (and S[n] = total), the step as a packed move, the tile
// of its payload end (a search hint; after the walk: its last tile), its first tile. The
// walk's jump tables (JumpWalk).
// Byte offsets (int32: the launch refuses more than INT_MAX bytes) and the total.
struct SmemLayout {
  int tile_c, tile_req, tile_tail, tile_shape;
  int req_q, req_len, req_tiles, req_tt, req_qo, req_kv;
  int cu_s, cu_val, cu_jtile, cu_tile;
  int jump;  // two tables of jump_positions 16-bit positions
  i64 bytes;
};

inline i64 AlignUp8(i64 x) { return (x + 7) & ~i64{7}; }

__host__ __device__ inline i64 MaxTiles(const GpuPlannerParams& p) {
  // 32-bit division: a 64-bit one is a long software routine on GPUs.
  const int per_request = (p.max_qlen + p.tokens_per_tile - 1) / p.tokens_per_tile;
  return i64{p.num_requests} * p.head_fold * per_request;
}

inline SmemLayout MakeSmemLayout(const GpuPlannerParams& p) {
  const i64 num_requests = p.num_requests, max_tiles = MaxTiles(p), num_cu = p.num_cu;
  SmemLayout l;
  i64 at = 0;
  auto take = [&at](i64 bytes) {
    const i64 here = at;
    at = AlignUp8(at + bytes);
    return static_cast<int>(std::min<i64>(here, INT_MAX));
  };
  l.tile_c = take(8 * (max_tiles + 1));
  l.cu_s = take(8 * (num_cu + 1));
  l.cu_val = take(8 * num_cu);
  l.tile_req = take(4 * max_tiles);
  l.tile_tail = take(4 * max_tiles);
  l.tile_shape = take(4 * max_tiles);
  l.req_q = take(4 * num_requests);
  l.req_len = take(4 * num_requests);
  l.req_tiles = take(4 * (num_requests + 1));
  l.req_tt = take(4 * num_requests);
  l.req_qo = take(4 * (num_requests + 1));
  l.req_kv = take(4 * num_requests);
  l.cu_jtile = take(4 * num_cu);
  l.cu_tile = take(4 * num_cu);
  l.jump = take(4 * i64{p.jump_positions});
  l.bytes = at;
  return l;
}

// `p` with its jump tables shrunk (down to none) so that the launch's dynamic shared memory
// fits `limit` bytes: they only speed the walk up (the plan is the same for every
// jump_positions). Unchanged when it fits already, or when nothing would (the launch then
// fails with the device's error).
inline GpuPlannerParams FitJumpTables(GpuPlannerParams p, i64 limit) {
  if (MakeSmemLayout(p).bytes <= limit) return p;
  GpuPlannerParams none = p;
  none.jump_positions = 0;
  const i64 room = limit - MakeSmemLayout(none).bytes;  // 2 positions per 8 aligned bytes
  p.jump_positions = room < 8 ? 0 : static_cast<int>(std::min<i64>(p.jump_positions, room / 8 * 2));
  return p;
}

// What the host derives once from the params (static per graph), so the device does not.
struct KernelConsts {
  SmemLayout smem;
  double inv_num_cu;  // 1 / num_cu
  int per_req;        // requests per thread: ceil(num_requests / threads)
  int per_cu;         // CUs per thread: ceil(num_cu / threads)
  i64 qg;             // blocks per split quantum max(granularity, page), a power of two
  int log2_g;         // kv granularity
  int log2_page;      // page size
  int ms;             // max split per tile; 0: none (a limit >= num_cu never binds: a tile only
                      // reaches num_cu - 1 pieces before the last CU)
};

inline int Log2OfPow2(int v) {
  int l = 0;
  while ((1 << l) < v) ++l;
  return l;
}

inline KernelConsts MakeConsts(const GpuPlannerParams& p, int threads) {
  KernelConsts k;
  k.smem = MakeSmemLayout(p);
  k.inv_num_cu = 1.0 / p.num_cu;
  k.per_req = (p.num_requests + threads - 1) / threads;
  k.per_cu = (p.num_cu + threads - 1) / threads;
  k.log2_g = Log2OfPow2(p.kv_granularity);
  k.log2_page = Log2OfPow2(p.page_size);
  k.qg = i64{std::max(p.kv_granularity, p.page_size)} >> k.log2_g;
  k.ms = p.max_split_per_batch >= p.num_cu ? 0 : p.max_split_per_batch;
  return k;
}

// Threads of the one block: params.threads, or enough lanes for one request and one CU each
// (up to kDefaultThreads); more lanes only add barrier and instruction-issue cost on the one SM.
inline int LaunchThreads(const GpuPlannerParams& p) {
  if (p.threads != 0) return p.threads;
  const int wanted = std::max(p.num_requests, p.num_cu + 1);
  return std::min(kDefaultThreads, std::max(64, (wanted + 63) / 64 * 64));
}

// ---- Scans -------------------------------------------------------------------------------------

// A warp shuffle of any trivially copyable value, one 32-bit word at a time
// (`shuffle_word(int) -> int`: one lane's word in, the source lane's word out).
template <typename T, typename ShuffleWord>
__device__ inline T ShuffleWords(T v, ShuffleWord shuffle_word) {
  static_assert(sizeof(T) % 4 == 0, "shuffled values are whole 32-bit words");
  int w[sizeof(T) / 4];
  memcpy(w, &v, sizeof(T));
  for (int i = 0; i < static_cast<int>(sizeof(T) / 4); ++i) w[i] = shuffle_word(w[i]);
  memcpy(&v, w, sizeof(T));
  return v;
}
template <typename T>
__device__ inline T ShflUp(T v, int delta) {
  return ShuffleWords(v, [delta](int w) { return __shfl_up(w, delta); });
}
template <typename T>
__device__ inline T Shfl(T v, int lane) {
  return ShuffleWords(v, [lane](int w) { return __shfl(w, lane); });
}

template <typename T, typename Op>
__device__ inline T WarpInclusiveScan(T v, Op op) {
  const int lane = threadIdx.x % warpSize;
  for (int d = 1; d < warpSize; d *= 2) {
    const T up = ShflUp(v, d);
    if (lane >= d) v = op(up, v);
  }
  return v;
}

template <typename T>
struct ScanResult {
  T before;  // the combination of the threads before this one (exclusive)
  T total;   // of all threads
};

// Exclusive scan of one value per thread in thread order (`op` associative, `identity` its
// neutral element). Every thread must call it. One barrier: then every warp scans the warp
// totals across its lanes (a warp has at least as many lanes as the block has warps). The
// caller must not reuse `warp_totals` before another barrier.
template <typename T, typename Op>
__device__ inline ScanResult<T> BlockExclusiveScan(T v, Op op, T identity, T* warp_totals) {
  const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  const int num_warps = blockDim.x / warpSize;
  const T inclusive = WarpInclusiveScan(v, op);
  if (lane == warpSize - 1) warp_totals[warp] = inclusive;
  __syncthreads();
  const T totals = WarpInclusiveScan(lane < num_warps ? warp_totals[lane] : identity, op);
  const T before_warp = Shfl(totals, max(warp - 1, 0));
  ScanResult<T> r;
  r.total = Shfl(totals, num_warps - 1);
  T exclusive = ShflUp(inclusive, 1);
  if (lane == 0) exclusive = identity;
  r.before = warp > 0 ? op(before_warp, exclusive) : exclusive;
  return r;
}

// Phase 1's running sums per request: cost (int64), tiles, kv tokens (saturating at 2^31:
// only "> INT32_MAX" matters).
struct RequestSums {
  i64 cost;
  int tiles;
  unsigned kv;
};
struct AddRequestSums {
  __device__ RequestSums operator()(const RequestSums& x, const RequestSums& y) const {
    return {x.cost + y.cost, x.tiles + y.tiles, SatAdd31(x.kv, y.kv)};
  }
};

// The layout's running counts over CUs (each bounded by the int32 capacities): works; split
// tiles (counted where they start), their pieces, their partial rows.
struct LayoutSums {
  int works, split, pieces, rows;
};
struct AddLayoutSums {
  __device__ LayoutSums operator()(const LayoutSums& x, const LayoutSums& y) const {
    return {x.works + y.works, x.split + y.split, x.pieces + y.pieces, x.rows + y.rows};
  }
};

// A step of the CU walk as a function of the previous position, packed in one int64: without
// kResetBit, x -> x + value; with it, x -> value (value in bits 0..61, never negative).
constexpr i64 kResetBit = i64{1} << 62;
// "x then y": a reset forgets what came before it.
struct ComposeMoves {
  __device__ i64 operator()(i64 x, i64 y) const { return (y & kResetBit) ? y : x + y; }
};

// ---- Kernel state ----------------------------------------------------------------------------

// Uniform values and shared arrays, held in registers by every thread.
struct Ctx {
  bool trim;             // causal trim
  int32_t* work_info;    // output rows
  int B, r, T;           // requests, head fold, tokens per tile
  int num_cu;            // CUs of the plan
  int L;                 // kv lanes (KvLanes; 1: none)
  int n;                 // CUs of the walk: num_cu / L (the first lane's CU group)
  int log2_g;            // kv granularity
  int log2_page;         // page size
  int oh, ms;            // overhead blocks, max split (0: none)
  i64 qg;                // blocks per split quantum max(granularity, page) (a power of two)
  int K;                 // qo tiles with kv (the cost axis holds only these); with lanes,
                         // the reference tiles of the first lane (see RefShape)
  i64 total, P;          // total cost, payload per CU
  float tiles_per_cost;  // K / total, for tile guesses
  i64* C;                // [K + 1] cost-axis start of each tile
  int* treq;             // [K] request of each tile
  int* tail;             // [K] tail limit (blocks); after the walk: the CU holding its start
  int* shape;            // [K] (head group << 24) | token tile (a tile's tokens < 2^24: it
                         // fits in shared memory); with lanes, the reference tile's index u
                         // inside its request
  int *rq, *rlen, *rtiles, *rtt, *rqo, *rkv;  // [B (+1)] per request
  i64 *S, *val;                               // [n + 1] CU starts, [n] packed moves
  int *jtile, *ctile;                         // [num_cu] per CU
  unsigned short* jump;                       // [2][jump_cap] JumpWalk's tables
  int jump_cap;                               // positions a table holds (0: none)
};

// What a tile is, from its request and its index inside the request.
struct TileShape {
  int b, grp, tau;  // request, head group, token tile
  int tokens;       // q tokens
  i64 kv_tokens;    // visible kv tokens (causally trimmed in dense mode)
};

// Token tiles of a request (one division, done once per request in phase 1: req_tt).
__device__ inline int TokenTiles(const Ctx& x, int qlen) {
  return x.T == 1 ? qlen : (qlen + x.T - 1) / x.T;
}

__device__ inline TileShape ShapeOf(const Ctx& x, int b, int grp, int tau, int q, i64 kv_len) {
  TileShape s;
  s.b = b;
  s.grp = grp;
  s.tau = tau;
  const int t0 = tau * x.T, t1 = min(q, t0 + x.T);
  s.tokens = t1 - t0;
  // The tile's last token (t1 - 1) sees kv positions < L - q + t1.
  s.kv_tokens = x.trim ? kv_len - q + t1 : kv_len;
  return s;
}

// Lanes (the host's AssignGreedyPayload with lanes > 1): request b's tiles i = u * L + l,
// l < L, are the u-th tiles of lanes 0..L-1; the walk runs over reference tiles (one per u:
// the least kv and the most q tokens of those L tiles) on the first CU group, and lane l
// repeats its cuts on CUs [l * n, (l + 1) * n) with its own tile in place of the reference.
__device__ inline TileShape RefShape(const Ctx& x, int b, int u, int q, i64 kv_len, int per_group) {
  TileShape ref = ShapeOf(x, b, 0, 0, q, kv_len);
  ref.tau = u;
#pragma unroll 1
  for (int l = 0; l < x.L; ++l) {
    const int i = u * x.L + l, grp = i / per_group;
    const TileShape s = ShapeOf(x, b, grp, i - grp * per_group, q, kv_len);
    ref.tokens = l == 0 ? s.tokens : max(ref.tokens, s.tokens);
    ref.kv_tokens = l == 0 ? s.kv_tokens : min(ref.kv_tokens, s.kv_tokens);
  }
  return ref;
}

// The tile lane `l` runs for cost-axis tile k (without lanes: tile k itself, l = 0).
__device__ inline TileShape LaneShape(const Ctx& x, int k, int l) {
  const int b = x.treq[k], packed = x.shape[k];
  if (x.L == 1) return ShapeOf(x, b, packed >> 24, packed & 0xffffff, x.rq[b], x.rlen[b]);
  const int i = packed * x.L + l, per_group = x.rtt[b], grp = i / per_group;
  return ShapeOf(x, b, grp, i - grp * per_group, x.rq[b], x.rlen[b]);
}

__device__ inline i64 TileCost(const Ctx& x, i64 kv_tokens) {
  return ((kv_tokens + (1 << x.log2_g) - 1) >> x.log2_g) + x.oh;
}

// Most blocks a split may take from the start of a tile: (kv - tokens) rounded down to the
// quantum, so the last piece keeps at least one kv token per q token. <= 0: never split.
__device__ inline int TailLimit(const Ctx& x, const TileShape& s) {
  return static_cast<int>(RoundDownPow2((s.kv_tokens - s.tokens) >> x.log2_g, x.qg));
}

// The tile containing cost position `pos` (C[t] <= pos < C[t+1]); pos must be < total.
// Gallops from `hint` (a nearby tile; any value is fine) and then bisects.
__device__ inline int TileAt(const Ctx& x, i64 pos, int hint) {
  const i64* C = x.C;
  // First t in [0, K-1] with C[t+1] > pos; it exists because pos < C[K].
  int lo, hi;
  const int h = min(max(hint, 0), x.K - 1);
  if (C[h + 1] > pos) {
    hi = h;
    int step = 1, probe = h - 1;
    while (probe >= 0 && C[probe + 1] > pos) {
      hi = probe;
      step *= 2;
      probe = hi - step;
    }
    lo = max(probe + 1, 0);
  } else {
    lo = h + 1;
    int step = 1, probe = min(x.K - 1, lo);
    while (C[probe + 1] <= pos) {
      lo = probe + 1;
      step *= 2;
      probe = min(x.K - 1, lo + step - 1);
    }
    hi = probe;
  }
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (C[mid + 1] > pos) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// A first guess of the tile at `pos` for TileAt, by interpolation (tiles of equal cost).
__device__ inline int GuessTile(const Ctx& x, i64 pos) {
  return static_cast<int>(static_cast<float>(pos) * x.tiles_per_cost);
}

// ---- The CU walk -------------------------------------------------------------------------------

struct StepResult {
  i64 next;    // start position of the next CU
  int j;       // the tile holding the payload end (K: past the end)
  int pieces;  // pieces of the tile at `next` emitted up to this CU (max_split_per_batch)
  bool reset;  // next does not move with the start position (see kResetBit)
};

// A tile as a step reads it: its cost-axis range [c, c1) and its tail limit.
struct TileSpan {
  i64 c, c1;
  int tail;
};
__device__ inline TileSpan SpanOf(const Ctx& x, int j) { return {x.C[j], x.C[j + 1], x.tail[j]}; }

// One CU of AssignGreedyPayload, not the last (which takes the rest), whose payload ends at
// end = pos + payload < total inside tile j (span t). It starts at position `pos`, `pieces`
// pieces of the tile holding pos already emitted by earlier CUs (read only for
// max_split_per_batch >= 2).
__device__ inline StepResult StepInTile(const Ctx& x, i64 pos, i64 end, int pieces, int j,
                                        const TileSpan& t) {
  const bool fresh = t.c <= pos;  // tile j starts the CU: nothing placed on it yet
  const i64 start = fresh ? pos : t.c;
  // The host's take (remaining - overhead, on the quantum) and its tail limit, as positions.
  const i64 snap = t.c + RoundDownPow2(end - x.oh - t.c, x.qg);
  const i64 limit = t.c + t.tail;
  const i64 take_end = min(snap, limit);
  const int done = fresh ? pieces : 0;
  if ((x.ms == 0 || done + 1 < x.ms) && take_end > start) {
    return {take_end, j, done + 1, limit < snap};  // a tail-limited split ends at a fixed place
  }
  // No split: an empty CU takes the rest of j whole; else the next CU starts on tile j.
  return {fresh ? t.c1 : t.c, j, 0, true};
}

// StepInTile from any start: `hint` is a guess of the tile at pos + payload.
__device__ inline StepResult PlanStep(const Ctx& x, i64 pos, int pieces, int hint) {
  const i64 end = pos + x.P;
  if (end >= x.total) return {x.total, x.K, 0, true};  // everything left fits
  const int j = TileAt(x, end, hint);
  return StepInTile(x, pos, end, pieces, j, SpanOf(x, j));
}

// The step as a packed move (a split's end moves with the start: it is > pos).
__device__ inline i64 AsMove(const StepResult& st, i64 pos) {
  return st.reset ? (st.next | kResetBit) : st.next - pos;
}

// Finishes the walk with warp 0 (every lane calls it) from CU `base`, whose start S[base] is
// exact (later entries are guesses): the rounds' scan over a window of warpSize CUs, keeping
// the window's exact prefix (up to its first changed start) and sliding past it. Starts move
// between lanes by shuffles; S is only written.
__device__ __noinline__ void WalkWindows(const Ctx x, int base) {
  const int lane = threadIdx.x % warpSize;
  i64 pos = base + lane < x.n ? x.S[base + lane] : x.total;
  while (base < x.n - 1) {
    const int c = base + lane;
    const bool active = c < x.n - 1;
    i64 m = 0;
    if (active) {
      const StepResult st = PlanStep(x, pos, 0, x.jtile[c]);
      x.jtile[c] = st.j;
      m = AsMove(st, pos);
    }
    const i64 inc = WarpInclusiveScan(m, ComposeMoves{});
    const i64 next = ComposeMoves{}(Shfl(pos, 0), inc) & ~kResetBit;
    // The guess this lane's step replaces: the next lane's start (the last lane reads S).
    i64 old = Shfl(pos, min(lane + 1, warpSize - 1));
    if (lane == warpSize - 1 && active) old = x.S[c + 1];
    const u64 changed = __ballot64(active && next != old);
    if (active) x.S[c + 1] = next;
    const int shift = changed == 0 ? warpSize : __ffsll(static_cast<long long>(changed));
    // The new window: lanes take the starts just computed, beyond them the older guesses.
    const int src = lane + shift - 1;
    pos = Shfl(next, min(src, warpSize - 1));
    if (src >= warpSize) pos = base + shift + lane < x.n ? x.S[base + shift + lane] : x.total;
    base += shift;
  }
}

// The walk by one thread, with the pieces of the current tile (max_split_per_batch >= 2).
__device__ __noinline__ void WalkSerially(const Ctx x) {
  i64 pos = 0;
  int pieces = 0, hint = 0;
  for (int c = 0; c + 1 < x.n; ++c) {
    const StepResult st = PlanStep(x, pos, pieces, hint);
    x.jtile[c] = st.j;
    pos = st.next;
    pieces = st.pieces;
    hint = st.j;
    x.S[c + 1] = pos;
  }
}

// The walk by pointer doubling over every position p of the cost axis (total + 1 <=
// jump_cap): F(p) = the step from p (F(total) = total), then F o F replaces F log2(n) times.
// CU c applies F = f^(2^k) to its position in round k when bit k of c is set, so it ends at
// f^c(0) = S[c] (powers of one map commute: the order of the bits does not matter). Exact
// for any batch: nothing rests on a guess, so a uniform batch's tile-end resets cost
// nothing. Every thread calls it (block barriers); thread t owns CUs [w_begin, w_end).
// Cost: each thread steps from a run of consecutive positions (their payload ends advance
// together, so the tile is followed, not searched), then ~log2(n) rounds of 2 shared loads a
// position, four positions in flight.
__device__ inline void JumpWalk(const Ctx& x, int w_begin, int w_end) {
  const int tid = threadIdx.x, threads = blockDim.x;
  const int total = static_cast<int>(x.total);
  unsigned short* from = x.jump;
  unsigned short* to = x.jump + x.jump_cap;
  {
    const int run = (total + threads) / threads;  // positions [0, total] in runs
    const int p0 = min(total + 1, tid * run), p1 = min(total + 1, p0 + run);
    int j = -1;
    TileSpan t = {0, 0, 0};
#pragma unroll 1
    for (int p = p0; p < p1; ++p) {
      const i64 end = p + x.P;
      int next = total;
      if (end < x.total) {
        if (j < 0) {
          j = TileAt(x, end, GuessTile(x, end));
          t = SpanOf(x, j);
        }
        while (t.c1 <= end) t = SpanOf(x, ++j);
        next = static_cast<int>(StepInTile(x, p, end, 0, j, t).next);
      }
      from[p] = static_cast<unsigned short>(next);
    }
  }
#pragma unroll 1
  for (int c = w_begin; c < w_end; ++c) x.S[c] = 0;
  __syncthreads();
#pragma unroll 1
  for (int k = 0; (1 << k) < x.n; ++k) {
#pragma unroll 1
    for (int c = w_begin; c < w_end; ++c) {
      if (c >> k & 1) x.S[c] = from[x.S[c]];
    }
    if ((2 << k) < x.n) {
#pragma unroll 1
      for (int p = tid; p <= total; p += 4 * threads) {
        int f[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) f[i] = p + i * threads <= total ? from[p + i * threads] : 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) f[i] = from[f[i]];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (p + i * threads <= total) to[p + i * threads] = static_cast<unsigned short>(f[i]);
        }
      }
    }
    __syncthreads();
    unsigned short* const swap = from;
    from = to;
    to = swap;
  }
}

// ---- Validation --------------------------------------------------------------------------------

// The position of a check in ValidateBatch's order (the first failing one is reported).
__device__ inline u64 KeyQoEntry(int i) { return static_cast<u64>(i); }  // 0 is the start check
__device__ inline u64 KeyKvEntry(int B, int i) { return static_cast<u64>(B) + 1 + i; }
__device__ inline u64 KeyQTotal(int B) { return 2 * static_cast<u64>(B) + 2; }
// Per request, in the host's order: qlen, qlen <= max_qlen, last page length, kv length
// overflow, running kv total, sparse topk, causal kv_len >= qlen.
enum RequestCheck {
  kCheckQlen,
  kCheckMaxQlen,
  kCheckLastPage,
  kCheckKvLen,
  kCheckKvTotal,
  kCheckTopk,
  kCheckCausal
};
__device__ inline u64 KeyRequest(int B, int b, RequestCheck check) {
  return 2 * static_cast<u64>(B) + 3 + 8 * static_cast<u64>(b) + check;
}

// The first error a thread saw, by key.
struct FirstError {
  u64 key = kNoError;
  int code = kGpuPlanOk, index = -1;
  i64 value = 0;
  __device__ void Add(u64 k, int c, int i, i64 v) {
    if (k < key) {
      key = k;
      code = c;
      index = i;
      value = v;
    }
  }
};

// The batch constants the checks read (scalars: a reference to the kernel's params would copy
// them to the stack).
struct CheckConsts {
  int B, num_heads, max_qlen, page_size, sparse_topk;
  bool causal_trim;
};

// Request b's first error in ValidateBatch's order (the rare path: only run when a quick test
// of the same conditions failed).
__device__ __noinline__ FirstError CheckRequest(const CheckConsts k, int b, int qo0, int qo1,
                                                int kv0, int kv1, int last) {
  FirstError err;
  const int B = k.B;
  const bool sparse = k.sparse_topk > 0;
  if (b == 0 && qo0 != 0) err.Add(KeyQoEntry(0), kGpuPlanQoIndptrStart, 0, qo0);
  if (qo1 < 0) {
    err.Add(KeyQoEntry(b + 1), kGpuPlanQoIndptrNegative, b + 1, qo1);
  } else if (qo1 < qo0) {
    err.Add(KeyQoEntry(b + 1), kGpuPlanQoIndptrDecreasing, b + 1, qo1);
  }
  if (b == 0 && kv0 != 0) err.Add(KeyKvEntry(B, 0), kGpuPlanKvIndptrStart, 0, kv0);
  if (kv1 < 0) {
    err.Add(KeyKvEntry(B, b + 1), kGpuPlanKvIndptrNegative, b + 1, kv1);
  } else if (kv1 < kv0) {
    err.Add(KeyKvEntry(B, b + 1), kGpuPlanKvIndptrDecreasing, b + 1, kv1);
  }
  if (b == B - 1 && i64{qo1} * k.num_heads * 2 > kInt32Max) {
    err.Add(KeyQTotal(B), kGpuPlanQTokensOverflow, B, qo1);
  }
  const i64 q = i64{qo1} - qo0, pages = i64{kv1} - kv0;
  if (sparse ? q != 1 : q <= 0) err.Add(KeyRequest(B, b, kCheckQlen), kGpuPlanQlenInvalid, b, q);
  if (q > k.max_qlen) err.Add(KeyRequest(B, b, kCheckMaxQlen), kGpuPlanQlenAboveMax, b, q);
  if (pages > 0 ? (last < 1 || last > k.page_size) : (last < 0 || last > k.page_size)) {
    err.Add(KeyRequest(B, b, kCheckLastPage), kGpuPlanLastPageLenInvalid, b, last);
  }
  const i64 kv_len = pages == 0 ? 0 : (pages - 1) * k.page_size + last;
  if (kv_len > kInt32Max) {
    err.Add(KeyRequest(B, b, kCheckKvLen), kGpuPlanKvLenOverflow, b, kv_len);
  }
  if (sparse && kv_len > k.sparse_topk) {
    err.Add(KeyRequest(B, b, kCheckTopk), kGpuPlanKvLenAboveTopk, b, kv_len);
  }
  if (k.causal_trim && kv_len < q) {
    err.Add(KeyRequest(B, b, kCheckCausal), kGpuPlanKvLenBelowQlen, b, kv_len);
  }
  return err;
}

__device__ inline void WriteStatus(GpuPlanStatus* status, int code, int index, i64 value,
                                   i64 capacity) {
  GpuPlanStatus s = {};
  s.code = code;
  s.index = index;
  s.value = value;
  s.capacity = capacity;
  s.scan_iterations = 0;
  *status = s;
}

// ---- Work items --------------------------------------------------------------------------------

// Writes work_info[row] for a piece of tile k: kv tokens from `begin` to the end of the CU
// range [.., cu_end) or of the tile, whichever comes first (WorkInfo's eight int32).
__device__ inline void WriteWork(const Ctx& x, int row, const TileShape& s, int k, i64 begin,
                                 i64 cu_end, int partial_qo_loc) {
  const int b = s.b;
  const int page = 1 << x.log2_page;
  const i64 end = cu_end < x.C[k + 1] ? (cu_end - x.C[k]) << x.log2_g : s.kv_tokens;
  const i64 end_page = (end + page - 1) >> x.log2_page;
  const i64 kv_len = x.rlen[b];
  const int qo_start = x.r * x.rqo[b] + s.grp * x.rq[b] + s.tau * x.T;  // folded qo_indptr
  int4 lo, hi;
  lo.x = b * x.r + s.grp;  // batch_idx: the virtual request
  lo.y = partial_qo_loc;
  lo.z = qo_start;
  lo.w = qo_start + s.tokens;
  hi.x = x.rkv[b] + static_cast<int>(begin >> x.log2_page);
  hi.y = x.rkv[b] + static_cast<int>(end_page);
  hi.z = static_cast<int>(kv_len - min(end_page * page, kv_len));  // kv_offset
  hi.w = 0;
  int4* out = reinterpret_cast<int4*>(x.work_info + 8 * i64{row});
  out[0] = lo;
  out[1] = hi;
}

// ---- The kernel --------------------------------------------------------------------------------

// The launch's dynamic shared memory (8-byte aligned: the layout's int64 arrays).
__device__ inline unsigned char* DynamicSmem() {
#if defined(MLAPS_HOST_EMULATION)
  return mlaps_emu::DynamicSmem();
#else
  extern __shared__ i64 gpu_planner_smem_words[];
  return reinterpret_cast<unsigned char*>(gpu_planner_smem_words);
#endif
}

__global__ void __launch_bounds__(kThreads, 1)
    GpuPlanKernel(const GpuPlannerParams params, const KernelConsts kc) {
  unsigned char* smem = DynamicSmem();
  __shared__ u64 s_error;
  __shared__ int s_tiles_min, s_tiles_max;  // tiles of the requests with kv (KvLanes)
  __shared__ RequestSums s_scan_requests[kMaxWarps];
  __shared__ i64 s_scan_moves[kMaxWarps];
  __shared__ LayoutSums s_scan_layout[kMaxWarps];

  const int tid = threadIdx.x;
  // Each thread owns a contiguous run of requests (and so of tiles) and of CUs. The first
  // request's entries are loaded first of all, so their latency overlaps the setup.
  const int b_begin = min(params.num_requests, tid * kc.per_req);
  const int b_end = min(params.num_requests, b_begin + kc.per_req);
  const int c_begin = min(params.num_cu, tid * kc.per_cu);
  const int c_end = min(params.num_cu, c_begin + kc.per_cu);
  int first_entries[5] = {0, 0, 0, 0, 0};  // qo_indptr[b], [b+1], kv_indptr[b], [b+1], last[b]
  if (b_begin < b_end) {
    first_entries[0] = params.qo_indptr[b_begin];
    first_entries[1] = params.qo_indptr[b_begin + 1];
    first_entries[2] = params.kv_indptr[b_begin];
    first_entries[3] = params.kv_indptr[b_begin + 1];
    first_entries[4] = params.kv_last_page_lens[b_begin];
  }
  // Diagnostics: clock64() at phase boundaries (planner_kernel.h, kGpuPlanProfileSlots).
  long long* const profile = tid == 0 ? params.profile : nullptr;
  if (profile) {
    profile[7] = WallClock();
    profile[0] = clock64();
  }
  Ctx x;
  x.trim = params.causal_trim;
  x.work_info = params.work_info;
  x.B = params.num_requests;
  x.r = params.head_fold;
  x.T = params.tokens_per_tile;
  x.num_cu = params.num_cu;
  x.L = 1;
  x.n = params.num_cu;
  x.log2_g = kc.log2_g;
  x.log2_page = kc.log2_page;
  x.oh = params.fixed_overhead;
  x.ms = kc.ms;
  x.qg = kc.qg;
  const SmemLayout& lay = kc.smem;
  x.C = reinterpret_cast<i64*>(smem + lay.tile_c);
  x.treq = reinterpret_cast<int*>(smem + lay.tile_req);
  x.tail = reinterpret_cast<int*>(smem + lay.tile_tail);
  x.shape = reinterpret_cast<int*>(smem + lay.tile_shape);
  x.rq = reinterpret_cast<int*>(smem + lay.req_q);
  x.rlen = reinterpret_cast<int*>(smem + lay.req_len);
  x.rtiles = reinterpret_cast<int*>(smem + lay.req_tiles);
  x.rtt = reinterpret_cast<int*>(smem + lay.req_tt);
  x.rqo = reinterpret_cast<int*>(smem + lay.req_qo);
  x.rkv = reinterpret_cast<int*>(smem + lay.req_kv);
  x.S = reinterpret_cast<i64*>(smem + lay.cu_s);
  x.val = reinterpret_cast<i64*>(smem + lay.cu_val);
  x.jtile = reinterpret_cast<int*>(smem + lay.cu_jtile);
  x.ctile = reinterpret_cast<int*>(smem + lay.cu_tile);
  x.jump = reinterpret_cast<unsigned short*>(smem + lay.jump);
  x.jump_cap = params.jump_positions;
  if (tid == 0) {
    s_error = kNoError;
    s_tiles_min = kInt32Max;
    s_tiles_max = 0;
  }

  const bool sparse = params.sparse_topk > 0;

  // ---- 1. Load and validate; tiles and cost per request; the cost axis ----------------------
  FirstError err;
  RequestSums mine = {0, 0, 0};
  int tiles_min = kInt32Max, tiles_max = 0;  // over this thread's requests with kv
#pragma unroll 1
  for (int b = b_begin; b < b_end; ++b) {
    const bool first = b == b_begin;
    const int qo0 = first ? first_entries[0] : params.qo_indptr[b];
    const int qo1 = first ? first_entries[1] : params.qo_indptr[b + 1];
    const int kv0 = first ? first_entries[2] : params.kv_indptr[b];
    const int kv1 = first ? first_entries[3] : params.kv_indptr[b + 1];
    const int last = first ? first_entries[4] : params.kv_last_page_lens[b];
    const i64 q = i64{qo1} - qo0, pages = i64{kv1} - kv0;
    const i64 kv_len = pages == 0 ? 0 : (pages - 1) * params.page_size + last;
    // Tiles and cost only of a well-formed request (they only count when nothing failed), so
    // the tile arrays below stay inside their max_qlen-sized space either way.
    const bool sane = q >= 1 && q <= params.max_qlen && kv_len >= 0 && kv_len <= kInt32Max &&
                      (!x.trim || kv_len >= q);
    // The same conditions as CheckRequest's, tested at once.
    const bool suspect = !sane || (sparse && (q != 1 || kv_len > params.sparse_topk)) ||
                         qo1 < qo0 || kv1 < kv0 || qo1 < 0 || kv1 < 0 ||
                         (b == 0 && (qo0 != 0 || kv0 != 0)) ||
                         (b == x.B - 1 && i64{qo1} * params.num_heads * 2 > kInt32Max) ||
                         (pages > 0 ? last < 1 : last < 0) || last > params.page_size;
    if (suspect) {
      const CheckConsts k = {
          x.B, params.num_heads, params.max_qlen, params.page_size, params.sparse_topk, x.trim};
      const FirstError e = CheckRequest(k, b, qo0, qo1, kv0, kv1, last);
      err.Add(e.key, e.code, e.index, e.value);
    }
    const int qs = sane ? static_cast<int>(q) : 0;
    x.rq[b] = qs;
    x.rlen[b] = sane ? static_cast<int>(kv_len) : 0;
    x.rqo[b] = qo0;
    x.rkv[b] = kv0;
    if (b == x.B - 1) x.rqo[x.B] = qo1;
    const int per_group = TokenTiles(x, qs);
    x.rtt[b] = per_group;
    // A request has kv in all its tiles or in none (trimmed tiles keep >= 1 kv token).
    if (sane && (x.trim || kv_len > 0)) {
      i64 group_cost = 0;
#pragma unroll 1
      for (int tau = 0; tau < per_group; ++tau) {
        group_cost += TileCost(x, ShapeOf(x, b, 0, tau, qs, kv_len).kv_tokens);
      }
      mine.tiles += x.r * per_group;
      mine.cost += x.r * group_cost;
      tiles_min = min(tiles_min, x.r * per_group);
      tiles_max = max(tiles_max, x.r * per_group);
    }
    // Kept for the running total below (req_tiles is free until the tiles are laid out).
    const unsigned kv_clamped = static_cast<unsigned>(min(max(kv_len, i64{0}), i64{1} << 31));
    reinterpret_cast<unsigned*>(x.rtiles)[b] = kv_clamped;
    mine.kv = SatAdd31(mine.kv, kv_clamped);
  }
  ScanResult<RequestSums> scan1 =
      BlockExclusiveScan(mine, AddRequestSums{}, RequestSums{0, 0, 0}, s_scan_requests);
  {
    unsigned kv_run = scan1.before.kv;
#pragma unroll 1
    for (int b = b_begin; b < b_end; ++b) {
      kv_run = SatAdd31(kv_run, reinterpret_cast<const unsigned*>(x.rtiles)[b]);
      if (kv_run > kInt32Max) {
        // Only reported when every earlier check passed, so kv_len[b] is exact then.
        const i64 pages = i64{params.kv_indptr[b + 1]} - params.kv_indptr[b];
        const i64 kv_len =
            pages == 0 ? 0 : (pages - 1) * params.page_size + params.kv_last_page_lens[b];
        err.Add(KeyRequest(x.B, b, kCheckKvTotal), kGpuPlanKvTotalOverflow, b, kv_len);
      }
    }
  }
  if (err.key != kNoError) atomicMin(&s_error, err.key);
  if (params.kv_lanes > 1) {
    // KvLanes: every request with kv has the same number m of tiles; L is the largest
    // divisor of m, at most kv_lanes, that divides num_cu. Then the cost axis holds the
    // reference tiles (m / L per request), scanned again.
    if (tiles_max > 0) {
      atomicMin(&s_tiles_min, tiles_min);
      atomicMax(&s_tiles_max, tiles_max);
    }
    __syncthreads();
    const int m = s_tiles_max;
    if (m > 0 && s_tiles_min == m) {
#pragma unroll 1
      for (int d = min(params.kv_lanes, m); d > 1 && x.L == 1; --d) {
        if (m % d == 0 && x.num_cu % d == 0) x.L = d;
      }
    }
    if (x.L > 1) {
      mine.cost = 0;
      mine.tiles = 0;
#pragma unroll 1
      for (int b = b_begin; b < b_end; ++b) {
        const int q = x.rq[b];
        const i64 kv_len = x.rlen[b];
        if (q == 0 || (!x.trim && kv_len == 0)) continue;
        const int refs = x.r * x.rtt[b] / x.L;
#pragma unroll 1
        for (int u = 0; u < refs; ++u) {
          mine.cost += TileCost(x, RefShape(x, b, u, q, kv_len, x.rtt[b]).kv_tokens);
        }
        mine.tiles += refs;
      }
      x.n = x.num_cu / x.L;
      scan1 = BlockExclusiveScan(mine, AddRequestSums{}, RequestSums{0, 0, 0}, s_scan_requests);
    }
  }
  x.K = scan1.total.tiles;
  x.total = scan1.total.cost;
  // The payload holds at least one split quantum (metadata/planner.cc, Payload); with lanes
  // for the first lane's CU group.
  x.P = max(
      (x.L == 1 ? CeilDivByCount(x.total, x.n, kc.inv_num_cu) : (x.total + x.n - 1) / x.n) + x.oh,
      x.oh + x.qg);
  x.tiles_per_cost =
      x.total > 0 ? __fdividef(static_cast<float>(x.K), static_cast<float>(x.total)) : 0.f;
  // This thread's CUs of the walk (with lanes, the first CU group only).
  const int w_begin = min(c_begin, x.n), w_end = min(c_end, x.n);
  {
    int tile = scan1.before.tiles;
    i64 cost = scan1.before.cost;
#pragma unroll 1
    for (int b = b_begin; b < b_end; ++b) {
      x.rtiles[b] = tile;
      const int q = x.rq[b];
      const i64 kv_len = x.rlen[b];
      if (q == 0 || (!x.trim && kv_len == 0)) continue;
      const int per_group = x.rtt[b];
      if (x.L > 1) {
        const int refs = x.r * per_group / x.L;
#pragma unroll 1
        for (int u = 0; u < refs; ++u, ++tile) {
          const TileShape s = RefShape(x, b, u, q, kv_len, per_group);
          x.C[tile] = cost;
          x.treq[tile] = b;
          x.tail[tile] = TailLimit(x, s);
          x.shape[tile] = u;
          cost += TileCost(x, s.kv_tokens);
        }
        continue;
      }
#pragma unroll 1
      for (int grp = 0; grp < x.r; ++grp) {
#pragma unroll 1
        for (int tau = 0; tau < per_group; ++tau, ++tile) {
          const TileShape s = ShapeOf(x, b, grp, tau, q, kv_len);
          x.C[tile] = cost;
          x.treq[tile] = b;
          x.tail[tile] = TailLimit(x, s);
          x.shape[tile] = (grp << 24) | tau;
          cost += TileCost(x, s.kv_tokens);
        }
      }
    }
    // The walk's first guesses: every CU advances by the payload less one overhead, on the
    // quantum (exact while no step meets a tile boundary's special cases).
    const i64 step0 = RoundDownPow2(x.P - x.oh, x.qg);
#pragma unroll 1
    for (int c = w_begin; c < w_end; ++c) {
      const i64 guess = min(x.total, step0 * c);
      x.S[c] = guess;
      x.jtile[c] = GuessTile(x, guess + x.P);
    }
    if (tid == 0) {
      x.C[x.K] = x.total;
      x.rtiles[x.B] = x.K;
      x.S[x.n] = x.total;
    }
  }
  __syncthreads();
  if (s_error != kNoError) {
    if (err.key == s_error) WriteStatus(params.status, err.code, err.index, err.value, 0);
    return;
  }
  if (profile) profile[1] = clock64();

  // ---- 2. The CU walk: S[c] = start position of CU c; S[n] = total ---------------------------
  const bool stateless = x.ms <= 1;  // a step is a function of its start position alone
  // Tiles of one cost T (a uniform batch) whose CU 0 ends on a tile end: each CU then starts
  // on a tile boundary as CU 0 did and takes the same whole tiles, so the walk is likely S[c]
  // = c x CU 0's step (checked by the rounds like any guess). The first guesses miss every CU
  // there and the rounds fix one tile-end reset each (b = 128 ctx 8192 at (16, 4) on 132 CUs,
  // one whole tile a CU, fell to the warp windows: ~100 us).
  if (stateless && x.n > 1 && x.K > 1) {
    const i64 T = x.C[1];
    if (T > 0 && x.total == T * x.K) {
      const StepResult st0 = PlanStep(x, 0, 0, GuessTile(x, x.P));
      if (st0.next < x.total && st0.next % T == 0) {
#pragma unroll 1
        for (int c = w_begin; c < w_end; ++c) {
          x.S[c] = min(x.total, st0.next * c);
          x.jtile[c] = GuessTile(x, x.S[c] + x.P);
        }
      }
    }
    __syncthreads();
  }
  // Jump tables that hold every position walk the batch when the rounds have not settled:
  // after 2 rounds when the tables are small (a jump then costs ~3 rounds; most varlen
  // walks settle in 1-2, a uniform batch's in tens), else after max_scan_iterations (a jump
  // over more positions costs up to ~7 rounds, and varlen walks may take 6).
  const bool jump = stateless && x.total < x.jump_cap;
  const int max_rounds = jump && x.total < kSmallJumpPerThread * static_cast<int>(blockDim.x)
                             ? min(params.max_scan_iterations, 2)
                             : params.max_scan_iterations;
  int rounds = 0;
  bool converged = x.n == 1;
  if (stateless && !converged) {
    // The start of the CU after this thread's last one, as this thread knows it (the guess, then
    // what its own moves compose to): every CU's check is then local.
    i64 next_start = x.S[w_end];
#pragma unroll 1
    while (rounds < max_rounds) {
      // Check: every CU's step from its guess lands on the next guess (then, by induction from
      // S[0] = 0, the guesses are the walk). The steps are kept as moves for the update.
      i64 run = 0;
      bool mismatch = false;
#pragma unroll 1
      for (int c = w_begin; c < min(w_end, x.n - 1); ++c) {
        const i64 pos = x.S[c];
        const StepResult st = PlanStep(x, pos, 0, x.jtile[c]);
        x.jtile[c] = st.j;
        const i64 m = AsMove(st, pos);
        x.val[c] = m;
        run = ComposeMoves{}(run, m);
        mismatch |= st.next != (c + 1 == w_end ? next_start : x.S[c + 1]);
      }
      ++rounds;
      if (profile && rounds == 1) profile[6] = clock64();
      if (!__syncthreads_or(mismatch)) {
        converged = true;
        break;
      }
      // Update: the moves composed in CU order (S[0] = 0, so a composed move's value is the
      // position it leads to) are the next guesses.
      i64 acc = BlockExclusiveScan(run, ComposeMoves{}, i64{0}, s_scan_moves).before;
#pragma unroll 1
      for (int c = w_begin; c < w_end; ++c) {
        x.S[c] = acc & ~kResetBit;
        if (c < x.n - 1) acc = ComposeMoves{}(acc, x.val[c]);
      }
      next_start = acc & ~kResetBit;
    }
  }
  if (!converged && jump) {
    JumpWalk(x, w_begin, w_end);  // ends on a barrier
  } else if (!converged) {
    // One warp finishes from CU 0 with the last guesses (windows that check out pass quickly).
    __syncthreads();
    if (stateless && tid < warpSize) WalkWindows(x, 0);
    if (!stateless && tid == 0) WalkSerially(x);
    __syncthreads();
  }
  const int scan_iterations = !stateless  ? -1
                              : converged ? rounds
                              : jump      ? 2000 + rounds
                                          : 1000 + rounds;
  if (profile) profile[2] = clock64();

  // ---- 3. Layout ------------------------------------------------------------------------------
  // CU c owns [S[c], S[c+1]): a piece of each tile from its first t0 to its last t1 (starts
  // strictly increase until the end, so a split tile's pieces are on consecutive CUs). In CU
  // order, the pieces of split tiles come in the host's tile order, so one scan over CUs of
  // (pieces, split tiles starting, pieces of split tiles, their rows) gives every CU its work
  // rows, its reduce entries and its partial rows, and each CU writes all of its pieces.
  // With lanes, CU c = l * n + w (lane l, walk CU w) runs lane l's tiles over w's range.
  LayoutSums counts = {0, 0, 0, 0};
#pragma unroll 1
  for (int c = c_begin; c < c_end; ++c) {
    const int l = c / x.n, w = c - l * x.n;
    const i64 s0 = x.S[w], s1 = x.S[w + 1];
    if (s1 <= s0) {
      x.ctile[c] = x.K;  // empty: the walk ended before this CU
      continue;
    }
    // The walk's hint of CU w is read only by its own lane-0 thread (which overwrites it).
    const int t1 = TileAt(x, s1 - 1, l == 0 ? x.jtile[c] : GuessTile(x, s1 - 1));
    const int t0 = TileAt(x, s0, t1);
    x.ctile[c] = t0;
    x.jtile[c] = t1;  // the hint is free now
    const bool head_inside = s0 > x.C[t0], tail_inside = s1 < x.C[t1 + 1];
    counts.works += t1 - t0 + 1;
    if (head_inside || (t0 == t1 && tail_inside)) {  // the first piece is of a split tile
      counts.pieces += 1;
      counts.rows += LaneShape(x, t0, l).tokens;
    }
    if (t1 > t0 && tail_inside) {  // so is the last
      counts.pieces += 1;
      counts.rows += LaneShape(x, t1, l).tokens;
    }
    if (tail_inside && (t1 > t0 || !head_inside)) counts.split += 1;  // t1 starts here
  }
  const ScanResult<LayoutSums> scan2 =
      BlockExclusiveScan(counts, AddLayoutSums{}, LayoutSums{0, 0, 0, 0}, s_scan_layout);
  const LayoutSums& totals = scan2.total;
  if (profile) profile[3] = clock64();

  // Capacities, in PlanDecodeInto's order; nothing is written unless all fit.
  {
    const i64 need0 = i64{x.B} * x.r + 1, need1 = i64{x.num_cu} + 1, need2 = totals.works,
              need3 = i64{totals.split} + 1, need4 = 2 * i64{totals.split}, need5 = totals.pieces;
    int bad = -1;
    i64 need = 0, have = 0;
    if (params.reduce_partial_map_capacity < need5)
      bad = 5, need = need5, have = params.reduce_partial_map_capacity;
    if (params.reduce_final_map_capacity < need4)
      bad = 4, need = need4, have = params.reduce_final_map_capacity;
    if (params.reduce_indptr_capacity < need3)
      bad = 3, need = need3, have = params.reduce_indptr_capacity;
    if (params.work_info_capacity < need2) bad = 2, need = need2, have = params.work_info_capacity;
    if (params.work_indptr_capacity < need1)
      bad = 1, need = need1, have = params.work_indptr_capacity;
    if (params.out_qo_indptr_capacity < need0)
      bad = 0, need = need0, have = params.out_qo_indptr_capacity;
    if (bad >= 0) {
      if (tid == 0) WriteStatus(params.status, kGpuPlanBufferTooSmall, bad, need, have);
      return;
    }
  }

  // Folded qo_indptr: virtual request v = b * r + g starts at r * qo[b] + g * qlen(b).
#pragma unroll 1
  for (int b = b_begin; b < b_end; ++b) {
    const int q = x.rq[b], qo = x.r * x.rqo[b];
#pragma unroll 1
    for (int grp = 0; grp < x.r; ++grp) params.out_qo_indptr[b * x.r + grp] = qo + grp * q;
    if (b == x.B - 1) params.out_qo_indptr[x.B * x.r] = x.r * x.rqo[x.B];
  }
  if (tid == 0) {
    params.work_indptr[x.num_cu] = totals.works;
    params.reduce_indptr[0] = 0;
  }
  if (profile) profile[4] = clock64();

  // Every CU's pieces: work_info rows, and for a split tile's piece its reduce_partial_map
  // entry and partial row; the CU where a split tile starts writes its reduce_final_map entry,
  // the CU where it ends its reduce_indptr entry.
  {
    int row = scan2.before.works, split = scan2.before.split;
    int piece = scan2.before.pieces, partial_row = scan2.before.rows;
#pragma unroll 1
    for (int c = c_begin; c < c_end; ++c) {
      params.work_indptr[c] = row;
      const int t0 = x.ctile[c];
      if (t0 == x.K) continue;
      const int t1 = x.jtile[c];
      const int l = c / x.n, w = c - l * x.n;
      const i64 s0 = x.S[w], s1 = x.S[w + 1];
      const bool head_inside = s0 > x.C[t0], tail_inside = s1 < x.C[t1 + 1];
#pragma unroll 1
      for (int k = t0; k <= t1; ++k, ++row) {
        const TileShape s = LaneShape(x, k, l);
        const bool first = k == t0, last = k == t1;
        int partial = kNoPartialRow;
        if ((first && head_inside) || (last && tail_inside)) {
          partial = partial_row;
          params.reduce_partial_map[piece] = partial_row;
          if (first && head_inside && !(last && tail_inside)) {
            params.reduce_indptr[split] = piece + 1;  // the split tile ends here
          }
          if (last && tail_inside && !(first && head_inside)) {  // a split tile starts here
            const int qo_start = x.r * x.rqo[s.b] + s.grp * x.rq[s.b] + s.tau * x.T;
            params.reduce_final_map[2 * split] = qo_start;
            params.reduce_final_map[2 * split + 1] = qo_start + s.tokens;
            ++split;
          }
          ++piece;
          partial_row += s.tokens;
        }
        WriteWork(x, row, s, k, first ? (s0 - x.C[k]) << x.log2_g : 0, s1, partial);
      }
    }
  }

  if (profile) {
    profile[5] = clock64();
    profile[8] = WallClock();
  }
  if (tid == 0) {
    GpuPlanStatus st = {};
    st.code = kGpuPlanOk;
    st.index = -1;
    st.num_virtual_requests = x.B * x.r;
    st.num_works = totals.works;
    st.num_reduce_tiles = totals.split;
    st.num_reduce_pieces = totals.pieces;
    st.num_partial_rows = totals.rows;
    st.scan_iterations = scan_iterations;
    *params.status = st;
  }
}

}  // namespace gpu_planner
}  // namespace mlaps

#endif  // MLAPS_KERNELS_PLANNER_PLANNER_KERNEL_DEVICE_H_
