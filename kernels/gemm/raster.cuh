// The order in which a GEMM's blocks take their output tiles: groups of `group_rows` tile rows,
// walked column by column, so the blocks resident at one time cover a roughly square patch of C
// and share its A rows and B columns in L2 instead of streaming whole rows of tiles.
#pragma once

#include <cuda_runtime.h>

namespace shapetune::kernels::gemm {

template <typename Index>
struct TileIndex {
  Index m, n;
};

// Tile (row, column) of block `block` in a tiles_m x tiles_n grid. Index is int where the
// caller keeps group_rows * tiles_n below 2^31, else std::int64_t.
template <typename Index>
__device__ __forceinline__ TileIndex<Index> grouped_tile(Index block, Index group_rows, Index tiles_m, Index tiles_n) {
  const Index per_group = group_rows * tiles_n;
  const Index group = block / per_group;
  const Index first_m = group * group_rows;
  const Index rows_in_group = tiles_m - first_m < group_rows ? tiles_m - first_m : group_rows;
  const Index in_group = block % per_group;
  return {first_m + in_group % rows_in_group, in_group / rows_in_group};
}

}  // namespace shapetune::kernels::gemm
