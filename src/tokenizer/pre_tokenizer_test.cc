#include "tokenizer/pre_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> SplitWith(const std::string& pre, const std::string& text) {
  auto regexes = PreTokenizerRegexes(pre);
  EXPECT_TRUE(regexes.ok()) << regexes.status().ToString();
  if (!regexes.ok()) return {};
  auto splitter = PreTokenizer::Create(*regexes);
  EXPECT_TRUE(splitter.ok()) << splitter.status().ToString();
  if (!splitter.ok()) return {};
  std::vector<std::string> pieces = (*splitter)->Split(text);
  std::string joined;
  for (const std::string& p : pieces) {
    EXPECT_FALSE(p.empty());
    joined += p;
  }
  EXPECT_EQ(joined, SanitizeUtf8(text));
  return pieces;
}

TEST(PreTokenizer, Gpt2WordsAndContractions) {
  EXPECT_THAT(SplitWith("gpt-2", "Hello world's end"),
              ElementsAre("Hello", " world", "'s", " end"));
  // GPT-2 contractions are lowercase only.
  EXPECT_THAT(SplitWith("gpt-2", "I'M here"), ElementsAre("I", "'", "M", " here"));
  EXPECT_THAT(SplitWith("gpt-2", "we'll"), ElementsAre("we", "'ll"));
  EXPECT_THAT(SplitWith("gpt-2", "x+=12345;"), ElementsAre("x", "+=", "12345", ";"));
}

TEST(PreTokenizer, Gpt2Whitespace) {
  // \s+(?!\S): a whitespace run before a word leaves its last space to the word.
  EXPECT_THAT(SplitWith("gpt-2", "a   b"), ElementsAre("a", "  ", " b"));
  EXPECT_THAT(SplitWith("gpt-2", "a  "), ElementsAre("a", "  "));
  EXPECT_THAT(SplitWith("gpt-2", "\tb"), ElementsAre("\t", "b"));
  EXPECT_THAT(SplitWith("gpt-2", "a\n\nb"), ElementsAre("a", "\n", "\n", "b"));
  EXPECT_THAT(SplitWith("gpt-2", " "), ElementsAre(" "));
  EXPECT_TRUE(SplitWith("gpt-2", "").empty());
}

TEST(PreTokenizer, Llama3DigitsCaseInsensitiveContractionsAndNewlines) {
  EXPECT_THAT(SplitWith("llama-bpe", "1234567"), ElementsAre("123", "456", "7"));
  EXPECT_THAT(SplitWith("llama-bpe", "I'M"), ElementsAre("I", "'M"));
  EXPECT_THAT(SplitWith("llama-bpe", "YOU'RE"), ElementsAre("YOU", "'RE"));
  EXPECT_THAT(SplitWith("llama3", "hello\n\nworld"), ElementsAre("hello", "\n\n", "world"));
  EXPECT_THAT(SplitWith("llama3", "a.\n\nb"), ElementsAre("a", ".\n\n", "b"));
  EXPECT_THAT(SplitWith("llama3", "(hi)"), ElementsAre("(hi", ")"));
  EXPECT_THAT(SplitWith("llama3", "a   b"), ElementsAre("a", "  ", " b"));
}

TEST(PreTokenizer, Qwen2SingleDigits) {
  EXPECT_THAT(SplitWith("qwen2", "x 123"), ElementsAre("x", " ", "1", "2", "3"));
}

TEST(PreTokenizer, StarcoderAndFalconDigits) {
  EXPECT_THAT(SplitWith("starcoder", "abc123"), ElementsAre("abc", "1", "2", "3"));
  // Falcon isolates punctuation/symbol runs, then GPT-2, then splits digit triples.
  EXPECT_THAT(SplitWith("falcon", "x=1234"), ElementsAre("x", "=", "123", "4"));
}

TEST(PreTokenizer, CjkAndEmoji) {
  EXPECT_THAT(SplitWith("gpt-2", "你好世界"), ElementsAre("你好世界"));
  EXPECT_THAT(SplitWith("gpt-2", "go 🚀🚀!"), ElementsAre("go", " 🚀🚀!"));
  EXPECT_THAT(SplitWith("deepseek-coder", "你好abc 12"),
              ElementsAre("你好", "abc", " ", "1", "2"));
  EXPECT_THAT(SplitWith("deepseek-llm", "ab  "), ElementsAre("ab", "  "));
  // Pieces never break a UTF-8 character.
  EXPECT_THAT(SplitWith("llama3", "é😶‍🌫️"), ElementsAre("é", "😶‍🌫️"));
}

