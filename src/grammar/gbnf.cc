#include "grammar/gbnf.h"

#include <set>
#include <string>

namespace kvserve::grammar {

namespace {

constexpr int kMaxRepeat = 10000;
constexpr int kMaxNesting = 200;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : text_(text) {}

  StatusOr<Grammar> Parse() {
    SkipSpace(true);
    while (pos_ < text_.size()) {
      KV_RETURN_IF_ERROR(ParseRule());
      SkipSpace(true);
    }
    for (size_t i = 0; i < g_.rules().size(); ++i) {
      if (!defined_.count(g_.rules()[i].name) && !g_.rules()[i].name.empty()) {
        return InvalidArgumentError("grammar: rule '" + g_.rules()[i].name +
                                    "' is used but not defined");
      }
    }
    const int32_t root = g_.FindRule("root");
    if (root < 0) return InvalidArgumentError("grammar: no 'root' rule");
    g_.set_root(root);
    KV_RETURN_IF_ERROR(g_.Validate().WithContext("grammar"));
    return std::move(g_);
  }

 private:
  Status Error(const std::string& what) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return InvalidArgumentError("grammar: " + what + " at line " + std::to_string(line) +
                                ", column " + std::to_string(col));
  }

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  // Skips blanks and comments; newlines too when `newlines` is set.
  void SkipSpace(bool newlines) {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  // At a newline outside parentheses: continue the rule only if the next line starts with '|'.
  bool ContinuesOnNextLine() {
    size_t save = pos_;
    SkipSpace(true);
    if (Peek() == '|') return true;
    pos_ = save;
    return false;
  }

  std::string ParseName() {
    size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  Status ParseRule() {
    std::string name = ParseName();
    if (name.empty()) return Error("expected a rule name");
    SkipSpace(false);
    if (text_.substr(pos_, 3) != "::=") return Error("expected '::=' after rule name '" + name + "'");
    pos_ += 3;
    SkipSpace(true);
    if (defined_.count(name)) return Error("rule '" + name + "' is defined twice");
    defined_.insert(name);
    const int32_t rule = g_.GetOrAddRule(name);
    return ParseAlternatives(rule, /*nested=*/false);
  }

  Status ParseAlternatives(int32_t rule, bool nested) {
    while (true) {
      Sequence seq;
      KV_RETURN_IF_ERROR(ParseSequence(&seq, nested));
      g_.AddAlternative(rule, std::move(seq));
      if (Peek() == '\n' && !nested && !ContinuesOnNextLine()) return OkStatus();
      if (Peek() != '|') return OkStatus();
      ++pos_;
      SkipSpace(true);
    }
  }

  // Reads one (possibly escaped) character of a literal or class.
  Status ParseChar(uint32_t* cp) {
    if (AtEnd()) return Error("unexpected end of input");
    if (Peek() != '\\') {
      size_t p = pos_;
      if (!DecodeUtf8(text_, &p, cp)) return Error("invalid UTF-8");
      pos_ = p;
      return OkStatus();
    }
    ++pos_;
    const char e = Peek();
    ++pos_;
    int hex_digits = 0;
    switch (e) {
      case 'n': *cp = '\n'; return OkStatus();
      case 'r': *cp = '\r'; return OkStatus();
      case 't': *cp = '\t'; return OkStatus();
      case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'':
        *cp = static_cast<uint8_t>(e);
        return OkStatus();
      case 'x': hex_digits = 2; break;
      case 'u': hex_digits = 4; break;
      case 'U': hex_digits = 8; break;
      default:
        --pos_;
        return Error(std::string("unknown escape '\\") + e + "'");
    }
    uint32_t v = 0;
    for (int i = 0; i < hex_digits; ++i) {
      const char h = Peek();
      int d = -1;
      if (h >= '0' && h <= '9') d = h - '0';
      if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
      if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
      if (d < 0) return Error("expected a hex digit in escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    if (v > kMaxCodePoint) return Error("code point out of range");
    *cp = v;
    return OkStatus();
  }

  Status ParseInt(int* value) {
    if (!(Peek() >= '0' && Peek() <= '9')) return Error("expected a number");
    long v = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      v = v * 10 + (Peek() - '0');
      if (v > kMaxRepeat) return Error("repetition count above " + std::to_string(kMaxRepeat));
      ++pos_;
    }
    *value = static_cast<int>(v);
    return OkStatus();
  }

  Status ParseSequence(Sequence* seq, bool nested) {
    size_t last_start = seq->size();  // start of the last atom, for postfix operators
    bool have_atom = false;
    while (!AtEnd()) {
      const char c = Peek();
      if (c == '"') {
        ++pos_;
        last_start = seq->size();
        while (Peek() != '"') {
          if (AtEnd() || Peek() == '\n') return Error("unterminated literal");
          uint32_t cp = 0;
          KV_RETURN_IF_ERROR(ParseChar(&cp));
          seq->push_back(Element::Char(cp));
        }
        ++pos_;
        have_atom = seq->size() > last_start;
      } else if (c == '[') {
        ++pos_;
        Element e = Element::Set({});
        if (Peek() == '^') {
          e.negated = true;
          ++pos_;
        }
        while (Peek() != ']') {
          if (AtEnd()) return Error("unterminated character class");
          uint32_t lo = 0, hi = 0;
          KV_RETURN_IF_ERROR(ParseChar(&lo));
          hi = lo;
          if (Peek() == '-' && Peek(1) != ']' && Peek(1) != '\0') {
            ++pos_;
            KV_RETURN_IF_ERROR(ParseChar(&hi));
            if (hi < lo) return Error("character range out of order");
          }
          e.ranges.push_back({lo, hi});
        }
        ++pos_;
        last_start = seq->size();
        seq->push_back(std::move(e));
        have_atom = true;
      } else if (c == '.') {
        ++pos_;
        last_start = seq->size();
        seq->push_back(Element::Any());
        have_atom = true;
      } else if (IsNameChar(c)) {
        std::string name = ParseName();
        last_start = seq->size();
        seq->push_back(Element::Ref(g_.GetOrAddRule(name)));
        have_atom = true;
      } else if (c == '(') {
        if (++depth_ > kMaxNesting) return Error("parentheses nested deeper than " + std::to_string(kMaxNesting));
        ++pos_;
        SkipSpace(true);
        const int32_t sub = g_.NewRule("group");
        defined_.insert(g_.rules()[sub].name);
        KV_RETURN_IF_ERROR(ParseAlternatives(sub, /*nested=*/true));
        if (Peek() != ')') return Error("expected ')'");
        ++pos_;
        --depth_;
        last_start = seq->size();
        seq->push_back(Element::Ref(sub));
        have_atom = true;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_atom) return Error(std::string("'") + c + "' without an element before it");
        int min_count = 0, max_count = -1;
        ++pos_;
        if (c == '+') min_count = 1;
        if (c == '?') max_count = 1;
        if (c == '{') {
          SkipSpace(false);
          KV_RETURN_IF_ERROR(ParseInt(&min_count));
          SkipSpace(false);
          max_count = min_count;
          if (Peek() == ',') {
            ++pos_;
            SkipSpace(false);
            max_count = -1;
            if (Peek() != '}') KV_RETURN_IF_ERROR(ParseInt(&max_count));
            SkipSpace(false);
          }
          if (Peek() != '}') return Error("expected '}'");
          ++pos_;
          if (max_count >= 0 && max_count < min_count) return Error("repetition {m,n} with n < m");
        }
        Sequence body(seq->begin() + static_cast<long>(last_start), seq->end());
        seq->resize(last_start);
        seq->push_back(g_.Repeat(body, min_count, max_count, "repeat"));
        MarkHelpersDefined();
      } else {
        break;
      }
      SkipSpace(nested);
      if (!nested && Peek() == '\n') break;
    }
    if (!AtEnd() && Peek() != '|' && Peek() != ')' && Peek() != '\n') {
      return Error(std::string("unexpected character '") + Peek() + "'");
    }
    if (!nested && Peek() == ')') return Error("unbalanced ')'");
    if (nested && AtEnd()) return Error("expected ')'");
    return OkStatus();
  }

  // Helper rules made by Repeat are defined by construction.
  void MarkHelpersDefined() {
    for (; helpers_marked_ < g_.rules().size(); ++helpers_marked_) {
      const Rule& r = g_.rules()[helpers_marked_];
      if (!r.alternatives.empty()) defined_.insert(r.name);
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
  size_t helpers_marked_ = 0;
  Grammar g_;
  std::set<std::string> defined_;
};

}  // namespace

StatusOr<Grammar> ParseGbnf(std::string_view text) { return GbnfParser(text).Parse(); }

}  // namespace kvserve::grammar
