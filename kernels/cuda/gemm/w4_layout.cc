#include "kernels/cuda/gemm/w4_layout.h"

#include <cstring>
#include <functional>

#include "base/thread_pool.h"
#include "kernels/cuda/gemm/nvfp4_word.h"

namespace spar::gemm {
namespace {

int64_t RoundUp(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Int4: register p's two codes at bits 4p and 16 + 4p, so (word >> 4p) &
// 0x000F000F is the register's pair.
uint32_t Int4Word(const uint8_t (&codes)[4][2]) {
  uint32_t word = 0;
  for (int p = 0; p < 4; ++p) word |= static_cast<uint32_t>(codes[p][0]) << (4 * p) | static_cast<uint32_t>(codes[p][1]) << (16 + 4 * p);
  return word;
}

// Where packed row r, column k sits: the 32-bit word, its A register and half.
struct Place {
  int64_t word;
  int reg, half;
};

Place PlaceOf(int64_t r, int64_t k, int64_t cols) {
  const int64_t rt = r / 16, rr = r % 16, kc = k / kW4Chunk, kk = k % kW4Chunk;
  const int g = static_cast<int>(rr % 8), upper = static_cast<int>(rr / 8);
  const int t = static_cast<int>(kk / 16), s = static_cast<int>((kk % 16) / 4), j = static_cast<int>(kk % 4);
  const int lane = 4 * g + t;
  // j 0/1 -> register 0 (row g) or 1 (row g+8); j 2/3 -> register 2 or 3.
  return {((rt * (cols / kW4Chunk) + kc) * 32 + lane) * 4 + s, (j / 2) * 2 + upper, j % 2};
}

// A packed row's source: (matrix, row) or none (padding).
using RowSource = std::function<std::pair<const W4Source*, int64_t>(int64_t)>;

// Builds each 32-bit word of a chunk directly (8 nibbles, see the header),
// one 16-row tile at a time on all cores: the repack runs once per weight
// at load, over every expert of the model.
W4Packed Pack(const W4Source& first, int64_t rows, const RowSource& source) {
  W4Packed p;
  p.rows = rows;
  p.rows_padded = RoundUp(rows, kW4RowTile);
  p.cols = first.cols;
  p.fp4 = first.fp4;
  p.group = first.fp4 ? 16 : first.group;
  p.global_scale = first.global_scale;
  p.values.assign(static_cast<size_t>(p.rows_padded * p.cols / 2), 0);
  const int64_t groups = p.cols / p.group, chunks = p.cols / kW4Chunk;
  if (p.fp4) {
    p.fp4_scales.assign(static_cast<size_t>(p.rows_padded * groups), 0);
  } else {
    p.scales.assign(static_cast<size_t>(groups * p.rows_padded), 1.0f);
    p.zeros.assign(static_cast<size_t>(groups * p.rows_padded), 0);
  }
  ParallelFor(p.rows_padded / 16, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t rt = t0; rt < t1; ++rt) {
      const uint8_t* code_row[16];
      for (int i = 0; i < 16; ++i) {
        const auto [m, row] = source(rt * 16 + i);
        code_row[i] = m == nullptr ? nullptr : m->codes + row * p.cols;
        if (m == nullptr) continue;
        for (int64_t g = 0; g < groups; ++g) {
          if (p.fp4) {
            p.fp4_scales[(rt * 16 + i) * groups + g] = m->fp4_scales[row * groups + g];
          } else {
            p.scales[g * p.rows_padded + rt * 16 + i] = m->scales[row * groups + g];
            p.zeros[g * p.rows_padded + rt * 16 + i] = m->zeros[row * groups + g];
          }
        }
      }
      auto code = [&](int i, int64_t k) -> uint32_t { return code_row[i] == nullptr ? 0u : (code_row[i][k] & 0xFu); };
      for (int64_t kc = 0; kc < chunks; ++kc) {
        uint8_t* chunk = p.values.data() + (rt * chunks + kc) * kW4ChunkBytes;
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          for (int s = 0; s < 4; ++s) {
            const int64_t k0 = kc * kW4Chunk + 16 * t + 4 * s;
            // Register 0: row g, k0 / k0+1; 1: row g+8; 2: row g, k0+2 / +3; 3: row g+8.
            uint8_t regs[4][2];
            for (int reg = 0; reg < 4; ++reg) {
              for (int half = 0; half < 2; ++half) regs[reg][half] = static_cast<uint8_t>(code(g + 8 * (reg % 2), k0 + 2 * (reg / 2) + half));
            }
            const uint32_t word = p.fp4 ? nvfp4_word::PackWord(regs) : Int4Word(regs);
            std::memcpy(chunk + lane * 16 + s * 4, &word, 4);
          }
        }
      }
    }
  });
  return p;
}

}  // namespace

W4Source W4SourceOf(const ref::Int4Weights& w) {
  W4Source s;
  s.rows = w.rows;
  s.cols = w.cols;
  s.group = w.group;
  s.codes = w.codes.data();
  s.zeros = w.zeros.data();
  s.scales = w.scales.data();
  return s;
}

W4Source W4SourceOf(const ref::Nvfp4Weights& w) {
  W4Source s;
  s.fp4 = true;
  s.rows = w.rows;
  s.cols = w.cols;
  s.group = ref::kNvfp4Block;
  s.codes = w.codes.data();
  s.fp4_scales = w.scales.data();
  s.global_scale = w.global_scale;
  return s;
}

bool W4LayoutSupports(int64_t cols, int64_t group, bool fp4) {
  if (cols <= 0 || cols % kW4Chunk != 0) return false;
  return fp4 || (group > 0 && group % kW4Chunk == 0 && cols % group == 0);
}

bool W4CanStack(const W4Source& a, const W4Source& b) {
  if (a.cols != b.cols || a.fp4 != b.fp4) return false;
  return a.fp4 ? a.global_scale == b.global_scale : a.group == b.group;
}

W4Packed PackW4Stacked(const std::vector<W4Source>& parts) {
  if (parts.empty()) return W4Packed();
  std::vector<int64_t> first_row(parts.size() + 1, 0);  // part i: rows [first_row[i], first_row[i + 1])
  for (size_t i = 0; i < parts.size(); ++i) first_row[i + 1] = first_row[i] + parts[i].rows;
  return Pack(parts.front(), first_row.back(), [&parts, &first_row](int64_t r) {
    for (size_t i = 0; i < parts.size(); ++i) {
      if (r < first_row[i + 1]) return std::make_pair(&parts[i], r - first_row[i]);
    }
    return std::make_pair(static_cast<const W4Source*>(nullptr), int64_t{0});
  });
}

W4Packed PackW4(const W4Source& m) { return PackW4Stacked({m}); }

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
      uint32_t word;
      std::memcpy(&word, p.values.data() + 4 * at.word, 4);
      codes[r * p.cols + k] = p.fp4 ? nvfp4_word::CodeOf(word, at.reg, at.half)
                                    : static_cast<uint8_t>((word >> (4 * at.reg + 16 * at.half)) & 0xF);
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
