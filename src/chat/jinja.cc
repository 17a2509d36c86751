// Lexer, parser and renderer of the jinja subset (see jinja.h). Internally errors travel as a
// C++ exception (TemplateError) through the recursive parser and evaluator and become a Status
// at the two public entry points, Template::Parse and Template::Render.
#include "chat/jinja.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "base/check.h"
#include "chat/jinja_internal.h"

namespace kvserve::jinja {

using internal::Env;

namespace {

struct TemplateError {
  std::string message;
  int line = 0;
};

[[noreturn]] void Fail(int line, std::string message) { throw TemplateError{std::move(message), line}; }

// Unwraps a builtin's StatusOr or throws with the line.
template <typename T>
T Unwrap(StatusOr<T> s, int line) {
  if (!s.ok()) Fail(line, s.status().message());
  return std::move(s).value();
}

// ---- lexer ----------------------------------------------------------------------------------

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok kind = Tok::kEof;
  std::string text;  // text, name, string value, operator
  int64_t i = 0;
  double f = 0.0;
  int line = 1;
};

bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's str.rstrip() of template text before a `{%-` / `{{-` / `{#-`.
std::string RStripPy(const std::string& s) { return internal::PyStrip(s, nullptr, false, true); }

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  std::vector<Token> Run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t start = FindTagStart(pos_);
      if (start == std::string::npos) {
        Emit(Tok::kText, src_.substr(pos_), line_);
        break;
      }
      std::string text = src_.substr(pos_, start - pos_);
      const char type = src_[start + 1];
      char sign = start + 2 < src_.size() ? src_[start + 2] : 0;
      if (sign != '-' && sign != '+') sign = 0;
      if (sign == '-') {
        text = RStripPy(text);
      } else if (sign == 0 && type != '{') {  // lstrip_blocks for blocks and comments
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
          bool all_ws = true;
          for (size_t k = l_pos; k < text.size(); ++k) {
            if (!IsWs(text[k])) all_ws = false;
          }
          if (all_ws) text.resize(l_pos);
        }
      }
      if (!text.empty()) Emit(Tok::kText, text, line_);
      CountLines(pos_, start);
      pos_ = start + 2 + (sign ? 1 : 0);
      if (type == '#') {
        LexComment();
      } else if (type == '%' && TryRaw(start)) {
        // handled
      } else {
        LexTag(type);
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    Emit(Tok::kEof, "", line_);
    return std::move(out_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    size_t p = from;
    while (true) {
      p = src_.find('{', p);
      if (p == std::string::npos || p + 1 >= src_.size()) return std::string::npos;
      const char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      ++p;
    }
  }
  void CountLines(size_t from, size_t to) {
    for (size_t k = from; k < to && k < src_.size(); ++k) {
      if (src_[k] == '\n') ++line_;
    }
  }
  void Emit(Tok kind, std::string text, int line) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.line = line;
    out_.push_back(std::move(t));
  }
  // After an end marker: `-` strips all following whitespace; a plain block/comment end
  // drops one newline (trim_blocks).
  void AfterEnd(char sign, bool trim_newline) {
    if (sign == '-') {
      const size_t s = pos_;
      while (pos_ < src_.size() && IsWs(src_[pos_])) ++pos_;
      CountLines(s, pos_);
    } else if (sign == 0 && trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
  }
  void LexComment() {
    const int begin_line = line_;
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) Fail(begin_line, "missing end of comment tag");
    char sign = 0;
    if (end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+')) sign = src_[end - 1];
    CountLines(pos_, end);
    pos_ = end + 2;
    AfterEnd(sign, true);
  }
  // {% raw %}...{% endraw %}: the text between is emitted verbatim.
  bool TryRaw(size_t tag_start) {
    size_t p = pos_;
    while (p < src_.size() && IsWs(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && IsWs(src_[p])) ++p;
    char sign = 0;
    if (p < src_.size() && src_[p] == '-') {
      sign = '-';
      ++p;
    }
    if (src_.compare(p, 2, "%}") != 0) return false;
    CountLines(pos_, p + 2);
    pos_ = p + 2;
    AfterEnd(sign, true);
    // Find {%[-+]? endraw [-]?%}.
    size_t q = pos_;
    while (true) {
      q = src_.find("{%", q);
      if (q == std::string::npos) Fail(line_, "missing end of raw directive");
      size_t r = q + 2;
      char lsign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) lsign = src_[r++];
      while (r < src_.size() && IsWs(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) {
        q += 2;
        continue;
      }
      r += 6;
      while (r < src_.size() && IsWs(src_[r])) ++r;
      char rsign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) rsign = src_[r++];
      if (src_.compare(r, 2, "%}") != 0) {
        q += 2;
        continue;
      }
      std::string text = src_.substr(pos_, q - pos_);
      if (lsign == '-') text = RStripPy(text);
      if (!text.empty()) Emit(Tok::kText, text, line_);
      CountLines(pos_, r + 2);
      pos_ = r + 2;
      AfterEnd(rsign == '+' ? '+' : rsign, true);
      return true;
    }
    (void)tag_start;
  }

  void LexTag(char type) {
    const bool block = type == '%';
    Emit(block ? Tok::kBlockBegin : Tok::kVarBegin, "", line_);
    int depth = 0;
    while (true) {
      while (pos_ < src_.size() && IsWs(src_[pos_])) {
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= src_.size()) Fail(line_, block ? "unexpected end of template, expected '%}'"
                                                 : "unexpected end of template, expected '}}'");
      if (depth == 0) {
        const char* end = block ? "%}" : "}}";
        char sign = 0;
        size_t p = pos_;
        if (src_[p] == '-' || (block && src_[p] == '+')) {
          sign = src_[p];
          ++p;
        }
        if (src_.compare(p, 2, end) == 0) {
          Emit(block ? Tok::kBlockEnd : Tok::kVarEnd, "", line_);
          pos_ = p + 2;
          AfterEnd(sign, block);
          return;
        }
      }
      LexToken(depth);
    }
  }

  void LexToken(int& depth) {
    const char c = src_[pos_];
    const int line = line_;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = pos_;
      while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
      Emit(Tok::kName, src_.substr(pos_, e - pos_), line);
      pos_ = e;
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      LexNumber();
      return;
    }
    if (c == '\'' || c == '"') {
      LexString(c);
      return;
    }
    static const char* kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kOps2) {
      if (src_.compare(pos_, 2, op) == 0) {
        Emit(Tok::kOp, op, line);
        pos_ += 2;
        return;
      }
    }
    if (std::strchr("+-*/%~<>=()[]{},.:|", c) != nullptr) {
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') {
        if (depth == 0) Fail(line, std::string("unexpected '") + c + "'");
        --depth;
      }
      Emit(Tok::kOp, std::string(1, c), line);
      ++pos_;
      return;
    }
    Fail(line, std::string("unexpected char '") + c + "'");
  }

  void LexNumber() {
    const int line = line_;
    const bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';
    size_t e = pos_;
    std::string digits;
    auto eat_digits = [&]() {
      while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) ||
                                 (src_[e] == '_' && e + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[e + 1]))))) {
        if (src_[e] != '_') digits.push_back(src_[e]);
        ++e;
      }
    };
    eat_digits();
    bool is_float = false;
    if (!after_dot && e + 1 < src_.size() && src_[e] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      digits.push_back('.');
      ++e;
      eat_digits();
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t k = e + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
        is_float = true;
        digits += 'e';
        digits.append(src_, e + 1, k - e - 1);
        e = k;
        eat_digits();
      }
    }
    Token t;
    t.line = line;
    if (is_float) {
      t.kind = Tok::kFloat;
      t.f = std::strtod(digits.c_str(), nullptr);
    } else {
      t.kind = Tok::kInt;
      errno = 0;
      const long long v = std::strtoll(digits.c_str(), nullptr, 10);
      if (errno == ERANGE) Fail(line, "integer literal too large");
      t.i = v;
    }
    out_.push_back(std::move(t));
    pos_ = e;
  }

  void LexString(char q) {
    const int line = line_;
    size_t p = pos_ + 1;
    std::string raw;
    while (true) {
      if (p >= src_.size()) Fail(line, "unterminated string literal");
      const char c = src_[p];
      if (c == '\\' && p + 1 < src_.size()) {
        raw.push_back(c);
        raw.push_back(src_[p + 1]);
        if (src_[p + 1] == '\n') ++line_;
        p += 2;
        continue;
      }
      if (c == q) break;
      if (c == '\n') ++line_;
      raw.push_back(c);
      ++p;
    }
    pos_ = p + 1;
    Emit(Tok::kString, Unescape(raw, line), line);
  }

  // Python's unicode-escape decoding of a literal's body (unknown escapes keep the backslash).
  static std::string Unescape(const std::string& s, int line) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\' || i + 1 >= s.size()) {
        out.push_back(s[i]);
        continue;
      }
      const char e = s[++i];
      auto hex = [&](int n) -> char32_t {
        char32_t v = 0;
        for (int k = 1; k <= n; ++k) {
          if (i + k >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + k]))) {
            Fail(line, "truncated \\x/\\u escape");
          }
          v = v * 16 + static_cast<char32_t>(std::stoi(std::string(1, s[i + k]), nullptr, 16));
        }
        i += n;
        return v;
      };
      switch (e) {
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'v': out.push_back('\v'); break;
        case '\n': break;
        case 'N': Fail(line, "\\N{name} escapes are not supported");
        case 'x': internal::AppendUtf8(out, hex(2)); break;
        case 'u': internal::AppendUtf8(out, hex(4)); break;
        case 'U': {
          const char32_t cp = hex(8);
          if (cp > 0x10FFFF) Fail(line, "illegal Unicode character");
          internal::AppendUtf8(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = e - '0';
            for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k) {
              v = v * 8 + (s[++i] - '0');
            }
            internal::AppendUtf8(out, v);
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    return out;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

}  // namespace

// ---- AST ------------------------------------------------------------------------------------

enum class NodeKind {
  // statements
  kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kWith, kScope, kFilterBlock,
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
};

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
    ExpectBlockEnd();
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    n->bodies.push_back(ParseBody({"endmacro"}, &end));
    loop_depth_ = saved_loops;
    if (Peek().kind == Tok::kName && Peek().text == n->name) Next();
    ExpectBlockEnd();
    return Finish(std::move(n));
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

  NodePtr ParseOr() {
    NodePtr l = ParseAnd();
    while (IsName("or")) {
      const int line = Next().line;
      NodePtr n = Make(NodeKind::kOr, line);
      n->kids.push_back(std::move(l));
      n->kids.push_back(ParseAnd());
      l = Finish(std::move(n));
    }
    return l;
  }
  NodePtr ParseAnd() {
    NodePtr l = ParseNot();
    while (IsName("and")) {
      const int line = Next().line;
      NodePtr n = Make(NodeKind::kAnd, line);
      n->kids.push_back(std::move(l));
      n->kids.push_back(ParseNot());
      l = Finish(std::move(n));
    }
    return l;
  }
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
};

