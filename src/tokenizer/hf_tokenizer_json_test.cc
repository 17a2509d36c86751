#include "tokenizer/hf_tokenizer_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A llama-3-like tokenizer.json in miniature: Split(digits) + ByteLevel(no regex), merges in
// both forms, special and non-special added tokens, a BOS template.
constexpr const char kSmallTokenizerJson[] = R"json({
  "version": "1.0",
  "added_tokens": [
    {"id": 9, "content": "<|begin_of_text|>", "special": true},
    {"id": 10, "content": "<|end_of_text|>", "special": true},
    {"id": 11, "content": "<|eot_id|>", "special": true},
    {"id": 12, "content": "<tool>", "special": false}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
  ]},
  "post_processor": {"type": "Sequence", "processors": [
    {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
    {"type": "TemplateProcessing",
     "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}}],
     "pair": [],
     "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [9],
                                               "tokens": ["<|begin_of_text|>"]}}}
  ]},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "ignore_merges": true,
            "vocab": {"a": 0, "b": 1, "1": 2, "2": 3, "\u0120": 4, "ab": 5, "12": 6,
                      "\u0120a": 7, "123": 8},
            "merges": ["a b", ["1", "2"], "\u0120 a", "12 3"]}
})json";

class HfTokenizerJsonTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvserve_hf_json_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(HfTokenizerJsonTest, LoadsSmallTokenizerJson) {
  auto spec = LoadHfTokenizerJson(Write("tokenizer.json", kSmallTokenizerJson));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->model, VocabSpec::Model::kBpe);
  ASSERT_EQ(spec->tokens.size(), 13u);
  EXPECT_EQ(spec->tokens[4], "\xc4\xa0");
  EXPECT_THAT(spec->merges, ElementsAre("a b", "1 2", "\xc4\xa0 a", "12 3"));
  EXPECT_EQ(spec->token_types[0], TokenType::kNormal);
  EXPECT_EQ(spec->token_types[9], TokenType::kControl);
  EXPECT_EQ(spec->token_types[12], TokenType::kUserDefined);
  EXPECT_EQ(spec->bos_id, 9);
  EXPECT_EQ(spec->eos_id, 10);
  EXPECT_THAT(spec->eog_ids, ElementsAre(11));
  EXPECT_TRUE(spec->add_bos);
  EXPECT_FALSE(spec->add_eos);
  EXPECT_TRUE(spec->bpe_ignore_merges);
  EXPECT_THAT(spec->pre_regexes, ElementsAre("\\p{N}{1,3}"));

  auto encoder = BpeEncoder::Create(*spec);
  ASSERT_TRUE(encoder.ok()) << encoder.status().ToString();
  std::vector<TokenId> ids;
  // Pieces: "ab a" (no ByteLevel regex, so one piece), "123", "1".
  (*encoder)->Encode("ab a1231", &ids);
  EXPECT_THAT(ids, ElementsAre(5, 7, 8, 2));
}

TEST_F(HfTokenizerJsonTest, ByteLevelRegexBecomesGpt2AndPrefixSpaceIsKept) {
  const std::string json = R"json({
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true, "use_regex": true},
    "model": {"type": "BPE", "vocab": {"a": 0, "\u0120": 1, "\u0120a": 2,
                                       "<|endoftext|>": 3},
              "merges": ["\u0120 a"]}})json";
  auto spec = ParseHfTokenizerJson(json);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->pre, "gpt-2");
  EXPECT_TRUE(spec->pre_regexes.empty());
  EXPECT_TRUE(spec->bpe_add_prefix_space);
  EXPECT_EQ(spec->eos_id, 3);
  EXPECT_EQ(spec->bos_id, 3);
  auto encoder = BpeEncoder::Create(*spec);
  ASSERT_TRUE(encoder.ok());
  std::vector<TokenId> ids;
  (*encoder)->Encode("a a", &ids);
  EXPECT_THAT(ids, ElementsAre(2, 2));
}

TEST_F(HfTokenizerJsonTest, NoPreTokenizerKeepsTextWhole) {
  auto spec = ParseHfTokenizerJson(
      R"json({"model": {"type": "BPE", "vocab": {"a": 0, "\u0120": 1, "a\u0120a": 2,
              "a\u0120": 3}, "merges": ["a \u0120", "a\u0120 a"]}})json");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto encoder = BpeEncoder::Create(*spec);
  ASSERT_TRUE(encoder.ok());
  std::vector<TokenId> ids;
  (*encoder)->Encode("a a", &ids);
  EXPECT_THAT(ids, ElementsAre(2));
}

