#include "model/synthetic.h"

#include <cmath>
#include <cstring>
#include <set>

#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

int64_t CountElements(const LoadedModel& m) {
  int64_t n = 0;
  for (const auto& [name, t] : m.tensors) n += t.num_elements();
  return n;
}

TEST(SyntheticTest, PresetParameterCountsMatchTheRealModels) {
  // Published parameter counts (embeddings counted once when tied).
  const std::vector<std::pair<std::string, int64_t>> known = {
      {"smollm2-135m", 134515008}, {"qwen2.5-0.5b", 494032768}, {"llama-3.2-1b", 1235814400},
      // The encoders as llama.cpp's converter writes them (HF's counts add a 147,840-value
      // pooler it drops).
      {"all-minilm-l6-v2", 22565376}, {"bge-small-en-v1.5", 33212160}};
  for (const auto& [preset, count] : known) {
    auto c = SyntheticPresetConfig(preset);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_TRUE(c->Validate().ok()) << preset;
    EXPECT_EQ(c->NumParameters(), count) << preset;
  }
  auto llama = SyntheticPresetConfig("llama-3.2-1b");
  EXPECT_EQ(llama->rope.scaling, RopeScalingType::kLlama3);
  EXPECT_FLOAT_EQ(llama->rope.scaling_factor, 32.0f);
  auto qwen = SyntheticPresetConfig("qwen2.5-0.5b");
  EXPECT_TRUE(qwen->qkv_bias);
  EXPECT_EQ(qwen->rope.layout, RopeLayout::kNeox);
  EXPECT_EQ(qwen->head_dim, 64);
}

TEST(SyntheticTest, EncoderPresetsAndTheirWordPieceVocabulary) {
  SyntheticModelOptions o;
  o.preset = "all-minilm-l6-v2";
  auto m = MakeSyntheticModel(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->config.is_encoder());
  EXPECT_EQ(m->config.pooling, PoolingType::kMean);
  EXPECT_FALSE(m->config.causal);
  EXPECT_EQ(m->tensors.size(), 5u + 16u * 6u);  // llama.cpp's count: 101
  EXPECT_EQ(m->tensors.at("token_types.weight").dtype, DType::kF32);
  EXPECT_EQ(m->tensors.at("position_embd.weight").shape, (std::vector<int64_t>{512, 384}));
  // q8_0 matrices; the type and position tables stay f32, as llama.cpp needs.
  o.dtype = DType::kQ8_0;
  auto q = MakeSyntheticModel(o);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->tensors.at("blk.0.attn_q.weight").dtype, DType::kQ8_0);
  EXPECT_EQ(q->tensors.at("position_embd.weight").dtype, DType::kF32);
  // The vocabulary: BERT's special ids, ASCII text without [UNK], [CLS] ... [SEP].
  ASSERT_TRUE(m->vocab.has_value());
  EXPECT_EQ(static_cast<int64_t>(m->vocab->tokens.size()), 30522);
  auto tok = Tokenizer::Create(*m->vocab);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::vector<TokenId> ids = (*tok)->Encode("Hello, World! 42 refunds", {});
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 101);
  EXPECT_EQ(ids.back(), 102);
  for (TokenId t : ids) EXPECT_NE(t, 100) << "an [UNK] in ASCII text";
  EXPECT_FALSE(MakeSyntheticWordPieceVocab(299).ok());
}

TEST(SyntheticTest, UnknownPresetListsNames) {
  auto c = SyntheticPresetConfig("gpt-5");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  for (const auto& name : SyntheticPresetNames()) {
    EXPECT_NE(c.status().message().find(name), std::string::npos) << name;
  }
}

TEST(SyntheticTest, WeightDTypesAreF32F16Bf16AndGgmlBlockTypes) {
  for (const char* name : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k",
                           "q3_k", "q4_k", "q5_k", "q6_k"}) {
    auto d = ParseSyntheticWeightDType(name);
    ASSERT_TRUE(d.ok()) << name;
    EXPECT_EQ(DTypeName(*d), std::string(name));
    EXPECT_TRUE(IsSyntheticWeightDType(*d)) << name;
  }
  for (const char* name : {"int8", "fp8_e4m3", "q4", ""}) {
    auto d = ParseSyntheticWeightDType(name);
    ASSERT_FALSE(d.ok()) << name;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(d.status().message(),
              std::string("--dtype must be f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, "
                          "q3_k, q4_k, q5_k or q6_k, got '") + name + "'");
  }
  auto m = MakeSyntheticModel({.preset = "tiny", .dtype = DType::kI8});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
}

