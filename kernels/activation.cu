#include "kernels/activation.cuh"

#include <algorithm>
#include <climits>
#include <type_traits>

#include "kernels/common/grid.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/vector_io.cuh"

namespace shapetune::kernels::activation {
namespace {

// ---- the functions, in float -----------------------------------------------------------------

constexpr float kSqrtHalf = 0.70710678118654752f;     // 1 / sqrt(2)
constexpr float kInvSqrtTwoPi = 0.39894228040143268f; // 1 / sqrt(2 pi)
constexpr float kTanhScale = 0.79788456080286536f;    // sqrt(2 / pi)
constexpr float kTanhCubic = 0.044715f;

// The logistic s(z) = 1 / (1 + exp(-z)) and its complement 1 - s(z) = s(-z), each to full
// relative accuracy: exp only sees -|z| (so it cannot overflow), and the smaller of the two is
// t / (1 + t), never 1 - s, which would cancel.
struct Logistic {
  float s;
  float complement;
};

__device__ __forceinline__ Logistic logistic(float z) {
  const float t = expf(-fabsf(z));
  const float large = 1.f / (1.f + t);
  const float small = t * large;
  return z >= 0.f ? Logistic{large, small} : Logistic{small, large};
}

template <Function F>
struct Activation;

template <>
struct Activation<Function::relu> {
  __device__ static float value(float x) { return x < 0.f ? 0.f : x; }  // NaN passes through
  // 0 at x = 0 exactly, the same convention as the reference (and PyTorch).
  __device__ static float derivative(float x) { return x > 0.f ? 1.f : 0.f; }
};

template <>
struct Activation<Function::gelu> {
  // Phi(x) = (1 + erf(x / sqrt 2)) / 2. erfcf(-x / sqrt 2) / 2 would keep its relative accuracy
  // in the left tail, where 1 + erf cancels, but costs over twice the instructions, enough to
  // make 16-bit gelu compute-bound; the cancellation's error is absolute (|x| ulp(1) / 2, under
  // 4e-7 for |x| <= 6) and within the tolerances' atol.
  __device__ static float cdf(float x) { return 0.5f * (1.f + erff(x * kSqrtHalf)); }
  __device__ static float value(float x) { return x * cdf(x); }
  // Phi(x) + x phi(x).
  __device__ static float derivative(float x) { return cdf(x) + x * kInvSqrtTwoPi * expf(-0.5f * x * x); }
};

template <>
struct Activation<Function::gelu_tanh> {
  // 0.5 x (1 + tanh(u)) = x s(2u) with u = sqrt(2/pi) (x + 0.044715 x^3): the same value without
  // 1 + tanh(u) cancelling for negative x.
  __device__ static float twice_u(float x) { return 2.f * kTanhScale * x * (1.f + kTanhCubic * x * x); }
  __device__ static float value(float x) { return x * logistic(twice_u(x)).s; }
  // s + x s (1 - s) (2u)', with (2u)' = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2).
  __device__ static float derivative(float x) {
    const Logistic l = logistic(twice_u(x));
    return l.s * (1.f + x * (2.f * kTanhScale) * (1.f + 3.f * kTanhCubic * x * x) * l.complement);
  }
};

template <>
struct Activation<Function::sigmoid> {
  __device__ static float value(float x) { return logistic(x).s; }
  __device__ static float derivative(float x) {
    const Logistic l = logistic(x);
    return l.s * l.complement;
  }
};

template <>
struct Activation<Function::silu> {
  __device__ static float value(float x) { return x * logistic(x).s; }
  // s + x s (1 - s).
  __device__ static float derivative(float x) {
    const Logistic l = logistic(x);
    return l.s * (1.f + x * l.complement);
  }
};

// GELU for 16-bit results, whose rounding (2^-11 relative or coarser) dwarfs erff's accuracy.
// erff evaluates both of its ranges and selects (about 30 instructions an element on sm_90),
// which made 16-bit GELU compute-bound: 3.47 TB/s, 81% of copy, at 2^28 bf16 elements on the
// H200. Here Phi comes from Abramowitz & Stegun 7.1.26,
//   erfc(z) ~ t (a1 + a2 t + ... + a5 t^4) exp(-z^2),  t = 1 / (1 + p z),  z >= 0,
// absolute error <= 1.5e-7 (7e-8 on Phi), and relative accuracy kept in the tail by the exp
// factor. With the constants folded (u = z sqrt(log2 e), so exp(-z^2) = 2^(-u^2)) it costs one
// multiply for u, one FMA and a fast reciprocal for t, five FMA/multiplies for the polynomial,
// a multiply and a fast exp2, a multiply: 11 issue slots, two of them MUFU (7.1.28's degree-6
// polynomial raised to the 16th power takes 13, which kept bias+GELU bf16 compute-bound). The
// left tail Phi(x < 0) = erfc(|z|) / 2 is taken directly, so nothing cancels there either.
struct FastGelu {
  // erfc(z) / 2 for z = |x| / sqrt 2, from u = z sqrt(log2 e) = |x| sqrt(log2(e) / 2).
  __device__ static float half_erfc(float u) {
    constexpr float kSqrtLog2e = 1.2011224087864498f;  // sqrt(log2 e)
    constexpr float kP = 0.3275911f / kSqrtLog2e;        // p z = kP u
    // a_k / 2: the halving folded into the coefficients.
    constexpr float kA1 = 0.5f * 0.254829592f, kA2 = 0.5f * -0.284496736f, kA3 = 0.5f * 1.421413741f,
                    kA4 = 0.5f * -1.453152027f, kA5 = 0.5f * 1.061405429f;
    const float t = fast_reciprocal(fmaf(kP, u, 1.f));
    float poly = fmaf(kA5, t, kA4);
    poly = fmaf(poly, t, kA3);
    poly = fmaf(poly, t, kA2);
    poly = fmaf(poly, t, kA1);
    return poly * t * fast_exp2(-u * u);
  }
  __device__ static float cdf(float x) {
    constexpr float kU = 0.8493218002880191f;  // sqrt(log2(e) / 2): u = |x| kU
    const float h = half_erfc(fabsf(x) * kU);
    return x >= 0.f ? 1.f - h : h;  // NaN goes to h, which is NaN
  }
  __device__ static float value(float x) { return x * cdf(x); }
  __device__ static float derivative(float x) { return cdf(x) + x * kInvSqrtTwoPi * __expf(-0.5f * x * x); }
};

// The math an element of type T gets: the fast GELU for 16-bit types, else the function itself.
template <Function F, typename T>
struct MathOf {
  using type = Activation<F>;
};
template <>
struct MathOf<Function::gelu, __half> {
  using type = FastGelu;
};
template <>
struct MathOf<Function::gelu, __nv_bfloat16> {
  using type = FastGelu;
};
template <Function F, typename T>
using Math = typename MathOf<F, T>::type;

// What one element becomes, forward or backward, so the elementwise kernels are written once.
template <Function F>
struct Forward {
  static constexpr int kInputs = 1;  // x
  template <typename T>
  __device__ static T apply(const T (&in)[kInputs]) {
    return from_float<T>(Math<F, T>::value(to_float(in[0])));
  }
};

template <Function F>
struct Backward {
  static constexpr int kInputs = 2;  // x, dy
  template <typename T>
  __device__ static T apply(const T (&in)[kInputs]) {
    return from_float<T>(to_float(in[1]) * Math<F, T>::derivative(to_float(in[0])));
  }
};

template <Function F, typename T>
__device__ __forceinline__ T biased(T x, T b) {
  return from_float<T>(Math<F, T>::value(to_float(x) + to_float(b)));
}

template <typename T, int kCount>
struct Inputs {
  const T* tensor[kCount];
};

// ---- v1: grid-stride, one element per step ---------------------------------------------------

template <typename Op, typename T>
__global__ void scalar_kernel(Inputs<T, Op::kInputs> in, T* __restrict__ out, std::int64_t n) {
  grid_dependency_sync();
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    T v[Op::kInputs];
#pragma unroll
    for (int k = 0; k < Op::kInputs; ++k) v[k] = in.tensor[k][i];
    out[i] = Op::apply(v);
  }
}

template <Function F, typename T>
__global__ void bias_scalar_kernel(const T* __restrict__ x, const T* __restrict__ b, T* __restrict__ y,
                                   std::int64_t n, int cols) {
  grid_dependency_sync();
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    y[i] = biased<F>(x[i], b[i % cols]);
}

// ---- v2: 16-byte packs -----------------------------------------------------------------------

// A flat tensor as `head` scalars up to the first 16-byte boundary, `packs` 16-byte packs, then
// `tail` scalars: RowSplit's counterpart for 64-bit extents, computed once on the host.
struct FlatSplit {
  int head;
  int tail;
  std::int64_t packs;
  std::int64_t body_end;  // index of the first tail element

