#include "base/system_memory.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

namespace kvserve {
namespace {

TEST(SystemMemoryTest, ReportsSomeMemory) {
  EXPECT_GT(TotalMemoryBytes(), 0);
  EXPECT_GT(AvailableMemoryBytes(), 0);
  EXPECT_LE(AvailableMemoryBytes(), TotalMemoryBytes());
}

TEST(SystemMemoryTest, LargeBuffersAreHugePageAlignedAndUsable) {
  EXPECT_EQ(AllocateLargeBuffer(0), nullptr);
  EXPECT_EQ(AllocateLargeBuffer(-5), nullptr);
  for (int64_t bytes : {int64_t{1}, int64_t{100}, kHugePageBytes - 1, kHugePageBytes,
                        3 * kHugePageBytes + 12345}) {
    void* p = AllocateLargeBuffer(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    const auto address = reinterpret_cast<uintptr_t>(p);
    EXPECT_EQ(address % 64, 0u) << bytes;
    if (bytes >= kHugePageBytes) {
      EXPECT_EQ(address % kHugePageBytes, 0u) << bytes;
    }
    std::memset(p, 0x5a, static_cast<size_t>(bytes));  // every byte is ours
    EXPECT_EQ(static_cast<unsigned char*>(p)[bytes - 1], 0x5a);
    std::free(p);
  }
}

}  // namespace
}  // namespace kvserve
