// What both halves of the recurrent family's catalogue (rnn.cpp, the forward; rnn_backward.cpp,
// the backward) read off a problem: the cell, from the primitive's family, and the four axes.
#pragma once

#include <cstdint>

#include "core/primitive_name.hpp"
#include "core/types.hpp"
#include "kernels/rnn/rnn.cuh"

namespace shapetune {

struct RnnProblem {
  kernels::rnn::Cell cell;
  std::int64_t steps, batch, input, hidden;
  int gates;
};

inline RnnProblem rnn_of(const Problem& p) {
  namespace kr = kernels::rnn;
  const kr::Cell cell = PrimitiveName::parse(p.primitive)->family == "gru" ? kr::Cell::gru : kr::Cell::lstm;
  return {cell, p.shape.at("T"), p.shape.at("N"), p.shape.at("D"), p.shape.at("H"), kr::gate_count(cell)};
}

}  // namespace shapetune
