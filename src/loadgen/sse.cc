#include "loadgen/sse.h"

namespace kvserve::loadgen {

void SseParser::Feed(std::string_view bytes) {
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c != '\n' && c != '\r') {
      last_was_cr_ = false;
      continue;
    }
    if (c == '\n' && last_was_cr_ && i == start && line_.empty()) {
      // The LF of a CRLF pair whose CR ended the previous line.
      last_was_cr_ = false;
      start = i + 1;
      continue;
    }
    line_.append(bytes.substr(start, i - start));
    ProcessLine(line_);
    line_.clear();
    last_was_cr_ = c == '\r';
    start = i + 1;
  }
  line_.append(bytes.substr(start));
}

void SseParser::Finish() {
  if (!line_.empty()) {
    ProcessLine(line_);
    line_.clear();
  }
  Dispatch();
  last_was_cr_ = false;
}

void SseParser::ProcessLine(std::string_view line) {
  if (line.empty()) {
    Dispatch();
    return;
  }
  if (line.front() == ':') return;  // comment
  std::string_view field = line, value;
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (have_data_) data_ += '\n';
    data_.append(value);
    have_data_ = true;
  } else if (field == "event") {
    type_.assign(value);
  } else if (field == "error") {
    // llama.cpp: "error: {...}" as its own event.
    Dispatch();
    type_ = "error";
    data_.assign(value);
    have_data_ = true;
    Dispatch();
  }
}

void SseParser::Dispatch() {
  if (have_data_) {
    SseEvent event{type_.empty() ? std::string("message") : type_, std::move(data_)};
    on_event_(event);
  }
  have_data_ = false;
  data_.clear();
  type_.clear();
}

}  // namespace kvserve::loadgen
