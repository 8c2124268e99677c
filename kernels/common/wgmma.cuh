// Warpgroup-level matrix multiply-accumulate (wgmma, sm_90a) and the instructions around it:
// the shared-memory matrix descriptor, fence/commit/wait, and the warpgroup register
// reallocation (setmaxnreg) of producer/consumer kernels. For the GEMM's and attention's Hopper
// kernels.
//
// Only code compiled for sm_90a may call these (a *_sm90a.cu file, inside its
// __CUDA_ARCH_FEAT_SM90_ALL guard); ptxas rejects them for any other target.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace shapetune::kernels {

// Warpgroup-wide register reallocation (every warp of the warpgroup executes it).
template <int kRegisters>
__device__ __forceinline__ void registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// wgmma's shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format") of a 128-byte
// swizzled operand: start address, leading and stride byte offsets, all >> 4; base offset 0
// (tiles start on a 1024-byte boundary, and a start moved by whole 16-byte chunks within a
// swizzle row keeps the pattern's phase, which the hardware takes from the address bits);
// bits 62-63 = 1: 128-byte swizzle.
__device__ __forceinline__ std::uint64_t matrix_descriptor(unsigned address, unsigned leading_bytes,
                                                           unsigned stride_bytes) {
  return static_cast<std::uint64_t>((address & 0x3FFFF) >> 4) |
         static_cast<std::uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16 |
         static_cast<std::uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32 | std::uint64_t{1} << 62;
}

