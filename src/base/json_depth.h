// How deep a JSON text nests, measured before parsing it: request bodies and request files
// refuse texts deeper than a limit, since a parser's memory grows with the depth.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvserve {

// Bodies and request lines may nest arrays and objects this deep (OpenAI's JSON schemas in
// tools and response_format need a few dozen levels; 15 million `[` took the parser 1 GB).
inline constexpr int64_t kMaxJsonNestingDepth = 128;

// The deepest nesting of arrays and objects in `text`, strings skipped; stops counting once
// past `limit` (returns limit + 1 then). Linear, no allocation.
int64_t JsonNestingDepth(std::string_view text, int64_t limit);

}  // namespace kvserve
