// Text scanning helpers shared by the tool-call format parsers (internal to src/toolcall):
// markers and their partial prefixes at the end of a growing text, JSON values located by
// bracket structure before they are parsed, call objects turned into (name, arguments), and
// Python keyword arguments (Llama's built-in tools). All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvserve::toolcall {

using Json = nlohmann::ordered_json;  // keeps the model's key order in the arguments

// Deeper JSON is treated as malformed (nlohmann's parser recurses).
inline constexpr int kMaxJsonDepth = 256;

size_t SkipSpace(std::string_view text, size_t pos);
bool StartsWithAt(std::string_view text, size_t pos, std::string_view prefix);
// True when text[pos, end) is a proper prefix of `marker` (the text may continue into it).
bool IsProperPrefixAt(std::string_view text, size_t pos, std::string_view marker);

struct MarkerMatch {
  size_t pos = std::string_view::npos;  // npos: none
  size_t index = 0;                     // which marker
};
// The earliest complete occurrence of any marker at or after `from` (ties: the longer one).
MarkerMatch FindFirstMarker(std::string_view text, size_t from, const std::vector<std::string_view>& markers);
// The first position >= from where the rest of the text is a proper prefix of some marker
// (a marker that more text may complete), or text.size() when there is none.
size_t PartialMarkerStart(std::string_view text, size_t from, const std::vector<std::string_view>& markers);

enum class JsonScanStatus { kComplete, kIncomplete, kInvalid };
struct JsonScan {
  JsonScanStatus status = JsonScanStatus::kInvalid;
  size_t end = 0;  // one past the closing bracket when complete
};
// Finds the extent of the JSON object or array that starts at text[pos] ('{' or '[') from
// its brackets and strings only: kIncomplete when the text ends inside it, kInvalid on a
// mismatched bracket or nesting deeper than kMaxJsonDepth. The value itself is checked by
// ParseJson afterwards.
// python_quotes: strings may also be single-quoted (Python literals).
JsonScan ScanJsonValue(std::string_view text, size_t pos, bool python_quotes = false);
std::optional<Json> ParseJson(std::string_view text);

// A Python literal as the whole text: dicts, lists, strings in either quote, numbers,
// True/False/None (Hermes 2 Pro writes its calls as Python dicts) -> the same value as JSON.
std::optional<Json> ParsePythonLiteral(std::string_view text);

// Compact JSON as OpenAI returns arguments (no spaces, non-ASCII kept, invalid UTF-8 replaced).
std::string CompactJson(const Json& value);

struct ParsedCall {
  std::string name;
  std::string arguments;  // compact JSON object
};
// `arguments` as a compact string: an object, a string holding a JSON object, or absent/null
// ("{}"); anything else is malformed.
std::optional<std::string> ArgumentsString(const Json* arguments);
// {"<name_key>": "...", "<one of args_keys>": {...}} -> call; nullopt when the name is missing
// or empty, the arguments are malformed, or (require_arguments) none of args_keys is present.
std::optional<ParsedCall> CallFromObject(const Json& object, std::string_view name_key,
                                         const std::vector<std::string_view>& args_keys,
                                         bool require_arguments = false);

// Identifier characters of function names: [A-Za-z0-9_.:-].
bool IsNameChar(char c);
// Python identifier characters: [A-Za-z0-9_].
bool IsWordChar(char c);

enum class PyCallStatus { kOk, kIncomplete, kInvalid };
struct PyCallArgs {
  PyCallStatus status = PyCallStatus::kInvalid;
  Json arguments;  // object of keyword arguments
  size_t end = 0;  // one past ')'
};
// Parses `key=value, ...)` starting at pos (just after the '('); values are Python literals
// (strings in either quote, numbers, True/False/None) or JSON objects/arrays.
PyCallArgs ParsePythonKwargs(std::string_view text, size_t pos);

// Length of the longest prefix of `text` that does not end inside a UTF-8 sequence.
size_t CompleteUtf8Prefix(std::string_view text);

}  // namespace kvserve::toolcall
