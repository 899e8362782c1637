// Where the bits of an NVFP4 weight word go (w4_layout.h), and how the
// kernels widen one: host and device code, so the repack and the device
// arithmetic are tested together on the CPU (tests/ref/w4_layout_test.cc).
//
// A packed 32-bit word holds eight e2m1 codes: A-register p (0..3) of one
// mma k-step, its two bf16 halves h (0: bits 0-15, 1: bits 16-31). The
// kernels need each code's sign at bf16 bit 15 and its three magnitude bits
// (e1 e0 m) at bits 8..6 of its half: that bf16 is the e2m1 value x 2^-126
// exactly (subnormal for e = 0), and the block scale's multiply restores it.
//
// Int4 codes sit as plain nibbles (register p at bits 4p and 16 + 4p), but
// e2m1 bits placed that way need two shifts and two logic operations a
// register (15 a word). Here each code bit sits where a rotation of the word
// brings it to its bf16 position:
//   register 0: the word itself                        (1 op: AND)
//   register 1: the word rotated right by 6             (2 ops)
//   register 2: the word rotated right by 12            (2 ops)
//   register 3: rotated right by 2 (sign, e1, e0) and by 10 (m)   (4 ops)
// 9 integer operations a word. No placement does it with one rotation a
// register: an exhaustive search over rotations finds no four that tile
// the word, so one register takes two (9 is the least that search found).
#ifndef SPAR_KERNELS_CUDA_GEMM_NVFP4_WORD_H_
#define SPAR_KERNELS_CUDA_GEMM_NVFP4_WORD_H_

#include <cstdint>

#include "base/host_device.h"

namespace spar::gemm::nvfp4_word {

// bf16 bit of code bit i (0 m, 1 e0, 2 e1, 3 sign) in half 0.
SPAR_HOST_DEVICE constexpr int TargetBit(int i) { return i == 3 ? 15 : 6 + i; }

// How far right register p's word is rotated to bring code bit i home.
SPAR_HOST_DEVICE constexpr int Rotation(int p, int i) {
  return p == 0 ? 0 : p == 1 ? 6 : p == 2 ? 12 : (i == 0 ? 10 : 2);
}

// The word bit that holds bit i of the code of register p, half h.
SPAR_HOST_DEVICE constexpr int SourceBit(int p, int h, int i) { return (TargetBit(i) + 16 * h + Rotation(p, i)) % 32; }

// The word bits of every code value at every place (p, h): the repack ORs
// eight of them a word, over every 4-bit weight of the model at load.
struct PlacementTable {
  uint32_t bits[4][2][16];
  constexpr PlacementTable() : bits{} {
    for (int p = 0; p < 4; ++p) {
      for (int h = 0; h < 2; ++h) {
        for (int code = 0; code < 16; ++code) {
          for (int i = 0; i < 4; ++i) {
            if ((code >> i) & 1) bits[p][h][code] |= 1u << SourceBit(p, h, i);
          }
        }
      }
    }
  }
};
inline constexpr PlacementTable kPlacement{};

// codes[p][h]: the e2m1 nibbles of register p's two halves.
inline uint32_t PackWord(const uint8_t (&codes)[4][2]) {
  uint32_t word = 0;
  for (int p = 0; p < 4; ++p) {
    for (int h = 0; h < 2; ++h) word |= kPlacement.bits[p][h][codes[p][h] & 0xF];
  }
  return word;
}

inline uint8_t CodeOf(uint32_t word, int p, int h) {
  uint32_t code = 0;
  for (int i = 0; i < 4; ++i) code |= ((word >> SourceBit(p, h, i)) & 1u) << i;
  return static_cast<uint8_t>(code);
}

template <int n>
SPAR_HOST_DEVICE inline uint32_t RotateRight(uint32_t x) {
  static_assert(n > 0 && n < 32, "rotation");
#ifdef __CUDA_ARCH__
  return __funnelshift_r(x, x, n);
#else
  return x >> n | x << (32 - n);
#endif
}

inline constexpr uint32_t kSignAndMagnitude = 0x81C081C0u;  // bits 15, 8..6 of each half

// Register p of a packed word as bf16x2 bit patterns worth value x 2^-126.
template <int p>
SPAR_HOST_DEVICE inline uint32_t E2m1PairBits(uint32_t word) {
  static_assert(p >= 0 && p < 4, "A register");
  if constexpr (p == 0) {
    return word & kSignAndMagnitude;
  } else if constexpr (p == 1) {
    return RotateRight<6>(word) & kSignAndMagnitude;
  } else if constexpr (p == 2) {
    return RotateRight<12>(word) & kSignAndMagnitude;
  } else {
    return (RotateRight<2>(word) & 0x81808180u) | (RotateRight<10>(word) & 0x00400040u);
  }
}

// Register p (an unrolled loop index) of a packed word.
SPAR_HOST_DEVICE inline uint32_t E2m1PairBitsOf(uint32_t word, int p) {
  return p == 0   ? E2m1PairBits<0>(word)
         : p == 1 ? E2m1PairBits<1>(word)
         : p == 2 ? E2m1PairBits<2>(word)
                  : E2m1PairBits<3>(word);
}

// The placement is a bijection (E2m1PairBits' agreement with SourceBit is
// tests/ref/w4_layout_test.cc's).
SPAR_HOST_DEVICE constexpr bool PlacementCoversTheWord() {
  uint32_t seen = 0;
  for (int p = 0; p < 4; ++p) {
    for (int h = 0; h < 2; ++h) {
      for (int i = 0; i < 4; ++i) seen |= 1u << SourceBit(p, h, i);
    }
  }
  return seen == 0xFFFFFFFFu;
}
static_assert(PlacementCoversTheWord(), "every word bit holds exactly one code bit");

}  // namespace spar::gemm::nvfp4_word

#endif  // SPAR_KERNELS_CUDA_GEMM_NVFP4_WORD_H_
