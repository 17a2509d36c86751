// A Jinja2 subset interpreter for chat templates: lexer -> parser (AST) -> tree-walking
// renderer. It follows Python jinja2 3.x as Hugging Face transformers configures it
// (ImmutableSandboxedEnvironment, trim_blocks=True, lstrip_blocks=True, loopcontrols; `tojson`
// = json.dumps(ensure_ascii=False) without HTML escaping), so that a model's own template
// renders here byte for byte as it does in Python.
//
// Covered: {{ }}, {% %}, {# #}, whitespace control (-/+), trim_blocks/lstrip_blocks, raw;
// statements if/elif/else, for (tuple targets, `if` filter, else, loop.*, break/continue),
// set (incl. namespace attributes and block set), macro + call (caller, varargs, kwargs), call
// blocks, with, filter blocks, generation (renders its body, as transformers' AssistantTracker
// does); expressions with Python semantics (literals, slicing, attribute/item access, calls
// with keyword arguments, arithmetic, comparisons, in, and/or/not, ternaries, `~`, filters,
// `is` tests); jinja2's default Undefined (prints empty, iterates empty, raises on attribute
// access, arithmetic and calls; select/reject/map and friends give nothing for any falsy
// input, None included, as jinja2's `if value:` does); Markup strings from `safe`/`escape`
// (`+` and `%` escape the plain str side, as markupsafe does). Not covered: template
// inheritance and inclusion, recursive loops, groupby, autoescaping, case mapping outside
// Latin, Greek and Cyrillic (upper/lower/title), Python big integers (int64 overflow is an
// error).
//
// Values: jinja::Value below, a small dynamically typed value with Python semantics. Lists,
// dicts and callables are shared (Python reference semantics: `namespace()` objects are
// mutated in place through any reference); strings are UTF-8 std::strings, indexed and
// measured in code points as Python does. Dicts keep insertion order (json.dumps and Python's
// dict printing depend on it).
//
// Errors: syntax errors and runtime errors come back as InvalidArgument Status values naming
// the template line ("chat template error: line 3: ..."); raise_exception(msg) gives exactly
// msg, as transformers shows it; a template never crashes the process: parse nesting,
// macro recursion, loop iterations and output size are all capped (Options).
//
// Thread-safety: a Template is immutable after Parse and may be rendered from several
// threads at once; each Render call has its own state.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kvserve::jinja {

class Value;
struct ValueList;
struct ValueDict;
struct Function;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // undefined
  static Value Undefined(std::string hint = "");  // hint: why, for error messages
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  // A markupsafe.Markup string (from the `safe` and `escape` filters): `+` and `%` HTML-escape
  // the plain str operands they combine with it, as Python does; `~` and printing treat it as
  // a plain string.
  static Value Markup(std::string s);
  static Value List(std::vector<Value> items, bool is_tuple = false);
  static Value Dict();  // empty, ordered
  static Value Namespace();
  static Value Func(std::shared_ptr<Function> f);
  // JSON -> Value (objects keep the order of `j`; nlohmann::ordered_json keeps file order).
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && markup_; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_function() const { return kind_ == Kind::kFunction; }
  bool is_tuple() const;
  bool is_namespace() const;

  bool bool_value() const { return b_; }
  int64_t int_value() const { return i_; }  // also for bools (0/1)
  double float_value() const { return f_; }
  double as_double() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(i_); }
  const std::string& str() const { return s_; }
  const std::string& undefined_hint() const { return s_; }
  const std::vector<Value>& items() const;   // list; KV_CHECKs the kind
  std::vector<Value>& mutable_items();
  const ValueDict& dict() const;
  ValueDict& mutable_dict();
  const std::shared_ptr<Function>& function() const { return fn_; }

  // Python truthiness.
  bool truthy() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool markup_ = false;  // kString only
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0.0;
  std::string s_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<Function> fn_;
};

struct ValueList {
  std::vector<Value> items;
  bool is_tuple = false;
};

// Insertion-ordered mapping. Keys are strings, numbers, booleans or None (Python hashables we
// support); lookups are linear, as chat dicts are small.
struct ValueDict {
  std::vector<std::pair<Value, Value>> entries;
  bool is_namespace = false;

  const Value* Find(const Value& key) const;
  const Value* Find(const std::string& key) const;
  void Set(const Value& key, Value value);
};

// Python str() and repr() of a value, and json.dumps as transformers' `tojson` calls it.
std::string ToPyStr(const Value& v);
std::string ToPyRepr(const Value& v);
struct JsonDumpOptions {
  std::optional<std::string> indent;  // nullopt: one line; else the indent unit
  std::string item_separator = ", ";  // json.dumps defaults: ", " / ": " ("," with indent)
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
StatusOr<std::string> ToJson(const Value& v, const JsonDumpOptions& options);
// Python float repr ("1.0", "1e-05", "0.1").
std::string PyFloatRepr(double f);

// Arguments of a call: positional, then keyword (in call order).
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

// A callable value: a builtin (global function or bound method) or a macro. Builtins report
// errors as Status; the renderer adds the template line.
struct Function {
  std::string name;
  std::function<StatusOr<Value>(const CallArgs&)> builtin;  // empty for macros
  const void* macro = nullptr;                                // internal: the macro node
  std::weak_ptr<void> closure;  // internal: defining scope (weak: the scope holds the macro)
};

struct Options {
  int64_t max_output_bytes = 64 << 20;      // rendered text (and any one string value)
  int64_t max_loop_iterations = 1'000'000;  // all loops of one render together
  int max_call_depth = 200;                 // macro recursion
  int max_nesting_depth = 200;              // parser: expression and block nesting
  int64_t max_range = 100'000;              // range() length (jinja2's sandbox MAX_RANGE)
};

struct Node;  // internal AST

// A parsed template. Immutable; copyable (shares the AST).
class Template {
 public:
  static StatusOr<Template> Parse(const std::string& source, const Options& options = {});

  // Renders with `context` (a dict of top-level variables) plus the globals range, dict,
  // namespace, raise_exception and strftime_now. strftime_now() formats the current local
  // time, or `now_unix_seconds` in UTC when given (deterministic output for tests).
  StatusOr<std::string> Render(const Value& context,
                               std::optional<std::time_t> now_unix_seconds = std::nullopt) const;

 private:
  std::shared_ptr<const Node> root_;
  Options options_;
};

}  // namespace kvserve::jinja
