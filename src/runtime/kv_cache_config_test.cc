#include "runtime/kv_cache_config.h"

#include <gtest/gtest.h>

#include "model/synthetic.h"

namespace kvserve {
namespace {

KvCacheSpec Spec() {
  KvCacheSpec spec;
  spec.num_layers = 4;
  spec.num_kv_heads = 2;
  spec.head_dim = 16;
  spec.dtype = DType::kF16;
  spec.block_size = 16;
  return spec;  // 4 * 2*2*16 * 2 = 512 bytes per token, 8 KiB per block
}

TEST(KvBudgetTest, ExplicitBytes) {
  KvCacheConfig config;
  config.memory_bytes = 1 << 20;
  auto b = ComputeKvBudget(Spec(), config, 256, 0, 0, 0);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->num_blocks, 128);
  EXPECT_NE(b->source.find("--kv-cache-memory"), std::string::npos);
}

TEST(KvBudgetTest, UtilizationOfWhatIsLeftAfterWeightsAndWorkspace) {
  KvCacheConfig config;
  config.memory_utilization = 0.5;
  // 10 MiB available - 2 MiB weights - 0 workspace = 8 MiB; half = 4 MiB = 512 blocks.
  auto b = ComputeKvBudget(Spec(), config, 256, 2 << 20, 0, 10 << 20);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->num_blocks, 512);
}

TEST(KvBudgetTest, DefaultRoomForSequences) {
  KvCacheConfig config;
  config.memory_utilization = 0.0;
  config.default_num_sequences = 3;
  auto b = ComputeKvBudget(Spec(), config, 40, 0, 0, 0);  // 3 blocks per sequence
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->num_blocks, 9);
}

TEST(KvBudgetTest, TooSmallForOneSequenceSaysHowMuchIsMissing) {
  KvCacheConfig config;
  config.memory_bytes = 8192 * 3;  // 3 blocks = 48 tokens
  auto b = ComputeKvBudget(Spec(), config, 64, 0, 0, 0);  // needs 4 blocks
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("8.19 KB"), std::string::npos) << b.status().message();
  EXPECT_NE(b.status().message().find("--max-model-len"), std::string::npos);
  config.memory_bytes = 0;
  config.memory_utilization = 1.5;
  EXPECT_FALSE(ComputeKvBudget(Spec(), config, 64, 0, 0, 1 << 30).ok());
}

TEST(PagedKvCacheTest, CreatesAndDescribesEveryDtype) {
  auto model = LlamaModel::Create(MakeBuiltinDefaultModel());
  ASSERT_TRUE(model.ok());
  for (const char* dtype : {"auto", "f16", "bf16", "fp8", "fp8_e5m2", "int8"}) {
    KvCacheConfig config;
    config.dtype = dtype;
    config.memory_bytes = 4 << 20;
    config.max_model_len = 64;
    auto cache = CreatePagedKvCache(**model, nullptr, config, nullptr);
    ASSERT_TRUE(cache.ok()) << dtype << ": " << cache.status().ToString();
    EXPECT_EQ(cache->max_model_len, 64);
    EXPECT_GT(cache->capacity_tokens(), 64);
    EXPECT_LE(cache->storage->total_bytes(), 4 << 20);
    std::string banner;
    for (const auto& line : cache->Describe()) banner += line + "\n";
    EXPECT_NE(banner.find("capacity"), std::string::npos) << banner;
    if (std::string(dtype).rfind("fp8", 0) == 0) {
      // Never silently 1.0: calibrated, and said so.
      EXPECT_EQ(cache->storage->scales().source, KvScaleSource::kCalibrated);
      EXPECT_NE(banner.find("calibrated"), std::string::npos) << banner;
      for (float s : cache->storage->scales().k) EXPECT_NE(s, 1.0f);
    }
  }
  KvCacheConfig bad;
  bad.dtype = "fp4";
  EXPECT_FALSE(CreatePagedKvCache(**model, nullptr, bad, nullptr).ok());
  bad.dtype = "f16";
  bad.max_model_len = (*model)->config().max_seq_len + 1;
  EXPECT_FALSE(CreatePagedKvCache(**model, nullptr, bad, nullptr).ok());
}

// A model file that carries fp8 KV scales (HF checkpoints' k_scale / v_scale) is used as is.
TEST(PagedKvCacheTest, Fp8ScalesFromTheModelFile) {
  LoadedModel loaded = MakeBuiltinDefaultModel();
  for (int64_t l = 0; l < loaded.config.num_layers; ++l) {
    for (const char* which : {"k", "v"}) {
      Tensor t = Tensor::Allocate(DType::kF32, {1});
      *static_cast<float*>(t.mutable_data()) = which[0] == 'k' ? 0.02f : 0.03f;
      loaded.tensors["blk." + std::to_string(l) + ".attn_" + which + ".kv_scale"] = t;
    }
  }
  auto model = LlamaModel::Create(std::move(loaded));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  KvCacheConfig config;
  config.dtype = "fp8_e4m3";
  config.memory_bytes = 1 << 20;
  config.max_model_len = 64;
  auto cache = CreatePagedKvCache(**model, nullptr, config, nullptr);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  EXPECT_EQ(cache->storage->scales().source, KvScaleSource::kModelFile);
  EXPECT_FLOAT_EQ(cache->storage->k_head_scales(0)[0], 0.02f);
  EXPECT_FLOAT_EQ(cache->storage->v_head_scales(1)[1], 0.03f);
  std::string banner;
  for (const auto& line : cache->Describe()) banner += line + "\n";
  EXPECT_NE(banner.find("model file"), std::string::npos) << banner;
}

}  // namespace
}  // namespace kvserve
