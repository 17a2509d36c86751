// Tool-call parsers: model output text -> OpenAI `content` + `tool_calls`, one parser per
// output format, named as vLLM's --tool-call-parser values:
//
//   hermes          Hermes 2/3, Qwen 2.5/3: <tool_call>{"name": ..., "arguments": {...}}</tool_call>
//   llama3_json     Llama 3.1-3.3: {"name": ..., "parameters": {...}} (at the start, ';' between
//                   calls) and <|python_tag|> with JSON, name.call(k=v, ...) or raw code
//   mistral         [TOOL_CALLS][{"name": ..., "arguments": {...}}] and [TOOL_CALLS]name[ARGS]{...}
//   deepseek_v3     DeepSeek V3/R1 <｜tool▁calls▁begin｜>...function<｜tool▁sep｜>NAME\n```json...
//                   and V3.1's <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
//   functionary_v3  Functionary v3.1 <function=NAME>{...}</function>, <|python_tag|>code, and
//                   v3.2 ">>>NAME\n{...}" with ">>>all\n" text
//   command_r       Command-R Action: ```json [{"tool_name": ..., "parameters": {...}}] ``` and
//                   Command R7B <|START_ACTION|>[...]<|END_ACTION|>
//
// Text outside the calls stays content (whitespace next to a call is dropped). A call that
// does not parse (bad JSON, no name, an unterminated tag) is returned as plain content: parsing
// never fails. Arguments are re-serialised as compact JSON with the model's key order.
//
// Every format is one `Scan` over the text that can stop early: with final = false it reads
// only as far as it can decide, so that the streaming parser (tool_call_stream.h) and Parse
// read the same calls from the same text.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvserve::toolcall {

struct ToolCall {
  std::string id;         // call_... (OpenAI style) or 9 alphanumerics (Mistral)
  std::string name;       // function.name
  std::string arguments;  // function.arguments: a compact JSON object as a string
};

// The non-streaming result. Content is "" when the model wrote nothing outside the calls
// (the server sends null then).
struct ParsedToolCalls {
  std::string content;
  std::vector<ToolCall> tool_calls;
};

enum class ToolCallIdStyle {
  kOpenAi,   // "call_" + 24 alphanumerics
  kMistral,  // 9 alphanumerics: Mistral's chat templates reject any other id in the history
};

// Makes tool call ids. Not thread-safe: one per request (or per test, seeded).
class ToolCallIdGenerator {
 public:
  explicit ToolCallIdGenerator(uint64_t seed) : rng_(seed) {}
  // Seeded from std::random_device.
  static ToolCallIdGenerator FromRandomDevice();

  std::string Next(ToolCallIdStyle style);

 private:
  std::mt19937_64 rng_;
};

// One piece of interpreted text: content, or one call (without its id).
struct ScanSegment {
  bool is_call = false;
  std::string content;    // when !is_call
  std::string name;       // when is_call
  std::string arguments;  // when is_call
};

// What a Scan decided about text[start, committed_end).
struct ToolCallScan {
  std::vector<ScanSegment> segments;
  size_t committed_end = 0;  // final scans: the text's size
  int resume_state = 0;      // the format's state at committed_end (0 at the very start)
};

// A stateless parser for one format. Immutable; safe to share between threads and requests.
class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;

  virtual std::string_view name() const = 0;
  virtual ToolCallIdStyle id_style() const { return ToolCallIdStyle::kOpenAi; }

  // Interprets text from `start` (a committed_end of an earlier scan of a prefix of this text,
  // with its resume_state; 0 and 0 at first). With final = false the text may still grow:
  // the scan commits only what no continuation can change and leaves the rest (a possible
  // start of a call, a call not yet closed) for later. With final = true it commits all.
  // Invariant (tested): the segments of successive partial scans followed by a final one are
  // those of one final scan of the whole text.
  virtual ToolCallScan Scan(std::string_view text, size_t start, int state, bool final) const = 0;

  // The whole output at once.
  ParsedToolCalls Parse(std::string_view text, ToolCallIdGenerator& ids) const;
};

// The texts of the markup tokens the tool-call and reasoning parsers read (<tool_call>,
// <|python_tag|>, [TOOL_CALLS], DeepSeek's <｜tool▁calls▁begin｜>, <think>, ...).
// Vocabularies often store them as control tokens, which a detokenizer drops unless it is
// told to keep them (EngineOptions::detokenize_special_ids).
const std::vector<std::string>& MarkupTokenTexts();

// The names CreateToolCallParser accepts, for --tool-call-parser's help and errors.
const std::vector<std::string>& ToolCallParserNames();

// InvalidArgument naming the valid choices for an unknown name.
StatusOr<std::unique_ptr<ToolCallParser>> CreateToolCallParser(std::string_view name);

}  // namespace kvserve::toolcall
