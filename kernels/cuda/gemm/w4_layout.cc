#include "kernels/cuda/gemm/w4_layout.h"

#include <functional>

namespace spar::gemm {
namespace {

int64_t RoundUp(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Where packed row r, column k sits: byte offset and nibble (0 low, 1 high).
struct Place {
  int64_t byte;
  int shift;
};

Place PlaceOf(int64_t r, int64_t k, int64_t cols) {
  const int64_t rt = r / 16, rr = r % 16, kc = k / kW4Chunk, kk = k % kW4Chunk;
  const int g = static_cast<int>(rr % 8), upper = static_cast<int>(rr / 8);
  const int t = static_cast<int>(kk / 16), s = static_cast<int>((kk % 16) / 4), j = static_cast<int>(kk % 4);
  const int lane = 4 * g + t;
  // j 0/1 -> register 0 (row g) or 1 (row g+8); j 2/3 -> register 2 or 3.
  const int reg = (j / 2) * 2 + upper;
  const int nibble = reg + 4 * (j % 2);
  const int64_t word = ((rt * (cols / kW4Chunk) + kc) * 32 + lane) * 4 + s;
  return {word * 4 + nibble / 2, (nibble % 2) * 4};
}

// A packed row's source: (matrix, row) or none (padding).
using RowSource = std::function<std::pair<const W4Source*, int64_t>(int64_t)>;

W4Packed Pack(const W4Source& first, int64_t rows, const RowSource& source) {
  W4Packed p;
  p.rows = rows;
  p.rows_padded = RoundUp(rows, kW4RowTile);
  p.cols = first.cols;
  p.fp4 = first.fp4;
  p.group = first.fp4 ? 16 : first.group;
  p.global_scale = first.global_scale;
  p.values.assign(static_cast<size_t>(p.rows_padded * p.cols / 2), 0);
  const int64_t groups = p.cols / p.group;
  if (p.fp4) {
    p.fp4_scales.assign(static_cast<size_t>(p.rows_padded * groups), 0);
  } else {
    p.scales.assign(static_cast<size_t>(groups * p.rows_padded), 1.0f);
    p.zeros.assign(static_cast<size_t>(groups * p.rows_padded), 0);
  }
  for (int64_t r = 0; r < p.rows_padded; ++r) {
    const auto [m, row] = source(r);
    if (m == nullptr) continue;
    for (int64_t k = 0; k < p.cols; ++k) {
      const Place at = PlaceOf(r, k, p.cols);
      p.values[at.byte] |= static_cast<uint8_t>((m->codes[row * p.cols + k] & 0xF) << at.shift);
    }
    for (int64_t g = 0; g < groups; ++g) {
      if (p.fp4) {
        p.fp4_scales[r * groups + g] = m->fp4_scales[row * groups + g];
      } else {
        p.scales[g * p.rows_padded + r] = m->scales[row * groups + g];
        p.zeros[g * p.rows_padded + r] = m->zeros[row * groups + g];
      }
    }
  }
  return p;
}

}  // namespace

bool W4LayoutSupports(int64_t cols, int64_t group, bool fp4) {
  if (cols <= 0 || cols % kW4Chunk != 0) return false;
  return fp4 || (group > 0 && group % kW4Chunk == 0 && cols % group == 0);
}

W4Packed PackW4(const W4Source& m) {
  return Pack(m, m.rows, [&m](int64_t r) {
    return r < m.rows ? std::make_pair(&m, r) : std::make_pair(static_cast<const W4Source*>(nullptr), int64_t{0});
  });
}

W4Packed PackW4SiluPair(const W4Source& gate, const W4Source& up) {
  const int64_t n = gate.rows;
  W4Packed p = Pack(gate, 2 * n, [&, n](int64_t r) {
    const int64_t q = r / 16, within = r % 16;
    const int64_t row = 8 * q + within % 8;
    if (row >= n) return std::make_pair(static_cast<const W4Source*>(nullptr), int64_t{0});
    return std::make_pair(within < 8 ? &gate : &up, row);
  });
  p.global_scale_up = up.global_scale;
  return p;
}

std::vector<uint8_t> UnpackW4Codes(const W4Packed& p) {
  std::vector<uint8_t> codes(static_cast<size_t>(p.rows_padded * p.cols));
  for (int64_t r = 0; r < p.rows_padded; ++r) {
    for (int64_t k = 0; k < p.cols; ++k) {
      const Place at = PlaceOf(r, k, p.cols);
      codes[r * p.cols + k] = static_cast<uint8_t>((p.values[at.byte] >> at.shift) & 0xF);
    }
  }
  return codes;
}

int64_t W4PackedBytes(int64_t rows, int64_t cols, int64_t group, bool fp4) {
  const int64_t padded = RoundUp(rows, kW4RowTile);
  const int64_t values = padded * cols / 2;
  if (fp4) return values + padded * (cols / 16) + 4;
  return values + padded * (cols / group) * 5;  // fp32 scale + uint8 zero per group
}

}  // namespace spar::gemm
