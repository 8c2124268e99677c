// Shared-memory mbarriers and the bulk (TMA) copies that complete on them (sm_90), and named
// barriers: the producer/consumer rings of the wgmma GEMM, LayerNorm's fused_ring and
// softmax_xent's fused_ring_row, and the h exchange of the persistent_cluster RNN. A full barrier
// completes when its one producer arrival and the transaction bytes it announced have landed;
// an empty barrier when every consumer warp has arrived. Waiters name the parity of the phase
// they wait for.
//
// Only kernels built for sm_90 may call these (the callers guard their bodies by __CUDA_ARCH__);
// below that the bodies trap, so that a file compiled for several architectures still builds.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/shared_address.cuh"

namespace shapetune::kernels {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SHAPETUNE_HAS_MBARRIER 1
#else
#define SHAPETUNE_HAS_MBARRIER 0
#endif

__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned count) {
#if SHAPETUNE_HAS_MBARRIER
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#else
  __trap();
#endif
}

// Makes the initialised barriers visible to the async proxy (TMA's complete_tx) and other threads.
__device__ __forceinline__ void fence_barrier_init() {
#if SHAPETUNE_HAS_MBARRIER
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
#if SHAPETUNE_HAS_MBARRIER
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
#if SHAPETUNE_HAS_MBARRIER
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
  __trap();
#endif
}

// The wait's loop; SEMANTICS is empty (acquire at CTA scope) or e.g. ".acquire.cluster".
#define SHAPETUNE_MBARRIER_TRY_WAIT_LOOP(SEMANTICS)                        \
  asm volatile(                                                          \
      "{\n.reg .pred done;\n"                                            \
      "WAIT:\n"                                                          \
      "mbarrier.try_wait.parity" SEMANTICS ".shared::cta.b64 done, [%0], %1;\n" \
      "@!done bra WAIT;\n}\n" ::"r"(bar),                                 \
      "r"(parity)                                                        \
      : "memory")

// Returns once the phase of parity `parity` has completed. On a fresh barrier (phase 0 under
// way) parity 1 counts as complete: a producer's first pass over the empty barriers goes through.
// The retry loop is in the PTX (labels are local to the braces), so the compiler sees one
// statement, and the warp leaves it converged (the wgmma's .sync.aligned instructions need that).
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
#if SHAPETUNE_HAS_MBARRIER
  SHAPETUNE_MBARRIER_TRY_WAIT_LOOP("");
#else
  __trap();
#endif
}

// mbarrier_wait at cluster scope: the phase's data came from other blocks of the cluster
// (cluster_store_async), and its acquire must make their writes visible here.
__device__ __forceinline__ void mbarrier_wait_cluster(unsigned bar, unsigned parity) {
#if SHAPETUNE_HAS_MBARRIER
  SHAPETUNE_MBARRIER_TRY_WAIT_LOOP(".acquire.cluster");
#else
  __trap();
#endif
}
#undef SHAPETUNE_MBARRIER_TRY_WAIT_LOOP

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global memory into this
// block's shared memory by the copy engine of the SM; the bytes count against `bar`'s
// transaction count. No thread waits for the data but those that wait on `bar`.
__device__ __forceinline__ void bulk_copy_to_shared(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
#if SHAPETUNE_HAS_MBARRIER
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
#else
  __trap();
#endif
}

// One box of a 2D tensor map (a CUtensorMap in global, constant or parameter memory;
// coordinates innermost first, in elements) into shared memory at `dst`, swizzled as the map
// says; its bytes count against `bar`'s transaction count. Parts of the box past the tensor's
// extent arrive as zeros (and still count).
__device__ __forceinline__ void tma_load_2d(unsigned dst, const void* map, int inner, int outer, unsigned bar) {
#if SHAPETUNE_HAS_MBARRIER
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(inner), "r"(outer), "r"(bar)
      : "memory");
#else
  __trap();
#endif
}

// The same for a 4D tensor map (coordinates innermost first).
__device__ __forceinline__ void tma_load_4d(unsigned dst, const void* map, int c0, int c1, int c2, int c3,
                                            unsigned bar) {
#if SHAPETUNE_HAS_MBARRIER
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
#else
  __trap();
#endif
}

// Brings a tensor map into the cache before its first tma_load_2d or tma_load_4d.
__device__ __forceinline__ void prefetch_tensor_map(const void* map) {
#if SHAPETUNE_HAS_MBARRIER
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
#else
  __trap();
#endif
}

// bar.sync on a named barrier (1..15) among `threads` threads (a multiple of 32): a barrier for
// part of a block, such as the consumer warps of a ring while the producer warp runs on.
__device__ __forceinline__ void named_barrier_sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// bar.arrive: counts this thread toward the barrier's next completion without waiting for it
// (the producer half of a named barrier whose other threads bar.sync on it).
__device__ __forceinline__ void named_barrier_arrive(unsigned id, unsigned threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// The same with both operands known at compile time (immediates in the instruction).
template <unsigned kId, unsigned kThreads>
__device__ __forceinline__ void named_barrier_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

}  // namespace shapetune::kernels
