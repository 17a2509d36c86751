// BodyBuffer: the bytes of one request body, in anonymous memory mappings that grow with
// mremap (no copy, and only the pages written count in the resident size) and go back to the
// kernel when the buffer is destroyed. A 32 MiB body so costs 32 MiB at its peak, where a
// std::string that doubles holds the old and the new copy at once (48-64 MiB), and the
// allocator may keep it after the request. Not thread-safe; movable, not copyable.
#pragma once

#include <cstddef>
#include <string_view>

namespace kvserve::http {

class BodyBuffer {
 public:
  BodyBuffer() = default;
  ~BodyBuffer();
  BodyBuffer(BodyBuffer&& other) noexcept;
  BodyBuffer& operator=(BodyBuffer&& other) noexcept;
  BodyBuffer(const BodyBuffer&) = delete;
  BodyBuffer& operator=(const BodyBuffer&) = delete;

  // Capacity for at least `num_bytes` in all. Returns false when the kernel refuses the
  // mapping (the buffer is then unchanged).
  bool Reserve(size_t num_bytes);
  // Appends; grows the capacity geometrically. False when the mapping cannot grow.
  bool Append(const void* data, size_t num_bytes);
  void Clear();

  std::string_view view() const { return {data_, size_}; }
  size_t size() const { return size_; }
  size_t capacity_bytes() const { return capacity_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;  // bytes mapped (a multiple of the page size)
};

}  // namespace kvserve::http
