#include "runtime/request.h"

#include <utility>

namespace kvserve {

const char* RequestStatusName(RequestStatus status) {
  switch (status) {
    case RequestStatus::kWaiting: return "waiting";
    case RequestStatus::kRunning: return "running";
    case RequestStatus::kPreempted: return "preempted";
    case RequestStatus::kFinished: return "finished";
  }
  return "?";
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "?";
}

Request::Request(SeqId id, RequestInput input, int64_t arrival_seq)
    : id_(id),
      input_(std::move(input)),
      arrival_seq_(arrival_seq),
      arrival_time_(std::chrono::steady_clock::now()),
      all_token_ids_(input_.prompt_ids) {}

}  // namespace kvserve