TEST_F(HfTokenizerJsonTest, UnsupportedTypesNameTheType) {
  auto unigram = ParseHfTokenizerJson(R"json({"model": {"type": "Unigram", "vocab": []}})json");
  ASSERT_FALSE(unigram.ok());
  EXPECT_EQ(unigram.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(unigram.status().message(), HasSubstr("Unigram"));

  auto metaspace = ParseHfTokenizerJson(R"json({
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581"},
    "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})json");
  ASSERT_FALSE(metaspace.ok());
  EXPECT_THAT(metaspace.status().message(), HasSubstr("Metaspace"));

  auto removed = ParseHfTokenizerJson(R"json({
    "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed"},
    "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})json");
  ASSERT_FALSE(removed.ok());
  EXPECT_THAT(removed.status().message(), HasSubstr("Removed"));

  auto normalizer = ParseHfTokenizerJson(R"json({
    "normalizer": {"type": "Lowercase"},
    "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})json");
  ASSERT_FALSE(normalizer.ok());
  EXPECT_THAT(normalizer.status().message(), HasSubstr("Lowercase"));
}

TEST_F(HfTokenizerJsonTest, MalformedInputIsAnError) {
  EXPECT_EQ(LoadHfTokenizerJson((dir_ / "missing.json").string()).status().code(),
            StatusCode::kNotFound);
  EXPECT_FALSE(ParseHfTokenizerJson("{not json").ok());
  EXPECT_FALSE(ParseHfTokenizerJson("[]").ok());
  EXPECT_FALSE(ParseHfTokenizerJson(R"json({"model": {"type": "BPE"}})json").ok());
  EXPECT_FALSE(ParseHfTokenizerJson(
                   R"json({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})json")
                   .ok());
  EXPECT_FALSE(ParseHfTokenizerJson(
                   R"json({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [1]}})json")
                   .ok());
  // A huge id is refused instead of allocated.
  EXPECT_FALSE(ParseHfTokenizerJson(
                   R"json({"model": {"type": "BPE", "vocab": {"a": 2000000000}, "merges": []}})json")
                   .ok());
  EXPECT_FALSE(ParseHfTokenizerJson(
                   R"json({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})json")
                   .ok());
  // A bad Split regex fails at load time.
  EXPECT_FALSE(ParseHfTokenizerJson(R"json({
    "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated"},
    "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})json")
                   .ok());
  // Wrong types inside otherwise valid JSON are errors, not crashes.
  EXPECT_FALSE(ParseHfTokenizerJson(R"json({"model": 5})json").ok());
  EXPECT_FALSE(ParseHfTokenizerJson(R"json({"model": {"type": "BPE", "vocab": {}, "merges": []},
                                            "added_tokens": [{"id": "x"}]})json")
                   .ok());
}

TEST_F(HfTokenizerJsonTest, SplitStringPatternIsLiteral) {
  auto spec = ParseHfTokenizerJson(R"json({
    "pre_tokenizer": {"type": "Split", "pattern": {"String": "a.b"}, "behavior": "Isolated"},
    "model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a"]}})json");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->pre_regexes.size(), 1u);
  EXPECT_EQ(spec->pre_regexes[0], "a\\.b");
}

TEST_F(HfTokenizerJsonTest, VocabAndMergesWithAndWithoutVersionHeader) {
  const std::string vocab =
      R"json({"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 3})json";
  for (const std::string& merges : {std::string("#version: 0.2\na b\n"), std::string("a b"),
                                   std::string("a b\r\n\r\n")}) {
    auto spec = LoadHfVocabAndMerges(Write("vocab.json", vocab), Write("merges.txt", merges));
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    EXPECT_THAT(spec->merges, ElementsAre("a b"));
    EXPECT_EQ(spec->pre, "gpt-2");
    EXPECT_EQ(spec->eos_id, 3);
    EXPECT_EQ(spec->token_types[3], TokenType::kControl);
  }
  EXPECT_FALSE(ParseHfVocabAndMerges(vocab, "#version: 0.2\n").ok());
  EXPECT_FALSE(ParseHfVocabAndMerges(vocab, "a b\nab\n").ok());
  EXPECT_FALSE(ParseHfVocabAndMerges("[1,2]", "a b\n").ok());
  EXPECT_FALSE(ParseHfVocabAndMerges("{bad", "a b\n").ok());
  EXPECT_EQ(LoadHfVocabAndMerges((dir_ / "nope.json").string(), (dir_ / "nope.txt").string())
                .status()
                .code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvserve
