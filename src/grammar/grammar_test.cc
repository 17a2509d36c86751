// GBNF front end, regex/choice front ends and the matcher against brute force.
#include <map>
#include <random>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "grammar/gbnf.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace kvserve::grammar {
namespace {

std::shared_ptr<const CompiledGrammar> MustCompile(const StatusOr<Grammar>& g) {
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  auto c = CompiledGrammar::Compile(*g);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

bool Matches(const std::shared_ptr<const CompiledGrammar>& g, std::string_view s) {
  GrammarMatcher m(g);
  return m.AcceptString(s) && m.IsComplete();
}

// Brute-force recognizer over the IR: the set of end positions of `rule` from position i.
class BruteForce {
 public:
  explicit BruteForce(const Grammar& g) : g_(g) {}
  bool Matches(const std::u32string& s) {
    s_ = s;
    // Least fixpoint: a (rule, position) met again while being computed (an empty-string
    // cycle such as `(a? b?)*`) reads the previous round's answer; repeat until stable.
    prev_.clear();
    while (true) {
      memo_.clear();
      in_progress_.clear();
      Ends(g_.root(), 0);
      if (memo_ == prev_) break;
      prev_ = memo_;
    }
    return memo_[{g_.root(), 0}].count(s.size()) > 0;
  }

 private:
  const std::set<size_t>& Ends(int32_t rule, size_t i) {
    auto key = std::make_pair(rule, i);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    if (in_progress_.count(key)) return prev_[key];
    in_progress_.insert(key);
    std::set<size_t> out;
    for (const Sequence& seq : g_.rules()[rule].alternatives) {
      std::set<size_t> cur = {i};
      for (const Element& e : seq) {
        std::set<size_t> next;
        for (size_t p : cur) {
          if (e.kind == Element::Kind::kRuleRef) {
            const auto& ends = Ends(e.rule, p);
            next.insert(ends.begin(), ends.end());
          } else if (p < s_.size()) {
            bool in = false;
            for (const CharRange& r : e.ranges) in |= (s_[p] >= r.lo && s_[p] <= r.hi);
            if (in != e.negated) next.insert(p + 1);
          }
        }
        cur = std::move(next);
      }
      out.insert(cur.begin(), cur.end());
    }
    return memo_[key] = std::move(out);
  }

  const Grammar& g_;
  std::u32string s_;
  std::map<std::pair<int32_t, size_t>, std::set<size_t>> memo_, prev_;
  std::set<std::pair<int32_t, size_t>> in_progress_;
};

TEST(GbnfTest, ParsesJsonStyleGrammar) {
  const char* text = R"(
# A llama.cpp style JSON grammar.
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)";
  auto g = MustCompile(ParseGbnf(text));
  EXPECT_TRUE(Matches(g, R"({"a": [1, 2.5, "x\n\u00e9"], "b": {"c": null}})"));
  EXPECT_TRUE(Matches(g, "{}"));
  EXPECT_FALSE(Matches(g, R"({"a": })"));
  EXPECT_FALSE(Matches(g, R"({"a": 1)"));
  EXPECT_FALSE(Matches(g, "[1]"));  // root is an object
}

TEST(GbnfTest, EscapesAndRepetitions) {
  auto g = MustCompile(ParseGbnf(R"(root ::= "\x41\u00e9\t" [a-c]{2,3} "z"? ("|" | "\\")+ .)"));
  EXPECT_TRUE(Matches(g, "A\xc3\xa9\tab|x"));
  EXPECT_TRUE(Matches(g, "A\xc3\xa9\tabcz\\|\\\xe6\x97\xa5"));
  EXPECT_FALSE(Matches(g, "A\xc3\xa9\ta|x"));
  EXPECT_FALSE(Matches(g, "A\xc3\xa9\tabcd|x"));
  EXPECT_FALSE(Matches(g, "A\xc3\xa9\tab"));
}

TEST(GbnfTest, MultiLineAlternatives) {
  auto g = MustCompile(ParseGbnf("root ::= \"a\"\n  | \"b\"\nother ::= \"c\"\n"));
  EXPECT_TRUE(Matches(g, "a"));
  EXPECT_TRUE(Matches(g, "b"));
  EXPECT_FALSE(Matches(g, "c"));
}

TEST(GbnfTest, ErrorsNameTheProblem) {
  struct Case {
    const char* text;
    const char* needle;
  };
  const Case cases[] = {
      {"root ::= foo", "'foo' is used but not defined"},
      {"start ::= \"a\"", "no 'root' rule"},
      {"root ::= \"abc", "unterminated literal"},
      {"root ::= [a-", "unterminated character class"},
      {"root ::= \"a\" )", "unbalanced ')'"},
      {"root ::= (\"a\"", "expected ')'"},
      {"root ::= root \"a\"", "left-recursive"},
      {"root ::= x\nx ::= root \"a\"", "left-recursive"},
      {"root ::= \"a\"{3,1}", "n < m"},
      {"root ::= * \"a\"", "without an element"},
      {"root ::= \"\\q\"", "unknown escape"},
      {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
      {"root = \"a\"", "expected '::='"},
      {"root ::= [z-a]", "out of order"},
  };
  {
    std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
    auto g = ParseGbnf(deep);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("nested deeper"), std::string::npos);
    EXPECT_FALSE(RegexToGrammar(std::string(100000, '(') + "a" + std::string(100000, ')')).ok());
    std::string many = "root ::=";
    for (int i = 0; i < 50; ++i) many += " [a-z]{0,10000}";
    auto huge = ParseGbnf(many);
    ASSERT_TRUE(huge.ok());
    auto compiled = CompiledGrammar::Compile(*huge);
    ASSERT_FALSE(compiled.ok());
    EXPECT_NE(compiled.status().message().find("grammar too large"), std::string::npos);
  }
  for (const Case& c : cases) {
    auto g = ParseGbnf(c.text);
    ASSERT_FALSE(g.ok()) << c.text;
    EXPECT_NE(g.status().message().find(c.needle), std::string::npos)
        << c.text << " -> " << g.status().message();
  }
}

TEST(GbnfTest, RoundTripsThroughToGbnf) {
  auto g = ParseGbnf(R"(root ::= ("ab" | [^x-z\]] "q")* "\"" [\n] )");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto again = ParseGbnf(g->ToGbnf());
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << g->ToGbnf();
  auto a = MustCompile(g);
  auto b = MustCompile(again);
  for (const char* s : {"\"\n", "ab\"\n", "aqab\"\n", "xq\"\n", "]q\"\n", "ab"}) {
    EXPECT_EQ(Matches(a, s), Matches(b, s)) << s;
  }
}

// The matcher agrees with a brute-force recognizer on every string over a small alphabet,
// and it rejects a prefix only if no string extending it is in the language.
TEST(MatcherTest, AgreesWithBruteForceOnAllShortStrings) {
  const char* grammars[] = {
      R"g(root ::= "a" root "b" | "")g",
      R"g(root ::= ("a" | "ab") ("c" | "bc")?)g",
      R"g(root ::= x+ y{1,2}  x ::= "a" | "b" "a"  y ::= "c" | x "c")g",
      R"g(root ::= [^b]* "b" [a-c]{0,2})g",
      R"g(root ::= e  e ::= t ("+" t)*  t ::= "a" | "(" e ")")g",
      R"g(root ::= ("a"? "b"?)* "c")g",
  };
  const std::u32string alphabet = U"abc+()";
  for (const char* text : grammars) {
    std::string t = text;
    // Rules on one line separated by two spaces -> newlines.
    for (size_t p; (p = t.find("  ")) != std::string::npos;) t.replace(p, 2, "\n");
    auto parsed = ParseGbnf(t);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    auto g = MustCompile(parsed);
    BruteForce brute(*parsed);
    std::set<std::u32string> rejected_prefixes;
    std::vector<std::u32string> all = {U""};
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i].size() < 6) {
        for (char32_t c : alphabet) all.push_back(all[i] + c);
      }
    }
    for (const std::u32string& s : all) {
      GrammarMatcher m(g);
      size_t accepted = 0;
      while (accepted < s.size() && m.AcceptCodePoint(s[accepted])) ++accepted;
      const bool in = accepted == s.size() && m.IsComplete();
      ASSERT_EQ(in, brute.Matches(s)) << text << " on string of length " << s.size();
      if (accepted < s.size()) rejected_prefixes.insert(s.substr(0, accepted + 1));
    }
    for (const std::u32string& s : all) {
      if (!brute.Matches(s)) continue;
      for (size_t k = 1; k <= s.size(); ++k) {
        ASSERT_FALSE(rejected_prefixes.count(s.substr(0, k))) << text;
      }
    }
  }
}

