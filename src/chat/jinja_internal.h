// Internals of the jinja interpreter shared by its .cc files (not part of the API).
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "chat/jinja.h"

namespace kvserve::jinja::internal {

// Python ==.
bool PyEqual(const Value& a, const Value& b);
// Python <: numbers, strings (code point order), lists/tuples lexicographically; else an error.
StatusOr<bool> PyLess(const Value& a, const Value& b);

// UTF-8 <-> code points. Invalid bytes decode to U+DC80..U+DCFF and encode back to the byte.
std::u32string Decode(const std::string& s);
std::string Encode(const std::u32string& s);
void AppendUtf8(std::string& out, char32_t cp);
bool IsAscii(const std::string& s);
int64_t CodePointLength(const std::string& s);
bool IsPySpace(char32_t c);  // str.isspace()
// str.strip() family: chars == nullptr strips whitespace.
std::string PyStrip(const std::string& s, const std::string* chars, bool left, bool right);

// Python type name for messages ("str", "int", "dict", "NoneType", ...).
std::string TypeName(const Value& v);

// Items of an iterable as Python iterates it (list/tuple items, dict keys, string code
// points; undefined: none). Error for non-iterables.
StatusOr<std::vector<Value>> Iterate(const Value& v);

// Hooks the builtins need from the renderer.
class Env {
 public:
  virtual ~Env() = default;
  virtual const Options& options() const = 0;
  // Calls a callable value (macro or builtin).
  virtual StatusOr<Value> Call(const Value& callee, const CallArgs& args) = 0;
};

StatusOr<Value> ApplyFilter(Env& env, const std::string& name, const Value& v, const CallArgs& a);
StatusOr<bool> ApplyTest(Env& env, const std::string& name, const Value& v, const CallArgs& a);
bool HasFilter(const std::string& name);
bool HasTest(const std::string& name);
// obj.name (dict keys, bound methods of str/dict, namespace attributes). Undefined when absent;
// an error on an undefined object.
StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
// obj[key] as jinja2's getitem (falls back to attributes; undefined when absent).
StatusOr<Value> GetItem(const Value& obj, const Value& key);
// The globals: range, dict, namespace, raise_exception, strftime_now.
// `namespaces` (if not null) collects every namespace() created, so that the renderer can
// clear them afterwards (a namespace may hold itself: `set ns.me = ns`).
Value MakeGlobals(const Options& options, std::optional<std::time_t> now_unix_seconds,
                  std::vector<Value>* namespaces);

// raise_exception() errors carry this prefix internally so the renderer reports the message
// alone (without a line number), as transformers does.
inline constexpr const char* kRaisePrefix = "\x01raise:";

}  // namespace kvserve::jinja::internal