  __device__ int edges() const { return head + tail; }
  __device__ std::int64_t edge_index(int k) const { return k < head ? k : body_end + (k - head); }
};

template <typename T>
FlatSplit flat_split(const T* start, std::int64_t n) {
  constexpr int kPack = Pack<T>::kCount;
  const int misalignment = static_cast<int>((reinterpret_cast<std::uintptr_t>(start) & 15) / sizeof(T));
  const int head = static_cast<int>(std::min<std::int64_t>(misalignment == 0 ? 0 : kPack - misalignment, n));
  const std::int64_t packs = (n - head) / kPack;
  const std::int64_t body_end = head + packs * kPack;
  return {head, static_cast<int>(n - body_end), packs, body_end};
}

template <typename Op, int kPacks, typename T>
__global__ void vec_kernel(Inputs<T, Op::kInputs> in, T* __restrict__ out, FlatSplit split) {
  grid_dependency_sync();
  constexpr int kPack = Pack<T>::kCount;
  constexpr int kInputs = Op::kInputs;
  // At most 2 * (kPack - 1) edge elements: the first threads of the grid take one each.
  const std::int64_t thread = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (thread < split.edges()) {
    const std::int64_t i = split.edge_index(static_cast<int>(thread));
    T v[kInputs];
#pragma unroll
    for (int k = 0; k < kInputs; ++k) v[k] = in.tensor[k][i];
    out[i] = Op::apply(v);
  }

  // A block covers kPacks * blockDim.x consecutive packs; a thread's u-th pack sits next to its
  // neighbours' u-th packs, so each of the kPacks loads is coalesced across the warp.
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(kPacks) * blockDim.x + threadIdx.x;
  Pack<T> loaded[kPacks][kInputs];
#pragma unroll
  for (int u = 0; u < kPacks; ++u) {
    const std::int64_t p = first + static_cast<std::int64_t>(u) * blockDim.x;
    if (p < split.packs) {
#pragma unroll
      for (int k = 0; k < kInputs; ++k) loaded[u][k] = load_pack(in.tensor[k] + split.head + p * kPack);
    }
  }
#pragma unroll
  for (int u = 0; u < kPacks; ++u) {
    const std::int64_t p = first + static_cast<std::int64_t>(u) * blockDim.x;
    if (p < split.packs) {
      Pack<T> result;
#pragma unroll
      for (int j = 0; j < kPack; ++j) {
        T v[kInputs];
#pragma unroll
        for (int k = 0; k < kInputs; ++k) v[k] = loaded[u][k].v[j];
        result.v[j] = Op::apply(v);
      }
      store_pack(out + split.head + p * kPack, result);
    }
  }
}

template <typename T>
__device__ __forceinline__ Pack<T> load_bias_pack(const T* b, bool aligned) {
  if (aligned) return load_pack(b);
  Pack<T> pack;
#pragma unroll
  for (int j = 0; j < Pack<T>::kCount; ++j) pack.v[j] = b[j];
  return pack;
}

template <Function F, typename T>
__global__ void bias_row_vec_kernel(const T* __restrict__ x, const T* __restrict__ b, T* __restrict__ y,
                                    std::int64_t rows, int cols, int threads_per_row) {
  grid_dependency_sync();
  constexpr int kPack = Pack<T>::kCount;
  constexpr int kUnroll = 4;  // packs loaded before the first is used: loads in flight per thread
  const int rows_per_block = blockDim.x / threads_per_row;
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(rows_per_block) + threadIdx.x / threads_per_row;
  const int lane = threadIdx.x % threads_per_row;
  if (row >= rows) return;  // nothing below synchronizes
  const T* in = x + row * cols;
  T* out = y + row * cols;
  const RowSplit split = RowSplit::of(in, cols);
  for (int k = lane; k < split.edges(); k += threads_per_row) {
    const int c = split.edge_index<T>(k);
    out[c] = biased<F>(in[c], b[c]);
  }

  const T* body_in = in + split.head;
  const T* body_bias = b + split.head;
  T* body_out = out + split.head;
  // Uniform over the row: with cols a multiple of the pack, every row's body lines up with b's.
  const bool bias_aligned = (reinterpret_cast<std::uintptr_t>(body_bias) & 15) == 0;
  for (int base = lane; base < split.packs; base += kUnroll * threads_per_row) {
    Pack<T> xs[kUnroll], bs[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = base + u * threads_per_row;
      if (p < split.packs) {
        xs[u] = load_pack(body_in + p * kPack);
        bs[u] = load_bias_pack(body_bias + p * kPack, bias_aligned);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = base + u * threads_per_row;
      if (p < split.packs) {
        Pack<T> result;
#pragma unroll
        for (int j = 0; j < kPack; ++j) result.v[j] = biased<F>(xs[u].v[j], bs[u].v[j]);
        store_pack(body_out + p * kPack, result);
      }
    }
  }
}

// Where a pack's bias comes from in the flat kernel: one 16-byte load when every pack's columns
// line up with b's packs, else element by element from `col` on, wrapping at the row's end
// (more than once for rows narrower than a pack).
template <typename T>
__device__ __forceinline__ Pack<T> bias_at(const T* b, unsigned col, unsigned cols, bool packs_align) {
  if (packs_align) return load_pack(b + col);
  Pack<T> pack;
#pragma unroll
  for (int j = 0; j < Pack<T>::kCount; ++j) {
    pack.v[j] = b[col];
    col = col + 1 == cols ? 0 : col + 1;
  }
  return pack;
}

template <Function F, int kPacks, typename T>
__global__ void bias_flat_vec_kernel(const T* __restrict__ x, const T* __restrict__ b, T* __restrict__ y,
                                     FlatSplit split, int cols, bool bias_packs_align) {
  grid_dependency_sync();
  constexpr int kPack = Pack<T>::kCount;
  const std::int64_t thread = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (thread < split.edges()) {
    const std::int64_t i = split.edge_index(static_cast<int>(thread));
    y[i] = biased<F>(x[i], b[i % cols]);
  }

  // The same walk as vec_kernel. One 64-bit modulo per thread gives its first pack's column;
  // the next pack, blockDim.x packs on, is `step` columns further (mod cols), in 32 bits
  // (col + step < 2 cols < 2^32).
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(kPacks) * blockDim.x + threadIdx.x;
  const unsigned ucols = static_cast<unsigned>(cols);
  const unsigned step = static_cast<unsigned>(static_cast<std::int64_t>(blockDim.x) * kPack % cols);
  unsigned col = static_cast<unsigned>((split.head + first * kPack) % cols);
  Pack<T> xs[kPacks], bs[kPacks];
#pragma unroll
  for (int u = 0; u < kPacks; ++u) {
    const std::int64_t p = first + static_cast<std::int64_t>(u) * blockDim.x;
    if (p < split.packs) {
      xs[u] = load_pack(x + split.head + p * kPack);
      bs[u] = bias_at(b, col, ucols, bias_packs_align);
    }
    col += step;
    col = col >= ucols ? col - ucols : col;
  }
#pragma unroll
  for (int u = 0; u < kPacks; ++u) {
    const std::int64_t p = first + static_cast<std::int64_t>(u) * blockDim.x;
    if (p < split.packs) {
      Pack<T> result;
#pragma unroll
      for (int j = 0; j < kPack; ++j) result.v[j] = biased<F>(xs[u].v[j], bs[u].v[j]);
      store_pack(y + split.head + p * kPack, result);
    }
  }
}

// v4: columns. Thread (tx, ty) of a blockDim.x x blockDim.y block owns column pack
// blockIdx.x * blockDim.x + tx (the same 16 bytes' worth of columns in every row it visits), loads
// that pack's bias once and keeps it in registers, then walks rows: kRows rows per step, all loaded
// before the first is used, (ty + u * blockDim.y) rows into the block's run of
// kRows * blockDim.y rows, so for each u a warp reads blockDim.y whole neighbouring row pieces.
// No index division anywhere and no bias traffic beyond the first row: at 16-bit precision the
// flat kernel's per-thread 64-bit modulo and per-pack bias load cost as many instructions as
// the GELU itself. Rows whose packs are not 16-byte aligned (cols not a multiple of the pack, or
// x or y unaligned) go element by element through the same walk; the last column pack may be
// partial (cols not a multiple of the pack) and is bounds-checked.
template <Function F, int kRows, typename T>
__global__ void bias_column_vec_kernel(const T* __restrict__ x, const T* __restrict__ b, T* __restrict__ y,
                                       std::int64_t rows, int cols, bool packed) {
  grid_dependency_sync();
  constexpr int kPack = Pack<T>::kCount;
  const int column_pack = blockIdx.x * blockDim.x + threadIdx.x;
  const int col = column_pack * kPack;
  if (col >= cols) return;  // nothing below synchronizes
  const int width = cols - col < kPack ? cols - col : kPack;
  float bias[kPack];
#pragma unroll
  for (int j = 0; j < kPack; ++j) bias[j] = j < width ? to_float(b[col + j]) : 0.f;

  const std::int64_t rows_per_step = static_cast<std::int64_t>(kRows) * blockDim.y;
  for (std::int64_t first = blockIdx.y * rows_per_step + threadIdx.y; first < rows;
       first += static_cast<std::int64_t>(gridDim.y) * rows_per_step) {
    const T* in = x + first * cols + col;
    T* out = y + first * cols + col;
    const std::int64_t row_step = static_cast<std::int64_t>(blockDim.y) * cols;
    if (packed) {
      Pack<T> xs[kRows];
#pragma unroll
      for (int u = 0; u < kRows; ++u)
        if (first + u * static_cast<std::int64_t>(blockDim.y) < rows) xs[u] = load_pack(in + u * row_step);
#pragma unroll
      for (int u = 0; u < kRows; ++u) {
        if (first + u * static_cast<std::int64_t>(blockDim.y) >= rows) continue;
        float v[kPack];
#pragma unroll
        for (int j = 0; j < kPack; ++j) v[j] = Math<F, T>::value(to_float(xs[u].v[j]) + bias[j]);
        store_pack(out + u * row_step, pack_of_floats<T>(v));
      }
    } else {
      for (int u = 0; u < kRows; ++u) {
        if (first + u * static_cast<std::int64_t>(blockDim.y) >= rows) break;
        for (int j = 0; j < width; ++j)
          out[u * row_step + j] = from_float<T>(Math<F, T>::value(to_float(in[u * row_step + j]) + bias[j]));
      }
    }
  }
}

// ---- launching ---------------------------------------------------------------------------------

// Calls fn(std::integral_constant<Function, f>{}), turning the run-time function into a
// template argument so each kernel is compiled for exactly one activation.
template <typename Fn>
cudaError_t with_function(Function f, Fn&& fn) {
  switch (f) {
    case Function::relu: return fn(std::integral_constant<Function, Function::relu>{});
    case Function::gelu: return fn(std::integral_constant<Function, Function::gelu>{});
    case Function::gelu_tanh: return fn(std::integral_constant<Function, Function::gelu_tanh>{});
    case Function::sigmoid: return fn(std::integral_constant<Function, Function::sigmoid>{});
    case Function::silu: return fn(std::integral_constant<Function, Function::silu>{});
  }
  return cudaErrorInvalidValue;
}

// The grid-stride kernels' grid: the blocks that cover n, but at most blocks_per_sm per SM.
cudaError_t grid_stride_blocks(std::int64_t n, int block_size, int blocks_per_sm, unsigned& blocks) {
  int device = 0, sms = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess) return e;
  const std::int64_t covering = (n + block_size - 1) / block_size;
  blocks = static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>(covering, std::int64_t{sms} * blocks_per_sm)));
  return cudaSuccess;
}