TEST(MatcherTest, PartialUtf8AcrossBytes) {
  auto g = MustCompile(ParseGbnf(R"(root ::= [\u4e00-\u9fff]+ "!")"));
  GrammarMatcher m(g);
  EXPECT_TRUE(m.AcceptByte(0xE6));   // 日 = E6 97 A5, in range
  EXPECT_EQ(m.num_pending_bytes(), 1);
  EXPECT_FALSE(m.IsComplete());
  EXPECT_TRUE(m.AcceptByte(0x97));
  EXPECT_TRUE(m.AcceptByte(0xA5));
  EXPECT_EQ(m.num_pending_bytes(), 0);
  EXPECT_FALSE(m.AcceptByte('!' + 0x80));  // invalid lead
  EXPECT_FALSE(m.AcceptByte(0xC3));        // é (U+00E9) is outside the range
  EXPECT_FALSE(m.AcceptByte(0xE2));        // U+2000..U+2FFF: outside too
  EXPECT_TRUE(m.AcceptByte('!'));
  EXPECT_TRUE(m.IsComplete());
}

TEST(MatcherTest, RightRecursionKeepsStatesFlat) {
  auto g = MustCompile(ParseGbnf("root ::= \"\\\"\" c* \"\\\"\"\nc ::= [^\"]"));
  GrammarMatcher m(g);
  ASSERT_TRUE(m.AcceptString("\"a"));
  std::string k1, k2;
  m.AppendKey(&k1);
  ASSERT_TRUE(m.AcceptString("bcdefgh"));
  m.AppendKey(&k2);
  EXPECT_EQ(k1, k2);
}

