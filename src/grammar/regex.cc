#include "grammar/regex.h"

#include <algorithm>

namespace kvserve::grammar {

namespace {

constexpr int kMaxRepeat = 10000;

std::vector<CharRange> Complement(std::vector<CharRange> r) {
  std::sort(r.begin(), r.end(), [](const CharRange& a, const CharRange& b) { return a.lo < b.lo; });
  std::vector<CharRange> out;
  uint32_t next = 0;
  for (const CharRange& cr : r) {
    if (cr.lo > next) out.push_back({next, cr.lo - 1});
    next = std::max(next, cr.hi + 1);
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

class RegexParser {
 public:
  RegexParser(Grammar* g, std::string_view pattern, const RegexOptions& options)
      : g_(g), p_(pattern), options_(options) {}

  StatusOr<Element> Parse() {
    if (!p_.empty() && p_.front() == '^') ++pos_;
    size_t end = p_.size();
    if (end > pos_ && p_[end - 1] == '$' && (end < 2 || p_[end - 2] != '\\')) --end;
    p_ = p_.substr(0, end);
    KV_ASSIGN_OR_RETURN(Sequence seq, ParseAlternation());
    if (pos_ < p_.size()) return Error("unbalanced ')'");
    return g_->Alternatives({std::move(seq)}, "regex");
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgumentError("regex: " + what + " at offset " + std::to_string(pos_) +
                                " of pattern '" + std::string(p_) + "'");
  }
  bool AtEnd() const { return pos_ >= p_.size(); }
  char Peek() const { return AtEnd() ? '\0' : p_[pos_]; }

  // Sequence of one or more alternatives (a rule reference when there are several).
  StatusOr<Sequence> ParseAlternation() {
    std::vector<Sequence> alts;
    while (true) {
      KV_ASSIGN_OR_RETURN(Sequence s, ParseSequence());
      alts.push_back(std::move(s));
      if (Peek() != '|') break;
      ++pos_;
    }
    if (alts.size() == 1) return std::move(alts[0]);
    return Sequence{g_->Alternatives(std::move(alts), "regex-alt")};
  }

  // A character set element respecting the JSON-string option.
  Element MakeSet(std::vector<CharRange> ranges, bool negated) {
    if (!options_.json_string) return Element::Set(std::move(ranges), negated);
    if (negated) ranges = Complement(std::move(ranges));
    // Remove controls, '"' and '\'.
    std::vector<CharRange> banned = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    std::vector<CharRange> allowed = Complement(banned);
    std::vector<CharRange> out;
    for (const CharRange& a : ranges) {
      for (const CharRange& b : allowed) {
        const uint32_t lo = std::max(a.lo, b.lo), hi = std::min(a.hi, b.hi);
        if (lo <= hi) out.push_back({lo, hi});
      }
    }
    return Element::Set(std::move(out));
  }

  // Appends one literal code point respecting the JSON-string option.
  void AppendChar(uint32_t cp, Sequence* seq) {
    if (options_.json_string) {
      switch (cp) {
        case '"': Grammar::AppendLiteral(seq, "\\\""); return;
        case '\\': Grammar::AppendLiteral(seq, "\\\\"); return;
        case '\n': Grammar::AppendLiteral(seq, "\\n"); return;
        case '\r': Grammar::AppendLiteral(seq, "\\r"); return;
        case '\t': Grammar::AppendLiteral(seq, "\\t"); return;
        default:
          if (cp < 0x20) {
            char buf[8];
            snprintf(buf, sizeof(buf), "\\u%04x", cp);
            Grammar::AppendLiteral(seq, buf);
            return;
          }
      }
    }
    seq->push_back(Element::Char(cp));
  }

  Status ParseHex(int digits, uint32_t* v) {
    *v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = Peek();
      int d = -1;
      if (h >= '0' && h <= '9') d = h - '0';
      if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
      if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
      if (d < 0) return Error("expected a hex digit");
      *v = *v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return OkStatus();
  }

  // After a backslash: a class escape fills `ranges` and sets *is_class; otherwise *cp.
  Status ParseEscape(bool* is_class, std::vector<CharRange>* ranges, uint32_t* cp) {
    if (AtEnd()) return Error("trailing backslash");
    const char e = p_[pos_++];
    *is_class = false;
    switch (e) {
      case 'd': case 'D': case 'w': case 'W': case 's': case 'S': {
        std::vector<CharRange> r;
        const char lower = static_cast<char>(e | 0x20);
        if (lower == 'd') r = {{'0', '9'}};
        if (lower == 'w') r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
        if (lower == 's') r = {{'\t', '\r'}, {' ', ' '}};
        if (e != lower) r = Complement(r);
        *is_class = true;
        *ranges = std::move(r);
        return OkStatus();
      }
      case 'n': *cp = '\n'; return OkStatus();
      case 't': *cp = '\t'; return OkStatus();
      case 'r': *cp = '\r'; return OkStatus();
      case 'f': *cp = '\f'; return OkStatus();
      case 'v': *cp = '\v'; return OkStatus();
      case '0': *cp = 0; return OkStatus();
      case 'x': return ParseHex(2, cp);
      case 'u': return ParseHex(4, cp);
      case 'b': case 'B': return Error("word-boundary assertions are not supported");
      case 'A': case 'z': case 'Z': return Error("anchors inside a pattern are not supported");
      default:
        if (e >= '1' && e <= '9') return Error("backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
          return Error(std::string("unknown escape '\\") + e + "'");
        }
        --pos_;
        {
          size_t p = pos_;
          if (!DecodeUtf8(p_, &p, cp)) return Error("invalid UTF-8");
          pos_ = p;
        }
        return OkStatus();
    }
  }

  Status ParseClass(Element* out) {
    ++pos_;  // '['
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CharRange> ranges;
    bool first = true;
    while (first || Peek() != ']') {
      if (AtEnd()) return Error("unterminated character class");
      first = false;
      uint32_t lo = 0;
      if (Peek() == '\\') {
        ++pos_;
        bool is_class = false;
        std::vector<CharRange> r;
        KV_RETURN_IF_ERROR(ParseEscape(&is_class, &r, &lo));
        if (is_class) {
          ranges.insert(ranges.end(), r.begin(), r.end());
          continue;
        }
      } else {
        size_t p = pos_;
        if (!DecodeUtf8(p_, &p, &lo)) return Error("invalid UTF-8");
        pos_ = p;
      }
      uint32_t hi = lo;
      if (Peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        if (Peek() == '\\') {
          ++pos_;
          bool is_class = false;
          std::vector<CharRange> r;
          KV_RETURN_IF_ERROR(ParseEscape(&is_class, &r, &hi));
          if (is_class) return Error("a class escape cannot end a range");
        } else {
          size_t p = pos_;
          if (!DecodeUtf8(p_, &p, &hi)) return Error("invalid UTF-8");
          pos_ = p;
        }
        if (hi < lo) return Error("character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;  // ']'
    *out = MakeSet(std::move(ranges), negated);
    return OkStatus();
  }

  Status ParseInt(int* v) {
    if (!(Peek() >= '0' && Peek() <= '9')) return Error("expected a number in {m,n}");
    long x = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      x = x * 10 + (Peek() - '0');
      if (x > kMaxRepeat) return Error("repetition count above " + std::to_string(kMaxRepeat));
      ++pos_;
    }
    *v = static_cast<int>(x);
    return OkStatus();
  }

  StatusOr<Sequence> ParseSequence() {
    Sequence seq;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      const size_t atom_start = seq.size();
      const char c = Peek();
      if (c == '(') {
        if (++depth_ > 200) return Error("groups nested deeper than 200");
        ++pos_;
        if (Peek() == '?') {
          ++pos_;
          if (Peek() == ':') {
            ++pos_;
          } else if (Peek() == 'P' && pos_ + 1 < p_.size() && p_[pos_ + 1] == '<') {
            pos_ = p_.find('>', pos_);
            if (pos_ == std::string_view::npos) return Error("unterminated group name");
            ++pos_;
          } else if (Peek() == '<' && pos_ + 1 < p_.size() && p_[pos_ + 1] != '=' && p_[pos_ + 1] != '!') {
            pos_ = p_.find('>', pos_);
            if (pos_ == std::string_view::npos) return Error("unterminated group name");
            ++pos_;
          } else {
            return Error("lookaround and inline flags are not supported");
          }
        }
        KV_ASSIGN_OR_RETURN(Sequence inner, ParseAlternation());
        if (Peek() != ')') return Error("missing ')'");
        ++pos_;
        --depth_;
        seq.push_back(g_->Alternatives({std::move(inner)}, "regex-group"));
      } else if (c == '[') {
        Element e;
        KV_RETURN_IF_ERROR(ParseClass(&e));
        seq.push_back(std::move(e));
      } else if (c == '.') {
        ++pos_;
        seq.push_back(MakeSet({{'\n', '\n'}}, /*negated=*/true));
      } else if (c == '\\') {
        ++pos_;
        bool is_class = false;
        std::vector<CharRange> r;
        uint32_t cp = 0;
        KV_RETURN_IF_ERROR(ParseEscape(&is_class, &r, &cp));
        if (is_class) {
          seq.push_back(MakeSet(std::move(r), false));
        } else {
          AppendChar(cp, &seq);
        }
      } else if (c == '^' || c == '$') {
        return Error("anchors inside a pattern are not supported");
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        return Error(std::string("nothing to repeat before '") + c + "'");
      } else {
        size_t p = pos_;
        uint32_t cp = 0;
        if (!DecodeUtf8(p_, &p, &cp)) return Error("invalid UTF-8");
        pos_ = p;
        AppendChar(cp, &seq);
      }
      // Quantifier?
      const char q = Peek();
      if (q != '*' && q != '+' && q != '?' && q != '{') continue;
      int min_count = 0, max_count = -1;
      ++pos_;
      if (q == '+') min_count = 1;
      if (q == '?') max_count = 1;
      if (q == '{') {
        KV_RETURN_IF_ERROR(ParseInt(&min_count));
        max_count = min_count;
        if (Peek() == ',') {
          ++pos_;
          max_count = -1;
          if (Peek() != '}') KV_RETURN_IF_ERROR(ParseInt(&max_count));
        }
        if (Peek() != '}') return Error("expected '}'");
        ++pos_;
        if (max_count >= 0 && max_count < min_count) return Error("{m,n} with n < m");
      }
      if (Peek() == '?') ++pos_;  // lazy: same language
      if (Peek() == '+') return Error("possessive quantifiers are not supported");
      if (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{') {
        return Error("nested quantifier");
      }
      Sequence body(seq.begin() + static_cast<long>(atom_start), seq.end());
      seq.resize(atom_start);
      seq.push_back(g_->Repeat(body, min_count, max_count, "regex-repeat"));
    }
    return seq;
  }

  Grammar* g_;
  std::string_view p_;
  RegexOptions options_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

StatusOr<Element> AddRegex(Grammar* grammar, std::string_view pattern, const RegexOptions& options) {
  return RegexParser(grammar, pattern, options).Parse();
}

StatusOr<Grammar> RegexToGrammar(std::string_view pattern) {
  Grammar g;
  const int32_t root = g.GetOrAddRule("root");
  KV_ASSIGN_OR_RETURN(Element e, AddRegex(&g, pattern));
  g.AddAlternative(root, {e});
  g.set_root(root);
  KV_RETURN_IF_ERROR(g.Validate());
  return g;
}

StatusOr<Grammar> ChoiceToGrammar(const std::vector<std::string>& choices) {
  if (choices.empty()) return InvalidArgumentError("choice: the list of choices is empty");
  Grammar g;
  const int32_t root = g.GetOrAddRule("root");
  for (size_t i = 0; i < choices.size(); ++i) {
    size_t p = 0;
    uint32_t cp = 0;
    while (p < choices[i].size()) {
      if (!DecodeUtf8(choices[i], &p, &cp)) {
        return InvalidArgumentError("choice: choice " + std::to_string(i) + " is not valid UTF-8");
      }
    }
    if (choices[i].empty()) return InvalidArgumentError("choice: choice " + std::to_string(i) + " is empty");
    Sequence s;
    Grammar::AppendLiteral(&s, choices[i]);
    g.AddAlternative(root, std::move(s));
  }
  g.set_root(root);
  return g;
}

}  // namespace kvserve::grammar
