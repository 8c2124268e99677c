#include "harness/ceilings.hpp"

#include <algorithm>

#include "baselines/cublas.hpp"
#include "harness/cuda_check.hpp"
#include "harness/device_buffer.hpp"
#include "harness/ceiling_kernels.cuh"
#include "harness/timing_kernels.cuh"
#include "kernels/rnn/rnn.cuh"

namespace shapetune {
namespace {

std::string sample_kind(const Measurer& measurer) {
  return std::string("median of ") + (measurer.options().flush_l2 ? "cold" : "hot") + " samples";
}

// Graph and executable graph, destroyed on every way out.
struct GraphExec {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~GraphExec() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

}  // namespace

std::vector<MeasuredCeiling> measure_memory_ceilings(Measurer& measurer, std::int64_t bytes) {
  const auto size = static_cast<std::size_t>(bytes) / 16 * 16;
  DeviceBuffer src(size), dst(size);
  SHAPETUNE_CUDA_CHECK(cudaMemset(src.get(), 0x3c, size));
  SHAPETUNE_CUDA_CHECK(cudaMemset(dst.get(), 0, size));
  const double moved = 2.0 * static_cast<double>(size);  // read + written
  const std::string what = std::to_string(size >> 20) + " MiB read + written, " + sample_kind(measurer);

  std::vector<MeasuredCeiling> out;
  auto add = [&](std::string name, std::string how, const std::function<void(cudaStream_t)>& launch) {
    TimingStats t = measurer.time_launch(launch);
    out.push_back({std::move(name), moved / (t.median_us * 1e-6), "B/s", how + ", " + what, t});
  };
  add("dram_copy_memcpy", "cudaMemcpyAsync device to device", [&](cudaStream_t s) {
    SHAPETUNE_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), size, cudaMemcpyDeviceToDevice, s));
  });
  add("dram_copy_kernel_vec16", "grid-stride copy kernel, 16-byte accesses", [&](cudaStream_t s) {
    SHAPETUNE_CUDA_CHECK(ceiling_kernels::copy_vec16(src.get(), dst.get(), size, s));
  });
  add("dram_copy_kernel_scalar", "grid-stride copy kernel, 4-byte accesses", [&](cudaStream_t s) {
    SHAPETUNE_CUDA_CHECK(ceiling_kernels::copy_scalar(src.get(), dst.get(), size, s));
  });
  const auto best = *std::max_element(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.value < b.value; });
  out.push_back({kCopyCeilingName, best.value, "B/s", "best of the copies above (" + best.name + ")", best.timing});
  return out;
}

MeasuredCeiling measure_fma_ceiling(Measurer& measurer) {
  namespace kc = ceiling_kernels;
  // Four blocks of 256 threads per SM are resident at once on every GPU since Volta (one wave,
  // no tail), 8 warps per scheduler with 8 chains each; 2^16 iterations make a launch ~2 ms on
  // an H200, long against the events' resolution.
  constexpr int kBlocksPerSm = 4, kIterations = 1 << 16;
  const int blocks = measurer.device().limits.sm_count * kBlocksPerSm;
  DeviceBuffer sink(sizeof(float));
  const double flops = 2.0 * blocks * kc::kFmaThreads * static_cast<double>(kIterations) * kc::kFmaChains;
  const TimingStats t = measurer.time_launch([&](cudaStream_t s) {
    SHAPETUNE_CUDA_CHECK(kc::fma_chains(blocks, kIterations, static_cast<float*>(sink.get()), s));
  });
  const std::string how = "FMA-chain kernel: " + std::to_string(blocks) + " blocks x " + std::to_string(kc::kFmaThreads) +
                          " threads x " + std::to_string(kc::kFmaChains) + " independent chains x " +
                          std::to_string(kIterations) + " fp32 FMAs, 2 FLOPs each, " + sample_kind(measurer);
  return {"fp32_fma", flops / (t.median_us * 1e-6), "FLOP/s", how, t};
}

std::vector<MeasuredCeiling> measure_gemm_ceilings(Measurer& measurer, std::int64_t n, std::vector<std::string>& skipped) {
  namespace kc = ceiling_kernels;
  struct Case {
    const char* name;
    DType dtype;
    kc::FillType fill;
    int min_compute_capability;  // tensor cores for this type
    const char* how;
  };
  const Case cases[] = {
      {"tensor_f16", DType::f16, kc::FillType::f16, 70, "cuBLAS cublasGemmEx, f16 A, B and C, fp32 accumulation"},
      {"tensor_bf16", DType::bf16, kc::FillType::bf16, 80, "cuBLAS cublasGemmEx, bf16 A, B and C, fp32 accumulation"},
      {"tensor_tf32", DType::tf32, kc::FillType::f32, 80,
       "cuBLAS cublasGemmEx, fp32 A, B and C, CUBLAS_COMPUTE_32F_FAST_TF32 (TF32 products)"},
      {"sgemm_fp32", DType::f32, kc::FillType::f32, 0,
       "cuBLAS cublasSgemm, fp32 on CUDA cores (a reference, not a roof)"},
  };
  const auto elements = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  DeviceBuffer a(elements * sizeof(float)), b(elements * sizeof(float)), c(elements * sizeof(float));
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const std::string size = std::to_string(n) + "^3 nn, inputs uniform in [-1, 1), 2 n^3 FLOPs, ";
  const int compute_capability = measurer.device().limits.compute_capability;

  std::vector<MeasuredCeiling> out;
  for (const Case& k : cases) {
    if (compute_capability < k.min_compute_capability) {
      skipped.push_back(std::string(k.name) + ": no tensor cores for " + std::string(dtype_name(k.dtype)) + " before sm_" +
                        std::to_string(k.min_compute_capability));
      continue;
    }
    SHAPETUNE_CUDA_CHECK(kc::fill_uniform(a.get(), elements, k.fill, 1, measurer.stream()));
    SHAPETUNE_CUDA_CHECK(kc::fill_uniform(b.get(), elements, k.fill, 2, measurer.stream()));
    GemmOperands g;
    g.a = a.get();
    g.b = b.get();
    g.c = c.get();
    g.m = g.n = g.k = n;
    // A refusal here (before any timing) leaves this ceiling out; a failure later is an error.
    if (const LibraryCallResult r = cublas_gemm(measurer.libraries(), measurer.stream(), k.dtype, g); !r.ok) {
      if (!r.not_supported) throw LibraryError(r.message);
      skipped.push_back(std::string(k.name) + ": " + r.message);
      continue;
    }
    SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(measurer.stream()));
    const TimingStats t = measurer.time_launch([&](cudaStream_t s) {
      if (const LibraryCallResult r = cublas_gemm(measurer.libraries(), s, k.dtype, g); !r.ok) throw LibraryError(r.message);
    });
    out.push_back({k.name, flops / (t.median_us * 1e-6), "FLOP/s", std::string(k.how) + ", " + size + sample_kind(measurer), t});
  }
  return out;
}

