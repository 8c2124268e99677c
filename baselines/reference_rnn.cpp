#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "baselines/reference.hpp"
#include "core/parallel.hpp"

namespace shapetune::reference {
namespace {

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// out[n][r] = b1[r] + b2[r] + sum_k in[n][k] w[r][k] over rows [0, rows) of w, for each batch row
// (b1 and b2 may be null).
void affine(std::int64_t batch, std::int64_t rows, std::int64_t width, const double* in, const double* w,
            const double* b1, const double* b2, double* out) {
  parallel_for(batch, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t n = begin; n < end; ++n)
      for (std::int64_t r = 0; r < rows; ++r) {
        double acc = (b1 ? b1[r] : 0.0) + (b2 ? b2[r] : 0.0);
        const double* wr = w + r * width;
        const double* v = in + n * width;
        for (std::int64_t k = 0; k < width; ++k) acc += v[k] * wr[k];
        out[n * rows + r] = acc;
      }
  });
}

// out[n][k] = add[n][k] + sum_r grad[n][r] w[r][k]: a gradient carried back through y = x W^T
// (add may be null). Split over k: the batch may be a single row.
void back_through(std::int64_t batch, std::int64_t rows, std::int64_t width, const double* grad, const double* w,
                  const double* add, double* out) {
  parallel_for(width, 64, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t n = 0; n < batch; ++n) {
      double* o = out + n * width;
      for (std::int64_t k = begin; k < end; ++k) o[k] = add ? add[n * width + k] : 0.0;
      for (std::int64_t r = 0; r < rows; ++r) {
        const double g = grad[n * rows + r];
        const double* wr = w + r * width;
        for (std::int64_t k = begin; k < end; ++k) o[k] += g * wr[k];
      }
    }
  });
}

// dw[r][k] += sum_n grad[n][r] in[n][k] and db[r] += sum_n grad[n][r]: one step's share of the
// weight and bias gradients of y = x W^T + b (db may be null).
void accumulate_weights(std::int64_t batch, std::int64_t rows, std::int64_t width, const double* grad,
                        const double* in, double* dw, double* db) {
  parallel_for(rows, 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r)
      for (std::int64_t n = 0; n < batch; ++n) {
        const double g = grad[n * rows + r];
        if (db) db[r] += g;
        const double* v = in + n * width;
        double* row = dw + r * width;
        for (std::int64_t k = 0; k < width; ++k) row[k] += g * v[k];
      }
  });
}

// What a backward pass reads of the forward, per step [T][N, H] (c: [T + 1][N, H], c0 first).
// LSTM: the activated gates i, f, g, o; GRU: r, z, n and W_hn h + b_hn in the first four slots.
struct Tape {
  std::vector<double> gate[4], c, h_prev;
};

void lstm_run(const RnnShape& s, const double* x, const double* h0, const double* c0, const double* w_ih,
              const double* w_hh, const double* b_ih, const double* b_hh, Rounding round_h, double* y, double* h_t,
              double* c_t, Tape* tape) {
  const std::int64_t N = s.batch, H = s.hidden, D = s.input, G = 4 * H;
  std::vector<double> h(h0, h0 + N * H), c(c0, c0 + N * H), in_gates(N * G), rec_gates(N * G);
  if (tape) {
    for (auto& g : tape->gate) g.resize(s.steps * N * H);
    tape->h_prev.resize(s.steps * N * H);
    tape->c.assign(c0, c0 + N * H);
    tape->c.resize((s.steps + 1) * N * H);
  }
  for (std::int64_t t = 0; t < s.steps; ++t) {
    if (tape) std::copy(h.begin(), h.end(), tape->h_prev.begin() + t * N * H);
    affine(N, G, D, x + t * N * D, w_ih, b_ih, b_hh, in_gates.data());
    affine(N, G, H, h.data(), w_hh, nullptr, nullptr, rec_gates.data());
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t j = 0; j < H; ++j) {
        auto gate = [&](int g) { return in_gates[n * G + g * H + j] + rec_gates[n * G + g * H + j]; };
        const double i = sigmoid(gate(0)), f = sigmoid(gate(1)), g = std::tanh(gate(2)), o = sigmoid(gate(3));
        double& cell = c[n * H + j];
        cell = f * cell + i * g;
        const double hv = round_h(o * std::tanh(cell));
        y[(t * N + n) * H + j] = hv;
        h[n * H + j] = hv;
        if (tape) {
          const std::int64_t e = t * N * H + n * H + j;
          tape->gate[0][e] = i, tape->gate[1][e] = f, tape->gate[2][e] = g, tape->gate[3][e] = o;
          tape->c[e + N * H] = cell;
        }
      }
  }
  for (std::int64_t e = 0; e < N * H; ++e) {
    h_t[e] = h[e];
    c_t[e] = c[e];
  }
}

