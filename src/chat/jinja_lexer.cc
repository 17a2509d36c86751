// The jinja lexer: template source to tokens (see jinja_syntax.h).
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_internal.h"
#include "chat/jinja_syntax.h"

namespace kvserve::jinja {
namespace {

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

std::vector<Token> Lex(std::string source) {
  Lexer lexer(std::move(source));
  return lexer.Run();
}

}  // namespace kvserve::jinja
