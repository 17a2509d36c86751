// VocabSpecFromGguf on GGUF files written with GgufWriter.
#include "model/gguf_vocab.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace kvserve {
namespace {

class GgufVocabTest : public testing::Test {
 protected:
  void SetUp() override {
    w_.Set("general.architecture", GgufValue::String("llama"));
    w_.Set("tokenizer.ggml.model", GgufValue::String("llama"));
    w_.Set("tokenizer.ggml.tokens",
           GgufValue::StringArray({"<unk>", "<s>", "</s>", "<|im_end|>", "a", "<|eot_id|>"}));
    w_.Set("tokenizer.ggml.scores", GgufValue::F32Array({0, 0, 0, 0, -1, 0}));
    w_.Set("tokenizer.ggml.token_type", GgufValue::I32Array({2, 3, 3, 4, 1, 1}));
  }
  void TearDown() override { std::remove(path_.c_str()); }

  StatusOr<VocabSpec> Load() {
    path_ = testing::TempDir() + "/gguf_vocab_" +
            testing::UnitTest::GetInstance()->current_test_info()->name() + ".gguf";
    Status s = w_.Write(path_);
    if (!s.ok()) return s;
    KV_ASSIGN_OR_RETURN(auto file, GgufFile::Open(path_));
    return VocabSpecFromGguf(*file);
  }

  GgufWriter w_;
  std::string path_;
};

TEST_F(GgufVocabTest, ReadsSpmVocabulary) {
  w_.Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(false));
  w_.Set("tokenizer.ggml.add_space_prefix", GgufValue::Bool(false));
  w_.Set("tokenizer.ggml.eos_token_id", GgufValue::U32(2));
  auto spec = Load();
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->model, VocabSpec::Model::kSpm);
  EXPECT_EQ(spec->tokens.size(), 6u);
  EXPECT_EQ(spec->scores[4], -1.0f);
  EXPECT_EQ(spec->token_types[0], TokenType::kUnknown);
  EXPECT_EQ(spec->bos_id, 1);  // llama default
  EXPECT_EQ(spec->eos_id, 2);
  EXPECT_EQ(spec->unk_id, 0);
  EXPECT_FALSE(spec->add_bos);
  EXPECT_FALSE(spec->add_space_prefix);
  // <|im_end|> and <|eot_id|> end generation and become control tokens (llama.cpp).
  EXPECT_EQ(spec->eog_ids, (std::vector<TokenId>{3, 5}));
  EXPECT_EQ(spec->token_types[3], TokenType::kControl);
  EXPECT_EQ(spec->token_types[5], TokenType::kControl);
}

TEST_F(GgufVocabTest, EotKeyIsEndOfGeneration) {
  w_.Set("tokenizer.ggml.eot_token_id", GgufValue::U32(4));
  auto spec = Load();
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->eog_ids, (std::vector<TokenId>{4, 3, 5}));
}

TEST_F(GgufVocabTest, ReadsBpeAndBert) {
  w_.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  w_.Set("tokenizer.ggml.merges", GgufValue::StringArray({"a a"}));
  w_.Set("tokenizer.ggml.pre", GgufValue::String("gpt-2"));
  w_.Set("tokenizer.ggml.bos_token_id", GgufValue::U32(1));
  auto spec = Load();
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->model, VocabSpec::Model::kBpe);
  EXPECT_EQ(spec->pre, "gpt-2");
  EXPECT_EQ(spec->merges, std::vector<std::string>{"a a"});
  EXPECT_EQ(spec->bos_id, 1);
  EXPECT_EQ(spec->eos_id, kNoToken);  // the default 11 does not fit 6 tokens
  EXPECT_FALSE(spec->add_bos);

  w_.Set("tokenizer.ggml.model", GgufValue::String("bert"));
  w_.Set("tokenizer.ggml.unknown_token_id", GgufValue::U32(0));
  w_.Set("tokenizer.ggml.seperator_token_id", GgufValue::U32(2));
  spec = Load();
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->model, VocabSpec::Model::kWpm);
  EXPECT_EQ(spec->sep_id, 2);
  EXPECT_EQ(spec->cls_id, 1);
}

TEST_F(GgufVocabTest, RefusesUnknownModelByName) {
  w_.Set("tokenizer.ggml.model", GgufValue::String("rwkv"));
  auto spec = Load();
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("rwkv"), std::string::npos);
}

TEST_F(GgufVocabTest, RefusesInconsistentSizesAndIds) {
  {
    w_.Set("tokenizer.ggml.scores", GgufValue::F32Array({0, 0}));
    EXPECT_FALSE(Load().ok());
    SetUp();
  }
  {
    w_.Set("tokenizer.ggml.token_type", GgufValue::I32Array({1, 1, 1}));
    EXPECT_FALSE(Load().ok());
    SetUp();
  }
  {
    w_.Set("tokenizer.ggml.token_type", GgufValue::I32Array({1, 1, 1, 1, 1, 99}));
    EXPECT_FALSE(Load().ok());
    SetUp();
  }
  {
    w_.Set("tokenizer.ggml.eos_token_id", GgufValue::U32(6));
    EXPECT_FALSE(Load().ok());
    SetUp();
  }
  {
    w_.Set("tokenizer.ggml.tokens", GgufValue::String("not an array"));
    EXPECT_FALSE(Load().ok());
    SetUp();
  }
  {
    w_.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));  // no merges
    EXPECT_FALSE(Load().ok());
  }
}

}  // namespace
}  // namespace kvserve
