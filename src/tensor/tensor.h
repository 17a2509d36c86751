// Tensor: a typed, row-major, N-D array that either views memory owned elsewhere (a memory-
// mapped model file) or shares ownership of a heap buffer. Copying a Tensor copies the view,
// never the data. Shapes list the outermost dimension first: a weight matrix used as y = W x
// has shape [out_features, in_features] with each row of in_features contiguous (GGUF's ne[]
// lists the same dimensions innermost first).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace kvserve {

struct Tensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;       // outermost first
  const void* data = nullptr;       // first byte of the first element
  std::shared_ptr<const void> owner;  // keeps `data` alive (mmap or heap); may be null for views
  // The same matrix repacked for the matmul kernel of the SIMD level that made it
  // (kernels::PackMatmulWeights), or null. Matmul uses it at that level and `data` otherwise.
  std::shared_ptr<const void> packed;

  int64_t num_elements() const;
  int64_t num_bytes() const;   // DTypeRowBytes over the innermost dimension times the rest
  int64_t rows() const;        // product of all but the innermost dimension (1 for 1-D)
  int64_t cols() const;        // innermost dimension
  int64_t row_bytes() const { return DTypeRowBytes(dtype, cols()); }
  const void* row(int64_t r) const {
    return static_cast<const char*>(data) + r * row_bytes();
  }
  bool empty() const { return data == nullptr; }
  std::string ShapeString() const;  // "[576, 49152]"

  // Allocates zero-filled heap storage.
  static Tensor Allocate(DType dtype, std::vector<int64_t> shape);
  // Mutable access to storage created by Allocate().
  void* mutable_data() const { return const_cast<void*>(data); }
};

}  // namespace kvserve
