#include "http/body_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace kvserve::http {

namespace {

size_t RoundUpToPage(size_t n) {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

}  // namespace

BodyBuffer::~BodyBuffer() { Clear(); }

BodyBuffer::BodyBuffer(BodyBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)) {}

BodyBuffer& BodyBuffer::operator=(BodyBuffer&& other) noexcept {
  if (this != &other) {
    Clear();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

void BodyBuffer::Clear() {
  if (data_ != nullptr) ::munmap(data_, capacity_);
  data_ = nullptr;
  size_ = 0;
  capacity_ = 0;
}

bool BodyBuffer::Reserve(size_t num_bytes) {
  if (num_bytes <= capacity_) return true;
  const size_t bytes = RoundUpToPage(num_bytes);
  void* p = data_ == nullptr
                ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                : ::mremap(data_, capacity_, bytes, MREMAP_MAYMOVE);
  if (p == MAP_FAILED) return false;
  data_ = static_cast<char*>(p);
  capacity_ = bytes;
  return true;
}

bool BodyBuffer::Append(const void* data, size_t num_bytes) {
  if (num_bytes == 0) return true;
  if (size_ + num_bytes > capacity_ && !Reserve(std::max(size_ + num_bytes, 2 * capacity_))) {
    return false;
  }
  std::memcpy(data_ + size_, data, num_bytes);
  size_ += num_bytes;
  return true;
}

}  // namespace kvserve::http
