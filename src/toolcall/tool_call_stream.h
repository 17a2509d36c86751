// Streaming tool-call parsing: detokenized text in, piece by piece, OpenAI deltas out.
//
//   ToolCallIdGenerator ids = ToolCallIdGenerator::FromRandomDevice();
//   ToolCallStream stream(parser.get(), &ids);
//   for each text piece: stream.Feed(piece, &deltas);  -> send deltas as chunks
//   at the end of generation: stream.Finish(&deltas);  -> send, then finish_reason
//
// Content is sent as soon as it cannot be the start of a call; only a possible marker prefix
// (e.g. a trailing "<tool_" for hermes), whitespace that may turn out to sit before a call,
// and an incomplete UTF-8 sequence are held back. A call is sent once it is complete and
// known to parse (a start delta with id and name, then its arguments), so the concatenation of
// all deltas always equals ToolCallParser::Parse of the whole text: a call that turns out
// malformed is content in both.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "toolcall/output_delta.h"
#include "toolcall/tool_call_parser.h"

namespace kvserve::toolcall {

// A growing piece of text sent as deltas: optionally without leading whitespace, holding
// trailing whitespace and an incomplete UTF-8 sequence until the text is final. Single thread.
// Invariant: what TakeNew returned so far is a prefix of every later view.
class HeldText {
 public:
  explicit HeldText(bool trim_left = false) : trim_left_(trim_left) {}

  void Append(std::string_view piece) { raw_.append(piece); }
  // The part of the view not returned before. final = false: the view ends before trailing
  // whitespace and an incomplete UTF-8 sequence; final = true: it ends at the end of the text,
  // or before trailing whitespace when trim_right.
  std::string TakeNew(bool final, bool trim_right);
  // Starts a new text.
  void Reset(bool trim_left);

 private:
  std::string raw_;
  size_t num_emitted_bytes_ = 0;  // of the view
  size_t num_skipped_bytes_ = 0;  // leading whitespace left out of the view
  bool trim_left_ = false;        // still skipping leading whitespace
};

// Turns a parser's scan segments into deltas: assigns ids and indices, drops whitespace next
// to calls; content written before and after calls is joined with one "\n". Single thread.
class SegmentAssembler {
 public:
  SegmentAssembler(ToolCallIdStyle id_style, ToolCallIdGenerator* ids) : id_style_(id_style), ids_(ids) {}

  void Add(const ScanSegment& segment, std::vector<OutputDelta>* out);
  // Sends the content that can no longer change (final: all of it).
  void Flush(bool final, std::vector<OutputDelta>* out);
  int num_tool_calls() const { return num_tool_calls_; }

 private:
  void EmitContent(std::string piece, std::vector<OutputDelta>* out);

  ToolCallIdStyle id_style_;
  ToolCallIdGenerator* ids_;  // not owned
  HeldText pending_content_;  // content since the last call
  int num_tool_calls_ = 0;
  bool content_emitted_ = false;
  bool separator_due_ = false;  // content before a call and more after it: join with "\n"
};

// One response's incremental parser. Holds the text generated so far. Single thread.
class ToolCallStream {
 public:
  // `parser` and `ids` must outlive the stream.
  ToolCallStream(const ToolCallParser* parser, ToolCallIdGenerator* ids)
      : parser_(parser), assembler_(parser->id_style(), ids) {}

  // Appends one piece of generated text; appends the deltas it completes to `out`.
  void Feed(std::string_view piece, std::vector<OutputDelta>* out);
  // The end of the output: everything left is decided (an unfinished call becomes content).
  void Finish(std::vector<OutputDelta>* out);

  int num_tool_calls() const { return assembler_.num_tool_calls(); }
  bool finished() const { return finished_; }

 private:
  void Run(bool final, std::vector<OutputDelta>* out);

  const ToolCallParser* parser_;
  SegmentAssembler assembler_;
  std::string text_;
  size_t resume_pos_ = 0;
  int resume_state_ = 0;
  bool finished_ = false;
};

}  // namespace kvserve::toolcall
