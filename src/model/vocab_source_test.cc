#include "model/vocab_source.h"

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace kvserve {
namespace {

namespace fs = std::filesystem;

const std::string kAssets = KVSERVE_ASSETS_DIR;
const std::string kStoriesDir = kAssets + "/models/stories260K";
const std::string kSpmVocab = kAssets + "/tokenizers/ggml-vocab-llama-spm.gguf";
const std::string kTokenizerJson = kAssets + "/tokenizers/all-MiniLM-L6-v2/tokenizer.json";

TEST(VocabSourceTest, MissingFileIsNotFound) {
  auto v = LoadVocabFile("/nonexistent/tokenizer.json", 0);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(v.status().message(), "tokenizer file '/nonexistent/tokenizer.json' does not exist");
}

TEST(VocabSourceTest, Llama2cTokenizerNeedsTheVocabularySize) {
  const std::string tok = kStoriesDir + "/tok512.bin";
  if (!fs::exists(tok)) GTEST_SKIP() << "no " << tok << " (shared assets absent)";
  auto v = LoadVocabFile(tok, 0);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("llama2.c tokenizer file"), std::string::npos);
  EXPECT_NE(v.status().message().find("--model"), std::string::npos);
  auto sized = LoadVocabFile(tok, 512);
  ASSERT_TRUE(sized.ok()) << sized.status().message();
  EXPECT_EQ(sized->tokens.size(), 512u);
  // Through LoadModelVocab (no model) it is the same error.
  auto alone = LoadModelVocab("", tok);
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().code(), StatusCode::kInvalidArgument);
}

TEST(VocabSourceTest, GgufAndTokenizerJsonNeedNoSize) {
  if (!fs::exists(kSpmVocab) || !fs::exists(kTokenizerJson)) {
    GTEST_SKIP() << "shared assets absent";
  }
  auto gguf = LoadVocabFile(kSpmVocab, 0);
  ASSERT_TRUE(gguf.ok()) << gguf.status().message();
  EXPECT_GT(gguf->tokens.size(), 1000u);
  // A .json file goes to the tokenizer.json reader (this one is WordPiece), not to the
  // llama2.c reader that would want a size.
  auto json = LoadVocabFile(kTokenizerJson, 0);
  ASSERT_TRUE(json.ok()) << json.status().message();
  EXPECT_EQ(json->model, VocabSpec::Model::kWpm);
  EXPECT_EQ(json->tokens.size(), 30522u);
  // A vocabulary-only GGUF given as the model: its metadata alone, no tensors needed.
  auto model_vocab = LoadModelVocab(kSpmVocab, "");
  ASSERT_TRUE(model_vocab.ok()) << model_vocab.status().message();
  EXPECT_EQ(model_vocab->tokens, gguf->tokens);
}

TEST(VocabSourceTest, Llama2cModelFindsItsTokenizerAndReportsProgress) {
  const std::string model = kStoriesDir + "/stories260K.bin";
  if (!fs::exists(model)) GTEST_SKIP() << "no " << model << " (shared assets absent)";
  int64_t last_done = -1, last_total = -1;
  auto v = LoadModelVocab(model, "", [&](int64_t done, int64_t total) {
    last_done = done;
    last_total = total;
  });
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->tokens.size(), 512u);
  EXPECT_GT(last_total, 0);
  EXPECT_GT(last_done, 0);
  EXPECT_LE(last_done, last_total);
  // An explicit tokenizer file overrides the model's.
  auto overridden = LoadModelVocab(model, kStoriesDir + "/tok512.bin");
  ASSERT_TRUE(overridden.ok()) << overridden.status().message();
  EXPECT_EQ(overridden->tokens, v->tokens);
}

}  // namespace
}  // namespace kvserve