void gru_run(const RnnShape& s, const double* x, const double* h0, const double* w_ih, const double* w_hh,
             const double* b_ih, const double* b_hh, Rounding round_h, double* y, double* h_t, Tape* tape) {
  const std::int64_t N = s.batch, H = s.hidden, D = s.input, G = 3 * H;
  std::vector<double> h(h0, h0 + N * H), in_gates(N * G), rec_gates(N * G);
  if (tape) {
    for (auto& g : tape->gate) g.resize(s.steps * N * H);
    tape->h_prev.resize(s.steps * N * H);
  }
  for (std::int64_t t = 0; t < s.steps; ++t) {
    if (tape) std::copy(h.begin(), h.end(), tape->h_prev.begin() + t * N * H);
    affine(N, G, D, x + t * N * D, w_ih, b_ih, nullptr, in_gates.data());
    affine(N, G, H, h.data(), w_hh, b_hh, nullptr, rec_gates.data());
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t j = 0; j < H; ++j) {
        const double* gi = in_gates.data() + n * G;
        const double* gh = rec_gates.data() + n * G;
        const double r = sigmoid(gi[j] + gh[j]);
        const double z = sigmoid(gi[H + j] + gh[H + j]);
        const double nn = std::tanh(gi[2 * H + j] + r * gh[2 * H + j]);
        const double hv = round_h((1 - z) * nn + z * h[n * H + j]);
        y[(t * N + n) * H + j] = hv;
        h[n * H + j] = hv;
        if (tape) {
          const std::int64_t e = t * N * H + n * H + j;
          tape->gate[0][e] = r, tape->gate[1][e] = z, tape->gate[2][e] = nn, tape->gate[3][e] = gh[2 * H + j];
        }
      }
  }
  for (std::int64_t e = 0; e < N * H; ++e) h_t[e] = h[e];
}

}  // namespace

double round_to_f32(double v) { return static_cast<float>(v); }
double round_to_f16(double v) { return __half2float(__float2half_rn(static_cast<float>(v))); }
double round_to_bf16(double v) { return __bfloat162float(__float2bfloat16_rn(static_cast<float>(v))); }

Rounding rounding_for(DType dtype) {
  return dtype == DType::f16 ? round_to_f16 : dtype == DType::bf16 ? round_to_bf16 : round_to_f32;
}

void lstm_forward(const RnnShape& s, const double* x, const double* h0, const double* c0, const double* w_ih,
                  const double* w_hh, const double* b_ih, const double* b_hh, Rounding round_h, double* y,
                  double* h_t, double* c_t) {
  lstm_run(s, x, h0, c0, w_ih, w_hh, b_ih, b_hh, round_h, y, h_t, c_t, nullptr);
}

void gru_forward(const RnnShape& s, const double* x, const double* h0, const double* w_ih, const double* w_hh,
                 const double* b_ih, const double* b_hh, Rounding round_h, double* y, double* h_t) {
  gru_run(s, x, h0, w_ih, w_hh, b_ih, b_hh, round_h, y, h_t, nullptr);
}

