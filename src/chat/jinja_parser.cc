// The jinja parser: tokens to the syntax tree (see jinja_syntax.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_internal.h"
#include "chat/jinja_syntax.h"

namespace kvserve::jinja {
namespace {

// ---- parser ---------------------------------------------------------------------------------

class Parser {
 public:
  Parser(std::vector<Token> toks, const Options& options) : t_(std::move(toks)), opt_(options) {}

  Body ParseTemplate() {
    std::string end;
    Body body = ParseBody({}, &end);
    return body;
  }

 private:
  const Token& Peek(int k = 0) const {
    const size_t i = std::min(p_ + k, t_.size() - 1);
    return t_[i];
  }
  Token Next() {
    Token t = Peek();
    if (p_ < t_.size() - 1) ++p_;
    return t;
  }
  bool IsOp(const char* op, int k = 0) const { return Peek(k).kind == Tok::kOp && Peek(k).text == op; }
  bool IsName(const char* n, int k = 0) const { return Peek(k).kind == Tok::kName && Peek(k).text == n; }
  void ExpectOp(const char* op) {
    if (!IsOp(op)) Fail(Peek().line, std::string("expected '") + op + "', got " + Describe(Peek()));
    Next();
  }
  std::string ExpectName() {
    if (Peek().kind != Tok::kName) Fail(Peek().line, "expected a name, got " + Describe(Peek()));
    return Next().text;
  }
  void ExpectBlockEnd() {
    if (Peek().kind != Tok::kBlockEnd) Fail(Peek().line, "expected '%}', got " + Describe(Peek()));
    Next();
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case Tok::kText: return "template text";
      case Tok::kVarBegin: return "'{{'";
      case Tok::kVarEnd: return "'}}'";
      case Tok::kBlockBegin: return "'{%'";
      case Tok::kBlockEnd: return "'%}'";
      case Tok::kName: return "'" + t.text + "'";
      case Tok::kString: return "a string";
      case Tok::kInt:
      case Tok::kFloat: return "a number";
      case Tok::kOp: return "'" + t.text + "'";
      case Tok::kEof: return "end of template";
    }
    return "?";
  }

  struct DepthGuard {
    DepthGuard(Parser* p, int line) : p(p) {
      if (++p->depth_ > p->opt_.max_nesting_depth) Fail(line, "template nested too deeply");
    }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };

  NodePtr Make(NodeKind kind, int line) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = line;
    return n;
  }
  // Sets depth from the children; refuses trees deeper than the limit (the evaluator recurses
  // over them).
  NodePtr Finish(NodePtr n) {
    int d = 0;
    for (const NodePtr& k : n->kids) {
      if (k) d = std::max(d, k->depth);
    }
    n->depth = d + 1;
    if (n->depth > opt_.max_nesting_depth) Fail(n->line, "expression nested too deeply");
    return n;
  }

  // Parses statements until a block tag named in `ends` (consumed up to its name; the caller
  // parses the rest of that tag). `*end` gets the tag name ("" at end of template).
  Body ParseBody(const std::vector<std::string>& ends, std::string* end) {
    Body body;
    while (true) {
      const Token& t = Peek();
      if (t.kind == Tok::kEof) {
        if (!ends.empty()) {
          Fail(t.line, "unexpected end of template, expected '" + ends[0] + "'");
        }
        *end = "";
        return body;
      }
      if (t.kind == Tok::kText) {
        NodePtr n = Make(NodeKind::kText, t.line);
        n->name = t.text;
        body.push_back(std::move(n));
        Next();
        continue;
      }
      if (t.kind == Tok::kVarBegin) {
        const int line = t.line;
        Next();
        NodePtr n = Make(NodeKind::kOutput, line);
        n->kids.push_back(ParseTuple(false));
        if (Peek().kind != Tok::kVarEnd) Fail(Peek().line, "expected '}}', got " + Describe(Peek()));
        Next();
        body.push_back(Finish(std::move(n)));
        continue;
      }
      if (t.kind == Tok::kBlockBegin) {
        const int line = t.line;
        Next();
        if (Peek().kind != Tok::kName) Fail(Peek().line, "expected a statement name");
        const std::string name = Peek().text;
        if (std::find(ends.begin(), ends.end(), name) != ends.end()) {
          Next();
          *end = name;
          return body;
        }
        Next();
        body.push_back(ParseStatement(name, line));
        continue;
      }
      Fail(t.line, "unexpected " + Describe(t));
    }
  }

