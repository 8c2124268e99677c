// Thread block clusters (sm_90): a block's rank in its cluster, stores into another block's
// shared memory (distributed shared memory), and the cluster-wide barrier split into its two
// halves, so that work independent of the other blocks can run between arriving and waiting.
#pragma once

#include <cuda_runtime.h>

#include "kernels/common/shared_address.cuh"

namespace shapetune::kernels {

__device__ __forceinline__ unsigned cluster_block_rank() {
  unsigned rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
#endif
  return rank;
}

// The address, in the cluster's shared window, of `local` (a pointer into this block's shared
// memory) in block `rank` of the cluster: the same variable in that block.
__device__ __forceinline__ unsigned cluster_shared_address(const void* local, unsigned rank) {
  unsigned remote = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(shared_address(local)), "r"(rank));
#endif
  return remote;
}

__device__ __forceinline__ void cluster_store(unsigned cluster_address, float value) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(cluster_address), "f"(value) : "memory");
#endif
}

// Every thread of every block of the cluster calls both, in order and without divergence
// (.aligned). Writes before arrive (into any block's shared memory, or global) are visible
// after wait to every thread of the cluster (release/acquire at cluster scope).
__device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}

// The arrive without release: nothing this thread wrote is ordered before the others' wait. Used
// where the barrier only says "I have finished reading" and the data goes by st.async below.
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}

// Stores `value` into another block's shared memory and counts its 4 bytes against the
// transaction count of the mbarrier at `cluster_barrier` (in that block): the receiver learns of
// the data by waiting on its own barrier, and the sender waits for nothing (no fence, no release).
__device__ __forceinline__ void cluster_store_async(unsigned cluster_address, float value, unsigned cluster_barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(cluster_address),
               "r"(__float_as_uint(value)), "r"(cluster_barrier)
               : "memory");
#endif
}

__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

}  // namespace shapetune::kernels
