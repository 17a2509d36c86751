// Status and StatusOr<T>: errors that a user can cause (a bad file, a bad request, no memory
// left). Broken invariants use KV_CHECK (check.h) instead.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace kvserve {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kOutOfRange,
  kResourceExhausted,
  kFailedPrecondition,
  kUnimplemented,
  kDataLoss,
  kUnavailable,
  kInternal,
  kCancelled,  // the caller went away (a client that disconnected)
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message" (or "OK").
  std::string ToString() const;
  // Returns a copy whose message is "prefix: message" (keeps the code).
  Status WithContext(const std::string& prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgumentError(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status ResourceExhaustedError(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status FailedPreconditionError(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status UnimplementedError(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status CancelledError(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : v_(status) { assert(!status.ok()); }  // NOLINT
  StatusOr(Status&& status) : v_(std::move(status)) { assert(!std::get<0>(v_).ok()); }  // NOLINT
  StatusOr(const T& value) : v_(value) {}  // NOLINT
  StatusOr(T&& value) : v_(std::move(value)) {}  // NOLINT

  bool ok() const { return v_.index() == 1; }
  Status status() const { return ok() ? Status() : std::get<0>(v_); }

  const T& value() const& { return std::get<1>(v_); }
  T& value() & { return std::get<1>(v_); }
  T&& value() && { return std::get<1>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<Status, T> v_;
};

#define KV_STATUS_CONCAT_INNER(a, b) a##b
#define KV_STATUS_CONCAT(a, b) KV_STATUS_CONCAT_INNER(a, b)

// Returns from the current function if `expr` (a Status) is not OK.
#define KV_RETURN_IF_ERROR(expr)                      \
  do {                                                \
    ::kvserve::Status kv_status_tmp_ = (expr);        \
    if (!kv_status_tmp_.ok()) return kv_status_tmp_;  \
  } while (0)

// `KV_ASSIGN_OR_RETURN(auto x, FunctionReturningStatusOr());`
#define KV_ASSIGN_OR_RETURN(lhs, expr) \
  KV_ASSIGN_OR_RETURN_IMPL(KV_STATUS_CONCAT(kv_statusor_, __LINE__), lhs, expr)
#define KV_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

}  // namespace kvserve