TEST(RegexTest, AgreesWithStdRegexOnRandomStrings) {
  const char* patterns[] = {
      "a(b|c)*d",      "[a-c]{2,4}x?",    "(ab|a)(bc|c)",   "\\d+(\\.\\d{1,2})?", "[^abc]+",
      "(a|b)*abb",     "x{0,3}y{2}",      "((a|b)c)+",      "\\w\\s\\W",          "a.c",
      "^(?:ab)+$",     "[\\d\\-]+",       "(a*)*b",         "(|a)b",              "a+?b",
  };
  const std::string alphabet = "abcdxy0123.- _\n!";
  std::mt19937 rng(1);
  for (const char* p : patterns) {
    auto g = MustCompile(RegexToGrammar(p));
    std::regex re(p, std::regex::ECMAScript);
    int num_matching = 0;
    for (int i = 0; i < 3000; ++i) {
      const int len = static_cast<int>(rng() % 8);
      std::string s;
      for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      const bool expected = std::regex_match(s, re);
      num_matching += expected;
      ASSERT_EQ(Matches(g, s), expected) << "pattern " << p << " on '" << s << "'";
    }
    // Also check a few strings that do match, built from the pattern's own language.
    (void)num_matching;
  }
  EXPECT_TRUE(Matches(MustCompile(RegexToGrammar("\\d+(\\.\\d{1,2})?")), "12.34"));
  EXPECT_TRUE(Matches(MustCompile(RegexToGrammar("(ab|a)(bc|c)")), "abc"));
}

TEST(RegexTest, ErrorsNameTheConstruct) {
  const std::pair<const char*, const char*> cases[] = {
      {"(a", "missing ')'"},           {"a)", "unbalanced ')'"},
      {"(?=a)b", "lookaround"},        {"(a)\\1", "backreferences"},
      {"a**", "nested quantifier"},    {"*a", "nothing to repeat"},
      {"[a", "unterminated"},          {"a{3,1}", "n < m"},
      {"a^b", "anchors"},              {"\\bword", "word-boundary"},
  };
  for (const auto& [p, needle] : cases) {
    auto g = RegexToGrammar(p);
    ASSERT_FALSE(g.ok()) << p;
    EXPECT_NE(g.status().message().find(needle), std::string::npos) << p << " -> " << g.status().message();
  }
}

TEST(ChoiceTest, MatchesExactlyTheChoices) {
  auto g = MustCompile(ChoiceToGrammar({"yes", "no", "yes please", "日本"}));
  for (const char* s : {"yes", "no", "yes please", "日本"}) EXPECT_TRUE(Matches(g, s)) << s;
  for (const char* s : {"", "ye", "yes ", "No", "日"}) EXPECT_FALSE(Matches(g, s)) << s;
  EXPECT_FALSE(ChoiceToGrammar({}).ok());
  EXPECT_FALSE(ChoiceToGrammar({"a", ""}).ok());
  EXPECT_FALSE(ChoiceToGrammar({"\xff"}).ok());
}

}  // namespace
}  // namespace kvserve::grammar
