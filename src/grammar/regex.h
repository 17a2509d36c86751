// Regular expressions and choice lists -> Grammar (vLLM's guided_regex and guided_choice, and
// JSON Schema `pattern` / `format`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"

namespace kvserve::grammar {

struct RegexOptions {
  // The text is the inside of a JSON string: '"' and '\' are emitted as escapes, other
  // characters a JSON string cannot hold raw (controls) are left out of classes and '.'.
  bool json_string = false;
};

// Adds rules for `pattern` to `grammar` and returns an element matching exactly the strings of
// the pattern (a full match: `^` at the start and `$` at the end are accepted and ignored).
// Supported: literals, escapes (\n \t \r \f \v \0 \xNN \uNNNN, \d \w \s \D \W \S, escaped
// punctuation), classes `[a-z]` `[^...]`, `.` (any character but newline), groups `( )`
// `(?: )`, named groups `(?<name> )` / `(?P<name> )`, `|`, quantifiers `* + ? {m} {m,} {m,n}`
// (lazy `?` suffixes accepted; matching is the same). Errors name the unsupported construct
// (backreferences, lookaround, anchors inside the pattern, ...).
StatusOr<Element> AddRegex(Grammar* grammar, std::string_view pattern,
                           const RegexOptions& options = {});

// A grammar whose root is the regex.
StatusOr<Grammar> RegexToGrammar(std::string_view pattern);

// A grammar matching exactly one of `choices` (at least one, each non-empty UTF-8).
StatusOr<Grammar> ChoiceToGrammar(const std::vector<std::string>& choices);

}  // namespace kvserve::grammar
