// The GPU planner kernel: AssignGreedyPayload + PlanDecodeInto's layout (metadata/planner.cc)
// in one thread block, byte-identical to the host. See planner_kernel.h for the contract.
//
// The host walk, restated on a cost axis. Qo tiles with kv are laid end to end: tile k
// occupies [C[k], C[k+1]) where C is the exclusive prefix of cost = blocks + overhead. A CU
// starting at position S owns [S, S + P) (P = payload). Tiles that end inside that range fit
// whole; the first tile j that does not (C[j+1] > S + P) is split on a quantum boundary or
// moved on, and the next CU starts at the position of what is left of tile j. A piece that
// starts inside a tile pays the overhead again; writing a mid-tile start at kv token b of
// tile j as S = C[j] + b / granularity makes "the rest of tile j costs C[j+1] - S" exact, so
// the whole walk is a map S_c -> S_{c+1} = Step(S_c) over CU start positions (PlanStep).
//
// Phases (all in shared memory, one block; barriers are the cost to keep low):
//  1. Load + validate the batch (one request per thread), per-request tile counts and costs,
//     one block scan (tile offsets, cost offsets, the running kv total of the overflow
//     check), the tiles laid out on the cost axis: C[k], request, tail limit.
//  2. The CU walk S_0 = 0, S_{c+1} = Step(S_c). Step is sequential, but almost always it
//     moves S by a constant (P - overhead) or resets it to a tile-determined position. So each
//     round evaluates Step at the current guess of every S_c in parallel, as "add d" or "reset
//     to x", and one scan composes them into new guesses; the guesses are exact up to the
//     first index a round changes, and a round that changes nothing anywhere is the exact
//     walk. Rounds are capped; what is left is walked serially by one warp.
//  3. Layout from the CU starts: pieces per CU (-> work_indptr), pieces per tile (-> reduce
//     maps, partial rows) in one scan, capacity checks, then the writes.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>

#include "kernels/planner_kernel.h"
#include "kernels/platform/hip_runtime.h"

