// IncrementalDetokenizer: never emits broken UTF-8.
#include <gtest/gtest.h>

#include <cstdio>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

// <unk> <s> </s> <0x00>..<0xFF> _ a _a
std::unique_ptr<Tokenizer> MakeTokenizer() {
  VocabSpec spec;
  spec.model = VocabSpec::Model::kSpm;
  auto add = [&](std::string text, TokenType type) {
    spec.tokens.push_back(std::move(text));
    spec.scores.push_back(-1);
    spec.token_types.push_back(type);
  };
  add("<unk>", TokenType::kUnknown);
  add("<s>", TokenType::kControl);
  add("</s>", TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name, TokenType::kByte);
  }
  add("\xE2\x96\x81", TokenType::kNormal);
  add("a", TokenType::kNormal);
  add("\xE2\x96\x81" "a", TokenType::kNormal);
  spec.unk_id = 0;
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.add_bos = true;
  auto t = Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(*t);
}

TokenId Byte(uint8_t b) { return 3 + b; }
constexpr TokenId kSpaceA = 261;

bool IsValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const int n = Utf8ValidPrefix(std::string_view(s).substr(i));
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

TEST(IncrementalDetokenizer, HoldsBackSplitCharacters) {
  auto tok = MakeTokenizer();
  IncrementalDetokenizer d(tok.get());
  EXPECT_EQ(d.Push(1), "");          // BOS
  EXPECT_EQ(d.Push(kSpaceA), "a");   // dummy-prefix space after BOS dropped
  // U+1F600 = F0 9F 98 80, one byte token at a time.
  EXPECT_EQ(d.Push(Byte(0xF0)), "");
  EXPECT_EQ(d.Push(Byte(0x9F)), "");
  EXPECT_EQ(d.Push(Byte(0x98)), "");
  EXPECT_EQ(d.Push(Byte(0x80)), "\xF0\x9F\x98\x80");
  EXPECT_EQ(d.Push(kSpaceA), " a");  // later spaces stay
  EXPECT_EQ(d.Flush(), "");
}

TEST(IncrementalDetokenizer, RendersOnlyTheControlTokensItIsToldTo) {
  auto tok = MakeTokenizer();
  // Token 2 (</s>) is rendered, token 1 (<s>) is not: tool-call markup kept for the parsers.
  std::vector<uint8_t> render(static_cast<size_t>(tok->vocab_size()), 0);
  render[2] = 1;
  IncrementalDetokenizer d(tok.get(), &render);
  EXPECT_EQ(d.Push(1), "");
  EXPECT_EQ(d.Push(kSpaceA), "a");
  EXPECT_EQ(d.Push(2), "</s>");
  IncrementalDetokenizer plain(tok.get());
  EXPECT_EQ(plain.Push(2), "");
}

TEST(IncrementalDetokenizer, NoStripWithoutBos) {
  auto tok = MakeTokenizer();
  IncrementalDetokenizer d(tok.get());
  EXPECT_EQ(d.Push(kSpaceA), " a");
}

