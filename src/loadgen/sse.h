// Incremental parser for server-sent events (text/event-stream) as OpenAI-compatible servers
// stream them: `data: {...}` lines, events separated by blank lines, `data: [DONE]` at the end.
//
// Bytes may arrive split anywhere (inside a line, inside a CRLF pair, inside a UTF-8
// character); Feed() buffers the incomplete tail. Lines end with LF, CRLF or CR. Several
// `data:` lines of one event are joined with '\n'; `event:` sets the event type; comment lines
// (starting with ':') and `id:` / `retry:` are ignored. Non-standard: an `error:` line (as
// llama.cpp's server sends on failures) becomes an event of type "error" whose data is the
// line's value.
//
// Not thread-safe; one parser per stream.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace kvserve::loadgen {

struct SseEvent {
  std::string type;  // "message" unless an `event:` line said otherwise
  std::string data;
};

class SseParser {
 public:
  using Callback = std::function<void(const SseEvent&)>;

  explicit SseParser(Callback on_event) : on_event_(std::move(on_event)) {}

  // Parses `bytes`, calling the callback for every event completed by them.
  void Feed(std::string_view bytes);
  // End of stream: completes a final line and an event that lacked its blank line.
  void Finish();

 private:
  void ProcessLine(std::string_view line);
  void Dispatch();

  Callback on_event_;
  std::string line_;          // incomplete line
  bool last_was_cr_ = false;  // the previous byte ended a line with CR (skip a following LF)
  bool have_data_ = false;
  std::string data_;
  std::string type_;
};

}  // namespace kvserve::loadgen
