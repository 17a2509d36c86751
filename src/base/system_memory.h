// What the machine (or the cgroup this process runs in) has in memory.
#pragma once

#include <cstdint>

namespace kvserve {

// Physical memory in bytes, lowered to the cgroup limit (v2 memory.max or v1
// memory.limit_in_bytes) when one is set. 0 if unknown.
int64_t TotalMemoryBytes();
// Memory a new allocation can use without swapping: /proc/meminfo MemAvailable, lowered to
// the cgroup's remaining allowance when a limit is set. 0 if unknown.
int64_t AvailableMemoryBytes();

}  // namespace kvserve
