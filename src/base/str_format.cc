#include "base/str_format.h"

#include <cstdarg>
#include <cstdio>

namespace kvserve {

std::string StrFormat(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  char buf[512];
  const int n = std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  std::string out;
  if (n < 0) {
    va_end(copy);
    return out;
  }
  if (static_cast<size_t>(n) < sizeof(buf)) {
    out.assign(buf, static_cast<size_t>(n));
  } else {
    out.resize(static_cast<size_t>(n) + 1);
    std::vsnprintf(out.data(), out.size(), fmt, copy);
    out.resize(static_cast<size_t>(n));
  }
  va_end(copy);
  return out;
}

std::string HumanCount(int64_t count) {
  const double v = static_cast<double>(count);
  if (count >= 1000000000) return StrFormat("%.2fB", v / 1e9);
  if (count >= 1000000) return StrFormat("%.*fM", v < 1e7 ? 2 : 0, v / 1e6);
  if (count >= 1000) return StrFormat("%.*fK", v < 1e4 ? 1 : 0, v / 1e3);
  return StrFormat("%lld", static_cast<long long>(count));
}

std::string HumanBytes(int64_t bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return StrFormat("%lld B", static_cast<long long>(bytes));
  return StrFormat("%.*f %s", v < 10 ? 2 : 1, v, units[u]);
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace kvserve