namespace mlaps {
namespace {

using i64 = long long;
using u64 = unsigned long long;

constexpr int kThreads = 512;         // the most threads a launch may ask for (registers: 128)
constexpr int kMaxWarps = 16;         // kThreads / the smallest warp (32 lanes)
constexpr int kDefaultThreads = 256;  // enough lanes; more only add barrier and issue cost
constexpr i64 kInt32Max = INT_MAX;
constexpr u64 kNoError = ~0ull;

// ---- Small integer math ----------------------------------------------------------------------

// ceil(a / n) for a >= 0, n >= 1 without a 64-bit integer division (slow on GPUs): a double
// quotient, corrected to the exact integer.
__device__ inline i64 CeilDivByCount(i64 a, int n) {
  i64 q = static_cast<i64>(static_cast<double>(a) / n);
  while (q * n < a) ++q;
  while (q > 0 && (q - 1) * n >= a) --q;
  return q;
}

// log2 of a power of two, in one instruction.
__device__ inline int Log2Pow2(int pow2) { return __ffs(pow2) - 1; }

// floor(x / 2^s) * 2^s for any sign: clearing the low bits of a two's complement number
// rounds toward -infinity.
__device__ inline i64 RoundDownPow2(i64 x, i64 pow2) { return x & ~(pow2 - 1); }

// HIP declares wall_clock64() in its device pass only.
__device__ inline long long WallClock() {
#if defined(MLAPS_GPU_ROCM) && !defined(__HIP_DEVICE_COMPILE__)
  return 0;
#else
  return wall_clock64();
#endif
}

// ---- Shared memory layout ----------------------------------------------------------------------
// Per tile: its cost-axis start C (and C[K] = total), its request, its tail limit (after the
// walk: the CU its start falls in), and its mid-tile starts (then: its first partial row).
// Per request: qlen, kv length, first tile, qo_indptr and kv_indptr entries.
// Per CU: start positions (two buffers for the rounds), step values and kinds, start tile,
// tile of the payload end, offset in the start tile, pieces / work offset.
struct SmemLayout {
  i64 tile_c, tile_req, tile_tail, tile_mid;
  i64 req_q, req_len, req_tiles, req_qo, req_kv;
  i64 cu_s0, cu_s1, cu_dval, cu_tile, cu_etile, cu_bg, cu_works, cu_dreset;
  i64 bytes;
};

__host__ __device__ inline i64 AlignUp(i64 x, i64 a) { return (x + a - 1) / a * a; }

__host__ __device__ inline SmemLayout MakeSmemLayout(i64 num_requests, i64 max_tiles, i64 num_cu) {
  SmemLayout l;
  i64 at = 0;
  auto take = [&at](i64 bytes) {
    const i64 here = at;
    at = AlignUp(at + bytes, 8);
    return here;
  };
  l.tile_c = take(8 * (max_tiles + 1));
  l.cu_s0 = take(8 * (num_cu + 1));
  l.cu_s1 = take(8 * (num_cu + 1));
  l.cu_dval = take(8 * (num_cu + 1));
  l.tile_req = take(4 * max_tiles);
  l.tile_tail = take(4 * max_tiles);
  l.tile_mid = take(4 * max_tiles);
  l.req_q = take(4 * (num_requests + 1));
  l.req_len = take(4 * (num_requests + 1));
  l.req_tiles = take(4 * (num_requests + 1));
  l.req_qo = take(4 * (num_requests + 1));
  l.req_kv = take(4 * (num_requests + 1));
  l.cu_tile = take(4 * (num_cu + 1));
  l.cu_etile = take(4 * (num_cu + 1));
  l.cu_bg = take(4 * (num_cu + 1));
  l.cu_works = take(4 * (num_cu + 1));
  l.cu_dreset = take(num_cu + 1);
  l.bytes = at;
  return l;
}

__host__ __device__ inline i64 MaxTiles(const GpuPlannerParams& p) {
  // 32-bit division: a 64-bit one is a long software routine on GPUs.
  const int per_request = (p.max_qlen + p.tokens_per_tile - 1) / p.tokens_per_tile;
  return i64{p.num_requests} * p.head_fold * per_request;
}

// ---- Block-wide scans --------------------------------------------------------------------------

// __shfl_up of any trivially copyable value, one 32-bit word at a time.
template <typename T>
__device__ inline T ShflUp(T v, int delta) {
  static_assert(sizeof(T) % 4 == 0, "shuffled values are whole 32-bit words");
  int w[sizeof(T) / 4];
  memcpy(w, &v, sizeof(T));
  for (int i = 0; i < static_cast<int>(sizeof(T) / 4); ++i) w[i] = __shfl_up(w[i], delta);
  memcpy(&v, w, sizeof(T));
  return v;
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

// Exclusive scan of one value per thread in thread order (`op` associative, `identity` its
// neutral element); *total gets the whole block's combination. Every thread must call it.
// One barrier: each thread folds the few warp totals before its own warp itself. The caller
// must not reuse `warp_totals` before another barrier.
template <typename T, typename Op>
__device__ T BlockExclusiveScan(T v, Op op, T identity, T* warp_totals, T* total) {
  const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  const int num_warps = blockDim.x / warpSize;
  const T inclusive = WarpInclusiveScan(v, op);
  if (lane == warpSize - 1) warp_totals[warp] = inclusive;
  __syncthreads();
  T before = identity, all = identity;
  for (int w = 0; w < num_warps; ++w) {
    const T t = warp_totals[w];
    if (w < warp) before = op(before, t);
    all = op(all, t);
  }
  T exclusive = ShflUp(inclusive, 1);
  if (lane == 0) exclusive = identity;
  *total = all;
  return op(before, exclusive);
}

// Several running sums at once (one scan).
struct Sum3 {
  i64 a, b, c;
};
struct AddSum3 {
  __device__ Sum3 operator()(const Sum3& x, const Sum3& y) const {
    return {x.a + y.a, x.b + y.b, x.c + y.c};
  }
};

struct Sum4 {
  i64 a, b, c, d;
};
struct AddSum4 {
  __device__ Sum4 operator()(const Sum4& x, const Sum4& y) const {
    return {x.a + y.a, x.b + y.b, x.c + y.c, x.d + y.d};
  }
};

// A step of the CU walk as a function of the previous position: x -> x + val, or x -> val.
struct Move {
  i64 val;
  int reset;
  int pad;
};
// "x then y": a reset forgets what came before it.
struct ComposeMoves {
  __device__ Move operator()(const Move& x, const Move& y) const {
    return y.reset ? y : Move{x.val + y.val, x.reset, 0};
  }
};

// ---- Kernel state ----------------------------------------------------------------------------

// Uniform values and shared arrays, held in registers by every thread.
struct Ctx {
  bool trim;             // causal trim
  int32_t* work_info;    // output rows
  int B, r, T, n;        // requests, head fold, tokens per tile, CUs
  int g, log2_g;         // kv granularity
  int log2_page;         // page size
  int oh, ms;            // overhead blocks, max split (0: none; >= n is the same as none)
  i64 qg;                // blocks per split quantum max(granularity, page) (a power of two)
  int K;                 // qo tiles with kv (the cost axis holds only these)
  i64 total, P;          // total cost, payload per CU
  float tiles_per_cost;  // K / total, for tile guesses
  i64* C;                // [K + 1] cost-axis start of each tile
  int* treq;             // [K] request of each tile
  int* tail;             // [K] tail limit (blocks); after the walk: the CU holding its start
  int* mid;              // [K] distinct mid-tile CU starts; then the first partial row
  int *rq, *rlen, *rtiles, *rqo, *rkv;  // [B (+1)] per request
  i64 *s0, *s1, *dval;                  // [n + 1] CU starts (two rounds) and step values
  int *ctile, *etile, *cbg, *cworks;    // [n + 1] per CU
  unsigned char* dreset;                // [n] per CU
};

// What a tile is, from its request and its index inside the request.
struct TileShape {
  int b, grp, tau;  // request, head group, token tile
  int tokens;       // q tokens
  i64 kv_tokens;    // visible kv tokens (causally trimmed in dense mode)
};

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

__device__ inline TileShape ShapeOf(const Ctx& x, int b, int grp, int tau) {
  return ShapeOf(x, b, grp, tau, x.rq[b], x.rlen[b]);
}

__device__ inline TileShape ShapeOfTile(const Ctx& x, int k) {
  const int b = x.treq[k];
  const int local = k - x.rtiles[b];
  const int per_group = TokenTiles(x, x.rq[b]);
  const int grp = local / per_group;
  return ShapeOf(x, b, grp, local - grp * per_group);
}

__device__ inline i64 TileCost(const Ctx& x, i64 kv_tokens) {
  return ((kv_tokens + x.g - 1) >> x.log2_g) + x.oh;
}

// Most blocks a split may take from the start of a tile: (kv - tokens) rounded down to the
// quantum, so the last piece keeps at least one kv token per q token. <= 0: never split.
__device__ inline int TailLimit(const Ctx& x, const TileShape& s) {
  return static_cast<int>(RoundDownPow2((s.kv_tokens - s.tokens) >> x.log2_g, x.qg));
}

// The tile containing cost position `pos` (C[t] <= pos < C[t+1]), K when pos >= total.
// Gallops from `hint` (a nearby tile; any value is fine) and then bisects.
__device__ int TileAt(const Ctx& x, i64 pos, int hint) {
  if (pos >= x.total) return x.K;
  const i64* C = x.C;
  // First t in [0, K-1] with C[t+1] > pos; it exists because pos < C[K].
  int lo, hi;
  int h = min(max(hint, 0), x.K - 1);
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
  const int t = static_cast<int>(static_cast<float>(pos) * x.tiles_per_cost);
  return min(max(t, 0), max(x.K - 1, 0));
}

// ---- The CU walk
// ---------------------------------------------------------------------------------

struct StepResult {
  i64 next;    // start position of the next CU
  int tile;    // its tile (K: nothing left)
  int pieces;  // pieces of that tile emitted so far (max_split_per_batch)
  bool reset;  // next does not move with the start position (see Move)
};

// One CU of AssignGreedyPayload. The CU starts at position S in tile s, `pieces` pieces of
// tile s already emitted; its payload ends at E = S + P; j is the first tile that does not
// fit (C[j+1] > E, j >= s). Returns where the next CU starts. Not called for the last CU,
// which takes everything that is left.
__device__ StepResult PlanStep(const Ctx& x, i64 S, int s, int pieces, int j) {
  const i64 E = S + x.P;
  // Everything left fits; with max_split_per_batch = 1 the host never moves on from CU 0.
  if (x.ms == 1 || E >= x.total) return {x.total, x.K, 0, true};
  const bool same = j == s;
  const i64 tile_start = x.C[j];
  const i64 start = same ? S : tile_start;  // where the rest of tile j begins
  const int done = same ? pieces : 0;
  if (x.ms > 0 && done + 1 >= x.ms) {
    // The last piece allowed: the rest of tile j goes whole on this CU; the next tile then
    // finds a negative remainder, takes nothing and starts the next CU.
    return {x.C[j + 1], j + 1, 0, true};
  }
  // The host's take: (remaining - overhead) blocks on the quantum, at most the tail limit.
  const i64 room = RoundDownPow2(E - start - x.oh, x.qg);
  const i64 tail = x.tail[j] - (start - tile_start);
  const i64 take = min(room, tail);
  if (take <= 0) {
    // Nothing fits: the next CU starts on the rest of tile j. Starting there already, the
    // host moves on CU by CU until the last one takes it all (a fixed point of the walk).
    return same ? StepResult{S, s, pieces, false} : StepResult{start, j, 0, true};
  }
  if (tail < room) return {start + tail, j, done + 1, true};  // = C[j] + the tail limit
  return {start + take, j, done + 1, false};
}

// The first tile t >= from with C[t+1] > pos (K if none), found by the whole warp: each lane
// tests one tile, a ballot picks the first. Falls back to TileAt after two windows.
__device__ int WarpTileAt(const Ctx& x, i64 pos, int from) {
  if (pos >= x.total) return x.K;
  const int lane = threadIdx.x % warpSize;
  for (int round = 0, base = from; round < 2 && base < x.K; ++round, base += warpSize) {
    const int t = base + lane;
    const u64 hits = __ballot64(t < x.K && x.C[t + 1] > pos);
    if (hits != 0) return base + __ffsll(static_cast<long long>(hits)) - 1;
  }
  return TileAt(x, pos, from);
}

// Serial walk by warp 0 from CU `first` (whose start S[first] is exact, with `pieces` pieces
// of its tile emitted) to CU n - 1; records each start and its tile.
__device__ void WalkSerially(const Ctx& x, i64* S, int first, int pieces) {
  const int lane = threadIdx.x % warpSize;
  i64 pos = S[first];
  int tile = TileAt(x, pos, GuessTile(x, pos));
  if (lane == 0) x.ctile[first] = tile;
  int c = first;
  for (; c + 1 < x.n; ++c) {
    if (pos >= x.total) break;
    const int j = WarpTileAt(x, pos + x.P, tile);
    const StepResult st = PlanStep(x, pos, tile, pieces, j);
    pos = st.next;
    tile = st.tile;
    pieces = st.pieces;
    if (lane == 0) {
      S[c + 1] = pos;
      x.ctile[c + 1] = tile;
    }
  }
  for (int d = c + 1 + lane; d < x.n; d += warpSize) {
    S[d] = x.total;
    x.ctile[d] = x.K;
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

// Writes work_info[row] for kv tokens [begin, end) of a tile (WorkInfo's eight int32).
__device__ inline void WriteWork(const Ctx& x, i64 row, const TileShape& s, i64 begin, i64 end,
                                 int partial_qo_loc) {
  const int b = s.b;
  const int page = 1 << x.log2_page;
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
  int4* out = reinterpret_cast<int4*>(x.work_info + 8 * row);
  out[0] = lo;
  out[1] = hi;
}

// The first index f in [0, last] with S[f] > pos, given S[last] > pos (S is non-decreasing),
// galloping back from `last` (the answer is usually a few CUs back).
__device__ inline int FirstAbove(const i64* S, int last, i64 pos) {
  int hi = last, step = 1, probe = last - 1;
  while (probe >= 0 && S[probe] > pos) {
    hi = probe;
    step *= 2;
    probe = hi - step;
  }
  int lo = max(probe + 1, 0);
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (S[mid] > pos) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// ---- The kernel
// ----------------------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads, 1) GpuPlanKernel(const GpuPlannerParams params) {
  extern __shared__ i64 smem_words[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(smem_words);
  __shared__ u64 s_error;
  __shared__ int s_mismatch[2];
  __shared__ Sum3 s_scan_requests[kMaxWarps];
  __shared__ Move s_scan_moves[kMaxWarps];
  __shared__ Sum4 s_scan_counts[kMaxWarps];

  const int tid = threadIdx.x, nthreads = blockDim.x;
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
  x.n = params.num_cu;
  x.g = params.kv_granularity;
  x.log2_g = Log2Pow2(x.g);
  x.log2_page = Log2Pow2(params.page_size);
  x.oh = params.fixed_overhead;
  // A piece count only reaches num_cu - 1 before the last CU, so such a limit never binds.
  x.ms = params.max_split_per_batch >= x.n ? 0 : params.max_split_per_batch;
  x.qg = i64{max(params.kv_granularity, params.page_size)} >> x.log2_g;
  const SmemLayout lay = MakeSmemLayout(x.B, MaxTiles(params), x.n);
  x.C = reinterpret_cast<i64*>(smem + lay.tile_c);
  x.treq = reinterpret_cast<int*>(smem + lay.tile_req);
  x.tail = reinterpret_cast<int*>(smem + lay.tile_tail);
  x.mid = reinterpret_cast<int*>(smem + lay.tile_mid);
  x.rq = reinterpret_cast<int*>(smem + lay.req_q);
  x.rlen = reinterpret_cast<int*>(smem + lay.req_len);
  x.rtiles = reinterpret_cast<int*>(smem + lay.req_tiles);
  x.rqo = reinterpret_cast<int*>(smem + lay.req_qo);
  x.rkv = reinterpret_cast<int*>(smem + lay.req_kv);
  x.s0 = reinterpret_cast<i64*>(smem + lay.cu_s0);
  x.s1 = reinterpret_cast<i64*>(smem + lay.cu_s1);
  x.dval = reinterpret_cast<i64*>(smem + lay.cu_dval);
  x.ctile = reinterpret_cast<int*>(smem + lay.cu_tile);
  x.etile = reinterpret_cast<int*>(smem + lay.cu_etile);
  x.cbg = reinterpret_cast<int*>(smem + lay.cu_bg);
  x.cworks = reinterpret_cast<int*>(smem + lay.cu_works);
  x.dreset = smem + lay.cu_dreset;
  if (tid == 0) {
    s_error = kNoError;
    s_mismatch[0] = s_mismatch[1] = x.n;
  }

  // Each thread owns a contiguous run of requests (and so of tiles) and of CUs.
  const int per_req = (x.B + nthreads - 1) / nthreads;
  const int b_begin = min(x.B, tid * per_req), b_end = min(x.B, b_begin + per_req);
  const int per_cu = (x.n + 1 + nthreads - 1) / nthreads;
  const int c_begin = min(x.n + 1, tid * per_cu), c_end = min(x.n + 1, c_begin + per_cu);
  const int c_last = min(c_end, x.n - 1);  // CUs whose next start the walk computes
  const bool sparse = params.sparse_topk > 0;

  // ---- 1. Load and validate; tiles and cost per request; the cost axis ----------------------
  FirstError err;
  Sum3 mine = {0, 0, 0};  // tiles, cost, kv tokens (clamped: only "> INT32_MAX" matters)
  for (int b = b_begin; b < b_end; ++b) {
    const int qo0 = params.qo_indptr[b], qo1 = params.qo_indptr[b + 1];
    const int kv0 = params.kv_indptr[b], kv1 = params.kv_indptr[b + 1];
    const int last = params.kv_last_page_lens[b];
    if (b == 0 && qo0 != 0) err.Add(KeyQoEntry(0), kGpuPlanQoIndptrStart, 0, qo0);
    if (qo1 < 0) {
      err.Add(KeyQoEntry(b + 1), kGpuPlanQoIndptrNegative, b + 1, qo1);
    } else if (qo1 < qo0) {
      err.Add(KeyQoEntry(b + 1), kGpuPlanQoIndptrDecreasing, b + 1, qo1);
    }
    if (b == 0 && kv0 != 0) err.Add(KeyKvEntry(x.B, 0), kGpuPlanKvIndptrStart, 0, kv0);
    if (kv1 < 0) {
      err.Add(KeyKvEntry(x.B, b + 1), kGpuPlanKvIndptrNegative, b + 1, kv1);
    } else if (kv1 < kv0) {
      err.Add(KeyKvEntry(x.B, b + 1), kGpuPlanKvIndptrDecreasing, b + 1, kv1);
    }
    if (b == x.B - 1 && i64{qo1} * params.num_heads * 2 > kInt32Max) {
      err.Add(KeyQTotal(x.B), kGpuPlanQTokensOverflow, x.B, qo1);
    }
    const i64 q = i64{qo1} - qo0, pages = i64{kv1} - kv0;
    if (sparse ? q != 1 : q <= 0) {
      err.Add(KeyRequest(x.B, b, kCheckQlen), kGpuPlanQlenInvalid, b, q);
    }
    if (q > params.max_qlen) {
      err.Add(KeyRequest(x.B, b, kCheckMaxQlen), kGpuPlanQlenAboveMax, b, q);
    }
    if (pages > 0 ? (last < 1 || last > params.page_size) : (last < 0 || last > params.page_size)) {
      err.Add(KeyRequest(x.B, b, kCheckLastPage), kGpuPlanLastPageLenInvalid, b, last);
    }
    const i64 kv_len = pages == 0 ? 0 : (pages - 1) * params.page_size + last;
    if (kv_len > kInt32Max) {
      err.Add(KeyRequest(x.B, b, kCheckKvLen), kGpuPlanKvLenOverflow, b, kv_len);
    }
    if (sparse && kv_len > params.sparse_topk) {
      err.Add(KeyRequest(x.B, b, kCheckTopk), kGpuPlanKvLenAboveTopk, b, kv_len);
    }
    if (x.trim && kv_len < q) {
      err.Add(KeyRequest(x.B, b, kCheckCausal), kGpuPlanKvLenBelowQlen, b, kv_len);
    }
    // Tiles and cost only of a well-formed request (they only count when nothing failed), so
    // the tile arrays below stay inside their max_qlen-sized space either way.
    const bool sane = q >= 1 && q <= params.max_qlen && kv_len >= 0 && kv_len <= kInt32Max &&
                      (!x.trim || kv_len >= q);
    const int qs = sane ? static_cast<int>(q) : 0;
    x.rq[b] = qs;
    x.rlen[b] = sane ? static_cast<int>(kv_len) : 0;
    x.rqo[b] = qo0;
    x.rkv[b] = kv0;
    if (b == x.B - 1) x.rqo[x.B] = qo1;
    // A request has kv in all its tiles or in none (trimmed tiles keep >= 1 kv token).
    if (sane && (x.trim || kv_len > 0)) {
      const int per_group = TokenTiles(x, qs);
      i64 group_cost = 0;
      for (int tau = 0; tau < per_group; ++tau) {
        group_cost += TileCost(x, ShapeOf(x, b, 0, tau, qs, kv_len).kv_tokens);
      }
      mine.a += i64{x.r} * per_group;
      mine.b += x.r * group_cost;
    }
    // Kept for the running total below (req_tiles is free until the tiles are laid out).
    const i64 kv_clamped = min(max(kv_len, i64{0}), i64{1} << 31);
    reinterpret_cast<unsigned*>(x.rtiles)[b] = static_cast<unsigned>(kv_clamped);
    mine.c += kv_clamped;
  }
  Sum3 totals;
  const Sum3 before = BlockExclusiveScan(mine, AddSum3{}, Sum3{0, 0, 0}, s_scan_requests, &totals);
  {
    i64 kv_run = before.c;
    for (int b = b_begin; b < b_end; ++b) {
      kv_run += reinterpret_cast<const unsigned*>(x.rtiles)[b];
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
  x.K = static_cast<int>(totals.a);
  x.total = totals.b;
  x.P = CeilDivByCount(x.total, x.n) + x.oh;
  // The walk's first guess: every CU advances by the payload less the split's extra overhead.
  const i64 step0 = max(i64{0}, x.P - x.oh - (x.qg - 1) / 2);
  const bool walk_in_rounds = params.max_scan_iterations > 0 && x.ms <= 1 && x.n > 1;
  x.tiles_per_cost = x.total > 0 ? static_cast<float>(x.K) / static_cast<float>(x.total) : 0.f;
  {
    i64 tile = before.a, cost = before.b;
    for (int b = b_begin; b < b_end; ++b) {
      x.rtiles[b] = static_cast<int>(tile);
      const int q = x.rq[b];
      const i64 kv_len = x.rlen[b];
      if (q == 0 || (!x.trim && kv_len == 0)) continue;
      const int per_group = TokenTiles(x, q);
      for (int grp = 0; grp < x.r; ++grp) {
        for (int tau = 0; tau < per_group; ++tau, ++tile) {
          const TileShape s = ShapeOf(x, b, grp, tau, q, kv_len);
          x.C[tile] = cost;
          x.treq[tile] = b;
          x.tail[tile] = TailLimit(x, s);
          x.mid[tile] = 0;
          cost += TileCost(x, s.kv_tokens);
        }
      }
    }
    if (tid == 0) {
      x.C[x.K] = x.total;
      x.rtiles[x.B] = x.K;
    }
  }
  __syncthreads();
  if (s_error != kNoError) {
    if (err.key == s_error) WriteStatus(params.status, err.code, err.index, err.value, 0);
    return;
  }
  if (profile) profile[1] = clock64();

  // ---- 2. The CU walk: S[c] = start position of CU c and ctile[c] its tile; S[n] = total -----
  i64* S = x.s0;
  int scan_iterations = -1;
  bool rounds_converged = false;
  if (walk_in_rounds) {
    auto guess = [&](int c) { return min(x.total, step0 * c); };
    i64* next = x.s1;
    int serial_from = 0, round = 0;
    while (round < params.max_scan_iterations) {
      // Step of every CU at the current guess, as a move.
      Move run = {0, 0, 0};
      for (int c = c_begin; c < c_last; ++c) {
        const i64 pos = round == 0 ? guess(c) : S[c];
        const i64 end = pos + x.P;
        // Last round's tiles are good hints; the first round interpolates.
        int s = x.K, j = x.K;
        if (pos < x.total) {
          s = TileAt(x, pos, round == 0 ? GuessTile(x, pos) : x.ctile[c]);
          if (end < x.total) {
            j = TileAt(x, end, max(s, round == 0 ? GuessTile(x, end) : x.etile[c]));
          }
        }
        x.ctile[c] = s;
        x.etile[c] = j;
        const StepResult st = PlanStep(x, pos, s, 0, j);
        x.cworks[c] = st.tile;  // the tile of the next start (cworks is free until the layout)
        const Move m = {st.reset ? st.next : st.next - pos, st.reset ? 1 : 0, 0};
        x.dval[c] = m.val;
        x.dreset[c] = static_cast<unsigned char>(m.reset);
        run = ComposeMoves{}(run, m);
      }
      Move all;
      Move acc = BlockExclusiveScan(run, ComposeMoves{}, Move{0, 0, 0}, s_scan_moves, &all);
      int first_change = x.n;
      for (int c = c_begin; c < c_last; ++c) {
        acc = ComposeMoves{}(acc, Move{x.dval[c], x.dreset[c], 0});
        next[c + 1] = acc.val;  // S[0] = 0, so the composed move's value is the position
        const i64 old = round == 0 ? guess(c + 1) : S[c + 1];
        if (acc.val != old && first_change == x.n) first_change = c + 1;
      }
      if (tid == 0) next[0] = 0;
      if (first_change < x.n) atomicMin(&s_mismatch[round & 1], first_change);
      const bool changed = __syncthreads_or(first_change < x.n);
      i64* t = S;
      S = next;
      next = t;
      ++round;
      if (profile && round == 1) profile[6] = clock64();
      // The new positions are exact up to the first index the round changed (each step
      // before it was evaluated at its final position); no change anywhere: all exact.
      if (!changed) {
        rounds_converged = true;
        break;
      }
      serial_from = s_mismatch[(round - 1) & 1];
      if (tid == 0) s_mismatch[round & 1] = x.n;
    }
    scan_iterations = rounds_converged ? round : 1000 + round;
    if (!rounds_converged && tid < warpSize) WalkSerially(x, S, serial_from, 0);
  } else if (tid < warpSize) {
    S[0] = 0;
    WalkSerially(x, S, 0, 0);
  }
  // Converged rounds leave every CU's start tile and the tile of its next start in this
  // thread's own slots, so the layout goes on without waiting; a serial walk wrote them all.
  if (!rounds_converged) __syncthreads();
  if (profile) profile[2] = clock64();

  // ---- 3. Layout ------------------------------------------------------------------------------
  // Pieces of CU c: the rest of its first tile, the tiles after it up to the next CU's start
  // tile, and the head of that one when the next CU starts inside it. A start inside a tile
  // (distinct from the previous CU's: a stuck walk repeats it) adds a piece to that tile. The
  // tiles that start in [S[c], S[c+1]) learn that CU c holds them (tail is free now).
  int my_works = 0;
  for (int c = c_begin; c < min(c_end, x.n); ++c) {
    const bool last_cu = c == x.n - 1;
    const i64 s0 = S[c], s1 = last_cu ? x.total : S[c + 1];
    int t0, t1;
    if (rounds_converged) {
      t0 = last_cu ? TileAt(x, s0, GuessTile(x, s0)) : x.ctile[c];
      t1 = last_cu ? x.K : x.cworks[c];
    } else {
      t0 = x.ctile[c];
      t1 = last_cu ? x.K : x.ctile[c + 1];
    }
    if (last_cu) x.ctile[c] = t0;
    const i64 bg0 = t0 == x.K ? 0 : s0 - x.C[t0];
    const i64 bg1 = t1 == x.K ? 0 : s1 - x.C[t1];
    x.cbg[c] = static_cast<int>(bg0);
    const bool head = t0 == t1 ? bg1 > bg0 : bg1 > 0;
    const int pieces = t1 - t0 + (head ? 1 : 0);
    x.cworks[c] = pieces;
    my_works += pieces;
    if (c > 0 && bg0 > 0 && s0 != S[c - 1]) atomicAdd(&x.mid[t0], 1);
    const int first_start = bg0 > 0 ? t0 + 1 : t0, last_start = bg1 > 0 ? t1 : t1 - 1;
    for (int k = first_start; k <= last_start; ++k) x.tail[k] = c;
  }
  if (tid == 0) {
    S[x.n] = x.total;
    x.ctile[x.n] = x.K;
    x.cbg[x.n] = 0;
  }
  __syncthreads();
  // Pieces of each tile: 1 + its mid-tile starts; split tiles get reduce maps and rows. One
  // scan gives the work offsets of CUs and the reduce offsets of tiles.
  Sum4 counts = {my_works, 0, 0, 0};  // works; split tiles, their pieces, their partial rows
  for (int b = b_begin; b < b_end; ++b) {
    int k = x.rtiles[b];
    const int last = x.rtiles[b + 1];
    if (k == last) continue;
    const int q = x.rq[b], per_group = TokenTiles(x, q);
    for (int grp = 0; grp < x.r; ++grp) {
      for (int tau = 0; tau < per_group; ++tau, ++k) {
        const int pieces = 1 + x.mid[k];
        if (pieces > 1) {
          counts.b += 1;
          counts.c += pieces;
          counts.d += i64{pieces} * (min(q, (tau + 1) * x.T) - tau * x.T);
        }
      }
    }
  }
  Sum4 totals4;
  const Sum4 before4 =
      BlockExclusiveScan(counts, AddSum4{}, Sum4{0, 0, 0, 0}, s_scan_counts, &totals4);
  if (profile) profile[3] = clock64();

  // Capacities, in PlanDecodeInto's order; nothing is written unless all fit.
  {
    const i64 need0 = i64{x.B} * x.r + 1, need1 = i64{x.n} + 1, need2 = totals4.a,
              need3 = totals4.b + 1, need4 = 2 * totals4.b, need5 = totals4.c;
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

  // work_indptr from the CU pieces.
  {
    i64 at = before4.a;
    for (int c = c_begin; c < min(c_end, x.n); ++c) {
      const int pieces = x.cworks[c];
      x.cworks[c] = static_cast<int>(at);
      params.work_indptr[c] = static_cast<int>(at);
      at += pieces;
    }
    if (tid == 0) {
      x.cworks[x.n] = static_cast<int>(totals4.a);
      params.work_indptr[x.n] = static_cast<int>(totals4.a);
      params.reduce_indptr[0] = 0;
    }
  }
  // Folded qo_indptr (virtual request v = b * r + g starts at r * qo[b] + g * qlen(b)), and
  // the reduce maps in tile order; mid becomes each tile's first partial row (-1: not split).
  {
    i64 tile_at = before4.b, piece_at = before4.c, row = before4.d;
    for (int b = b_begin; b < b_end; ++b) {
      const int q = x.rq[b], qo = x.r * x.rqo[b];
      for (int grp = 0; grp < x.r; ++grp) params.out_qo_indptr[b * x.r + grp] = qo + grp * q;
      if (b == x.B - 1) params.out_qo_indptr[x.B * x.r] = x.r * x.rqo[x.B];
      int k = x.rtiles[b];
      if (k == x.rtiles[b + 1]) continue;
      const int per_group = TokenTiles(x, q);
      for (int grp = 0; grp < x.r; ++grp) {
        for (int tau = 0; tau < per_group; ++tau, ++k) {
          const int pieces = 1 + x.mid[k];
          if (pieces == 1) {
            x.mid[k] = -1;
            continue;
          }
          const int tokens = min(q, (tau + 1) * x.T) - tau * x.T;
          const int qo_start = qo + grp * q + tau * x.T;
          params.reduce_final_map[2 * tile_at] = qo_start;
          params.reduce_final_map[2 * tile_at + 1] = qo_start + tokens;
          for (int piece = 0; piece < pieces; ++piece) {
            params.reduce_partial_map[piece_at + piece] = static_cast<int>(row + piece * tokens);
          }
          x.mid[k] = static_cast<int>(row);
          ++tile_at;
          piece_at += pieces;
          row += i64{pieces} * tokens;
          params.reduce_indptr[tile_at] = static_cast<int>(piece_at);
        }
      }
    }
  }
  __syncthreads();
  if (profile) profile[4] = clock64();

  // work_info. A CU that starts inside a tile writes that piece: its rank among the tile's
  // pieces counts the distinct starts inside the tile up to it. Every tile writes the piece
  // that starts it, at its place in the CU holding its start.
  for (int c = c_begin; c < min(c_end, x.n); ++c) {
    if (x.cbg[c] == 0 || x.cworks[c + 1] == x.cworks[c]) continue;
    const int k = x.ctile[c];
    const TileShape s = ShapeOfTile(x, k);
    const int first_mid = FirstAbove(S, c, x.C[k]);
    const int start = c > 0 && S[c - 1] == S[c] ? FirstAbove(S, c, S[c] - 1) : c;
    const int rank = start - first_mid + 1;
    const i64 end = x.ctile[c + 1] == k ? i64{x.cbg[c + 1]} << x.log2_g : s.kv_tokens;
    WriteWork(x, x.cworks[c], s, i64{x.cbg[c]} << x.log2_g, end, x.mid[k] + rank * s.tokens);
  }
  for (int b = b_begin; b < b_end; ++b) {
    int k = x.rtiles[b];
    if (k == x.rtiles[b + 1]) continue;
    const int q = x.rq[b], per_group = TokenTiles(x, q);
    const i64 kv_len = x.rlen[b];
    for (int grp = 0; grp < x.r; ++grp) {
      for (int tau = 0; tau < per_group; ++tau, ++k) {
        const int c = x.tail[k];
        const TileShape s = ShapeOf(x, b, grp, tau, q, kv_len);
        const i64 end = x.ctile[c + 1] == k ? i64{x.cbg[c + 1]} << x.log2_g : s.kv_tokens;
        WriteWork(x, x.cworks[c] + (k - x.ctile[c]), s, 0, end, x.mid[k]);
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
    st.num_works = static_cast<int32_t>(totals4.a);
    st.num_reduce_tiles = static_cast<int32_t>(totals4.b);
    st.num_reduce_pieces = static_cast<int32_t>(totals4.c);
    st.num_partial_rows = static_cast<int32_t>(totals4.d);
    st.scan_iterations = scan_iterations;
    *params.status = st;
  }
}

bool IsPowerOfTwo(i64 v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

const char* GpuPlannerParamsError(const GpuPlannerParams& p) {
  if (p.qo_indptr == nullptr || p.kv_indptr == nullptr || p.kv_last_page_lens == nullptr) {
    return "qo_indptr, kv_indptr and kv_last_page_lens must be device pointers";
  }
  if (p.status == nullptr) return "status must be a device pointer";
  if (p.out_qo_indptr == nullptr || p.work_indptr == nullptr || p.work_info == nullptr ||
      p.reduce_indptr == nullptr || p.reduce_final_map == nullptr ||
      p.reduce_partial_map == nullptr) {
    return "every output buffer must be a device pointer";
  }
  if (reinterpret_cast<uintptr_t>(p.work_info) % 16 != 0) {
    return "work_info must be 16-byte aligned (rows are written as two 16-byte stores)";
  }
  if (p.num_requests < 1) return "num_requests must be >= 1";
  if (p.max_qlen < 1) return "max_qlen must be >= 1";
  const int h = p.num_heads;
  if (h != 16 && h != 32 && h != 48 && h != 64 && h != 128) {
    return "num_heads must be one of 16, 32, 48, 64, 128";
  }
  if (!IsPowerOfTwo(p.page_size) || p.page_size > (1 << 20)) {
    return "page_size must be a power of two in [1, 2^20]";
  }
  if (p.sparse_topk < 0) return "sparse_topk must be >= 0 (0: dense)";
  if (p.sparse_topk > 0 && p.causal_trim) return "a sparse batch has no causal trim";
  if (p.head_fold < 1 || p.head_fold > h) return "head_fold must be in [1, num_heads]";
  if (p.tokens_per_tile < 1) return "tokens_per_tile must be >= 1";
  if (p.num_cu < 1 || p.num_cu > 65536) return "num_cu must be in [1, 65536] (resolved)";
  if (!IsPowerOfTwo(p.kv_granularity) || p.kv_granularity > (1 << 16)) {
    return "kv_granularity must be a power of two in [1, 65536] (resolved)";
  }
  if (p.fixed_overhead < 0 || p.fixed_overhead > (1 << 20)) {
    return "fixed_overhead must be in [0, 2^20] (resolved, not -1)";
  }
  if (p.max_split_per_batch < 0) return "max_split_per_batch must be >= 0";
  if (p.policy != 0) return "policy: only greedy_payload (0) is planned on the GPU";
  if (p.max_scan_iterations < 0) return "max_scan_iterations must be >= 0";
  if (p.threads != 0 && (p.threads < 64 || p.threads > kThreads || p.threads % 64 != 0)) {
    return "threads must be 0 or a multiple of 64 in [64, 512]";
  }
  // Folded q offsets and tile counts stay in int32 for any batch that validates.
  if (MaxTiles(p) > (i64{1} << 30)) return "num_requests * head_fold * max_qlen is too large";
  const i64 caps[] = {p.out_qo_indptr_capacity,    p.work_indptr_capacity,
                      p.work_info_capacity,        p.reduce_indptr_capacity,
                      p.reduce_final_map_capacity, p.reduce_partial_map_capacity};
  for (i64 c : caps) {
    if (c < 0) return "buffer capacities must be >= 0";
  }
  return nullptr;
}

int64_t GpuPlannerSharedBytes(const GpuPlannerParams& p) {
  return MakeSmemLayout(p.num_requests, MaxTiles(p), p.num_cu).bytes;
}

int LaunchGpuPlanner(const GpuPlannerParams& params, void* stream) {
  if (GpuPlannerParamsError(params) != nullptr) return hipErrorInvalidValue;
  const i64 bytes = GpuPlannerSharedBytes(params);
  if (bytes > INT_MAX) return hipErrorInvalidValue;
  // Above the default 48 KiB the kernel must opt in, once per device and size.
  constexpr int kMaxDevices = 64;
  static std::atomic<i64> opted_in[kMaxDevices];
  int device = 0;
  if (hipError_t e = hipGetDevice(&device); e != hipSuccess) return e;
  if (bytes > 48 * 1024 && device >= 0 && device < kMaxDevices &&
      opted_in[device].load(std::memory_order_relaxed) < bytes) {
    hipError_t e =
        hipFuncSetAttribute(reinterpret_cast<const void*>(&GpuPlanKernel),
                            hipFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (e != hipSuccess) return e;
    opted_in[device].store(bytes, std::memory_order_relaxed);
  }
  // Enough lanes for one request and one CU each (up to kDefaultThreads); more lanes only
  // add barrier and instruction-issue cost on the one SM.
  const int wanted = max(params.num_requests, params.num_cu + 1);
  const int threads = params.threads != 0
                          ? params.threads
                          : std::min(kDefaultThreads, std::max(64, (wanted + 63) / 64 * 64));
  hipLaunchKernelGGL(GpuPlanKernel, dim3(1), dim3(threads), static_cast<size_t>(bytes),
                     static_cast<hipStream_t>(stream), params);
  return hipGetLastError();
}

}  // namespace mlaps
