// Small, fast, deterministic 64-bit mixing (splitmix64), for hashing token ids and for
// reproducible pseudo-random sequences. Not cryptographic.
#pragma once

#include <cstdint>

namespace kvserve {

// The splitmix64 finalizer: a bijection of 64-bit values with good avalanche.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Combines a running hash with one more value (order matters).
inline uint64_t HashCombine(uint64_t seed, uint64_t value) {
  return SplitMix64(seed ^ SplitMix64(value));
}

}  // namespace kvserve