  NodePtr ParseStatement(const std::string& name, int line) {
    DepthGuard g(this, line);
    if (name == "if") return ParseIf(line);
    if (name == "for") return ParseFor(line);
    if (name == "set") return ParseSet(line);
    if (name == "macro") return ParseMacro(line);
    if (name == "call") return ParseCallBlock(line);
    if (name == "with") return ParseWith(line);
    if (name == "filter") return ParseFilterBlock(line);
    if (name == "generation") {
      ExpectBlockEnd();
      NodePtr n = Make(NodeKind::kScope, line);
      std::string end;
      n->bodies.push_back(ParseBody({"endgeneration"}, &end));
      ExpectBlockEnd();
      return n;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) Fail(line, "'" + name + "' outside of a loop");
      ExpectBlockEnd();
      return Make(name == "break" ? NodeKind::kBreak : NodeKind::kContinue, line);
    }
    Fail(line, "unknown or unsupported tag '" + name + "'");
  }

  NodePtr ParseIf(int line) {
    NodePtr n = Make(NodeKind::kIf, line);
    n->kids.push_back(ParseTuple(false));
    ExpectBlockEnd();
    while (true) {
      std::string end;
      n->bodies.push_back(ParseBody({"elif", "else", "endif"}, &end));
      if (end == "elif") {
        n->kids.push_back(ParseTuple(false));
        ExpectBlockEnd();
        continue;
      }
      if (end == "else") {
        ExpectBlockEnd();
        n->bodies.push_back(ParseBody({"endif"}, &end));
        n->has_else = true;
      }
      ExpectBlockEnd();
      break;
    }
    return Finish(std::move(n));
  }

  std::vector<std::string> ParseTargets() {
    std::vector<std::string> names;
    const bool paren = IsOp("(");
    if (paren) Next();
    names.push_back(ExpectName());
    while (IsOp(",")) {
      Next();
      if (Peek().kind != Tok::kName) break;
      names.push_back(ExpectName());
    }
    if (paren) ExpectOp(")");
    return names;
  }

  NodePtr ParseFor(int line) {
    NodePtr n = Make(NodeKind::kFor, line);
    n->targets = ParseTargets();
    if (!IsName("in")) Fail(Peek().line, "expected 'in' in for loop");
    Next();
    n->kids.push_back(ParseTuple(true));  // no conditional: `if` starts the filter
    if (IsName("if")) {
      Next();
      n->kids.push_back(ParseTuple(false));
    } else {
      n->kids.push_back(nullptr);
    }
    if (IsName("recursive")) Fail(Peek().line, "recursive loops are not supported");
    ExpectBlockEnd();
    ++loop_depth_;
    std::string end;
    n->bodies.push_back(ParseBody({"else", "endfor"}, &end));
    --loop_depth_;
    if (end == "else") {
      ExpectBlockEnd();
      n->bodies.push_back(ParseBody({"endfor"}, &end));
      n->has_else = true;
    }
    ExpectBlockEnd();
    return Finish(std::move(n));
  }

  NodePtr ParseSet(int line) {
    // set name = expr | set ns.attr = expr | set a, b = expr | set name %}...{% endset
    if (Peek().kind == Tok::kName && IsOp(".", 1)) {
      NodePtr n = Make(NodeKind::kSet, line);
      n->name = Next().text;
      Next();
      n->attr = ExpectName();
      ExpectOp("=");
      n->kids.push_back(ParseTuple(false));
      ExpectBlockEnd();
      return Finish(std::move(n));
    }
    std::vector<std::string> targets = ParseTargets();
    if (Peek().kind == Tok::kBlockEnd && targets.size() == 1) {
      Next();
      NodePtr n = Make(NodeKind::kSetBlock, line);
      n->name = targets[0];
      std::string end;
      n->bodies.push_back(ParseBody({"endset"}, &end));
      ExpectBlockEnd();
      return n;
    }
    if (IsOp("|") && targets.size() == 1) Fail(line, "filtered block set is not supported");
    ExpectOp("=");
    NodePtr n = Make(NodeKind::kSet, line);
    n->targets = std::move(targets);
    n->kids.push_back(ParseTuple(false));
    ExpectBlockEnd();
    return Finish(std::move(n));
  }

  NodePtr ParseMacro(int line) {
    NodePtr n = Make(NodeKind::kMacro, line);
    n->name = ExpectName();
    ParseParams(n.get());
    ExpectBlockEnd();
    ParseMacroBody(n.get(), "endmacro");
    if (Peek().kind == Tok::kName && Peek().text == n->name) Next();
    ExpectBlockEnd();
    return Finish(std::move(n));
  }

  NodePtr ParseCallBlock(int line) {
    NodePtr n = Make(NodeKind::kCallBlock, line);
    n->name = "caller";
    if (IsOp("(")) ParseParams(n.get());
    NodePtr call = ParseExpression(true);
    if (call->kind != NodeKind::kCall) Fail(line, "expected a call in the call block");
    ExpectBlockEnd();
    ParseMacroBody(n.get(), "endcall");
    ExpectBlockEnd();
    n->kids.push_back(std::move(call));
    return Finish(std::move(n));
  }

  // The body of a macro or call block up to `end_tag` (no enclosing loop; records the use of
  // caller/varargs/kwargs on `n`).
  void ParseMacroBody(Node* n, const char* end_tag) {
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    macros_.push_back(n);
    std::string end;
    n->bodies.push_back(ParseBody({end_tag}, &end));
    macros_.pop_back();
    loop_depth_ = saved_loops;
  }

  // (a, b=default, ...) of a macro or call block: names in targets, defaults (or null) in kids.
  void ParseParams(Node* n) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!n->targets.empty()) ExpectOp(",");
      if (IsOp(")")) break;
      n->targets.push_back(ExpectName());
      if (IsOp("=")) {
        Next();
        n->kids.push_back(ParseExpression(true));
      } else {
        n->kids.push_back(nullptr);
      }
    }
    ExpectOp(")");
  }

  // {% filter name(args) | name2 %}...{% endfilter %}: kids[0] is a chain of kFilter nodes whose
  // innermost operand is a null placeholder for the rendered body.
  NodePtr ParseFilterBlock(int line) {
    NodePtr n = Make(NodeKind::kFilterBlock, line);
    NodePtr chain;
    do {
      if (chain) Next();  // '|'
      NodePtr f = Make(NodeKind::kFilter, Peek().line);
      f->name = ExpectName();
      f->kids.push_back(std::move(chain));
      if (IsOp("(")) ParseCallArgs(f.get());
      if (!internal::HasFilter(f->name)) Fail(f->line, "no filter named '" + f->name + "'");
      chain = std::move(f);
    } while (IsOp("|"));
    n->kids.push_back(std::move(chain));
    ExpectBlockEnd();
    std::string end;
    n->bodies.push_back(ParseBody({"endfilter"}, &end));
    ExpectBlockEnd();
    return n;
  }

  NodePtr ParseWith(int line) {
    NodePtr n = Make(NodeKind::kWith, line);
    while (Peek().kind != Tok::kBlockEnd) {
      if (!n->targets.empty()) ExpectOp(",");
      n->targets.push_back(ExpectName());
      ExpectOp("=");
      n->kids.push_back(ParseExpression(true));
    }
    ExpectBlockEnd();
    std::string end;
    n->bodies.push_back(ParseBody({"endwith"}, &end));
    ExpectBlockEnd();
    return Finish(std::move(n));
  }

  // ---- expressions ----

  // A tuple without parentheses (`a, b`) or a single expression.
  NodePtr ParseTuple(bool no_cond) {
    const int line = Peek().line;
    NodePtr first = ParseExpression(!no_cond);
    if (!IsOp(",")) return first;
    NodePtr t = Make(NodeKind::kTupleLit, line);
    t->kids.push_back(std::move(first));
    while (IsOp(",")) {
      Next();
      if (!StartsExpression()) break;
      t->kids.push_back(ParseExpression(!no_cond));
    }
    return Finish(std::move(t));
  }
  bool StartsExpression() const {
    const Token& t = Peek();
    if (t.kind == Tok::kName || t.kind == Tok::kString || t.kind == Tok::kInt || t.kind == Tok::kFloat) return true;
    return t.kind == Tok::kOp && (t.text == "(" || t.text == "[" || t.text == "{" || t.text == "-" || t.text == "+");
  }

  NodePtr ParseExpression(bool with_cond = true) {
    DepthGuard g(this, Peek().line);
    if (with_cond) return ParseCond();
    return ParseOr();
  }

  NodePtr ParseCond() {
    NodePtr expr = ParseOr();
    while (IsName("if")) {
      const int line = Next().line;
      NodePtr n = Make(NodeKind::kCond, line);
      n->kids.push_back(std::move(expr));
      n->kids.push_back(ParseOr());
      if (IsName("else")) {
        Next();
        n->kids.push_back(ParseCond());
      } else {
        n->kids.push_back(nullptr);
      }
      expr = Finish(std::move(n));
    }
    return expr;
  }

  // A left-associative chain `operand (word operand)*` of `kind` nodes ("or", "and").
  NodePtr ParseLogical(const char* word, NodeKind kind, NodePtr (Parser::*operand)()) {
    NodePtr l = (this->*operand)();
    while (IsName(word)) {
      NodePtr n = Make(kind, Next().line);
      n->kids.push_back(std::move(l));
      n->kids.push_back((this->*operand)());
      l = Finish(std::move(n));
    }
    return l;
  }
  NodePtr ParseOr() { return ParseLogical("or", NodeKind::kOr, &Parser::ParseAnd); }
  NodePtr ParseAnd() { return ParseLogical("and", NodeKind::kAnd, &Parser::ParseNot); }
  NodePtr ParseNot() {
    if (IsName("not")) {
      const int line = Next().line;
      DepthGuard g(this, line);
      NodePtr n = Make(NodeKind::kNot, line);
      n->kids.push_back(ParseNot());
      return Finish(std::move(n));
    }
    return ParseCompare();
  }
  NodePtr ParseCompare() {
    const int line = Peek().line;
    NodePtr first = ParseMath1();
    NodePtr n;
    while (true) {
      std::string op;
      if (Peek().kind == Tok::kOp && (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" ||
                                      Peek().text == "<=" || Peek().text == ">" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        op = "not in";
      } else {
        break;
      }
      if (!n) {
        n = Make(NodeKind::kCompare, line);
        n->kids.push_back(std::move(first));
      }
      n->ops.push_back(op);
      n->kids.push_back(ParseMath1());
    }
    if (!n) return first;
    return Finish(std::move(n));
  }
  NodePtr Binary(const std::string& op, NodePtr l, NodePtr r, int line) {
    NodePtr n = Make(NodeKind::kBinary, line);
    n->name = op;
    n->kids.push_back(std::move(l));
    n->kids.push_back(std::move(r));
    return Finish(std::move(n));
  }
  NodePtr ParseMath1() {
    NodePtr l = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token op = Next();
      l = Binary(op.text, std::move(l), ParseConcat(), op.line);
    }
    return l;
  }
  NodePtr ParseConcat() {
    NodePtr l = ParseMath2();
    while (IsOp("~")) {
      const Token op = Next();
      l = Binary("~", std::move(l), ParseMath2(), op.line);
    }
    return l;
  }
  NodePtr ParseMath2() {
    NodePtr l = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token op = Next();
      l = Binary(op.text, std::move(l), ParsePow(), op.line);
    }
    return l;
  }
  NodePtr ParsePow() {
    NodePtr l = ParseUnary(true);
    while (IsOp("**")) {
      const Token op = Next();
      l = Binary("**", std::move(l), ParseUnary(true), op.line);
    }
    return l;
  }
  NodePtr ParseUnary(bool with_filter) {
    const Token& t = Peek();
    DepthGuard g(this, t.line);
    NodePtr node;
    if (IsOp("-") || IsOp("+")) {
      const Token op = Next();
      node = Make(op.text == "-" ? NodeKind::kNeg : NodeKind::kPos, op.line);
      node->kids.push_back(ParseUnary(false));
      node = Finish(std::move(node));
    } else {
      node = ParsePrimary();
    }
    node = ParsePostfix(std::move(node));
    if (with_filter) node = ParseFilterExpr(std::move(node));
    return node;
  }

  NodePtr ParsePrimary() {
    const Token t = Peek();
    DepthGuard g(this, t.line);
    switch (t.kind) {
      case Tok::kName: {
        Next();
        NodePtr n = Make(NodeKind::kLiteral, t.line);
        if (t.text == "true" || t.text == "True") {
          n->literal = Value::Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          n->literal = Value::Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          n->literal = Value::None();
        } else {
          n->kind = NodeKind::kName;
          n->name = t.text;
          if (!macros_.empty()) {
            macros_.back()->uses_caller |= t.text == "caller";
            macros_.back()->uses_varargs |= t.text == "varargs";
            macros_.back()->uses_kwargs |= t.text == "kwargs";
          }
        }
        return n;
      }
      case Tok::kString: {
        Next();
        std::string s = t.text;
        while (Peek().kind == Tok::kString) s += Next().text;  // adjacent literals concatenate
        NodePtr n = Make(NodeKind::kLiteral, t.line);
        n->literal = Value::String(std::move(s));
        return n;
      }
      case Tok::kInt:
      case Tok::kFloat: {
        Next();
        NodePtr n = Make(NodeKind::kLiteral, t.line);
        n->literal = t.kind == Tok::kInt ? Value::Int(t.i) : Value::Float(t.f);
        return n;
      }
      case Tok::kOp:
        if (t.text == "(") {
          Next();
          if (IsOp(")")) {
            Next();
            return Finish(Make(NodeKind::kTupleLit, t.line));
          }
          NodePtr first = ParseExpression(true);
          if (IsOp(")")) {
            Next();
            return first;
          }
          NodePtr tup = Make(NodeKind::kTupleLit, t.line);
          tup->kids.push_back(std::move(first));
          while (IsOp(",")) {
            Next();
            if (IsOp(")")) break;
            tup->kids.push_back(ParseExpression(true));
          }
          ExpectOp(")");
          return Finish(std::move(tup));
        }
        if (t.text == "[") {
          Next();
          NodePtr l = Make(NodeKind::kListLit, t.line);
          while (!IsOp("]")) {
            if (!l->kids.empty()) ExpectOp(",");
            if (IsOp("]")) break;
            l->kids.push_back(ParseExpression(true));
          }
          ExpectOp("]");
          return Finish(std::move(l));
        }
        if (t.text == "{") {
          Next();
          NodePtr d = Make(NodeKind::kDictLit, t.line);
          while (!IsOp("}")) {
            if (!d->kids.empty()) ExpectOp(",");
            if (IsOp("}")) break;
            d->kids.push_back(ParseExpression(true));
            ExpectOp(":");
            d->kids.push_back(ParseExpression(true));
          }
          ExpectOp("}");
          return Finish(std::move(d));
        }
        break;
      default: break;
    }
    Fail(t.line, "unexpected " + Describe(t));
  }

  // (args) after a callee/filter/test: positional then keyword arguments.
  void ParseCallArgs(Node* n) {
    ExpectOp("(");
    bool first = true;
    while (!IsOp(")")) {
      if (!first) ExpectOp(",");
      first = false;
      if (IsOp(")")) break;
      if (Peek().kind == Tok::kName && IsOp("=", 1)) {
        n->kw_names.push_back(Next().text);
        Next();
        n->kids.push_back(ParseExpression(true));
      } else {
        if (!n->kw_names.empty()) Fail(Peek().line, "positional argument after keyword argument");
        n->kids.push_back(ParseExpression(true));
      }
    }
    ExpectOp(")");
  }

  NodePtr ParsePostfix(NodePtr node) {
    while (true) {
      if (IsOp(".")) {
        const int line = Next().line;
        NodePtr n;
        if (Peek().kind == Tok::kInt) {
          n = Make(NodeKind::kItem, line);
          n->kids.push_back(std::move(node));
          NodePtr k = Make(NodeKind::kLiteral, line);
          k->literal = Value::Int(Next().i);
          n->kids.push_back(std::move(k));
        } else {
          n = Make(NodeKind::kAttr, line);
          n->name = ExpectName();
          n->kids.push_back(std::move(node));
        }
        node = Finish(std::move(n));
      } else if (IsOp("[")) {
        const int line = Next().line;
        DepthGuard g(this, line);
        NodePtr parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!IsOp(":") && !IsOp("]")) parts[k] = ParseExpression(true);
          if (k < 2 && IsOp(":")) {
            Next();
            slice = true;
          } else {
            break;
          }
        }
        ExpectOp("]");
        NodePtr n = Make(slice ? NodeKind::kSlice : NodeKind::kItem, line);
        n->kids.push_back(std::move(node));
        if (slice) {
          for (auto& p : parts) n->kids.push_back(std::move(p));
        } else {
          if (!parts[0]) Fail(line, "expected a subscript");
          n->kids.push_back(std::move(parts[0]));
        }
        node = Finish(std::move(n));
      } else if (IsOp("(")) {
        const int line = Peek().line;
        NodePtr n = Make(NodeKind::kCall, line);
        n->kids.push_back(std::move(node));
        ParseCallArgs(n.get());
        node = Finish(std::move(n));
      } else {
        return node;
      }
    }
  }

  NodePtr ParseFilterExpr(NodePtr node) {
    while (true) {
      if (IsOp("|")) {
        const int line = Next().line;
        NodePtr n = Make(NodeKind::kFilter, line);
        n->name = ExpectName();
        while (IsOp(".")) {  // dotted filter names
          Next();
          n->name += "." + ExpectName();
        }
        n->kids.push_back(std::move(node));
        if (IsOp("(")) ParseCallArgs(n.get());
        if (!internal::HasFilter(n->name)) Fail(line, "no filter named '" + n->name + "'");
        node = Finish(std::move(n));
      } else if (IsName("is")) {
        const int line = Next().line;
        NodePtr n = Make(NodeKind::kTest, line);
        if (IsName("not")) {
          Next();
          n->negated = true;
        }
        n->name = ExpectName();
        n->kids.push_back(std::move(node));
        if (IsOp("(")) {
          ParseCallArgs(n.get());
        } else if ((Peek().kind == Tok::kName && Peek().text != "else" && Peek().text != "or" &&
                    Peek().text != "and" && Peek().text != "if" && Peek().text != "is" &&
                    Peek().text != "in" && Peek().text != "not") ||
                   Peek().kind == Tok::kString || Peek().kind == Tok::kInt ||
                   Peek().kind == Tok::kFloat || IsOp("[") || IsOp("{")) {
          // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses.
          NodePtr arg = ParsePrimary();
          arg = ParsePostfix(std::move(arg));
          n->kids.push_back(std::move(arg));
        }
        if (!internal::HasTest(n->name)) Fail(line, "no test named '" + n->name + "'");
        node = Finish(std::move(n));
      } else if (IsOp("(")) {
        node = ParsePostfix(std::move(node));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  const Options& opt_;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<Node*> macros_;  // macro and call-block bodies being parsed, innermost last
};

}  // namespace

Body ParseTemplate(std::vector<Token> tokens, const Options& options) {
  Parser parser(std::move(tokens), options);
  return parser.ParseTemplate();
}

}  // namespace kvserve::jinja