void lstm_backward(const RnnShape& s, const double* x, const double* h0, const double* c0, const double* w_ih,
                   const double* w_hh, const double* b_ih, const double* b_hh, Rounding round_h, const double* dy,
                   const double* dh_t, const double* dc_t, double* dx, double* dh0, double* dc0, double* dw_ih,
                   double* dw_hh, double* db_ih, double* db_hh) {
  const std::int64_t T = s.steps, N = s.batch, H = s.hidden, D = s.input, G = 4 * H, NH = N * H;
  Tape tape;
  std::vector<double> y(T * NH), h_last(NH), c_last(NH);
  lstm_run(s, x, h0, c0, w_ih, w_hh, b_ih, b_hh, round_h, y.data(), h_last.data(), c_last.data(), &tape);

  std::fill(dw_ih, dw_ih + G * D, 0.0);
  std::fill(dw_hh, dw_hh + G * H, 0.0);
  std::fill(db_ih, db_ih + G, 0.0);
  std::vector<double> dh(dh_t, dh_t + NH), dc(dc_t, dc_t + NH), dgates(N * G);
  for (std::int64_t t = T - 1; t >= 0; --t) {
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t j = 0; j < H; ++j) {
        const std::int64_t e = n * H + j, at = t * NH + e;
        const double i = tape.gate[0][at], f = tape.gate[1][at], g = tape.gate[2][at], o = tape.gate[3][at];
        const double tanh_c = std::tanh(tape.c[at + NH]);
        const double dh_total = dy[at] + dh[e];
        const double dc_total = dc[e] + dh_total * o * (1 - tanh_c * tanh_c);
        double* d = dgates.data() + n * G;
        d[j] = dc_total * g * i * (1 - i);
        d[H + j] = dc_total * tape.c[at] * f * (1 - f);
        d[2 * H + j] = dc_total * i * (1 - g * g);
        d[3 * H + j] = dh_total * tanh_c * o * (1 - o);
        dc[e] = dc_total * f;
      }
    back_through(N, G, D, dgates.data(), w_ih, nullptr, dx + t * N * D);
    back_through(N, G, H, dgates.data(), w_hh, nullptr, dh.data());
    accumulate_weights(N, G, D, dgates.data(), x + t * N * D, dw_ih, db_ih);
    accumulate_weights(N, G, H, dgates.data(), tape.h_prev.data() + t * NH, dw_hh, nullptr);
  }
  // Both biases enter the same sum, so their gradients are the same.
  std::copy(db_ih, db_ih + G, db_hh);
  std::copy(dh.begin(), dh.end(), dh0);
  std::copy(dc.begin(), dc.end(), dc0);
}

void gru_backward(const RnnShape& s, const double* x, const double* h0, const double* w_ih, const double* w_hh,
                  const double* b_ih, const double* b_hh, Rounding round_h, const double* dy, const double* dh_t,
                  double* dx, double* dh0, double* dw_ih, double* dw_hh, double* db_ih, double* db_hh) {
  const std::int64_t T = s.steps, N = s.batch, H = s.hidden, D = s.input, G = 3 * H, NH = N * H;
  Tape tape;
  std::vector<double> y(T * NH), h_last(NH);
  gru_run(s, x, h0, w_ih, w_hh, b_ih, b_hh, round_h, y.data(), h_last.data(), &tape);

  std::fill(dw_ih, dw_ih + G * D, 0.0);
  std::fill(dw_hh, dw_hh + G * H, 0.0);
  std::fill(db_ih, db_ih + G, 0.0);
  std::fill(db_hh, db_hh + G, 0.0);
  // The input side's gradients and the hidden side's differ in the candidate's rows only: r
  // multiplies W_hn h + b_hn, so those get r dn where W_in x + b_in get dn.
  std::vector<double> dh(dh_t, dh_t + NH), through_z(NH), d_input(N * G), d_hidden(N * G);
  for (std::int64_t t = T - 1; t >= 0; --t) {
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t j = 0; j < H; ++j) {
        const std::int64_t e = n * H + j, at = t * NH + e;
        const double r = tape.gate[0][at], z = tape.gate[1][at], nn = tape.gate[2][at], hidden_n = tape.gate[3][at];
        const double dh_total = dy[at] + dh[e];
        const double dn = dh_total * (1 - z) * (1 - nn * nn);
        const double dr = dn * hidden_n * r * (1 - r);
        const double dz = dh_total * (tape.h_prev[at] - nn) * z * (1 - z);
        double* di = d_input.data() + n * G;
        double* dhid = d_hidden.data() + n * G;
        di[j] = dhid[j] = dr;
        di[H + j] = dhid[H + j] = dz;
        di[2 * H + j] = dn;
        dhid[2 * H + j] = r * dn;
        through_z[e] = dh_total * z;
      }
    back_through(N, G, D, d_input.data(), w_ih, nullptr, dx + t * N * D);
    back_through(N, G, H, d_hidden.data(), w_hh, through_z.data(), dh.data());
    accumulate_weights(N, G, D, d_input.data(), x + t * N * D, dw_ih, db_ih);
    accumulate_weights(N, G, H, d_hidden.data(), tape.h_prev.data() + t * NH, dw_hh, db_hh);
  }
  std::copy(dh.begin(), dh.end(), dh0);
}