TEST(SyntheticTest, BuildsSmolLm2ShapesAndCountsInQ8) {
  int64_t last_done = 0, last_total = 0;
  auto m = MakeSyntheticModel({.preset = "smollm2-135m", .dtype = DType::kQ8_0},
                              [&](int64_t done, int64_t total) {
                                EXPECT_GE(done, last_done);
                                last_done = done;
                                last_total = total;
                              });
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(CountElements(*m), 134515008);
  EXPECT_EQ(last_done, last_total);
  EXPECT_EQ(last_total, m->WeightBytes());
  EXPECT_EQ(m->tensors.at("blk.29.ffn_down.weight").dtype, DType::kQ8_0);
  EXPECT_EQ(m->tensors.at("blk.29.ffn_down.weight").shape, (std::vector<int64_t>{576, 1536}));
  EXPECT_EQ(m->tensors.at("output_norm.weight").dtype, DType::kF32);
  EXPECT_EQ(m->tensors.count("output.weight"), 0u);
  EXPECT_EQ(m->vocab->tokens.size(), 49152u);
}

TEST(SyntheticTest, DeterministicInSeedAndScaledLikeAnInit) {
  auto a = MakeSyntheticModel({.preset = "tiny", .seed = 7});
  auto b = MakeSyntheticModel({.preset = "tiny", .seed = 7});
  auto c = MakeSyntheticModel({.preset = "tiny", .seed = 8});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_EQ(a->tensors.size(), b->tensors.size());
  for (const auto& [name, t] : a->tensors) {
    const Tensor& u = b->tensors.at(name);
    ASSERT_EQ(t.num_bytes(), u.num_bytes());
    EXPECT_EQ(std::memcmp(t.data, u.data, t.num_bytes()), 0) << name;
  }
  const Tensor& q7 = a->tensors.at("blk.0.attn_q.weight");
  const Tensor& q8 = c->tensors.at("blk.0.attn_q.weight");
  EXPECT_NE(std::memcmp(q7.data, q8.data, q7.num_bytes()), 0);
  EXPECT_EQ(a->vocab->tokens, b->vocab->tokens);
  EXPECT_EQ(a->vocab->merges, b->vocab->merges);
  // Weights: mean ~0, std ~0.02; norms 1.
  const float* w = static_cast<const float*>(q7.data);
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < q7.num_elements(); ++i) {
    sum += w[i];
    sq += double{w[i]} * w[i];
  }
  double mean = sum / q7.num_elements();
  double std = std::sqrt(sq / q7.num_elements() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(std, 0.02, 0.001);
  const float* norm = static_cast<const float*>(a->tensors.at("blk.3.ffn_norm.weight").data);
  EXPECT_EQ(norm[0], 1.0f);
  EXPECT_EQ(norm[127], 1.0f);
}

