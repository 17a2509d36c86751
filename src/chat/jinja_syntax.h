// Internals of the jinja interpreter (see jinja.h) shared by its lexer (jinja_lexer.cc),
// parser (jinja_parser.cc) and renderer (jinja.cc): the error type, the tokens and the syntax
// tree. Errors travel as a C++ exception (TemplateError) through the recursive parser and
// evaluator and become a Status at the two public entry points, Template::Parse and
// Template::Render.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "chat/jinja.h"

namespace kvserve::jinja {

struct TemplateError {
  std::string message;
  int line = 0;
};

[[noreturn]] inline void Fail(int line, std::string message) {
  throw TemplateError{std::move(message), line};
}

// Unwraps a builtin's StatusOr or throws with the line.
template <typename T>
T Unwrap(StatusOr<T> s, int line) {
  if (!s.ok()) Fail(line, s.status().message());
  return std::move(s).value();
}

// ---- tokens ---------------------------------------------------------------------------------

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok kind = Tok::kEof;
  std::string text;  // text, name, string value, operator
  int64_t i = 0;
  double f = 0.0;
  int line = 1;
};

// Splits template source (newlines normalized as jinja2 does) into text, tag delimiters and
// expression tokens, with jinja2's whitespace control: `-` and `+` markers, and trim_blocks and
// lstrip_blocks on, as transformers configures jinja2 for chat templates. Throws TemplateError.
std::vector<Token> Lex(std::string source);

// ---- syntax tree ----------------------------------------------------------------------------

enum class NodeKind {
  // statements
  kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kBreak, kContinue, kWith, kScope,
  kFilterBlock,
  // expressions
  kLiteral, kName, kAttr, kItem, kSlice, kCall, kFilter, kTest, kNeg, kPos, kNot, kBinary,
  kAnd, kOr, kCompare, kCond, kListLit, kTupleLit, kDictLit,
};

using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  NodeKind kind = NodeKind::kText;
  int line = 0;
  int depth = 1;
  std::string name;   // text, name, attribute, filter/test/operator, macro name
  std::string attr;   // set ns.attr
  Value literal;
  std::vector<NodePtr> kids;           // operands (nullptr where optional and absent)
  std::vector<std::string> kw_names;   // calls/filters/tests: names of the trailing kids
  std::vector<std::string> ops;        // compare operators
  std::vector<std::string> targets;    // for/set/with/macro parameter names
  std::vector<Body> bodies;            // if branches (+ else), for body + else, macro body
  bool negated = false;
  bool has_else = false;
  // Macros: the body names `caller`, `varargs` or `kwargs` (jinja2 then accepts a caller,
  // extra positional or extra keyword arguments and binds them to those names).
  bool uses_caller = false;
  bool uses_varargs = false;
  bool uses_kwargs = false;
};
// A call block {% call(params) macro(args) %}body{% endcall %} is a kCallBlock shaped like a
// macro named "caller" (targets, defaults in kids, bodies[0]) whose last kid is the call.

// Parses the tokens of a whole template into its top-level body. Throws TemplateError.
Body ParseTemplate(std::vector<Token> tokens, const Options& options);

}  // namespace kvserve::jinja