std::vector<MeasuredCeiling> measure_launch_ceilings(Measurer& measurer, int launches) {
  auto issue = [&](cudaStream_t s) {
    for (int i = 0; i < launches; ++i) SHAPETUNE_CUDA_CHECK(ceiling_kernels::empty(s));
  };
  const std::string each = std::to_string(launches) + " launches of an empty <<<1, 1>>> kernel";
  std::vector<MeasuredCeiling> out;
  auto add = [&](std::string name, std::string how, const TimingStats& t) {
    TimingStats per_sample = t;
    per_sample.launches_per_sample = launches;
    out.push_back({std::move(name), t.median_us * 1e-6 / launches, "s", how + ", " + sample_kind(measurer) + " / " +
                   std::to_string(launches), per_sample});
  };
  add("launch_overhead_stream", each + " back to back on one stream between two events", measurer.time_launch(issue));

  GraphExec graph;
  cudaStream_t stream = measurer.stream();
  SHAPETUNE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    issue(stream);
  } catch (...) {
    cudaStreamEndCapture(stream, &graph.graph);
    throw;
  }
  SHAPETUNE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph.graph));
  SHAPETUNE_CUDA_CHECK(cudaGraphInstantiate(&graph.exec, graph.graph, 0));
  add("launch_overhead_graph", each + " captured into one CUDA graph, replayed between two events",
      measurer.time_launch([&](cudaStream_t s) { SHAPETUNE_CUDA_CHECK(cudaGraphLaunch(graph.exec, s)); }));
  return out;
}

MeasuredCeiling measure_grid_barrier(Measurer& measurer, int rounds) {
  const int blocks = measurer.device().limits.sm_count;
  constexpr int kThreads = 128;
  DeviceBuffer counter(sizeof(unsigned));
  const TimingStats t = measurer.time_launch([&](cudaStream_t s) {
    SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(counter.get(), 0, sizeof(unsigned), s));
    SHAPETUNE_CUDA_CHECK(
        kernels::rnn::grid_barrier_rounds(blocks, kThreads, rounds, static_cast<unsigned*>(counter.get()), s));
  });
  TimingStats per_sample = t;
  per_sample.launches_per_sample = rounds;
  return {"grid_barrier", t.median_us * 1e-6 / rounds, "s",
          std::to_string(rounds) + " grid barriers (the persistent RNN's) in one cooperative launch of " +
              std::to_string(blocks) + " blocks x " + std::to_string(kThreads) + " threads, one block per SM, " +
              sample_kind(measurer) + " / " + std::to_string(rounds),
          per_sample};
}

std::vector<MeasuredCeiling> measure_cluster_barriers(Measurer& measurer, int rounds, std::vector<std::string>& skipped) {
  std::vector<MeasuredCeiling> out;
  if (measurer.device().limits.compute_capability != 90) {
    skipped.push_back("cluster_barrier_*: the cluster kernel is built for sm_90a (compute capability 9.0)");
    return out;
  }
  constexpr int kThreads = 128;
  for (const int size : {2, 4, 8, 16}) {
    const std::string name = "cluster_barrier_" + std::to_string(size);
    const cudaError_t probe = kernels::rnn::cluster_barrier_rounds(size, kThreads, 1, measurer.stream());
    if (probe != cudaSuccess) {
      cudaGetLastError();  // a refused launch leaves no sticky error
      skipped.push_back(name + ": " + cudaGetErrorString(probe));
      continue;
    }
    SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(measurer.stream()));
    const TimingStats t = measurer.time_launch([&](cudaStream_t s) {
      SHAPETUNE_CUDA_CHECK(kernels::rnn::cluster_barrier_rounds(size, kThreads, rounds, s));
    });
    TimingStats per_sample = t;
    per_sample.launches_per_sample = rounds;
    out.push_back({name, t.median_us * 1e-6 / rounds, "s",
                   std::to_string(rounds) + " cluster barriers (barrier.cluster arrive + wait, the persistent_cluster "
                                            "RNN's) in one cluster of " + std::to_string(size) + " blocks x " +
                       std::to_string(kThreads) + " threads, " + sample_kind(measurer) + " / " +
                       std::to_string(rounds),
                   per_sample});
  }
  return out;
}

}  // namespace shapetune
