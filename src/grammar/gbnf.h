// GBNF (llama.cpp's grammar syntax) -> Grammar.
#pragma once

#include <string_view>

#include "base/status.h"
#include "grammar/grammar.h"

namespace kvserve::grammar {

// Parses llama.cpp GBNF: `name ::= alternatives` rules, `|`, sequences of `"literal"`,
// `[a-z]` / `[^"]` classes, `.` (any character), rule names, `( ... )` groups, postfix
// `* + ? {m} {m,} {m,n}`, `#` comments, escapes `\n \r \t \\ \" \[ \] \- \xNN \uNNNN
// \UNNNNNNNN`. A newline ends a rule except inside parentheses or before a line that starts
// with `|`. The rule named `root` is the start rule. Errors say line:column and what is wrong
// (undefined rules, unterminated literals, left recursion, ...).
StatusOr<Grammar> ParseGbnf(std::string_view text);

}  // namespace kvserve::grammar