TEST(SyntheticTest, DtypesAgreeWithF32WithinTheirPrecision) {
  auto f32 = MakeSyntheticModel({.preset = "tiny"});
  ASSERT_TRUE(f32.ok());
  for (DType d : {DType::kF16, DType::kBF16}) {
    auto m = MakeSyntheticModel({.preset = "tiny", .dtype = d});
    ASSERT_TRUE(m.ok()) << DTypeName(d);
    const Tensor& t = m->tensors.at("blk.1.ffn_up.weight");
    const Tensor& r = f32->tensors.at("blk.1.ffn_up.weight");
    ASSERT_EQ(t.dtype, d);
    std::vector<float> row(t.cols());
    double max_err = 0;
    for (int64_t i = 0; i < t.rows(); ++i) {
      DequantizeRow(d, t.row(i), row.data(), t.cols());
      const float* ref = static_cast<const float*>(r.row(i));
      for (int64_t j = 0; j < t.cols(); ++j) max_err = std::max(max_err, double(std::fabs(row[j] - ref[j])));
    }
    EXPECT_LT(max_err, 0.035 * 0.01) << DTypeName(d);  // < 1% of the value range
  }
  // Q8_0 is drawn directly as quantized uniform values (not from the f32 stream): check its
  // distribution instead.
  auto q = MakeSyntheticModel({.preset = "tiny", .dtype = DType::kQ8_0});
  ASSERT_TRUE(q.ok());
  const Tensor& t = q->tensors.at("blk.1.ffn_up.weight");
  ASSERT_EQ(t.dtype, DType::kQ8_0);
  std::vector<float> all(t.num_elements());
  for (int64_t i = 0; i < t.rows(); ++i) DequantizeRow(t.dtype, t.row(i), all.data() + i * t.cols(), t.cols());
  double sum = 0, sq = 0, mx = 0;
  for (float x : all) {
    sum += x;
    sq += double{x} * x;
    mx = std::max(mx, double(std::fabs(x)));
  }
  EXPECT_NEAR(sum / all.size(), 0.0, 0.002);
  EXPECT_NEAR(std::sqrt(sq / all.size()), 0.02, 0.001);
  EXPECT_LE(mx, 0.0347);
  EXPECT_FALSE(MakeSyntheticModel({.preset = "tiny", .dtype = DType::kI8}).ok());
}

TEST(SyntheticTest, SyntheticVocabRoundTripsText) {
  auto m = MakeSyntheticModel({.preset = "tiny"});
  ASSERT_TRUE(m.ok());
  const VocabSpec& v = *m->vocab;
  EXPECT_EQ(v.tokens.size(), 512u);
  EXPECT_EQ(v.merges.size(), 512u - 257u);
  EXPECT_EQ(v.tokens[v.eos_id], "<|endoftext|>");
  EXPECT_EQ(v.bos_id, v.eos_id);
  auto tok = Tokenizer::Create(v);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  for (std::string text : {std::string("hello world, the cat sat on the mat."),
                           std::string("Ünïcödé 日本語 \xF0\x9F\x98\x80 tabs\tand\nnewlines  "),
                           std::string("")}) {
    auto ids = (*tok)->Encode(text, {});
    EXPECT_EQ((*tok)->Decode(ids), text);
    for (TokenId id : ids) EXPECT_LT(id, 511);
  }
  // Merges make common lowercase text shorter than its bytes.
  std::string text = "there was a little girl who liked to read and sing";
  EXPECT_LT((*tok)->Encode(text, {}).size(), text.size() * 3 / 4);
  EncodeOptions special;
  special.parse_special = true;
  auto eot = (*tok)->Encode("a<|endoftext|>", special);
  ASSERT_FALSE(eot.empty());
  EXPECT_EQ(eot.back(), v.eos_id);
}

TEST(SyntheticTest, GivenVocabSetsVocabSize) {
  auto vocab = MakeSyntheticVocab(1000, 5);
  ASSERT_TRUE(vocab.ok());
  auto m = MakeSyntheticModel({.preset = "tiny", .vocab = *vocab});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->config.vocab_size, 1000);
  EXPECT_EQ(m->tensors.at("token_embd.weight").shape[0], 1000);
  EXPECT_EQ(m->tensors.at("output.weight").shape[0], 1000);
}

TEST(SyntheticTest, BuiltinDefault) {
  LoadedModel m = MakeBuiltinDefaultModel();
  EXPECT_EQ(m.format, "builtin");
  EXPECT_TRUE(m.config.Validate().ok());
  EXPECT_EQ(m.config.vocab_size, 512);
  EXPECT_EQ(m.config.num_layers, 4);
  EXPECT_TRUE(m.vocab.has_value());
}

}  // namespace
}  // namespace kvserve

namespace kvserve {
namespace {

TEST(SyntheticTest, LargeVocabTokensAreUnique) {
  auto v = MakeSyntheticVocab(151936, 0);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->tokens.size(), 151936u);
  std::set<std::string> unique(v->tokens.begin(), v->tokens.end());
  EXPECT_EQ(unique.size(), v->tokens.size());
  EXPECT_TRUE(Tokenizer::Create(*v).ok());
}

}  // namespace
}  // namespace kvserve
