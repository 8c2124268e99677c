// Grid sizes for grid-stride loops.
#pragma once

#include <cstddef>

namespace shapetune::kernels {

// One block per `threads` items, at least one and at most `max_blocks` (enough to fill any
// current GPU several times over); a grid-stride loop covers the rest.
inline unsigned grid_stride_blocks(std::size_t items, unsigned threads, unsigned max_blocks) {
  const std::size_t wanted = (items + threads - 1) / threads;
  return static_cast<unsigned>(wanted < max_blocks ? (wanted > 0 ? wanted : 1) : max_blocks);
}

}  // namespace shapetune::kernels
