// The probe hooks of the sm90 f16-tile kernel (mla_decode_sm90.h): progress marks, wait
// timers and the macros that build its timing variants. Every hook compiles to nothing unless
// the probe binary (kernels/decode/mla_decode_probe.hip, BUILD variants) defines
// MLAPS_SM90_PROGRESS; the shipped kernel never sees them.
#ifndef MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_PROBE_H_
#define MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_PROBE_H_

// Macros and probe-only device variables; included by mla_decode_sm90_producer.h and
// mla_decode_sm90.h after the device dialect (the emulation header or
// kernels/platform/hip_runtime.h).

namespace mlaps {
namespace mla {

// Progress marks for a hang probe (kernels/decode/mla_decode_probe.hip builds the kernel with
// MLAPS_SM90_PROGRESS, under the name MlaDecodeSm90ProbeKernel): lane 0 of every warp stores
// (tag << 48 | value) for its warp into g_sm90_progress[block][warp] (mapped host memory the
// host reads while the kernel runs).
// Tags: 1 own step n, 2 remote step n, 3 S of n waits chunk position pos (value n * 16 + pos),
// 4 epilogue of item, 5 producer at tile n, 6 producer waits an empty slot (n * 16 + pos),
// 7 producer waits Q empty (item), 8 past setmaxnreg, 9 done, 10 / 11 a consumer before / after
// its Q wait (item). Compiled out otherwise. (MLAPS_SM90_NO_SETMAXNREG: a probe variant that
// keeps the launch's register split.)
#if defined(MLAPS_SM90_PROGRESS)
#define MLAPS_SM90_KERNEL MlaDecodeSm90ProbeKernel
#else
#define MLAPS_SM90_KERNEL MlaDecodeSm90Kernel
#endif
// Probe-only variants that time the kernel with parts of it removed (wrong results; the probe
// binary only, kernels/decode/BUILD.bazel): MLAPS_SM90_PROBE_QUIET (no marks or timers),
// ..._SKIP_CONVERT (landed chunks published unconverted), ..._SKIP_COPY (no Q or kv copies,
// TMA loads included), ..._SKIP_S / ..._SKIP_PV (those wgmmas not issued);
// MLAPS_SM90_PROBE_NO_MARKS keeps the wait timers only. The f16 P V kernel
// (mla_decode_sm90_f16pv.h) has the S / P V and copy hooks too: a bench built with them in the
// `mla_decode` library's copts times it the same way (notes.md, session 13); its bf16 P V also
// ..._SKIP_WIDEN (V^T fragments used as they were loaded but for one mask, no scale or widening)
// and ..._SKIP_VT_LOAD (dims tiles 1-3 reuse tile 0's fragments). Bench variants
// (kernels/decode/BUILD.bazel, gpu_bundle.sh --variant): probe_skip_widen, probe_skip_vt_load
// (session 31), probe_skip_copy (the shared memory zeroed first, RunSm90Block), probe_skip_s and
// probe_skip_pv (session 32).
#if defined(MLAPS_SM90_PROGRESS)
__device__ unsigned long long* g_sm90_progress = nullptr;
__device__ unsigned long long* g_sm90_times = nullptr;
#endif
#if defined(MLAPS_SM90_PROGRESS) && !defined(MLAPS_SM90_PROBE_QUIET) && \
    !defined(MLAPS_SM90_PROBE_NO_MARKS)
#define MLAPS_SM90_MARK(tag, value)                                                       \
  do {                                                                                    \
    if ((threadIdx.x & 31) == 0 && g_sm90_progress != nullptr) {                          \
      *reinterpret_cast<volatile unsigned long long*>(g_sm90_progress + blockIdx.x * 12 + \
                                                      threadIdx.x / 32) =                 \
          (static_cast<unsigned long long>(tag) << 48) |                                  \
          (static_cast<unsigned long long>(value) & 0xffffffffffffull);                   \
    }                                                                                     \
  } while (0)
#else
#define MLAPS_SM90_MARK(tag, value) \
  do {                              \
  } while (0)
#endif
#if defined(MLAPS_SM90_PROGRESS) && !defined(MLAPS_SM90_PROBE_QUIET)
// Probe builds also time waits: MLAPS_SM90_TIMED(slot, statement) adds the statement's
// clock64() cycles (lane 0's view) to its warp's counter in shared memory, and each warp adds
// its counters to g_sm90_times[block][warp][slot] once at the end (a global read-modify-write
// per wait made the probe kernel ~2x slower than the real one).
__shared__ unsigned int g_sm90_wait_cycles[12 * 16];
// MLAPS_SM90_TIC(t); ... MLAPS_SM90_TOC(slot, t); times a section the same way.
#define MLAPS_SM90_TIC(t) const long long t = clock64()
#define MLAPS_SM90_TOC(slot, t)                             \
  do {                                                      \
    if ((threadIdx.x & 31) == 0) {                          \
      g_sm90_wait_cycles[threadIdx.x / 32 * 16 + (slot)] += \
          static_cast<unsigned int>(clock64() - t);         \
    }                                                       \
  } while (0)
#define MLAPS_SM90_TIMED(slot, ...) \
  do {                              \
    MLAPS_SM90_TIC(t0_);            \
    __VA_ARGS__;                    \
    MLAPS_SM90_TOC(slot, t0_);      \
  } while (0)
#define MLAPS_SM90_TIMES_BEGIN()                                    \
  do {                                                              \
    if (threadIdx.x < 12 * 16) g_sm90_wait_cycles[threadIdx.x] = 0; \
  } while (0)
#define MLAPS_SM90_TIMES_END()                                             \
  do {                                                                     \
    if ((threadIdx.x & 31) == 0 && g_sm90_times != nullptr) {              \
      for (int slot_ = 0; slot_ < 16; ++slot_) {                           \
        g_sm90_times[(blockIdx.x * 12 + threadIdx.x / 32) * 16 + slot_] += \
            g_sm90_wait_cycles[threadIdx.x / 32 * 16 + slot_];             \
      }                                                                    \
    }                                                                      \
  } while (0)
#else
#define MLAPS_SM90_TIMED(slot, ...) \
  do {                              \
    __VA_ARGS__;                    \
  } while (0)
#define MLAPS_SM90_TIC(t) \
  do {                    \
  } while (0)
#define MLAPS_SM90_TOC(slot, t) \
  do {                          \
  } while (0)
#define MLAPS_SM90_TIMES_BEGIN() \
  do {                           \
  } while (0)
#define MLAPS_SM90_TIMES_END() \
  do {                         \
  } while (0)
#endif

// A timeline probe (MLAPS_SM90_TRACE: the `mla_decode_traced` library and
// mla_decode_bench_traced, kernels/decode/BUILD.bazel; NVIDIA device pass only): thread 0 of each
// warpgroup of the first kSm90TraceCtas blocks stores the SM clock's low 32 bits when it passes
// event `tag` of kv block n (the block's walk order), into g_sm90_trace[block][warpgroup][n][tag];
// DumpSm90Trace (mla_decode.h) writes it to a file (mla_decode_bench_traced:
// MLAPS_SM90_TRACE_OUT=FILE, one --only case) and kernels/decode/sm90_trace_report.py prints it.
// The last launch's times remain. The events (Sm90TraceTag; the f16 P V kernel's consumers and the
// TMA producer) are numbered as sm90_trace_report.py reads them. Role 3 is the producer's first
// converter thread (Sm90ConverterTraceTag: when it sees a chunk landed, the load's latency).
constexpr int kSm90TraceCtas = 4, kSm90TraceRoles = 4, kSm90TraceBlocks = 512, kSm90TraceTags = 16;
enum Sm90TraceTag : int {
  kTraceSStart = 1,      // a consumer starts the S of kv block n
  kTraceSIssued = 2,     // ... has issued its last wgmma
  kTraceSRetired = 3,    // ... has retired it
  kTraceStatsWait = 4,   // it waits for the other's statistics of n
  kTraceStatsIn = 5,     // ... and has them
  kTraceSoftmax = 6,     // its softmax of n starts
  kTraceSoftmaxEnd = 7,  // ... and has published
  kTracePv = 8,          // its P V of n starts
  kTracePvEnd = 9,       // ... and has retired
  kTraceBlockTop = 10,   // the producer's copy threads reach block n (before its page id)
  kTraceCopy = 11,       // the producer starts block n
  kTraceTma0 = 12,       // its TMA of production positions 0, 4 and 8 issued
  kTraceTma4 = 13,
  kTraceTma8 = 14,
  kTraceTma8Issued = 15,  // its TMA of position 8 has been issued
};
enum Sm90ConverterTraceTag : int {
  kTraceLanded0 = 1,  // the converters see production position 0 of kv block n landed
  kTraceLanded4 = 2,  // ... position 4
  kTraceLanded8 = 3,  // ... position 8
};
constexpr int kSm90TraceConverterRole = 3;
#if defined(MLAPS_SM90_TRACE) && defined(__CUDACC__)
__device__ unsigned int g_sm90_trace[kSm90TraceCtas][kSm90TraceRoles][kSm90TraceBlocks]
                                    [kSm90TraceTags];
#endif
#if defined(MLAPS_SM90_TRACE) && defined(__CUDA_ARCH__)
// Event `tag` of kv block n, stored when `is_first` (the thread that speaks for `role`).
#define MLAPS_SM90_TRACE_ROLE_AT(is_first, role, tag, n)                              \
  do {                                                                                \
    const uint32_t n_ = (n);                                                          \
    if (blockIdx.x < kSm90TraceCtas && (is_first) && n_ < kSm90TraceBlocks) {         \
      g_sm90_trace[blockIdx.x][role][n_][tag] = static_cast<unsigned int>(clock64()); \
    }                                                                                 \
  } while (0)
#else
#define MLAPS_SM90_TRACE_ROLE_AT(is_first, role, tag, n) \
  do {                                                   \
  } while (0)
#endif
// Thread 0 of each warpgroup speaks for it (roles 0-2).
#define MLAPS_SM90_TRACE_AT(tag, n) \
  MLAPS_SM90_TRACE_ROLE_AT((threadIdx.x & 127) == 0, threadIdx.x >> 7, tag, n)

#if defined(MLAPS_SM90_PROBE_SKIP_S)
#define MLAPS_SM90_S_MMA(...) \
  do {                        \
  } while (0)
#else
#define MLAPS_SM90_S_MMA(...) __VA_ARGS__
#endif
#if defined(MLAPS_SM90_PROBE_SKIP_PV)
#define MLAPS_SM90_PV_MMA(...) \
  do {                         \
  } while (0)
#else
#define MLAPS_SM90_PV_MMA(...) __VA_ARGS__
#endif

}  // namespace mla
}  // namespace mlaps

#endif  // MLAPS_KERNELS_DECODE_MLA_DECODE_SM90_PROBE_H_
