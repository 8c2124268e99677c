#include <algorithm>
#include <cmath>
#include <numbers>

#include "baselines/reference.hpp"
#include "core/parallel.hpp"

namespace shapetune::reference {
namespace {

constexpr std::int64_t kGrain = 1 << 16;
constexpr double kTanhScale = 0.7978845608028654;  // sqrt(2 / pi), spelled as gelu_tanh's definition does
constexpr double kTanhCubic = 0.044715;

// The logistic s(z) and 1 - s(z), each computed without cancellation (exp only of -|z|).
struct Logistic {
  double s;
  double complement;
};

Logistic logistic(double z) {
  const double t = std::exp(-std::fabs(z));
  const double large = 1 / (1 + t), small = t / (1 + t);
  return z >= 0 ? Logistic{large, small} : Logistic{small, large};
}

// Phi(x) through erfc: 1 + erf(x / sqrt 2) would lose the left tail's digits, even in double.
double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }
double normal_pdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi); }

// gelu_tanh's 0.5 x (1 + tanh(u)) is x s(2u): the same value, no cancellation for negative x.
double gelu_tanh_twice_u(double x) { return 2 * kTanhScale * (x + kTanhCubic * x * x * x); }

}  // namespace

double activation(Activation f, double x) {
  switch (f) {
    case Activation::relu: return x > 0 ? x : 0;
    case Activation::gelu: return x * normal_cdf(x);
    case Activation::gelu_tanh: return x * logistic(gelu_tanh_twice_u(x)).s;
    case Activation::sigmoid: return logistic(x).s;
    case Activation::silu: return x * logistic(x).s;
  }
  return NAN;
}

double activation_derivative(Activation f, double x) {
  switch (f) {
    case Activation::relu: return x > 0 ? 1 : 0;
    case Activation::gelu: return normal_cdf(x) + x * normal_pdf(x);
    case Activation::gelu_tanh: {
      // d/dx x s(2u) = s + x s (1 - s) (2u)'.
      const Logistic l = logistic(gelu_tanh_twice_u(x));
      const double twice_u_slope = 2 * kTanhScale * (1 + 3 * kTanhCubic * x * x);
      return l.s + x * l.s * l.complement * twice_u_slope;
    }
    case Activation::sigmoid: {
      const Logistic l = logistic(x);
      return l.s * l.complement;
    }
    case Activation::silu: {
      const Logistic l = logistic(x);
      return l.s + x * l.s * l.complement;
    }
  }
  return NAN;
}

void activation_forward(Activation f, std::int64_t n, const double* x, double* y) {
  parallel_for(n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) y[i] = activation(f, x[i]);
  });
}

void activation_backward(Activation f, std::int64_t n, const double* x, const double* dy, double* dx) {
  parallel_for(n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) dx[i] = dy[i] * activation_derivative(f, x[i]);
  });
}

void bias_activation(Activation f, std::int64_t rows, std::int64_t cols, const double* x, const double* b, double* y) {
  parallel_for(rows, std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(cols, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t r = begin; r < end; ++r)
                   for (std::int64_t c = 0; c < cols; ++c) y[r * cols + c] = activation(f, x[r * cols + c] + b[c]);
               });
}

}  // namespace shapetune::reference