void lstm_cell_forward(std::int64_t batch, std::int64_t hidden, const double* gx, const double* gh,
                       const double* b_ih, const double* b_hh, const double* c_prev, Rounding round_h, double* h,
                       double* c, double* saved) {
  const std::int64_t H = hidden, G = 4 * H;
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t j = 0; j < H; ++j) {
      const auto pre = [&](int g) {
        const std::int64_t k = g * H + j;
        return gx[n * G + k] + gh[n * G + k] + b_ih[k] + b_hh[k];
      };
      const double i = sigmoid(pre(0)), f = sigmoid(pre(1)), g = std::tanh(pre(2)), o = sigmoid(pre(3));
      const std::int64_t e = n * H + j;
      c[e] = f * c_prev[e] + i * g;
      h[e] = round_h(o * std::tanh(c[e]));
      double* keep = saved + n * 4 * H;
      keep[j] = i, keep[H + j] = f, keep[2 * H + j] = g, keep[3 * H + j] = o;
    }
}

void gru_cell_forward(std::int64_t batch, std::int64_t hidden, const double* gx, const double* gh, const double* b_ih,
                      const double* b_hh, const double* h_prev, Rounding round_h, double* h, double* saved) {
  const std::int64_t H = hidden, G = 3 * H;
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t j = 0; j < H; ++j) {
      const double* in = gx + n * G;
      const double* rec = gh + n * G;
      const double r = sigmoid(in[j] + b_ih[j] + rec[j] + b_hh[j]);
      const double z = sigmoid(in[H + j] + b_ih[H + j] + rec[H + j] + b_hh[H + j]);
      const double hidden_n = rec[2 * H + j] + b_hh[2 * H + j];
      const double nn = std::tanh(in[2 * H + j] + b_ih[2 * H + j] + r * hidden_n);
      const std::int64_t e = n * H + j;
      h[e] = round_h((1 - z) * nn + z * h_prev[e]);
      double* keep = saved + n * 4 * H;
      keep[j] = r, keep[H + j] = z, keep[2 * H + j] = nn, keep[3 * H + j] = hidden_n;
    }
}

void lstm_cell_backward(std::int64_t batch, std::int64_t hidden, const double* saved, const double* c_prev,
                        const double* c, const double* dy, const double* dh, double* dc, double* d_gates) {
  const std::int64_t H = hidden;
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t j = 0; j < H; ++j) {
      const double* keep = saved + n * 4 * H;
      const double i = keep[j], f = keep[H + j], g = keep[2 * H + j], o = keep[3 * H + j];
      const std::int64_t e = n * H + j;
      const double tanh_c = std::tanh(c[e]);
      const double dh_total = dy[e] + dh[e];
      const double dc_total = dc[e] + dh_total * o * (1 - tanh_c * tanh_c);
      double* d = d_gates + n * 4 * H;
      d[j] = dc_total * g * i * (1 - i);
      d[H + j] = dc_total * c_prev[e] * f * (1 - f);
      d[2 * H + j] = dc_total * i * (1 - g * g);
      d[3 * H + j] = dh_total * tanh_c * o * (1 - o);
      dc[e] = dc_total * f;
    }
}

void gru_cell_backward(std::int64_t batch, std::int64_t hidden, const double* saved, const double* h_prev,
                       const double* dy, double* dh, double* d_input, double* d_hidden) {
  const std::int64_t H = hidden, G = 3 * H;
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t j = 0; j < H; ++j) {
      const double* keep = saved + n * 4 * H;
      const double r = keep[j], z = keep[H + j], nn = keep[2 * H + j], hidden_n = keep[3 * H + j];
      const std::int64_t e = n * H + j;
      const double dh_total = dy[e] + dh[e];
      const double dn = dh_total * (1 - z) * (1 - nn * nn);
      const double dr = dn * hidden_n * r * (1 - r);
      const double dz = dh_total * (h_prev[e] - nn) * z * (1 - z);
      double* di = d_input + n * G;
      double* dhid = d_hidden + n * G;
      di[j] = dhid[j] = dr;
      di[H + j] = dhid[H + j] = dz;
      di[2 * H + j] = dn;
      dhid[2 * H + j] = r * dn;
      dh[e] = dh_total * z;
    }
}

}  // namespace shapetune::reference