TEST(PreTokenizer, OtherKindsCompile) {
  for (const std::string& name : SupportedPreTokenizerNames()) {
    auto regexes = PreTokenizerRegexes(name);
    ASSERT_TRUE(regexes.ok()) << name;
    auto splitter = PreTokenizer::Create(*regexes);
    ASSERT_TRUE(splitter.ok()) << name << ": " << splitter.status().ToString();
    const std::string text = "Hello, World! I'VE 12345 héllo\n\n  你好 🦙 x";
    std::string joined;
    for (const std::string& p : (*splitter)->Split(text)) joined += p;
    EXPECT_EQ(joined, text) << name;
  }
  EXPECT_THAT(SplitWith("gpt-4o", "HelloWorld"), ElementsAre("Hello", "World"));
  EXPECT_THAT(SplitWith("tekken", "HelloWorld"), ElementsAre("Hello", "World"));
  EXPECT_TRUE(PreTokenizerIgnoresMerges("llama-bpe"));
  EXPECT_TRUE(PreTokenizerIgnoresMerges("tekken"));
  EXPECT_FALSE(PreTokenizerIgnoresMerges("gpt-2"));
  EXPECT_FALSE(PreTokenizerIgnoresMerges("qwen2"));
}

TEST(PreTokenizer, UnknownNameAndBadRegex) {
  auto regexes = PreTokenizerRegexes("no-such-pre");
  ASSERT_FALSE(regexes.ok());
  EXPECT_THAT(regexes.status().message(), HasSubstr("no-such-pre"));
  EXPECT_THAT(regexes.status().message(), HasSubstr("llama-bpe"));
  auto bad = PreTokenizer::Create({"(unclosed"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("(unclosed"));
}

TEST(PreTokenizer, NoRegexesKeepsTextWhole) {
  auto splitter = PreTokenizer::Create({});
  ASSERT_TRUE(splitter.ok());
  EXPECT_THAT((*splitter)->Split("a b c"), ElementsAre("a b c"));
}

TEST(SanitizeUtf8, ReplacesInvalidBytesLikeLlamaCpp) {
  EXPECT_EQ(SanitizeUtf8("abc é 你 🦙"), "abc é 你 🦙");
  EXPECT_EQ(SanitizeUtf8("a\xff"), "a\xef\xbf\xbd");
  // A truncated sequence: each byte is replaced on its own.
  EXPECT_EQ(SanitizeUtf8("\xe4\xbd"), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(SanitizeUtf8("\x80x"), "\xef\xbf\xbdx");
  // Overlong forms decode to their code point; surrogates become U+FFFD.
  EXPECT_EQ(SanitizeUtf8(std::string("\xc0\x80", 2)), std::string(1, '\0'));
  EXPECT_EQ(SanitizeUtf8("\xed\xa0\x80"), "\xef\xbf\xbd");
  EXPECT_EQ(SanitizeUtf8("\xf7\xbf\xbf\xbf"), "\xef\xbf\xbd");
}

TEST(PreTokenizer, InvalidUtf8AndLongRunsDoNotCrash) {
  EXPECT_THAT(SplitWith("gpt-2", "a\xff b"), ElementsAre("a", "\xef\xbf\xbd", " b"));
  for (const char* name : {"gpt-2", "llama-bpe", "falcon", "deepseek-llm"}) {
    std::string text = std::string(200000, ' ') + "x" + std::string(100000, '7') +
                       std::string(50000, '\n') + "\xc3";
    const std::vector<std::string> pieces = SplitWith(name, text);
    EXPECT_FALSE(pieces.empty()) << name;
  }
  // A long whitespace run still splits exactly (no JIT/heap limit fallback).
  const std::vector<std::string> pieces = SplitWith("gpt-2", std::string(200000, ' ') + "x");
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].size(), 199999u);
  EXPECT_EQ(pieces[1], " x");
}

}  // namespace
}  // namespace kvserve