TEST(IncrementalDetokenizer, InvalidBytesBecomeReplacementCharacter) {
  auto tok = MakeTokenizer();
  IncrementalDetokenizer d(tok.get());
  // E4 B8 then 'a': the started character can never complete -> one U+FFFD, then " a".
  EXPECT_EQ(d.Push(Byte(0xE4)), "");
  EXPECT_EQ(d.Push(Byte(0xB8)), "");
  EXPECT_EQ(d.Push(kSpaceA), "\xEF\xBF\xBD a");
  // A stray continuation byte and an impossible lead byte.
  EXPECT_EQ(d.Push(Byte(0x80)), "\xEF\xBF\xBD");
  EXPECT_EQ(d.Push(Byte(0xFF)), "\xEF\xBF\xBD");
  // Overlong / surrogate encodings are invalid too.
  EXPECT_EQ(d.Push(Byte(0xC0)), "\xEF\xBF\xBD");
  EXPECT_EQ(d.Push(Byte(0xED)), "");
  EXPECT_EQ(d.Push(Byte(0xA0)), "\xEF\xBF\xBD\xEF\xBF\xBD");
  // An incomplete character at the end is flushed as U+FFFD.
  EXPECT_EQ(d.Push(Byte(0xE4)), "");
  EXPECT_EQ(d.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(d.Flush(), "");
}

TEST(IncrementalDetokenizer, AnyByteStreamGivesValidUtf8MatchingDecode) {
  auto tok = MakeTokenizer();
  uint32_t state = 12345;
  for (int round = 0; round < 200; ++round) {
    IncrementalDetokenizer d(tok.get());
    std::vector<TokenId> ids = {1};
    std::string text = d.Push(1);
    const int n = 1 + round % 17;
    for (int i = 0; i < n; ++i) {
      state = state * 1664525u + 1013904223u;
      // Mostly bytes of real characters, sometimes random bytes.
      const uint32_t r = state >> 8;
      TokenId id = (r % 5 == 0) ? kSpaceA : Byte(static_cast<uint8_t>(r >> 4));
      ids.push_back(id);
      const std::string piece = d.Push(id);
      EXPECT_TRUE(IsValidUtf8(piece));
      text += piece;
    }
    text += d.Flush();
    EXPECT_TRUE(IsValidUtf8(text));
    // When the whole sequence is valid UTF-8 the streamed text equals Decode.
    const std::string full = tok->Decode(ids);
    if (IsValidUtf8(full)) {
      EXPECT_EQ(text, full);
    }
  }
}

TEST(IncrementalDetokenizer, StreamsValidMultiByteText) {
  auto tok = MakeTokenizer();
  const std::string text = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80 a";
  std::vector<TokenId> ids = tok->Encode(text, {});
  IncrementalDetokenizer d(tok.get());
  std::string streamed;
  for (TokenId id : ids) streamed += d.Push(id);
  streamed += d.Flush();
  EXPECT_EQ(streamed, text);
}

TEST(Utf8, ValidPrefix) {
  EXPECT_EQ(Utf8ValidPrefix(""), 0);
  EXPECT_EQ(Utf8ValidPrefix("a"), 1);
  EXPECT_EQ(Utf8ValidPrefix("\xC3\xA9"), 2);
  EXPECT_EQ(Utf8ValidPrefix("\xC3"), 0);
  EXPECT_EQ(Utf8ValidPrefix("\xF0\x9F\x98"), 0);
  EXPECT_EQ(Utf8ValidPrefix("\xF0\x9F\x98\x80"), 4);
  EXPECT_EQ(Utf8ValidPrefix("\xF0\x9F" "a"), -2);
  EXPECT_EQ(Utf8ValidPrefix("\x80"), -1);
  EXPECT_EQ(Utf8ValidPrefix("\xC1\xBF"), -1);
  EXPECT_EQ(Utf8ValidPrefix("\xE0\x80"), -1);
  EXPECT_EQ(Utf8ValidPrefix("\xF4\x90"), -1);
}

TEST(Unicode, Properties) {
  EXPECT_EQ(UnicodeToLower('A'), static_cast<uint32_t>('a'));
  EXPECT_EQ(UnicodeToLower(0x0416), 0x0436u);  // Cyrillic Zhe
  EXPECT_EQ(UnicodeNfdFirst(0xE9), static_cast<uint32_t>('e'));
  EXPECT_EQ(UnicodeNfdFirst(0xAC00), 0x1100u);  // Hangul syllable -> leading jamo
  EXPECT_TRUE(GetCodepointFlags(',').is_punctuation);
  EXPECT_TRUE(GetCodepointFlags('+').is_symbol);
  EXPECT_TRUE(GetCodepointFlags(0x3000).is_whitespace);
  EXPECT_TRUE(GetCodepointFlags(0x200B).is_control);  // ZWSP is Cf
  EXPECT_FALSE(GetCodepointFlags('a').is_punctuation);
}

}  // namespace
}  // namespace kvserve
