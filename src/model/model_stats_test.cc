#include "model/model_stats.h"

#include <gtest/gtest.h>

#include "model/synthetic.h"

namespace kvserve {
namespace {

TEST(ModelStatsTest, UntiedModelSkipsTheEmbeddingTable) {
  auto m = MakeSyntheticModel({.preset = "tiny"});  // 512 x 128, f32, untied
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_FALSE(m->config.tied_embeddings);
  EXPECT_EQ(EmbeddingBytes(*m), 512 * 128 * 4);
  EXPECT_EQ(WeightBytesPerToken(*m), m->WeightBytes() - 512 * 128 * 4);
  EXPECT_EQ(OutputParameters(*m), 512 * 128);
  EXPECT_EQ(ParametersPerToken(*m), m->config.NumParameters() - 512 * 128);
}

TEST(ModelStatsTest, TiedEmbeddingsCountAsTheOutputMatrix) {
  auto m = MakeSyntheticModel({.preset = "tiny", .dtype = DType::kQ8_0});
  ASSERT_TRUE(m.ok()) << m.status().message();
  m->config.tied_embeddings = true;
  m->tensors.erase("output.weight");
  EXPECT_GT(EmbeddingBytes(*m), 0);
  EXPECT_EQ(WeightBytesPerToken(*m), m->WeightBytes());
  EXPECT_EQ(ParametersPerToken(*m), m->config.NumParameters());
  EXPECT_EQ(OutputParameters(*m), 512 * 128);
}

TEST(ModelStatsTest, NoEmbeddingTensorIsZeroBytes) {
  LoadedModel empty;
  EXPECT_EQ(EmbeddingBytes(empty), 0);
  EXPECT_EQ(WeightBytesPerToken(empty), 0);
}

}  // namespace
}  // namespace kvserve
