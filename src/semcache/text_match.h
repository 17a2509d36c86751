// Text-level rules of the semantic response cache: the normalisation under which two
// requests are exact repeats, and the lexical vetoes that refuse a hit between two texts an
// embedding finds close but that differ where meaning hinges on little (a number, a name, a
// negation: "refund window for EU orders" vs "... for US orders").
#pragma once

#include <string>
#include <string_view>

namespace kvserve::semcache {

// Exact-repeat form: runs of whitespace become one space, leading and trailing whitespace go.
// Case and punctuation are kept ("US" and "us" are different requests).
std::string NormalizeForExactMatch(std::string_view text);

// Why `a` and `b` must not share an answer, or "" when nothing lexical says so:
//   - numbers: the multisets of numbers differ ("3 nights" vs "4 nights", "v1.2" vs "v1.3");
//   - names: a capitalised word of one is missing from the other ("EU" vs "US", "Paris" vs
//     "Lyon"); a sentence's first word is not a name unless it has another capital or is in
//     capitals, but counts as present; "I" (I'm, I've, ...) is no name; a plural or possessive
//     "s" is dropped ("Sundays" is "Sunday"), or
//   - negation: one says "not"/"no"/"never"/"n't"/... more often than the other.
// Cheap (one pass over each text); what it cannot catch is in docs/semantic-cache.md.
std::string VetoReason(std::string_view a, std::string_view b);

}  // namespace kvserve::semcache
