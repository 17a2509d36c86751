#include "base/system_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace kvserve {
namespace {

// A number from a one-line file, or -1 (missing file, "max", garbage).
int64_t ReadNumber(const char* path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return -1;
  try {
    size_t used = 0;
    const long long v = std::stoll(word, &used);
    return used == word.size() && v >= 0 ? v : -1;
  } catch (...) {
    return -1;
  }
}

// Bytes of the cgroup limit and current usage, or -1 each when unlimited/unknown.
void CgroupMemory(int64_t* limit, int64_t* usage) {
  *limit = ReadNumber("/sys/fs/cgroup/memory.max");
  *usage = ReadNumber("/sys/fs/cgroup/memory.current");
  if (*limit < 0) {
    *limit = ReadNumber("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    *usage = ReadNumber("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  if (*limit >= (int64_t{1} << 60)) *limit = -1;  // v1 "unlimited" is a huge number
}

int64_t MemInfoBytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) == 0 && line.size() > key.size() &&
        line[key.size()] == ':') {
      std::istringstream fields(line.substr(key.size() + 1));
      long long kib = 0;
      if (fields >> kib) return static_cast<int64_t>(kib) * 1024;
    }
  }
  return 0;
}

}  // namespace

int64_t TotalMemoryBytes() {
  int64_t total = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) *
                  static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
  int64_t limit, usage;
  CgroupMemory(&limit, &usage);
  if (limit > 0) total = total > 0 ? std::min(total, limit) : limit;
  return std::max<int64_t>(total, 0);
}

int64_t AvailableMemoryBytes() {
  int64_t available = MemInfoBytes("MemAvailable");
  int64_t limit, usage;
  CgroupMemory(&limit, &usage);
  if (limit > 0 && usage >= 0) {
    const int64_t left = std::max<int64_t>(limit - usage, 0);
    available = available > 0 ? std::min(available, left) : left;
  }
  return available;
}

void* AllocateLargeBuffer(int64_t bytes) {
  if (bytes <= 0) return nullptr;
  const size_t alignment = bytes >= kHugePageBytes ? kHugePageBytes : 64;
  const size_t rounded = (static_cast<size_t>(bytes) + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded);
#ifdef MADV_HUGEPAGE
  // Advice only: without THP support the buffer simply keeps 4 KiB pages.
  if (p != nullptr && alignment == kHugePageBytes) ::madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return p;
}

}  // namespace kvserve