template <typename Op, typename T>
cudaError_t launch_scalar(Inputs<T, Op::kInputs> in, T* out, std::int64_t n, int block_size, int blocks_per_sm,
                          cudaStream_t stream) {
  unsigned blocks = 0;
  if (cudaError_t e = grid_stride_blocks(n, block_size, blocks_per_sm, blocks); e != cudaSuccess) return e;
  scalar_kernel<Op><<<blocks, block_size, 0, stream>>>(in, out, n);
  return cudaGetLastError();
}

template <typename Op, int kPacks, typename T>
cudaError_t launch_vec_packs(Inputs<T, Op::kInputs> in, T* out, FlatSplit split, int block_size,
                             cudaStream_t stream) {
  const std::int64_t per_block = std::int64_t{kPacks} * block_size;
  const std::int64_t blocks = std::max<std::int64_t>(1, (split.packs + per_block - 1) / per_block);
  if (blocks > INT_MAX) return cudaErrorInvalidConfiguration;
  vec_kernel<Op, kPacks><<<static_cast<unsigned>(blocks), block_size, 0, stream>>>(in, out, split);
  return cudaGetLastError();
}

template <typename Op, typename T>
cudaError_t launch_vec(Inputs<T, Op::kInputs> in, T* out, std::int64_t n, int block_size, int packs_per_thread,
                       cudaStream_t stream) {
  for (const T* tensor : in.tensor)
    if (!same_16_byte_phase(tensor, out)) return cudaErrorNotSupported;
  const FlatSplit split = flat_split(out, n);
  switch (packs_per_thread) {
    case 1: return launch_vec_packs<Op, 1>(in, out, split, block_size, stream);
    case 2: return launch_vec_packs<Op, 2>(in, out, split, block_size, stream);
    case 4: return launch_vec_packs<Op, 4>(in, out, split, block_size, stream);
    case 8: return launch_vec_packs<Op, 8>(in, out, split, block_size, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

template <typename T>
cudaError_t forward_scalar(Function f, const T* x, T* y, std::int64_t n, int block_size, int blocks_per_sm,
                           cudaStream_t stream) {
  return with_function(f, [&](auto fn) {
    return launch_scalar<Forward<decltype(fn)::value>>(Inputs<T, 1>{{x}}, y, n, block_size, blocks_per_sm, stream);
  });
}

template <typename T>
cudaError_t backward_scalar(Function f, const T* x, const T* dy, T* dx, std::int64_t n, int block_size,
                            int blocks_per_sm, cudaStream_t stream) {
  return with_function(f, [&](auto fn) {
    return launch_scalar<Backward<decltype(fn)::value>>(Inputs<T, 2>{{x, dy}}, dx, n, block_size, blocks_per_sm,
                                                        stream);
  });
}

template <typename T>
cudaError_t forward_vec(Function f, const T* x, T* y, std::int64_t n, int block_size, int packs_per_thread,
                        cudaStream_t stream) {
  return with_function(f, [&](auto fn) {
    return launch_vec<Forward<decltype(fn)::value>>(Inputs<T, 1>{{x}}, y, n, block_size, packs_per_thread, stream);
  });
}

template <typename T>
cudaError_t backward_vec(Function f, const T* x, const T* dy, T* dx, std::int64_t n, int block_size,
                         int packs_per_thread, cudaStream_t stream) {
  return with_function(f, [&](auto fn) {
    return launch_vec<Backward<decltype(fn)::value>>(Inputs<T, 2>{{x, dy}}, dx, n, block_size, packs_per_thread,
                                                     stream);
  });
}

template <typename T>
cudaError_t bias_forward_scalar(Function f, const T* x, const T* b, T* y, std::int64_t rows, int cols, int block_size,
                                int blocks_per_sm, cudaStream_t stream) {
  const std::int64_t n = rows * cols;
  unsigned blocks = 0;
  if (cudaError_t e = grid_stride_blocks(n, block_size, blocks_per_sm, blocks); e != cudaSuccess) return e;
  return with_function(f, [&](auto fn) {
    bias_scalar_kernel<decltype(fn)::value><<<blocks, block_size, 0, stream>>>(x, b, y, n, cols);
    return cudaGetLastError();
  });
}

template <typename T>
cudaError_t bias_forward_row_vec(Function f, const T* x, const T* b, T* y, std::int64_t rows, int cols,
                                 int threads_per_row, int block_size, cudaStream_t stream) {
  if (!same_16_byte_phase(x, y)) return cudaErrorNotSupported;
  if (threads_per_row < 1 || block_size % threads_per_row != 0) return cudaErrorInvalidValue;
  const std::int64_t rows_per_block = block_size / threads_per_row;
  const std::int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  if (blocks > INT_MAX) return cudaErrorInvalidConfiguration;
  return with_function(f, [&](auto fn) {
    bias_row_vec_kernel<decltype(fn)::value><<<static_cast<unsigned>(blocks), block_size, 0, stream>>>(
        x, b, y, rows, cols, threads_per_row);
    return cudaGetLastError();
  });
}

template <typename T>
cudaError_t bias_forward_flat_vec(Function f, const T* x, const T* b, T* y, std::int64_t rows, int cols,
                                  int block_size, int packs_per_thread, cudaStream_t stream) {
  constexpr int kPack = Pack<T>::kCount;
  if (!same_16_byte_phase(x, y)) return cudaErrorNotSupported;
  const FlatSplit split = flat_split(y, rows * cols);
  // Packs stay inside rows, at columns that are multiples of the pack, only when the rows
  // start on 16-byte boundaries (no head) and cols is a multiple of the pack; b's packs then
  // line up with them if b itself is aligned. Otherwise packs straddle rows.
  const bool bias_packs_align =
      split.head == 0 && cols % kPack == 0 && (reinterpret_cast<std::uintptr_t>(b) & 15) == 0;
  const std::int64_t per_block = std::int64_t{packs_per_thread} * block_size;
  const std::int64_t blocks = std::max<std::int64_t>(1, (split.packs + per_block - 1) / per_block);
  if (blocks > INT_MAX) return cudaErrorInvalidConfiguration;
  return with_function(f, [&](auto fn) {
    constexpr Function kF = decltype(fn)::value;
    const dim3 grid(static_cast<unsigned>(blocks));
    switch (packs_per_thread) {
      case 1: bias_flat_vec_kernel<kF, 1><<<grid, block_size, 0, stream>>>(x, b, y, split, cols, bias_packs_align); break;
      case 2: bias_flat_vec_kernel<kF, 2><<<grid, block_size, 0, stream>>>(x, b, y, split, cols, bias_packs_align); break;
      case 4: bias_flat_vec_kernel<kF, 4><<<grid, block_size, 0, stream>>>(x, b, y, split, cols, bias_packs_align); break;
      case 8: bias_flat_vec_kernel<kF, 8><<<grid, block_size, 0, stream>>>(x, b, y, split, cols, bias_packs_align); break;
      default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
  });
}

template <typename T>
cudaError_t bias_forward_column_vec(Function f, const T* x, const T* b, T* y, std::int64_t rows, int cols,
                                    int block_size, int rows_per_thread, cudaStream_t stream) {
  constexpr int kPack = Pack<T>::kCount;
  if (block_size < 32 || block_size > 1024 || block_size % 32 != 0 || rows < 1 || cols < 1) return cudaErrorInvalidValue;
  const auto aligned = [](const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0; };
  const bool packed = cols % kPack == 0 && aligned(x) && aligned(y);
  // blockDim.x: the column packs of a row, rounded up to a power of two, at most the block; the
  // rest of the block's threads stack along rows, so narrow rows still fill whole warps.
  const int column_packs = (cols + kPack - 1) / kPack;
  int block_x = 1;
  while (block_x < column_packs && block_x < block_size) block_x *= 2;
  const int block_y = block_size / block_x;
  const std::int64_t grid_x = (column_packs + block_x - 1) / block_x;
  const std::int64_t rows_per_block = std::int64_t{rows_per_thread} * block_y;
  // Enough row blocks to cover the rows, capped by the grid's y limit (the kernel strides).
  const std::int64_t grid_y = std::min<std::int64_t>((rows + rows_per_block - 1) / rows_per_block, 65535);
  if (grid_x > INT_MAX) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y));
  const dim3 block(static_cast<unsigned>(block_x), static_cast<unsigned>(block_y));
  return with_function(f, [&](auto fn) {
    constexpr Function kF = decltype(fn)::value;
    switch (rows_per_thread) {
      case 1: bias_column_vec_kernel<kF, 1><<<grid, block, 0, stream>>>(x, b, y, rows, cols, packed); break;
      case 2: bias_column_vec_kernel<kF, 2><<<grid, block, 0, stream>>>(x, b, y, rows, cols, packed); break;
      case 4: bias_column_vec_kernel<kF, 4><<<grid, block, 0, stream>>>(x, b, y, rows, cols, packed); break;
      case 8: bias_column_vec_kernel<kF, 8><<<grid, block, 0, stream>>>(x, b, y, rows, cols, packed); break;
      default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
  });
}

#define SHAPETUNE_INSTANTIATE_ACTIVATION(T)                                                                         \
  template cudaError_t forward_scalar<T>(Function, const T*, T*, std::int64_t, int, int, cudaStream_t);             \
  template cudaError_t backward_scalar<T>(Function, const T*, const T*, T*, std::int64_t, int, int, cudaStream_t);  \
  template cudaError_t forward_vec<T>(Function, const T*, T*, std::int64_t, int, int, cudaStream_t);                \
  template cudaError_t backward_vec<T>(Function, const T*, const T*, T*, std::int64_t, int, int, cudaStream_t);     \
  template cudaError_t bias_forward_scalar<T>(Function, const T*, const T*, T*, std::int64_t, int, int, int,        \
                                              cudaStream_t);                                                        \
  template cudaError_t bias_forward_row_vec<T>(Function, const T*, const T*, T*, std::int64_t, int, int, int,       \
                                               cudaStream_t);                                                       \
  template cudaError_t bias_forward_flat_vec<T>(Function, const T*, const T*, T*, std::int64_t, int, int, int,      \
                                                cudaStream_t);                                                      \
  template cudaError_t bias_forward_column_vec<T>(Function, const T*, const T*, T*, std::int64_t, int, int, int,    \
                                                  cudaStream_t);

SHAPETUNE_INSTANTIATE_ACTIVATION(float)
SHAPETUNE_INSTANTIATE_ACTIVATION(__half)
SHAPETUNE_INSTANTIATE_ACTIVATION(__nv_bfloat16)

}  // namespace shapetune::kernels::activation
