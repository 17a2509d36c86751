#include "tokenizer/unicode.h"

#include <algorithm>

namespace kvserve {
namespace {

using unicode_internal::UnicodeRange;

const UnicodeRange* FindRange(const UnicodeRange* table, size_t size, uint32_t cp) {
  const UnicodeRange* end = table + size;
  const UnicodeRange* it = std::upper_bound(
      table, end, cp, [](uint32_t v, const UnicodeRange& r) { return v < r.first; });
  if (it == table) return nullptr;
  --it;
  return (cp >= it->first && cp <= it->last) ? it : nullptr;
}

}  // namespace

size_t Utf8SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

int Utf8ValidPrefix(std::string_view s) {
  if (s.empty()) return 0;
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return 1;
  int need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int i = 1; i < need; ++i) {
    if (static_cast<size_t>(i) >= s.size()) return 0;  // valid so far, incomplete
    const auto b = static_cast<uint8_t>(s[i]);
    const uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return -i;  // the maximal invalid subpart is bytes [0, i)
  }
  return need;
}

std::vector<uint32_t> Utf8ToCodepoints(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const int n = Utf8ValidPrefix(s.substr(i));
    if (n <= 0) {
      out.push_back(0xFFFD);
      i = n < 0 ? i + static_cast<size_t>(-n) : s.size();
      continue;
    }
    const auto* p = reinterpret_cast<const uint8_t*>(s.data() + i);
    uint32_t cp;
    switch (n) {
      case 1: cp = p[0]; break;
      case 2: cp = ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu); break;
      case 3: cp = ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu); break;
      default:
        cp = ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) |
             (p[3] & 0x3Fu);
    }
    out.push_back(cp);
    i += static_cast<size_t>(n);
  }
  return out;
}

CodepointFlags GetCodepointFlags(uint32_t cp) {
  CodepointFlags f;
  f.is_whitespace = (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
                    cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
                    cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
  const UnicodeRange* r = FindRange(unicode_internal::kCategoryRanges,
                                    unicode_internal::kCategoryRanges_size, cp);
  if (r != nullptr) {
    f.is_punctuation = r->value & 1;
    f.is_symbol = r->value & 2;
    f.is_control = r->value & 4;
  }
  return f;
}

uint32_t UnicodeToLower(uint32_t cp) {
  const UnicodeRange* r =
      FindRange(unicode_internal::kLowerRanges, unicode_internal::kLowerRanges_size, cp);
  return r != nullptr ? r->value : cp;
}

uint32_t UnicodeNfdFirst(uint32_t cp) {
  const UnicodeRange* r =
      FindRange(unicode_internal::kNfdRanges, unicode_internal::kNfdRanges_size, cp);
  return r != nullptr ? r->value : cp;
}

}  // namespace kvserve
