#include "tensor/tensor.h"

#include <cstdlib>
#include <sstream>

#include "base/check.h"

namespace kvserve {

int64_t Tensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Tensor::cols() const { return shape.empty() ? 1 : shape.back(); }

int64_t Tensor::rows() const {
  int64_t n = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) n *= shape[i];
  return n;
}

int64_t Tensor::num_bytes() const { return rows() * row_bytes(); }

std::string Tensor::ShapeString() const {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

Tensor Tensor::Allocate(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  int64_t bytes = t.num_bytes();
  // 64-byte alignment for SIMD loads.
  size_t alloc = static_cast<size_t>((bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, alloc == 0 ? 64 : alloc);
  KV_CHECK(p != nullptr) << "out of memory allocating " << bytes << " bytes";
  std::memset(p, 0, alloc == 0 ? 64 : alloc);
  t.owner = std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  t.data = p;
  return t;
}

}  // namespace kvserve
