// Warp-level matrix multiply-accumulate (mma.sync, sm_80+) and the shared-memory fragment loads
// that feed it (ldmatrix, 32-bit loads, 16-byte stores by shared address), for any kernel that
// multiplies tiles on tensor cores: the GEMM's, attention's.
//
// Only code compiled for sm_80+ may call these (ptxas rejects them elsewhere, so a misplaced call
// fails the build, not a run); their callers sit inside an architecture guard.
// The "memory" clobbers of the shared accesses keep the compiler from moving them across the
// cp.async waits and barriers, which it cannot see through.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/common/shared_address.cuh"

namespace shapetune::kernels {

// Four 8 x 8 matrices of 16-bit elements; lanes 8q..8q+7 give the 8 row addresses of matrix q.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}
// The same, each matrix transposed on the way (a K-major fragment from an MN-major tile).
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}
__device__ __forceinline__ unsigned load_shared_u32(unsigned address) {
  unsigned v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(address) : "memory");
  return v;
}
__device__ __forceinline__ void load_shared_16(unsigned address, unsigned (&v)[4]) {
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "r"(address)
               : "memory");
}
__device__ __forceinline__ void store_shared_16(unsigned address, const unsigned (&v)[4]) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(v[0]), "r"(v[1]), "r"(v[2]),
               "r"(v[3])
               : "memory");
}
// Round-to-nearest TF32, kept in a 32-bit register as the mma expects.
__device__ __forceinline__ unsigned to_tf32(unsigned fp32_bits) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(fp32_bits)));
  return r;
}

// One warp-level multiply-accumulate per element type: D = A B + D on a 16 x 8 output tile,
// fp32 accumulators. A fragments are 4 registers, B fragments 2, in the PTX ISA's "Matrix
// Fragments" layouts; kK is the product's depth (16 for 16-bit types, 8 for TF32).
template <typename T>
struct Mma;

template <>
struct Mma<__half> {
  static constexpr int kK = 16;
  __device__ static void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

template <>
struct Mma<__nv_bfloat16> {
  static constexpr int kK = 16;
  __device__ static void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

template <>
struct Mma<float> {  // TF32 products of fp32 tensors
  static constexpr int kK = 8;
  __device__ static void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

}  // namespace shapetune::kernels
