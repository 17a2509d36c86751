#include "toolcall/tool_call_stream.h"

#include "base/check.h"
#include "toolcall/scan_util.h"

namespace kvserve::toolcall {

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

std::string HeldText::TakeNew(bool final, bool trim_right) {
  // Leading whitespace is skipped once; after the first other byte the start is fixed.
  while (trim_left_ && num_skipped_bytes_ < raw_.size() && IsSpace(raw_[num_skipped_bytes_])) ++num_skipped_bytes_;
  if (num_skipped_bytes_ < raw_.size()) trim_left_ = false;
  size_t begin = num_skipped_bytes_;
  size_t end = raw_.size();
  if (!final || trim_right) {
    while (end > begin && IsSpace(raw_[end - 1])) --end;
  }
  if (!final) end = begin + CompleteUtf8Prefix(std::string_view(raw_).substr(begin, end - begin));
  size_t view_size = end - begin;
  if (view_size <= num_emitted_bytes_) return {};
  std::string piece = raw_.substr(begin + num_emitted_bytes_, view_size - num_emitted_bytes_);
  num_emitted_bytes_ = view_size;
  return piece;
}

void HeldText::Reset(bool trim_left) {
  raw_.clear();
  num_emitted_bytes_ = 0;
  num_skipped_bytes_ = 0;
  trim_left_ = trim_left;
}

void SegmentAssembler::Add(const ScanSegment& segment, std::vector<OutputDelta>* out) {
  if (!segment.is_call) {
    pending_content_.Append(segment.content);
    return;
  }
  EmitContent(pending_content_.TakeNew(/*final=*/true, /*trim_right=*/true), out);
  pending_content_.Reset(/*trim_left=*/true);
  if (content_emitted_) separator_due_ = true;
  int index = num_tool_calls_++;
  OutputDelta start;
  start.kind = OutputDelta::Kind::kToolCallStart;
  start.tool_call_index = index;
  start.id = ids_->Next(id_style_);
  start.name = segment.name;
  out->push_back(std::move(start));
  OutputDelta args;
  args.kind = OutputDelta::Kind::kToolCallArguments;
  args.tool_call_index = index;
  args.text = segment.arguments;
  out->push_back(std::move(args));
}

void SegmentAssembler::Flush(bool final, std::vector<OutputDelta>* out) {
  EmitContent(pending_content_.TakeNew(final, /*trim_right=*/false), out);
}

void SegmentAssembler::EmitContent(std::string piece, std::vector<OutputDelta>* out) {
  if (piece.empty()) return;
  if (separator_due_) {
    piece = "\n" + piece;
    separator_due_ = false;
  }
  content_emitted_ = true;
  out->push_back(OutputDelta::Content(std::move(piece)));
}

void ToolCallStream::Feed(std::string_view piece, std::vector<OutputDelta>* out) {
  KV_CHECK(!finished_) << "Feed after Finish";
  text_.append(piece);
  Run(/*final=*/false, out);
}

void ToolCallStream::Finish(std::vector<OutputDelta>* out) {
  if (finished_) return;
  Run(/*final=*/true, out);
  finished_ = true;
}

void ToolCallStream::Run(bool final, std::vector<OutputDelta>* out) {
  ToolCallScan scan = parser_->Scan(text_, resume_pos_, resume_state_, final);
  KV_CHECK(scan.committed_end >= resume_pos_ && scan.committed_end <= text_.size());
  if (final) KV_CHECK_EQ(scan.committed_end, text_.size());
  for (const ScanSegment& segment : scan.segments) assembler_.Add(segment, out);
  assembler_.Flush(final, out);
  resume_pos_ = scan.committed_end;
  resume_state_ = scan.resume_state;
}

}  // namespace kvserve::toolcall
