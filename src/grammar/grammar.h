// The grammar IR shared by every constrained-decoding front end (GBNF, JSON Schema, json_object,
// regex, choice): rules of alternatives of sequences of elements over Unicode code points.
//
// Elements are character sets (ranges, possibly negated) and rule references. Literal strings
// and repetition (? * + {m,n}) are lowered by the builder helpers into those two, so the matcher
// (matcher.h) only ever sees character sets and rule references.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/utf8.h"

namespace kvserve::grammar {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct CharRange {
  uint32_t lo = 0;  // inclusive
  uint32_t hi = 0;  // inclusive
};

struct Element {
  enum class Kind : uint8_t { kCharSet, kRuleRef };
  Kind kind = Kind::kCharSet;
  bool negated = false;            // kCharSet: matches code points outside `ranges`
  std::vector<CharRange> ranges;   // kCharSet
  int32_t rule = -1;               // kRuleRef

  static Element Char(uint32_t cp) { return Set({{cp, cp}}); }
  static Element Set(std::vector<CharRange> ranges, bool negated = false) {
    Element e;
    e.ranges = std::move(ranges);
    e.negated = negated;
    return e;
  }
  static Element Any() { return Set({{0, kMaxCodePoint}}); }
  static Element Ref(int32_t rule) {
    Element e;
    e.kind = Kind::kRuleRef;
    e.rule = rule;
    return e;
  }
};

using Sequence = std::vector<Element>;

struct Rule {
  std::string name;
  std::vector<Sequence> alternatives;  // an empty Sequence is the empty string
};

// A context-free grammar under construction or finished. Plain value; not thread-safe while
// being built. Invariant once Validate() returned OK: every reference names an existing rule,
// every rule has at least one alternative, no rule is left-recursive, root() is set.
class Grammar {
 public:
  // Returns the id of the rule named `name`, creating an empty one if needed.
  int32_t GetOrAddRule(std::string_view name);
  // Creates a rule with a fresh name derived from `base` ("base", "base-1", ...).
  int32_t NewRule(std::string_view base);
  // -1 when absent.
  int32_t FindRule(std::string_view name) const;
  void AddAlternative(int32_t rule, Sequence seq);

  // Appends the code points of UTF-8 `text` as single-character elements. Invalid UTF-8 is
  // appended byte by byte as Latin-1 code points (callers validate user text first).
  static void AppendLiteral(Sequence* seq, std::string_view text);
  // A reference to a new rule matching `body` repeated between min_count and max_count times
  // (max_count < 0: unbounded). Lowered into helper rules, right-recursive, so the matcher's
  // stack stays flat.
  Element Repeat(const Sequence& body, int min_count, int max_count, std::string_view base);
  // A reference to a new rule with one alternative per sequence.
  Element Alternatives(std::vector<Sequence> alts, std::string_view base);

  void set_root(int32_t rule) { root_ = rule; }
  int32_t root() const { return root_; }
  const std::vector<Rule>& rules() const { return rules_; }

  // Checks the invariant above. Errors name the offending rule.
  Status Validate() const;
  // GBNF text of the grammar (for logs and tests; parses back with ParseGbnf).
  std::string ToGbnf() const;

 private:
  std::vector<Rule> rules_;
  std::unordered_map<std::string, int32_t> index_;      // rule name -> id
  std::unordered_map<std::string, int> next_suffix_;    // NewRule base -> next "-k" to try
  int32_t root_ = -1;
};

// For tool calls: a grammar matching `prefix inner suffix`, repeated between min_repeats and
// max_repeats times (max_repeats < 0: unbounded) with `separator` between repetitions.
// E.g. Hermes/Qwen: WrapGrammar(args_schema_grammar, "<tool_call>\n", "\n</tool_call>", 1, -1, "\n").
// `inner` must have a root; the result's root is a new rule.
Grammar WrapGrammar(const Grammar& inner, std::string_view prefix, std::string_view suffix,
                    int min_repeats = 1, int max_repeats = 1, std::string_view separator = "");

// A validated grammar flattened for matching. Immutable after Compile, so one instance is
// shared by every sequence that uses it (thread-safe to read).
//
// Layout: all alternatives of all rules laid end to end in `elements`, each terminated by a
// kEnd element. A position is an index into `elements`.
class CompiledGrammar {
 public:
  enum class Op : uint8_t { kCharSet, kRuleRef, kEnd };
  struct FlatElement {
    Op op;
    int32_t arg;  // charset index for kCharSet, rule id for kRuleRef
  };
  // A character set normalised to sorted, disjoint, non-negated ranges, with an ASCII bitmap.
  struct CharSet {
    uint64_t ascii[2] = {0, 0};
    std::vector<CharRange> ranges;  // sorted, disjoint, merged (covers ASCII too)
    bool Contains(uint32_t cp) const;
    // True when some code point in [lo, hi] is in the set.
    bool Intersects(uint32_t lo, uint32_t hi) const;
  };

  // Validates and flattens. Grammars over kMaxElements elements (after repetitions are
  // expanded) are refused, so a request cannot make the server build a huge automaton.
  static constexpr size_t kMaxElements = 2'000'000;
  static StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(const Grammar& grammar);

  const std::vector<FlatElement>& elements() const { return elements_; }
  const CharSet& charset(int32_t i) const { return charsets_[i]; }
  // Start positions of rule `rule`'s alternatives.
  const std::vector<uint32_t>& alternatives(int32_t rule) const { return alt_starts_[rule]; }
  int32_t root() const { return root_; }
  const std::string& rule_name(int32_t rule) const { return rule_names_[rule]; }
  const std::string& gbnf() const { return gbnf_; }
  size_t memory_bytes() const;

 private:
  std::vector<FlatElement> elements_;
  std::vector<CharSet> charsets_;
  std::vector<std::vector<uint32_t>> alt_starts_;
  std::vector<std::string> rule_names_;
  std::string gbnf_;
  int32_t root_ = -1;
};

// Decodes one UTF-8 code point from `s` at `*pos`; returns false on invalid UTF-8.
bool DecodeUtf8(std::string_view s, size_t* pos, uint32_t* cp);
using ::kvserve::AppendUtf8;  // base/utf8.h

}  // namespace kvserve::grammar
