#include "tokenizer/bpe.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

namespace kvserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ByteLevel, AllBytesRoundTripThroughOneCharacterEach) {
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    const std::string text = ByteLevelEncode(byte);
    EXPECT_TRUE(seen.insert(text).second) << "byte " << b << " shares its character";
    EXPECT_LE(text.size(), 2u);
    EXPECT_EQ(ByteLevelDecode(text), byte) << "byte " << b;
  }
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(ByteLevelDecode(ByteLevelEncode(all)), all);
}

TEST(ByteLevel, KnownCharacters) {
  EXPECT_EQ(ByteLevelEncode("A"), "A");
  EXPECT_EQ(ByteLevelEncode(" "), "\xc4\xa0");   // U+0120 'Ġ'
  EXPECT_EQ(ByteLevelEncode("\n"), "\xc4\x8a");  // U+010A 'Ċ'
  EXPECT_EQ(ByteLevelEncode("\xc3\xa9"), "\xc3\x83\xc2\xa9");  // é -> "Ã©"
  EXPECT_EQ(ByteLevelDecode("\xc4\xa0world"), " world");
  // Characters outside the alphabet pass through as UTF-8.
  EXPECT_EQ(ByteLevelDecode("<|你|>"), "<|你|>");
  EXPECT_EQ(ByteLevelDecode("a\xff"), "a\xff");
}

// A tiny vocabulary over 'a', 'b', 'c', 'Ġ' (space) with hand-made merges.
VocabSpec TinySpec(std::vector<std::string> merges) {
  VocabSpec spec;
  spec.model = VocabSpec::Model::kBpe;
  spec.pre = "gpt-2";
  spec.tokens = {"a", "b", "c", "\xc4\xa0", "ab", "bc", "abc", "\xc4\xa0" "a", "aa", "xyz"};
  spec.token_types.assign(spec.tokens.size(), TokenType::kNormal);
  spec.merges = std::move(merges);
  return spec;
}

std::vector<TokenId> EncodeWith(const VocabSpec& spec, std::string_view text) {
  auto encoder = BpeEncoder::Create(spec);
  EXPECT_TRUE(encoder.ok()) << encoder.status().ToString();
  std::vector<TokenId> ids;
  if (encoder.ok()) (*encoder)->Encode(text, &ids);
  return ids;
}

TEST(BpeEncoder, MergesByRank) {
  const VocabSpec spec = TinySpec({"a b", "ab c", "b c", "\xc4\xa0 a", "a a"});
  EXPECT_THAT(EncodeWith(spec, "abc"), ElementsAre(6));
  EXPECT_THAT(EncodeWith(spec, "abcab"), ElementsAre(6, 4));
  EXPECT_THAT(EncodeWith(spec, "cab a"), ElementsAre(2, 4, 7));
  // Pre-tokens are merged separately; the space goes with the following word, where "a b"
  // (rank 0) beats "Ġ a" (rank 3) and no "Ġ ab" merge exists.
  EXPECT_THAT(EncodeWith(spec, "ab ab"), ElementsAre(4, 3, 4));
  EXPECT_THAT(EncodeWith(spec, "ab ac"), ElementsAre(4, 7, 2));
  EXPECT_TRUE(EncodeWith(spec, "").empty());
}

TEST(BpeEncoder, LowerRankWinsAndTiesGoLeft) {
  // "b c" outranks "a b": abc -> a + bc (no "a bc" merge).
  EXPECT_THAT(EncodeWith(TinySpec({"b c", "a b"}), "abc"), ElementsAre(0, 5));
  EXPECT_THAT(EncodeWith(TinySpec({"a b", "b c"}), "abc"), ElementsAre(4, 2));
  // aaa: both pairs have the same rank; the left one merges first.
  EXPECT_THAT(EncodeWith(TinySpec({"a a"}), "aaa"), ElementsAre(8, 0));
}

TEST(BpeEncoder, MergeResultMissingFromVocabFallsBackToSingleBytes) {
  // "c a" merges but "ca" is no token: the symbol is emitted byte by byte.
  EXPECT_THAT(EncodeWith(TinySpec({"c a"}), "ca"), ElementsAre(2, 0));
}

TEST(BpeEncoder, IgnoreMergesEmitsWholeWordTokens) {
  VocabSpec spec = TinySpec({"a b"});
  EXPECT_THAT(EncodeWith(spec, "abc"), ElementsAre(4, 2));
  spec.bpe_ignore_merges = true;
  EXPECT_THAT(EncodeWith(spec, "abc"), ElementsAre(6));
  // llama-3 pre-tokenizers imply it.
  spec.bpe_ignore_merges = false;
  spec.pre = "llama-bpe";
  EXPECT_THAT(EncodeWith(spec, "abc"), ElementsAre(6));
}

TEST(BpeEncoder, AddPrefixSpace) {
  VocabSpec spec = TinySpec({"\xc4\xa0 a"});
  spec.bpe_add_prefix_space = true;
  EXPECT_THAT(EncodeWith(spec, "a"), ElementsAre(7));
  EXPECT_THAT(EncodeWith(spec, " a"), ElementsAre(7));
}

TEST(BpeEncoder, CustomRegexes) {
  VocabSpec spec = TinySpec({"a b", "ab c"});
  spec.pre_regexes = {"b"};  // isolates every 'b'
  EXPECT_THAT(EncodeWith(spec, "abc"), ElementsAre(0, 1, 2));
}

TEST(BpeEncoder, InvalidUtf8IsDeterministic) {
  const VocabSpec spec = TinySpec({"a b"});
  const std::vector<TokenId> first = EncodeWith(spec, "ab\xff\xfe\xc3");
  EXPECT_EQ(first, EncodeWith(spec, "ab\xff\xfe\xc3"));
  // U+FFFD's bytes have no tokens here: only "ab" survives.
  EXPECT_THAT(first, ElementsAre(4));
}

TEST(BpeEncoder, RejectsBadSpecs) {
  VocabSpec no_merges = TinySpec({});
  auto a = BpeEncoder::Create(no_merges);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("merges"));

  VocabSpec unknown_pre = TinySpec({"a b"});
  unknown_pre.pre = "klingon";
  auto b = BpeEncoder::Create(unknown_pre);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("klingon"));
  EXPECT_THAT(b.status().message(), HasSubstr("gpt-2"));

  VocabSpec bad_merge = TinySpec({"ab"});
  EXPECT_FALSE(BpeEncoder::Create(bad_merge).ok());

  VocabSpec spm = TinySpec({"a b"});
  spm.model = VocabSpec::Model::kSpm;
  EXPECT_FALSE(BpeEncoder::Create(spm).ok());

  VocabSpec bad_regex = TinySpec({"a b"});
  bad_regex.pre_regexes = {"[z-a]"};
  EXPECT_FALSE(BpeEncoder::Create(bad_regex).ok());
}

TEST(BpeEncoder, ConcurrentEncodesAgree) {
  auto encoder = BpeEncoder::Create(TinySpec({"a b", "ab c", "\xc4\xa0 a", "a a"}));
  ASSERT_TRUE(encoder.ok());
  std::string text;
  for (int i = 0; i < 200; ++i) text += "abc aab cab ";
  std::vector<TokenId> want;
  (*encoder)->Encode(text, &want);
  std::vector<std::vector<TokenId>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        got[t].clear();
        (*encoder)->Encode(text, &got[t]);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& ids : got) EXPECT_EQ(ids, want);
}

}  // namespace
}  // namespace kvserve
