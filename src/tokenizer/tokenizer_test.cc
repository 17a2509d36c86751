// Tokenizer core on small hand-made vocabularies (no assets): SPM merges and byte fallback,
// special tokens, BOS/EOS, decoding, WordPiece, validation.
#include "tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "tokenizer/wordpiece.h"

namespace kvserve {
namespace {

using testing::ElementsAre;

// <unk> <s> </s> <0x00>..<0xFF> then the given pieces (U+2581 written as '_').
VocabSpec MakeSpm(const std::vector<std::pair<std::string, float>>& pieces) {
  VocabSpec spec;
  spec.model = VocabSpec::Model::kSpm;
  auto add = [&](std::string text, float score, TokenType type) {
    spec.tokens.push_back(std::move(text));
    spec.scores.push_back(score);
    spec.token_types.push_back(type);
  };
  add("<unk>", 0, TokenType::kUnknown);
  add("<s>", 0, TokenType::kControl);
  add("</s>", 0, TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name, 0, TokenType::kByte);
  }
  for (const auto& [text, score] : pieces) {
    std::string t;
    for (char c : text) {
      if (c == '_') t += "\xE2\x96\x81";
      else t.push_back(c);
    }
    add(t, score, TokenType::kNormal);
  }
  spec.unk_id = 0;
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.add_bos = true;
  return spec;
}

constexpr TokenId kFirst = 259;  // id of the first extra piece in MakeSpm

std::unique_ptr<Tokenizer> MustCreate(VocabSpec spec) {
  auto t = Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(SpmTokenizer, MergesByBestScoreLeftmostOnTies) {
  // pieces: _ a b c _a ab bc abc
  auto tok = MustCreate(MakeSpm({{"_", -1}, {"a", -1}, {"b", -1}, {"c", -1}, {"_a", -5},
                                 {"ab", -2}, {"bc", -2}, {"_ab", -9}}));
  const TokenId kSpace = kFirst, kA = kFirst + 1, kB = kFirst + 2, kC = kFirst + 3,
                kSpaceA = kFirst + 4, kAB = kFirst + 5, kBC = kFirst + 6;
  // "abc" -> "_abc": ab and bc tie at -2, the leftmost (ab) wins; then _ab (-9); c stays.
  EXPECT_THAT(tok->Encode("abc", {.add_bos = false}), ElementsAre(kFirst + 7, kC));
  // "bc" -> "_bc": bc (-2) merges, "_bc" is no token.
  EXPECT_THAT(tok->Encode("bc", {.add_bos = false}), ElementsAre(kSpace, kBC));
  EXPECT_THAT(tok->Encode("a", {.add_bos = false}), ElementsAre(kSpaceA));
  EXPECT_THAT(tok->Encode("ab", {.add_bos = true}), ElementsAre(1, kFirst + 7));
  (void)kA;
  (void)kB;
  (void)kAB;
}

TEST(SpmTokenizer, ByteFallbackForUnknownCharacters) {
  auto tok = MustCreate(MakeSpm({{"_", -1}, {"a", -1}}));
  // "é" = C3 A9 is not a token: its bytes are.
  EXPECT_THAT(tok->Encode("a\xC3\xA9", {.add_bos = false}),
              ElementsAre(kFirst, kFirst + 1, 3 + 0xC3, 3 + 0xA9));
  EXPECT_EQ(tok->Decode(tok->Encode("a\xC3\xA9", {})), "a\xC3\xA9");
  EXPECT_EQ(tok->TokenToPiece(3 + 0xC3), "\xC3");
}

TEST(SpmTokenizer, EmptyTextGivesOnlyBos) {
  auto tok = MustCreate(MakeSpm({{"_", -1}}));
  EXPECT_TRUE(tok->Encode("", {.add_bos = false}).empty());
  EXPECT_THAT(tok->Encode("", {}), ElementsAre(1));
}

TEST(SpmTokenizer, DecodeDropsDummyPrefixSpaceOnce) {
  auto tok = MustCreate(MakeSpm({{"_", -1}, {"a", -1}, {"_a", -2}}));
  EXPECT_EQ(tok->Decode({1, kFirst + 2, kFirst + 2}), "a a");
  EXPECT_EQ(tok->Decode({kFirst + 2, kFirst + 2}), "a a");
  EXPECT_EQ(tok->Decode({1, kFirst + 2}, /*special=*/true), "<s>a");
  EXPECT_EQ(tok->TokenToPiece(kFirst + 2), " a");
  EXPECT_EQ(tok->TokenToPiece(1), "");
  EXPECT_EQ(tok->TokenToPiece(1, true), "<s>");
  EXPECT_EQ(tok->TokenToPiece(-5), "");
  EXPECT_EQ(tok->TokenToPiece(1 << 20), "");
  for (std::string text : {" a", "a  a", "  ", "a\xF0\x9F\x98\x80"}) {
    EXPECT_EQ(tok->Decode(tok->Encode(text, {})), text) << text;
  }
}

TEST(SpmTokenizer, SpecialTokensOnlyWithParseSpecial) {
  VocabSpec spec = MakeSpm({{"_", -1}, {"a", -1}, {"_a", -2}, {"<|eot|>", 0}, {"<tool>", 0}});
  spec.token_types[kFirst + 3] = TokenType::kControl;
  spec.token_types[kFirst + 4] = TokenType::kUserDefined;
  spec.eog_ids = {kFirst + 3};
  auto tok = MustCreate(spec);
  const TokenId kEot = kFirst + 3, kTool = kFirst + 4, kSpaceA = kFirst + 2;
  // parse_special: the control token is recognised and the text after it gets a new
  // dummy prefix (llama.cpp).
  EXPECT_THAT(tok->Encode("a<|eot|>a", {.add_bos = false, .parse_special = true}),
              ElementsAre(kSpaceA, kEot, kSpaceA));
  // Without it the control token is plain text ('<', '|', ... as bytes).
  const auto plain = tok->Encode("<|eot|>", {.add_bos = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), kEot), 0);
  EXPECT_EQ(tok->Decode(plain), "<|eot|>");
  // User-defined tokens always split.
  EXPECT_THAT(tok->Encode("<tool>a", {.add_bos = false}), ElementsAre(kTool, kSpaceA));
  EXPECT_EQ(tok->TokenToPiece(kTool), "<tool>");
  EXPECT_TRUE(tok->IsEndOfGeneration(kEot));
  EXPECT_TRUE(tok->IsEndOfGeneration(2));
  EXPECT_FALSE(tok->IsEndOfGeneration(kSpaceA));
  EXPECT_FALSE(tok->IsEndOfGeneration(kNoToken));
}

TEST(SpmTokenizer, LongestSpecialTokenFirst) {
  VocabSpec spec = MakeSpm({{"_", -1}, {"<a>", 0}, {"<a><b>", 0}, {"<b>", 0}});
  for (TokenId id : {kFirst + 1, kFirst + 2, kFirst + 3}) spec.token_types[id] = TokenType::kControl;
  auto tok = MustCreate(spec);
  EXPECT_THAT(tok->Encode("<a><b><b>", {.add_bos = false, .parse_special = true}),
              ElementsAre(kFirst + 2, kFirst + 3));
}

TEST(SpmTokenizer, AddEosAndNoSpacePrefix) {
  VocabSpec spec = MakeSpm({{"_", -1}, {"a", -1}, {"_a", -2}});
  spec.add_eos = true;
  spec.add_space_prefix = false;
  auto tok = MustCreate(spec);
  EXPECT_THAT(tok->Encode("a", {}), ElementsAre(1, kFirst + 1, 2));
  // Without the special tokens (llama.cpp's add_special = false): no BOS and no EOS, so a chat
  // prompt (whose template writes BOS) does not end in EOS.
  EXPECT_THAT(tok->Encode("a", {.add_bos = false}), ElementsAre(kFirst + 1));
}

TEST(SpmTokenizer, Llama2cFormatUsesPlainSpacesAndBytesAtThree) {
  VocabSpec spec = MakeSpm({{" ", -1}, {"a", -1}, {" a", -2}});
  spec.tokens[kFirst] = " ";
  spec.tokens[kFirst + 2] = " a";
  spec.llama2c_format = true;
  auto tok = MustCreate(spec);
  EXPECT_THAT(tok->Encode("a a\n", {}), ElementsAre(1, kFirst + 2, kFirst + 2, 3 + '\n'));
  EXPECT_EQ(tok->Decode({1, kFirst + 2, kFirst + 2, 3 + '\n'}), "a a\n");
}

TEST(TokenizerCreate, RejectsBadSpecs) {
  {
    VocabSpec spec;
    EXPECT_FALSE(Tokenizer::Create(spec).ok());  // no tokens
  }
  {
    VocabSpec spec = MakeSpm({});
    spec.scores.pop_back();
    EXPECT_FALSE(Tokenizer::Create(spec).ok());
  }
  {
    VocabSpec spec = MakeSpm({});
    spec.token_types.push_back(TokenType::kNormal);
    EXPECT_FALSE(Tokenizer::Create(spec).ok());
  }
  {
    VocabSpec spec = MakeSpm({});
    spec.eos_id = 100000;
    EXPECT_FALSE(Tokenizer::Create(spec).ok());
  }
  {
    VocabSpec spec = MakeSpm({});
    spec.eog_ids = {-7};
    EXPECT_FALSE(Tokenizer::Create(spec).ok());
  }
  {
    VocabSpec spec = MakeSpm({});
    spec.token_types[5] = static_cast<TokenType>(42);
    EXPECT_FALSE(Tokenizer::Create(spec).ok());
  }
  {
    VocabSpec spec = MakeSpm({});
    spec.bos_id = kNoToken;  // add_bos without a BOS token
    EXPECT_FALSE(Tokenizer::Create(spec).ok());
  }
  {
    // No byte token for 0x41 and no unk.
    VocabSpec spec = MakeSpm({});
    spec.tokens[3 + 0x41] = "x";
    spec.unk_id = kNoToken;
    EXPECT_FALSE(Tokenizer::Create(spec).ok());
  }
  {
    VocabSpec spec = MakeSpm({});
    spec.llama2c_format = true;
    spec.tokens.resize(100);
    spec.scores.resize(100);
    spec.token_types.resize(100);
    EXPECT_FALSE(Tokenizer::Create(spec).ok());
  }
}

VocabSpec MakeWpm() {
  VocabSpec spec;
  spec.model = VocabSpec::Model::kWpm;
  const std::string u = "\xE2\x96\x81";
  spec.tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", u + "hello", u + "world", "s",
                 u + "!", u + "fuhrer", u + "un", "aff", "able", u + "\xE4\xB8\xAD", u + "a"};
  spec.token_types.assign(spec.tokens.size(), TokenType::kNormal);
  for (int i = 0; i < 4; ++i) spec.token_types[i] = TokenType::kControl;
  spec.token_types[1] = TokenType::kUnknown;
  spec.unk_id = 1;
  spec.bos_id = 2;
  spec.cls_id = 2;
  spec.sep_id = 3;
  spec.add_bos = true;
  return spec;
}

