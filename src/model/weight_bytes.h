// Bytes of a model's stored weights, in total and by type: the one tally behind the start-up
// banner's weights line and `kvserve plan`'s weights of a GGUF file, so that a mixed-type file
// (q4_k_m: q4_k, q6_k, q5_0 ... and f32 norms) reports its real size. Plain values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/gguf.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace kvserve {

struct WeightBytesByType {
  int64_t total_bytes = 0;
  std::vector<std::pair<DType, int64_t>> by_type;  // largest first (ties: dtype order)

  // "101.6 MiB (q4_k 62.0 MiB, q6_k 25.3 MiB, q5_0 14.1 MiB, f32 0.2 MiB)"; one type gives
  // "101.6 MiB (q8_0)", none "0 B".
  std::string ToString() const;
  // The type holding the most bytes ("none" without tensors).
  std::string main_type() const;
};

// Adds up (dtype, bytes) pairs, one per tensor.
WeightBytesByType TallyWeightBytes(const std::vector<std::pair<DType, int64_t>>& tensors);
// The tensors of a loaded model (their num_bytes()).
WeightBytesByType TallyWeightBytes(const std::map<std::string, Tensor>& tensors);
// A GGUF file's tensor infos (their num_bytes as stored; no data is read).
WeightBytesByType TallyWeightBytes(const std::vector<GgufTensorInfo>& tensors);

// "512 B", "40.5 KiB" (below 0.1 MiB), "0.2 MiB", "101.6 MiB", "1.23 GiB" (binary units, as
// llama.cpp prints sizes).
std::string FormatWeightBytes(int64_t bytes);

}  // namespace kvserve
