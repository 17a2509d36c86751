// UTF-8 encoding of one code point: the one definition the tokenizer, the grammar engine and the
// tool-call parsers share. Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace kvserve {

// Appends the UTF-8 bytes of `cp` (1 to 4 bytes; the caller passes a valid code point).
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace kvserve