TEST(WordPiece, SplitsAndNormalizesLikeBert) {
  EXPECT_THAT(WordPieceTokenizer::SplitWords("Hello, WORLD!"),
              ElementsAre("hello", ",", "world", "!"));
  EXPECT_THAT(WordPieceTokenizer::SplitWords("F\xC3\xBChrer"), ElementsAre("fuhrer"));
  // CJK ideographs are words of their own; whitespace runs and controls vanish.
  EXPECT_THAT(WordPieceTokenizer::SplitWords(" \t\xE4\xB8\xAD\xE6\x96\x87x\x01 "),
              ElementsAre("\xE4\xB8\xAD", "\xE6\x96\x87", "x"));
  // ASCII symbols split; non-ASCII symbols (the euro sign, Sc) do not.
  EXPECT_THAT(WordPieceTokenizer::SplitWords("a+b\xE2\x82\xAC"), ElementsAre("a", "+", "b\xE2\x82\xAC"));
  EXPECT_TRUE(WordPieceTokenizer::SplitWords("  \n ").empty());
}

TEST(WordPiece, GreedyLongestMatchWithContinuations) {
  auto tok = MustCreate(MakeWpm());
  EXPECT_THAT(tok->Encode("Hello worlds!", {.add_bos = false}), ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(tok->Encode("unaffable", {.add_bos = false}), ElementsAre(9, 10, 11));
  // A word with an unmatched position is [UNK] as a whole.
  EXPECT_THAT(tok->Encode("unaffablex hello", {.add_bos = false}), ElementsAre(1, 4));
  EXPECT_THAT(tok->Encode("F\xC3\xBCHRER \xE4\xB8\xAD", {}), ElementsAre(2, 8, 12, 3));
  EXPECT_EQ(tok->Decode({2, 4, 5, 6, 7, 3}), "hello worlds !");
  EXPECT_EQ(tok->Decode({2, 4, 3}, /*special=*/true), "[CLS]hello[SEP]");
}

TEST(WordPiece, OneSepEvenWhenTheVocabularyAsksForEos) {
  // The current llama.cpp converter writes add_eos_token with eos = [SEP]; its WPM tokenizer
  // ignores it: [CLS] text [SEP], once.
  VocabSpec spec = MakeWpm();
  spec.eos_id = 3;
  spec.add_eos = true;
  auto tok = MustCreate(spec);
  EXPECT_THAT(tok->Encode("hello", {}), ElementsAre(2, 4, 3));
  EXPECT_THAT(tok->Encode("hello", {.add_bos = false}), ElementsAre(4));
}

TEST(WordPiece, NeedsUnk) {
  VocabSpec spec = MakeWpm();
  spec.unk_id = kNoToken;
  EXPECT_FALSE(Tokenizer::Create(spec).ok());
}

}  // namespace
}  // namespace kvserve
