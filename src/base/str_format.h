// printf-style formatting into a std::string, for tables and messages.
#pragma once

#include <string>

namespace kvserve {

// Formats like snprintf; the result is not truncated.
std::string StrFormat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace kvserve