// ---- renderer -------------------------------------------------------------------------------

struct Scope {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Scope> parent;

  Value* Find(const std::string& name) {
    for (Scope* s = this; s != nullptr; s = s->parent.get()) {
      for (auto& [k, v] : s->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void Set(const std::string& name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer : public Env {
 public:
  Renderer(const Options& o, std::optional<std::time_t> now) : opt_(o), now_(now) {}
  ~Renderer() override {
    for (Value& ns : namespaces_) ns.mutable_dict().entries.clear();  // break reference cycles
  }

  const Options& options() const override { return opt_; }

  StatusOr<Value> Call(const Value& callee, const CallArgs& args) override {
    try {
      return CallValue(callee, args, cur_line_);
    } catch (const TemplateError& e) {
      return InvalidArgumentError(e.message);
    }
  }

  void Run(const Body& body, const Value& context, std::string* out) {
    auto globals = std::make_shared<Scope>();
    const Value g = internal::MakeGlobals(opt_, now_, &namespaces_);
    for (const auto& [k, v] : g.dict().entries) globals->vars.emplace_back(k.str(), v);
    auto root = std::make_shared<Scope>();
    root->parent = globals;
    root_ = root;
    if (context.is_dict()) {
      for (const auto& [k, v] : context.dict().entries) {
        if (k.is_string()) root->Set(k.str(), v);
      }
    }
    Exec(body, root, out);
  }

 private:
  void Append(std::string* out, const std::string& s, int line) {
    if (static_cast<int64_t>(out->size() + s.size()) > opt_.max_output_bytes) {
      Fail(line, "rendered output exceeds " + std::to_string(opt_.max_output_bytes) + " bytes");
    }
    out->append(s);
  }

  Flow Exec(const Body& body, const ScopePtr& scope, std::string* out) {
    for (const NodePtr& n : body) {
      const Flow f = ExecOne(*n, scope, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow ExecOne(const Node& n, const ScopePtr& scope, std::string* out) {
    cur_line_ = n.line;
    switch (n.kind) {
      case NodeKind::kText: Append(out, n.name, n.line); return Flow::kNormal;
      case NodeKind::kOutput: {
        const Value v = Eval(*n.kids[0], scope);
        Append(out, ToPyStr(v), n.line);
        return Flow::kNormal;
      }
      case NodeKind::kIf: {
        for (size_t i = 0; i < n.kids.size(); ++i) {
          if (Eval(*n.kids[i], scope).truthy()) return Exec(n.bodies[i], scope, out);
        }
        if (n.has_else) return Exec(n.bodies.back(), scope, out);
        return Flow::kNormal;
      }
      case NodeKind::kFor: ExecFor(n, scope, out); return Flow::kNormal;
      case NodeKind::kSet: {
        Value v = Eval(*n.kids[0], scope);
        if (!n.attr.empty()) {
          Value* ns = scope->Find(n.name);
          if (ns == nullptr || !ns->is_namespace()) {
            Fail(n.line, "cannot assign attribute on non-namespace object");
          }
          ns->mutable_dict().Set(Value::String(n.attr), std::move(v));
        } else {
          Assign(n.targets, std::move(v), scope.get(), n.line);
        }
        return Flow::kNormal;
      }
      case NodeKind::kSetBlock: {
        std::string captured;
        Exec(n.bodies[0], scope, &captured);
        scope->Set(n.name, Value::String(std::move(captured)));
        return Flow::kNormal;
      }
      case NodeKind::kMacro: {
        auto f = std::make_shared<Function>();
        f->name = n.name;
        f->macro = &n;
        f->closure = scope;
        scope->Set(n.name, Value::Func(std::move(f)));
        return Flow::kNormal;
      }
      case NodeKind::kBreak: return Flow::kBreak;
      case NodeKind::kContinue: return Flow::kContinue;
      case NodeKind::kWith: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        for (size_t i = 0; i < n.targets.size(); ++i) inner->Set(n.targets[i], Eval(*n.kids[i], scope));
        return Exec(n.bodies[0], inner, out);
      }
      case NodeKind::kScope: return Exec(n.bodies[0], scope, out);
      case NodeKind::kFilterBlock: {
        std::string body;
        const Flow f = Exec(n.bodies[0], scope, &body);
        Value v = Value::String(std::move(body));
        std::vector<const Node*> chain;  // outermost filter first
        for (const Node* k = n.kids[0].get(); k != nullptr; k = k->kids[0].get()) chain.push_back(k);
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
          CallArgs a = EvalArgs(**it, 1, scope);
          v = Unwrap(internal::ApplyFilter(*this, (*it)->name, v, a), (*it)->line);
        }
        Append(out, ToPyStr(v), n.line);
        return f;
      }
      default: KV_CHECK(false) << "not a statement";
    }
    return Flow::kNormal;
  }

  void Assign(const std::vector<std::string>& targets, Value v, Scope* scope, int line) {
    if (targets.size() == 1) {
      scope->Set(targets[0], std::move(v));
      return;
    }
    std::vector<Value> items = Unwrap(internal::Iterate(v), line);
    if (items.size() != targets.size()) {
      Fail(line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                     std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope->Set(targets[i], std::move(items[i]));
  }

  void CountIteration(int line) {
    if (++iterations_ > opt_.max_loop_iterations) {
      Fail(line, "more than " + std::to_string(opt_.max_loop_iterations) + " loop iterations");
    }
  }

  void ExecFor(const Node& n, const ScopePtr& scope, std::string* out) {
    const Value iterable = Eval(*n.kids[0], scope);
    if (!iterable.is_undefined() && !iterable.is_list() && !iterable.is_dict() && !iterable.is_string()) {
      Fail(n.line, "'" + internal::TypeName(iterable) + "' object is not iterable");
    }
    std::vector<Value> items = Unwrap(internal::Iterate(iterable), n.line);
    if (n.kids[1]) {  // {% for x in xs if cond %}
      std::vector<Value> kept;
      for (Value& item : items) {
        CountIteration(n.line);
        auto s = std::make_shared<Scope>();
        s->parent = scope;
        Assign(n.targets, item, s.get(), n.line);
        if (Eval(*n.kids[1], s).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    auto current = std::make_shared<int64_t>(0);  // loop.cycle() reads the iteration index
    auto cycle = std::make_shared<Function>();
    cycle->name = "cycle";
    cycle->builtin = [current](const CallArgs& a) -> StatusOr<Value> {
      if (a.args.empty()) return InvalidArgumentError("no items for cycling given");
      return a.args[*current % static_cast<int64_t>(a.args.size())];
    };
    const Value cycle_value = Value::Func(std::move(cycle));
    for (int64_t i = 0; i < len; ++i) {
      *current = i;
      CountIteration(n.line);
      auto s = std::make_shared<Scope>();
      s->parent = scope;
      Value loop = Value::Dict();
      ValueDict& d = loop.mutable_dict();
      auto set = [&](const char* k, Value v) { d.entries.emplace_back(Value::String(k), std::move(v)); };
      set("index", Value::Int(i + 1));
      set("index0", Value::Int(i));
      set("revindex", Value::Int(len - i));
      set("revindex0", Value::Int(len - i - 1));
      set("first", Value::Bool(i == 0));
      set("last", Value::Bool(i == len - 1));
      set("length", Value::Int(len));
      set("depth", Value::Int(1));
      set("depth0", Value::Int(0));
      if (i > 0) set("previtem", items[i - 1]);
      if (i + 1 < len) set("nextitem", items[i + 1]);
      set("cycle", cycle_value);
      s->vars.emplace_back("loop", std::move(loop));
      Assign(n.targets, items[i], s.get(), n.line);
      const Flow f = Exec(n.bodies[0], s, out);
      if (f == Flow::kBreak) break;
    }
    if (len == 0 && n.has_else) Exec(n.bodies[1], scope, out);
  }

  Value CallValue(const Value& callee, const CallArgs& args, int line) {
    if (callee.is_undefined()) {
      Fail(line, callee.undefined_hint().empty() ? "undefined value is not callable"
                                                 : callee.undefined_hint());
    }
    if (!callee.is_function()) Fail(line, "'" + internal::TypeName(callee) + "' object is not callable");
    const Function& f = *callee.function();
    if (f.builtin) {
      StatusOr<Value> r = f.builtin(args);
      if (!r.ok()) Fail(line, r.status().message());
      return std::move(r).value();
    }
    const Node& m = *static_cast<const Node*>(f.macro);
    if (++call_depth_ > opt_.max_call_depth) {
      Fail(line, "macro calls nested more than " + std::to_string(opt_.max_call_depth) + " deep");
    }
    auto s = std::make_shared<Scope>();
    s->parent = std::static_pointer_cast<Scope>(f.closure.lock());
    if (!s->parent) s->parent = root_;  // the defining scope ended (macro escaped a loop body)
    if (args.args.size() > m.targets.size()) {
      Fail(line, "macro '" + m.name + "' takes not more than " + std::to_string(m.targets.size()) +
                     " argument(s)");
    }
    std::vector<bool> bound(m.targets.size(), false);
    for (size_t i = 0; i < args.args.size(); ++i) {
      s->Set(m.targets[i], args.args[i]);
      bound[i] = true;
    }
    for (const auto& [k, v] : args.kwargs) {
      auto it = std::find(m.targets.begin(), m.targets.end(), k);
      if (it == m.targets.end()) Fail(line, "macro '" + m.name + "' takes no keyword argument '" + k + "'");
      s->Set(k, v);
      bound[it - m.targets.begin()] = true;
    }
    for (size_t i = 0; i < m.targets.size(); ++i) {
      if (bound[i]) continue;
      if (m.kids[i]) {
        s->Set(m.targets[i], Eval(*m.kids[i], s));
      } else {
        s->Set(m.targets[i], Value::Undefined("parameter '" + m.targets[i] + "' was not provided"));
      }
    }
    std::string body;
    Exec(m.bodies[0], s, &body);
    --call_depth_;
    return Value::String(std::move(body));
  }

  CallArgs EvalArgs(const Node& n, size_t first, const ScopePtr& scope) {
    CallArgs a;
    const size_t num_kw = n.kw_names.size();
    const size_t num_pos = n.kids.size() - first - num_kw;
    for (size_t i = 0; i < num_pos; ++i) a.args.push_back(Eval(*n.kids[first + i], scope));
    for (size_t i = 0; i < num_kw; ++i) {
      a.kwargs.emplace_back(n.kw_names[i], Eval(*n.kids[first + num_pos + i], scope));
    }
    return a;
  }

  Value Eval(const Node& n, const ScopePtr& scope) {
    switch (n.kind) {
      case NodeKind::kLiteral: return n.literal;
      case NodeKind::kName: {
        Value* v = scope->Find(n.name);
        if (v == nullptr) return Value::Undefined("'" + n.name + "' is undefined");
        return *v;
      }
      case NodeKind::kAttr: return Unwrap(internal::GetAttr(Eval(*n.kids[0], scope), n.name), n.line);
      case NodeKind::kItem: {
        const Value obj = Eval(*n.kids[0], scope);
        return Unwrap(internal::GetItem(obj, Eval(*n.kids[1], scope)), n.line);
      }
      case NodeKind::kSlice: return EvalSlice(n, scope);
      case NodeKind::kCall: {
        const Value callee = Eval(*n.kids[0], scope);
        CallArgs a = EvalArgs(n, 1, scope);
        cur_line_ = n.line;
        return CallValue(callee, a, n.line);
      }
      case NodeKind::kFilter: {
        const Value v = Eval(*n.kids[0], scope);
        CallArgs a = EvalArgs(n, 1, scope);
        cur_line_ = n.line;
        return Unwrap(internal::ApplyFilter(*this, n.name, v, a), n.line);
      }
      case NodeKind::kTest: {
        const Value v = Eval(*n.kids[0], scope);
        CallArgs a = EvalArgs(n, 1, scope);
        cur_line_ = n.line;
        const bool r = Unwrap(internal::ApplyTest(*this, n.name, v, a), n.line);
        return Value::Bool(n.negated ? !r : r);
      }
      case NodeKind::kNeg:
      case NodeKind::kPos: {
        const Value v = Eval(*n.kids[0], scope);
        if (v.is_undefined()) Fail(n.line, v.undefined_hint());
        if (!v.is_number()) Fail(n.line, "bad operand type for unary " + std::string(n.kind == NodeKind::kNeg ? "-" : "+") + ": '" + internal::TypeName(v) + "'");
        if (n.kind == NodeKind::kPos) return v.is_bool() ? Value::Int(v.int_value()) : v;
        if (v.is_float()) return Value::Float(-v.float_value());
        if (v.int_value() == std::numeric_limits<int64_t>::min()) Fail(n.line, "integer overflow");
        return Value::Int(-v.int_value());
      }
      case NodeKind::kNot: return Value::Bool(!Eval(*n.kids[0], scope).truthy());
      case NodeKind::kAnd: {
        Value l = Eval(*n.kids[0], scope);
        if (!l.truthy()) return l;
        return Eval(*n.kids[1], scope);
      }
      case NodeKind::kOr: {
        Value l = Eval(*n.kids[0], scope);
        if (l.truthy()) return l;
        return Eval(*n.kids[1], scope);
      }
      case NodeKind::kCond: {
        if (Eval(*n.kids[1], scope).truthy()) return Eval(*n.kids[0], scope);
        if (n.kids[2]) return Eval(*n.kids[2], scope);
        return Value::Undefined("the inline if-expression evaluated to false and no else section was defined");
      }
      case NodeKind::kCompare: {
        Value l = Eval(*n.kids[0], scope);
        for (size_t i = 0; i < n.ops.size(); ++i) {
          Value r = Eval(*n.kids[i + 1], scope);
          if (!Compare(n.ops[i], l, r, n.line)) return Value::Bool(false);
          l = std::move(r);
        }
        return Value::Bool(true);
      }
      case NodeKind::kBinary: return EvalBinary(n, scope);
      case NodeKind::kListLit:
      case NodeKind::kTupleLit: {
        std::vector<Value> items;
        for (const NodePtr& k : n.kids) items.push_back(Eval(*k, scope));
        return Value::List(std::move(items), n.kind == NodeKind::kTupleLit);
      }
      case NodeKind::kDictLit: {
        Value d = Value::Dict();
        for (size_t i = 0; i + 1 < n.kids.size(); i += 2) {
          Value k = Eval(*n.kids[i], scope);
          if (k.is_list() && !k.is_tuple()) Fail(n.line, "unhashable type: 'list'");
          if (k.is_dict()) Fail(n.line, "unhashable type: 'dict'");
          d.mutable_dict().Set(k, Eval(*n.kids[i + 1], scope));
        }
        return d;
      }
      default: KV_CHECK(false) << "not an expression";
    }
    return Value();
  }

  Value EvalSlice(const Node& n, const ScopePtr& scope) {
    const Value obj = Eval(*n.kids[0], scope);
    if (obj.is_undefined()) Fail(n.line, obj.undefined_hint());
    std::optional<int64_t> idx[3];
    for (int k = 0; k < 3; ++k) {
      if (!n.kids[k + 1]) continue;
      const Value v = Eval(*n.kids[k + 1], scope);
      if (v.is_none()) continue;
      if (!v.is_int() && !v.is_bool()) Fail(n.line, "slice indices must be integers or None");
      idx[k] = v.int_value();
    }
    const int64_t step = idx[2].value_or(1);
    if (step == 0) Fail(n.line, "slice step cannot be zero");
    auto do_slice = [&](int64_t len, auto&& take) {
      int64_t start, stop;
      auto adjust = [&](std::optional<int64_t> v, int64_t def_pos, int64_t def_neg, bool is_start) {
        (void)is_start;
        if (!v) return step > 0 ? def_pos : def_neg;
        int64_t x = *v;
        if (x < 0) {
          x += len;
          if (x < 0) x = step > 0 ? 0 : -1;
        } else if (x >= len) {
          x = step > 0 ? len : len - 1;
        }
        return x;
      };
      start = adjust(idx[0], 0, len - 1, true);
      stop = adjust(idx[1], len, -1, false);
      if (step > 0) {
        for (int64_t i = start; i < stop; i += step) take(i);
      } else {
        for (int64_t i = start; i > stop; i += step) take(i);
      }
    };
    if (obj.is_string()) {
      const std::u32string s = internal::Decode(obj.str());
      std::u32string r;
      do_slice(static_cast<int64_t>(s.size()), [&](int64_t i) { r.push_back(s[i]); });
      return Value::String(internal::Encode(r));
    }
    if (obj.is_list()) {
      const auto& items = obj.items();
      std::vector<Value> r;
      do_slice(static_cast<int64_t>(items.size()), [&](int64_t i) { r.push_back(items[i]); });
      return Value::List(std::move(r), obj.is_tuple());
    }
    Fail(n.line, "'" + internal::TypeName(obj) + "' object is not subscriptable");
  }

  bool Compare(const std::string& op, const Value& l, const Value& r, int line) {
    if (op == "==") return internal::PyEqual(l, r);
    if (op == "!=") return !internal::PyEqual(l, r);
    if (op == "in" || op == "not in") {
      bool found = false;
      if (r.is_string()) {
        if (!l.is_string()) Fail(line, "'in <string>' requires string as left operand, not " + internal::TypeName(l));
        found = r.str().find(l.str()) != std::string::npos;
      } else if (r.is_list()) {
        for (const Value& v : r.items()) {
          if (internal::PyEqual(l, v)) {
            found = true;
            break;
          }
        }
      } else if (r.is_dict()) {
        found = r.dict().Find(l) != nullptr;
      } else if (r.is_undefined()) {
        found = false;
      } else {
        Fail(line, "argument of type '" + internal::TypeName(r) + "' is not iterable");
      }
      return op == "in" ? found : !found;
    }
    if (l.is_undefined()) Fail(line, l.undefined_hint());
    if (r.is_undefined()) Fail(line, r.undefined_hint());
    if (op == "<") return Unwrap(internal::PyLess(l, r), line);
    if (op == ">") return Unwrap(internal::PyLess(r, l), line);
    if (op == "<=") return !Unwrap(internal::PyLess(r, l), line);
    if (op == ">=") return !Unwrap(internal::PyLess(l, r), line);
    Fail(line, "unknown comparison " + op);
  }

  Value EvalBinary(const Node& n, const ScopePtr& scope) {
    const Value l = Eval(*n.kids[0], scope);
    const Value r = Eval(*n.kids[1], scope);
    const std::string& op = n.name;
    const int line = n.line;
    if (op == "~") {
      std::string s = ToPyStr(l);
      s += ToPyStr(r);
      CheckSize(s.size(), line);
      return Value::String(std::move(s));
    }
    if (l.is_undefined()) Fail(line, l.undefined_hint());
    if (r.is_undefined()) Fail(line, r.undefined_hint());
    auto type_error = [&]() {
      Fail(line, "unsupported operand type(s) for " + op + ": '" + internal::TypeName(l) + "' and '" +
                     internal::TypeName(r) + "'");
    };
    if (op == "+") {
      if (l.is_string() && r.is_string()) {
        CheckSize(l.str().size() + r.str().size(), line);
        return Value::String(l.str() + r.str());
      }
      if (l.is_list() && r.is_list() && l.is_tuple() == r.is_tuple()) {
        std::vector<Value> items = l.items();
        items.insert(items.end(), r.items().begin(), r.items().end());
        return Value::List(std::move(items), l.is_tuple());
      }
      if (l.is_string() || r.is_string()) {
        if (l.is_string()) Fail(line, "can only concatenate str (not \"" + internal::TypeName(r) + "\") to str");
        type_error();
      }
    }
    if (op == "*" && ((l.is_string() || l.is_list()) != (r.is_string() || r.is_list()))) {
      const Value& seq = (l.is_string() || l.is_list()) ? l : r;
      const Value& cnt = (l.is_string() || l.is_list()) ? r : l;
      if (!cnt.is_int() && !cnt.is_bool()) type_error();
      const int64_t times = std::max<int64_t>(0, cnt.int_value());
      if (seq.is_string()) {
        if (times > 0 && seq.str().size() > 0) CheckSize(static_cast<double>(seq.str().size()) * times, line);
        std::string s;
        for (int64_t i = 0; i < times && !seq.str().empty(); ++i) s += seq.str();
        return Value::String(std::move(s));
      }
      if (times > 0 && !seq.items().empty()) CheckSize(static_cast<double>(seq.items().size()) * times * 8, line);
      std::vector<Value> items;
      for (int64_t i = 0; i < times; ++i) items.insert(items.end(), seq.items().begin(), seq.items().end());
      return Value::List(std::move(items), seq.is_tuple());
    }
    if (op == "%" && l.is_string()) {
      CallArgs a;
      a.args.push_back(r);
      return Unwrap(internal::ApplyFilter(*this, "format", l, a.args[0].is_tuple() ? CallArgs{r.items(), {}} : a), line);
    }
    if (!l.is_number() || !r.is_number()) type_error();
    const bool as_float = l.is_float() || r.is_float();
    const double a = l.as_double(), b = r.as_double();
    const int64_t x = l.int_value(), y = r.int_value();
    if (op == "/") {
      if (b == 0.0) Fail(line, "division by zero");
      return Value::Float(a / b);
    }
    if (op == "//" || op == "%") {
      if (as_float) {
        if (b == 0.0) Fail(line, "float division by zero");
        double m = std::fmod(a, b);
        if (m != 0.0 && ((m < 0) != (b < 0))) m += b;
        if (op == "%") return Value::Float(m);
        return Value::Float(std::floor(a / b));
      }
      if (y == 0) Fail(line, "integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) Fail(line, "integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        --q;
      }
      return Value::Int(op == "//" ? q : m);
    }
    if (op == "**") {
      if (!as_float && y >= 0) {
        int64_t result = 1, base = x;
        int64_t e = y;
        while (e > 0) {
          if (e & 1) {
            if (__builtin_mul_overflow(result, base, &result)) Fail(line, "integer overflow");
          }
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) Fail(line, "integer overflow");
        }
        return Value::Int(result);
      }
      if (a == 0.0 && b < 0) Fail(line, "0.0 cannot be raised to a negative power");
      return Value::Float(std::pow(a, b));
    }
    if (as_float) {
      if (op == "+") return Value::Float(a + b);
      if (op == "-") return Value::Float(a - b);
      if (op == "*") return Value::Float(a * b);
    } else {
      int64_t res = 0;
      bool overflow = false;
      if (op == "+") overflow = __builtin_add_overflow(x, y, &res);
      else if (op == "-") overflow = __builtin_sub_overflow(x, y, &res);
      else if (op == "*") overflow = __builtin_mul_overflow(x, y, &res);
      else type_error();
      if (overflow) Fail(line, "integer overflow");
      return Value::Int(res);
    }
    type_error();
    return Value();
  }

  void CheckSize(double bytes, int line) {
    if (bytes > static_cast<double>(opt_.max_output_bytes)) {
      Fail(line, "string or list exceeds " + std::to_string(opt_.max_output_bytes) + " bytes");
    }
  }

  const Options& opt_;
  std::optional<std::time_t> now_;
  std::shared_ptr<Scope> root_;
  std::vector<Value> namespaces_;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  int cur_line_ = 0;
};

// Normalizes newlines as jinja2 does (\r\n and \r become \n) and drops one trailing newline
// (keep_trailing_newline=False).
std::string NormalizeSource(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out.push_back(s[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string WithLine(const TemplateError& e) {
  if (e.message.rfind(internal::kRaisePrefix, 0) == 0) {
    return e.message.substr(std::strlen(internal::kRaisePrefix));
  }
  return "line " + std::to_string(e.line) + ": " + e.message;
}

}  // namespace

StatusOr<Template> Template::Parse(const std::string& source, const Options& options) {
  try {
    Lexer lexer(NormalizeSource(source));
    Parser parser(lexer.Run(), options);
    auto root = std::make_shared<Node>();
    root->kind = NodeKind::kScope;
    root->bodies.push_back(parser.ParseTemplate());
    Template t;
    t.root_ = std::move(root);
    t.options_ = options;
    return t;
  } catch (const TemplateError& e) {
    return InvalidArgumentError("chat template syntax error: " + WithLine(e));
  }
}

StatusOr<std::string> Template::Render(const Value& context,
                                       std::optional<std::time_t> now_unix_seconds) const {
  KV_CHECK(root_ != nullptr) << "Render on a default-constructed Template";
  std::string out;
  try {
    Renderer r(options_, now_unix_seconds);
    r.Run(root_->bodies[0], context, &out);
  } catch (const TemplateError& e) {
    if (e.message.rfind(internal::kRaisePrefix, 0) == 0) return InvalidArgumentError(WithLine(e));
    return InvalidArgumentError("chat template error: " + WithLine(e));
  }
  return out;
}

}  // namespace kvserve::jinja
