// The wgmma GEMM's one-tile-a-block kernel timed alone (bias epilogue, nt, f16, 8 configs at four
// shapes: cases 1-13's and 8's projections), for comparing two versions of
// kernels/gemm/wgmma_sm90a.cu built by wgmma-ab.sh. Cold L2 (a 256 MiB memset before each sample),
// one launch between two events, median and p10 of 40 samples. With an argument S it runs shape S
// at tile 1, stages 3 only (one launch to profile).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/gemm/wgmma.cuh"

using namespace shapetune::kernels;

int main(int argc, char** argv) {
  const int only = argc > 1 ? std::atoi(argv[1]) : -1;
  struct Shape {
    long m, n, k;
  };
  const Shape shapes[] = {{65536, 128, 128}, {8192, 1024, 1024}, {8192, 3072, 1024}, {65536, 384, 128}};
  const size_t a_elems = 65536L * 1024, b_elems = 3072L * 1024, c_elems = 65536L * 3072;
  __half *a, *b, *c, *bias;
  char* flush;
  const size_t flush_bytes = size_t{256} << 20;
  if (cudaMalloc(&a, a_elems * 2) || cudaMalloc(&b, b_elems * 2) || cudaMalloc(&c, c_elems * 2) ||
      cudaMalloc(&bias, 4096 * 2) || cudaMalloc(&flush, flush_bytes)) {
    std::fprintf(stderr, "error: cudaMalloc failed (no GPU?)\n");
    return 2;
  }
  cudaMemset(a, 0, a_elems * 2);
  cudaMemset(b, 0, b_elems * 2);
  cudaMemset(bias, 0, 4096 * 2);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int si = 0; si < 4; ++si)
    for (int tile = 0; tile < 4; ++tile)
      for (int stages = 3; stages <= 4; ++stages) {
        if (only >= 0 && (si != only || tile != 1 || stages != 3)) continue;
        const Shape s = shapes[si];
        gemm::Args<__half> args;
        args.a = a, args.b = b, args.c = c, args.bias = bias;
        args.m = s.m, args.n = s.n, args.k = s.k;
        args.layout = gemm::Layout::nt, args.epilogue = gemm::Epilogue::bias;
#ifdef WGMMA_NO_PERSISTENT
        const auto run = [&] { return gemm_wgmma::wgmma(args, tile, stages, 0); };
#else
        const auto run = [&] { return gemm_wgmma::wgmma(args, tile, stages, false, 0); };
#endif
        if (run() != cudaSuccess) {
          std::printf("%ld %ld %ld tile=%d stages=%d refused\n", s.m, s.n, s.k, tile, stages);
          cudaGetLastError();
          continue;
        }
        cudaDeviceSynchronize();
        std::vector<float> t;
        for (int i = 0; i < 40; ++i) {
          cudaMemsetAsync(flush, i, flush_bytes);
          cudaEventRecord(e0);
          run();
          cudaEventRecord(e1);
          cudaEventSynchronize(e1);
          float ms = 0;
          cudaEventElapsedTime(&ms, e0, e1);
          t.push_back(ms * 1000);
        }
        std::sort(t.begin(), t.end());
        std::printf("%ld %ld %ld tile=%d stages=%d %.1f us (p10 %.1f) %s\n", s.m, s.n, s.k, tile, stages, t[20], t[4],
                    cudaGetErrorString(cudaGetLastError()));
      }
  return 0;
}