// A descriptor's fixed fields, set once, and its start address field moved by whole 16-byte chunks:
// one 32-bit add a wgmma, where rebuilding each step's descriptor from its address (mask, shift,
// or with the fields) took 8 instructions a wgmma in an H100 profile of flash_wgmma. The start
// field holds bits 4-17 of the address; shared tiles lie below 256 KB, so the add never carries
// out of it into the leading offset's bits.
struct DescriptorBase {
  unsigned low, high;
};
__device__ __forceinline__ DescriptorBase descriptor_base(unsigned address, unsigned leading_bytes,
                                                          unsigned stride_bytes) {
  const std::uint64_t d = matrix_descriptor(address, leading_bytes, stride_bytes);
  return {static_cast<unsigned>(d), static_cast<unsigned>(d >> 32)};
}
__device__ __forceinline__ std::uint64_t descriptor_at(DescriptorBase base, unsigned byte_offset) {
  return static_cast<std::uint64_t>(base.high) << 32 | (base.low + (byte_offset >> 4));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Tells the compiler the accumulators may have changed here (they are written asynchronously by
// the wgmma in flight), so it neither reads them early nor keeps stale copies across a wait.
template <int kCount>
__device__ __forceinline__ void touch(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D (64 x N, fp32, N / 2 registers a thread) += A (64 x K) B (K x N), both from shared memory;
// K is 16 for 16-bit operands, 8 for TF32 (32 bytes of a row either way). kTransA / kTransB: 0 for
// a K-major operand, 1 for an M- or N-major one; TF32 has no transpose (both operands K-major),
// so its instruction names no transpose operands (they stay in the operand list, unreferenced).
// scale_d = 0 ignores D (D = A B): the first product initialises the accumulators, which no other
// instruction then writes while a wgmma is in flight (ptxas serialises the wgmma where one does).
// SHAPE_TYPES: "k16.f32.f16.f16", "k16.f32.bf16.bf16" or "k8.f32.tf32.tf32"; TRANS: the transpose
// operands' text, or "" for TF32.
#define SHAPETUNE_WGMMA_M64N256(SHAPE_TYPES, TRANS) \
  asm volatile( \
      "{\n.reg .pred p;\n" \
      "setp.ne.b32 p, %130, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n256" SHAPE_TYPES " {" \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
      "}, %128, %129, p, 1, 1" TRANS ";\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB))

#define SHAPETUNE_WGMMA_M64N128(SHAPE_TYPES, TRANS) \
  asm volatile( \
      "{\n.reg .pred p;\n" \
      "setp.ne.b32 p, %66, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n128" SHAPE_TYPES " {" \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
      "}, %64, %65, p, 1, 1" TRANS ";\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB))

#define SHAPETUNE_WGMMA_M64N64(SHAPE_TYPES, TRANS) \
  asm volatile( \
      "{\n.reg .pred p;\n" \
      "setp.ne.b32 p, %34, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n64" SHAPE_TYPES " {" \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
      "}, %32, %33, p, 1, 1" TRANS ";\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB))


template <typename T, int kN, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[kN / 2], std::uint64_t desc_a, std::uint64_t desc_b,
                                             int scale_d) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (kN == 256) {
    if constexpr (kBf16)
      SHAPETUNE_WGMMA_M64N256("k16.f32.bf16.bf16", ", %131, %132");
    else
      SHAPETUNE_WGMMA_M64N256("k16.f32.f16.f16", ", %131, %132");
  } else if constexpr (kN == 128) {
    if constexpr (kBf16)
      SHAPETUNE_WGMMA_M64N128("k16.f32.bf16.bf16", ", %67, %68");
    else
      SHAPETUNE_WGMMA_M64N128("k16.f32.f16.f16", ", %67, %68");
  } else {
    if constexpr (kBf16)
      SHAPETUNE_WGMMA_M64N64("k16.f32.bf16.bf16", ", %35, %36");
    else
      SHAPETUNE_WGMMA_M64N64("k16.f32.f16.f16", ", %35, %36");
  }
}

// The TF32 form: fp32 operands in shared memory, both K-major, of which the tensor cores read the
// top 19 bits (the low 13 mantissa bits are dropped, not rounded: gemm.cpp's tolerance allows a
// truncated TF32 input).
template <int kN>
__device__ __forceinline__ void wgmma_m64k8_tf32(float (&d)[kN / 2], std::uint64_t desc_a, std::uint64_t desc_b,
                                                 int scale_d) {
  constexpr int kTransA = 0, kTransB = 0;  // the macros' unreferenced operands
  if constexpr (kN == 256)
    SHAPETUNE_WGMMA_M64N256("k8.f32.tf32.tf32", "");
  else if constexpr (kN == 128)
    SHAPETUNE_WGMMA_M64N128("k8.f32.tf32.tf32", "");
  else
    SHAPETUNE_WGMMA_M64N64("k8.f32.tf32.tf32", "");
}

// D (64 x N, fp32) += A (64 x 16, from registers) B (16 x N, shared memory). A's four 32-bit
// registers a thread hold 16-bit pairs in mma.sync m16n8k16's A layout, warp w of the warpgroup
// taking rows 16w..16w+15: the layout of a 16-bit-rounded m64 accumulator, so a product's result
// feeds the next product without moving between lanes (attention's P V). The register form has
// no A transpose; kTransB as above.
#define SHAPETUNE_WGMMA_M64N128K16_RS(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\n" \
      "setp.ne.b32 p, %69, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {" \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB))

#define SHAPETUNE_WGMMA_M64N64K16_RS(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\n" \
      "setp.ne.b32 p, %37, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {" \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB))

template <typename T, int kN, int kTransB>
__device__ __forceinline__ void wgmma_m64k16_register_a(float (&d)[kN / 2], const unsigned (&a)[4],
                                                        std::uint64_t desc_b, int scale_d) {
  static_assert(kN == 64 || kN == 128, "an n the register-A wrappers provide");
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (kN == 128) {
    if constexpr (kBf16)
      SHAPETUNE_WGMMA_M64N128K16_RS("bf16");
    else
      SHAPETUNE_WGMMA_M64N128K16_RS("f16");
  } else {
    if constexpr (kBf16)
      SHAPETUNE_WGMMA_M64N64K16_RS("bf16");
    else
      SHAPETUNE_WGMMA_M64N64K16_RS("f16");
  }
}

// Orders this thread's earlier generic-proxy writes to shared memory (plain stores, cp.async once
// waited for) before later async-proxy reads of it (wgmma's shared operands). Each writer executes
// it before the barrier that the readers pass.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

#undef SHAPETUNE_WGMMA_M64N256
#undef SHAPETUNE_WGMMA_M64N128
#undef SHAPETUNE_WGMMA_M64N64
#undef SHAPETUNE_WGMMA_M64N128K16_RS
#undef SHAPETUNE_WGMMA_M64N64K16_RS

}  // namespace shapetune::kernels
