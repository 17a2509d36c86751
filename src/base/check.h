// KV_CHECK: for broken invariants (programming errors), never for user input. Aborts with the
// file, line, condition and an optional streamed message:
//   KV_CHECK(n >= 0) << "n=" << n;
#pragma once

#include <sstream>

namespace kvserve::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `KV_CHECK(x) << ...` be a single expression of type void.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace kvserve::internal

#define KV_CHECK(cond)                                   \
  (cond) ? (void)0                                       \
         : ::kvserve::internal::Voidify() &              \
               ::kvserve::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#define KV_CHECK_EQ(a, b) KV_CHECK((a) == (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
#define KV_CHECK_NE(a, b) KV_CHECK((a) != (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
#define KV_CHECK_LT(a, b) KV_CHECK((a) < (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
#define KV_CHECK_LE(a, b) KV_CHECK((a) <= (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
#define KV_CHECK_GT(a, b) KV_CHECK((a) > (b)) << #a "=" << (a) << " " #b "=" << (b) << " "
#define KV_CHECK_GE(a, b) KV_CHECK((a) >= (b)) << #a "=" << (a) << " " #b "=" << (b) << " "

#ifndef NDEBUG
#define KV_DCHECK(cond) KV_CHECK(cond)
#else
#define KV_DCHECK(cond) \
  while (false) KV_CHECK(cond)
#endif
