// Internals of the jinja interpreter shared by its .cc files (not part of the API).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/str_format.h"
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

// Shared by the filters (jinja_builtins.cc) and the str methods (jinja_methods.cc):
// A Python TypeError-style message (an InvalidArgument status).
Status TypeError(std::string message);
// Positional argument `i` or keyword `name` of a call, else nullptr / `def`.
const Value* Arg(const CallArgs& a, size_t i, const char* name);
Value ArgOr(const CallArgs& a, size_t i, const char* name, Value def);
// An integer argument (None or absent: `def`); `what` names it in the error.
StatusOr<int64_t> IntArg(const Value* v, int64_t def, const char* what);
// str.lower(), str.upper(), str.title(), str.capitalize() (simple case mapping).
std::string Lower(const std::string& s);
std::string Upper(const std::string& s);
std::string Title(const std::string& s);
std::string Capitalize(const std::string& s);
// str.replace(from, to, count) (count < 0: all).
std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count);
// str.split() on whitespace with maxsplit (< 0: no limit).
std::vector<std::string> SplitWs(const std::string& s, int64_t maxsplit);
// Jinja's escape filter is base's HtmlEscape (markupsafe's five characters).
using ::kvserve::HtmlEscape;
// printf-style formatting ("%s" % x, "%s"|format(x)): %s %r %d %i %f %x %% with optional
// width/precision.
StatusOr<std::string> PercentFormat(const std::string& fmt, const std::vector<Value>& args);
// Calls method `name` of a str value (s.strip(), s.split(), ...).
StatusOr<Value> CallStrMethod(const std::string& s, const std::string& name, const CallArgs& a);

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
