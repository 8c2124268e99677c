#include <cmath>

#include "baselines/reference.hpp"
#include "core/parallel.hpp"

namespace shapetune::reference {

void adam(const std::int64_t* sizes, std::int64_t tensors, const AdamHyperparameters& h, double* params,
          const double* grads, double* exp_avg, double* exp_avg_sq) {
  const double bias_correction1 = 1 - std::pow(h.beta1, h.step);
  const double bias_correction2 = 1 - std::pow(h.beta2, h.step);
  std::int64_t offset = 0;
  for (std::int64_t k = 0; k < tensors; ++k) {
    double* p = params + offset;
    const double* g = grads + offset;
    double* m = exp_avg + offset;
    double* v = exp_avg_sq + offset;
    parallel_for(sizes[k], 1 << 16, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        m[i] = h.beta1 * m[i] + (1 - h.beta1) * g[i];
        v[i] = h.beta2 * v[i] + (1 - h.beta2) * g[i] * g[i];
        const double m_hat = m[i] / bias_correction1;
        const double v_hat = v[i] / bias_correction2;
        p[i] -= h.lr * (m_hat / (std::sqrt(v_hat) + h.eps) + h.weight_decay * p[i]);
      }
    });
    offset += sizes[k];
  }
}

}  // namespace shapetune::reference
