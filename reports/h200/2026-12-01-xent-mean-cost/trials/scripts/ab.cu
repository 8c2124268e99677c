// A/B driver: compiled once against the old softmax_xent.cu (-Iscratch/old first), once against the new.
#include "kernels/softmax_xent.cu"
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); std::exit(1);} } while (0)
namespace kx = shapetune::kernels::softmax_xent;
__global__ void evict_ab(const uint4* b, std::size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (std::size_t i = blockIdx.x * (std::size_t)blockDim.x + threadIdx.x; i < n; i += (std::size_t)gridDim.x * blockDim.x) { uint4 v = __ldcg(b + i); acc ^= v.x ^ v.y ^ v.z ^ v.w; }
  if (acc == 0x12345678u) *sink = acc;
}
int main(int argc, char** argv) {
  const char* tag = argc > 2 ? argv[2] : "?";
  const int rows = 8192, classes = 1024;
  const std::size_t n = (std::size_t)rows * classes;
  const int brows = 4096, bclasses = 32000; const std::size_t bn = (std::size_t)brows * bclasses;
  float *logits, *dlogits, *loss; void* ws; std::int32_t* labels; unsigned* sink; uint4* flush;
  __nv_bfloat16 *bl, *bd;
  CK(cudaMalloc(&logits, n * 4)); CK(cudaMalloc(&dlogits, n * 4)); CK(cudaMalloc(&loss, 4));
  CK(cudaMalloc(&ws, 1 << 20)); CK(cudaMalloc(&labels, brows * 4 * 2)); CK(cudaMalloc(&sink, 4));
  CK(cudaMalloc(&bl, bn * 2)); CK(cudaMalloc(&bd, bn * 2));
  const std::size_t flush_bytes = 180u << 20; CK(cudaMalloc(&flush, flush_bytes)); CK(cudaMemset(flush, 0x5a, flush_bytes));
  std::vector<float> h(n); std::mt19937 g(1); std::normal_distribution<float> d(0, 3);
  for (auto& x : h) x = d(g);
  std::vector<__nv_bfloat16> hb(bn); for (auto& x : hb) x = __float2bfloat16(d(g));
  std::vector<std::int32_t> hl(rows); for (auto& x : hl) x = g() % 1024;
  CK(cudaMemcpy(logits, h.data(), n * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(labels, hl.data(), rows * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(bl, hb.data(), bn * 2, cudaMemcpyHostToDevice));
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  struct Exp { std::string name; std::function<void()> run; std::vector<double> t; };
  std::vector<Exp> ex;
  for (auto [tpr, bs, pk] : std::vector<std::tuple<int,int,int>>{{32,128,8},{32,256,8},{32,512,8},{16,128,16},{16,256,16},{8,128,16}})
    ex.push_back({"f32 8192x1024 register_row{" + std::to_string(tpr) + "," + std::to_string(bs) + "," + std::to_string(pk) + "}", [&, tpr, bs, pk] { if (cudaError_t e = kx::fused_register_row<float>(logits, labels, loss, dlogits, rows, classes, tpr, bs, pk, ws, st); e != cudaSuccess) { std::printf("%s\n", cudaGetErrorString(e)); } }});
  ex.push_back({"f32 8192x1024 warp_row{4}", [&] { CK(kx::fused_warp_row<float>(logits, labels, loss, dlogits, rows, classes, 4, ws, st)); }});
  ex.push_back({"bf16 4096x32000 ring{8,32K,2,0,claim}", [&] { CK(kx::fused_ring_row<__nv_bfloat16>(bl, labels, loss, bd, brows, bclasses, 8, 32768, 2, false, true, ws, st)); }});
  float l0 = 0; ex[0].run(); CK(cudaStreamSynchronize(st)); CK(cudaMemcpy(&l0, loss, 4, cudaMemcpyDeviceToHost));
  std::printf("[%s] loss %.9g\n", tag, l0);
  cudaEvent_t a[16], b[16]; for (int i = 0; i < 16; ++i) { CK(cudaEventCreate(&a[i])); CK(cudaEventCreate(&b[i])); }
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 40;
  for (int r = 0; r < rounds; ++r)
    for (auto& e : ex) {
      for (int i = 0; i < 8; ++i) {
        evict_ab<<<132 * 8, 512, 0, st>>>(flush, flush_bytes / 16, sink);
        CK(cudaEventRecord(a[i], st)); e.run(); CK(cudaEventRecord(b[i], st));
      }
      CK(cudaStreamSynchronize(st));
      for (int i = 0; i < 8; ++i) { float ms; CK(cudaEventElapsedTime(&ms, a[i], b[i])); if (r > 0) e.t.push_back(ms * 1000); }
    }
  for (auto& e : ex) {
    std::sort(e.t.begin(), e.t.end());
    auto q = [&](double f) { return e.t[(std::size_t)(f * (e.t.size() - 1))]; };
    std::printf("[%s] %-42s %9.2f %9.2f %9.2f\n", tag, e.name.c_str(), q(.1), q(.5), q(.9));
  }
}
