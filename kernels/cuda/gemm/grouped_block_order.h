// Which work entry and output row tile a block of a grouped (MoE) GEMM
// launch computes: host and device code, so the order is tested on the CPU
// (tests/kernels/gemm/gemm_config_test.cc). Used by the W8A16 tile kernel
// (w8a16_gemm_kernel.cuh) and the three W4A16 kernels (w4a16_block_steps.cuh).
//
// A grouped launch's grid is (work entries, row tiles[, K splits]), and
// blocks start in the order of their linear index, x fastest. Read as
// (entry = x, tile = y), the blocks resident at once were one tile each of
// as many different entries, so an entry's activation rows came back into
// L2 once for every output tile it has, a pass over all entries later (a
// 4096-token prefill chunk: ~1.5 MB of rows an entry, ~256 entries, a 50 MB
// L2 that the weights stream through). Here linear index i is entry
// i / row_tiles, tile i % row_tiles: one entry's tiles run together and
// share its rows, and the blocks past the launch's last entry (work lists
// are sized for the most entries there can be) are the grid's last.
#ifndef SPAR_KERNELS_CUDA_GEMM_GROUPED_BLOCK_ORDER_H_
#define SPAR_KERNELS_CUDA_GEMM_GROUPED_BLOCK_ORDER_H_

#include "base/host_device.h"

namespace spar::gemm {

struct GroupedBlock {
  unsigned entry;     // the work entry (an expert's run of rows)
  unsigned row_tile;  // which output tile of its rows
};

// Block (x, y) of a grouped launch whose grid is grid_x entries x grid_y
// row tiles (any K split is the grid's z and keeps its own order).
SPAR_HOST_DEVICE inline GroupedBlock GroupedBlockAt(unsigned x, unsigned y, unsigned grid_x, unsigned grid_y) {
  const unsigned linear = y * grid_x + x;
  const unsigned entry = linear / grid_y;
  return {entry, linear - entry * grid_y};
}

}  // namespace spar::gemm

#endif  // SPAR_KERNELS_CUDA_GEMM_GROUPED_BLOCK_ORDER_H_
