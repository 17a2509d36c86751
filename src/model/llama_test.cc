#include "model/llama.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/kernels.h"
#include "tensor/dtype.h"

namespace kvserve {
namespace {

ModelConfig SmallConfig() {
  ModelConfig c;
  c.name = "test";
  c.vocab_size = 64;
  c.hidden_dim = 32;
  c.ffn_dim = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.max_seq_len = 128;
  c.rope.head_dim = 8;
  c.tied_embeddings = true;
  return c;
}

Tensor RandomTensor(std::mt19937* rng, std::vector<int64_t> shape, float scale, float offset = 0,
                    DType dtype = DType::kF32) {
  Tensor f = Tensor::Allocate(DType::kF32, shape);
  std::uniform_real_distribution<float> dist(-scale, scale);
  auto* p = static_cast<float*>(f.mutable_data());
  for (int64_t i = 0; i < f.num_elements(); ++i) p[i] = offset + dist(*rng);
  if (dtype == DType::kF32) return f;
  Tensor t = Tensor::Allocate(dtype, shape);
  for (int64_t r = 0; r < f.rows(); ++r) {
    QuantizeRow(dtype, p + r * f.cols(), const_cast<void*>(t.row(r)), f.cols());
  }
  return t;
}

// Random weights of the config's shapes (norms near 1 so activations stay moderate).
LoadedModel RandomModel(const ModelConfig& c, uint32_t seed, DType dtype = DType::kF32) {
  std::mt19937 rng(seed);
  LoadedModel m;
  m.config = c;
  m.format = "test";
  const int64_t D = c.hidden_dim, q_dim = c.num_heads * c.head_dim,
                kv_dim = c.num_kv_heads * c.head_dim;
  m.tensors["token_embd.weight"] = RandomTensor(&rng, {c.vocab_size, D}, 1.0f, 0, dtype);
  if (!c.tied_embeddings) {
    m.tensors["output.weight"] = RandomTensor(&rng, {c.vocab_size, D}, 0.3f, 0, dtype);
  }
  m.tensors["output_norm.weight"] = RandomTensor(&rng, {D}, 0.2f, 1.0f);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    m.tensors[p + "attn_norm.weight"] = RandomTensor(&rng, {D}, 0.2f, 1.0f);
    m.tensors[p + "ffn_norm.weight"] = RandomTensor(&rng, {D}, 0.2f, 1.0f);
    m.tensors[p + "attn_q.weight"] = RandomTensor(&rng, {q_dim, D}, 0.3f, 0, dtype);
    m.tensors[p + "attn_k.weight"] = RandomTensor(&rng, {kv_dim, D}, 0.3f, 0, dtype);
    m.tensors[p + "attn_v.weight"] = RandomTensor(&rng, {kv_dim, D}, 0.3f, 0, dtype);
    m.tensors[p + "attn_output.weight"] = RandomTensor(&rng, {D, q_dim}, 0.3f, 0, dtype);
    m.tensors[p + "ffn_gate.weight"] = RandomTensor(&rng, {c.ffn_dim, D}, 0.3f, 0, dtype);
    m.tensors[p + "ffn_up.weight"] = RandomTensor(&rng, {c.ffn_dim, D}, 0.3f, 0, dtype);
    m.tensors[p + "ffn_down.weight"] = RandomTensor(&rng, {D, c.ffn_dim}, 0.3f, 0, dtype);
    if (c.qkv_bias) {
      m.tensors[p + "attn_q.bias"] = RandomTensor(&rng, {q_dim}, 0.3f);
      m.tensors[p + "attn_k.bias"] = RandomTensor(&rng, {kv_dim}, 0.3f);
      m.tensors[p + "attn_v.bias"] = RandomTensor(&rng, {kv_dim}, 0.3f);
    }
  }
  return m;
}

std::unique_ptr<LlamaModel> MustCreate(LoadedModel m) {
  auto model = LlamaModel::Create(std::move(m));
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? std::move(model).value() : nullptr;
}

const std::vector<TokenId> kTokens = {1, 17, 5, 63, 0, 42, 42, 9, 30};

// Logits of every token, computed one token at a time.
std::vector<float> StepwiseLogits(LlamaModel* model, const std::vector<TokenId>& tokens,
                                  ThreadPool* pool) {
  const int64_t V = model->config().vocab_size;
  auto cache = model->NewCache(64);
  std::vector<float> out(tokens.size() * V);
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_TRUE(model->Forward({tokens[i]}, cache.get(), pool, out.data() + i * V).ok());
  }
  EXPECT_EQ(cache->num_tokens(), static_cast<int64_t>(tokens.size()));
  return out;
}

void ExpectBatchedMatchesStepwise(const ModelConfig& c, ThreadPool* pool) {
  auto model = MustCreate(RandomModel(c, 7));
  ASSERT_NE(model, nullptr);
  const int64_t V = c.vocab_size;
  const int64_t n = static_cast<int64_t>(kTokens.size());
  std::vector<float> stepwise = StepwiseLogits(model.get(), kTokens, pool);

  // One batch, all logits.
  auto cache = model->NewCache(64);
  std::vector<float> batched(n * V);
  ASSERT_TRUE(model->Forward(kTokens, cache.get(), pool, batched.data(), true).ok());
  for (int64_t i = 0; i < n * V; ++i) ASSERT_NEAR(batched[i], stepwise[i], 1e-4) << "at " << i;

  // Two chunks (4 + 5), last logits only.
  cache->Clear();
  std::vector<float> last(V);
  std::vector<TokenId> first(kTokens.begin(), kTokens.begin() + 4);
  std::vector<TokenId> rest(kTokens.begin() + 4, kTokens.end());
  ASSERT_TRUE(model->Forward(first, cache.get(), pool, last.data()).ok());
  for (int64_t j = 0; j < V; ++j) ASSERT_NEAR(last[j], stepwise[3 * V + j], 1e-4);
  ASSERT_TRUE(model->Forward(rest, cache.get(), pool, last.data()).ok());
  for (int64_t j = 0; j < V; ++j) ASSERT_NEAR(last[j], stepwise[(n - 1) * V + j], 1e-4);
  EXPECT_EQ(cache->num_tokens(), n);
}

TEST(LlamaModelTest, BatchedForwardEqualsTokenByToken) {
  ExpectBatchedMatchesStepwise(SmallConfig(), nullptr);
}

TEST(LlamaModelTest, BatchedEqualsStepwiseThreadedQwenStyle) {
  ModelConfig c = SmallConfig();
  c.qkv_bias = true;
  c.rope.layout = RopeLayout::kNeox;
  c.rope.theta = 1e6f;
  c.tied_embeddings = false;
  ThreadPool pool(2);
  ExpectBatchedMatchesStepwise(c, &pool);
}

TEST(LlamaModelTest, HeadDimDifferentFromHiddenOverHeads) {
  ModelConfig c = SmallConfig();
  c.head_dim = 16;  // heads * head_dim = 64 != hidden 32
  c.rope.head_dim = 16;
  c.num_kv_heads = 1;
  ExpectBatchedMatchesStepwise(c, nullptr);
}

TEST(LlamaModelTest, Q8WeightsBatchedEqualsStepwise) {
  ModelConfig c = SmallConfig();
  c.ffn_dim = 64;  // Q8_0 rows must be whole 32-value blocks
  auto model = MustCreate(RandomModel(c, 3, DType::kQ8_0));
  ASSERT_NE(model, nullptr);
  std::vector<float> stepwise = StepwiseLogits(model.get(), kTokens, nullptr);
  auto cache = model->NewCache(16);
  std::vector<float> batched(kTokens.size() * c.vocab_size);
  ASSERT_TRUE(model->Forward(kTokens, cache.get(), nullptr, batched.data(), true).ok());
  for (size_t i = 0; i < batched.size(); ++i) ASSERT_NEAR(batched[i], stepwise[i], 1e-4);
}

// The paged path (block size 3, chunks of 4 + 5 with all logits) equals the dense path; and
// K/V channel normalization with arbitrary means and scales leaves the logits unchanged
// (softmax ignores the key shift; the model folds the key scales into q and maps the value
// output back).
TEST(LlamaModelTest, PagedForwardEqualsDenseAndCenteringIsExact) {
  ModelConfig c = SmallConfig();
  c.qkv_bias = true;
  auto model = MustCreate(RandomModel(c, 5));
  ASSERT_NE(model, nullptr);
  const int64_t V = c.vocab_size, n = static_cast<int64_t>(kTokens.size());
  const std::vector<float> dense = StepwiseLogits(model.get(), kTokens, nullptr);
  for (bool centered : {false, true}) {
    const KvCacheSpec spec = model->kv_spec(DType::kF32, 3);
    auto storage = KvStorage::Create(spec, 5);
    ASSERT_TRUE(storage.ok());
    if (centered) {
      std::mt19937 rng(3);
      std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
      const size_t n_ch = static_cast<size_t>(c.num_layers * c.num_kv_heads * c.head_dim);
      KvStorage::ChannelNorm norm;
      for (auto* vec : {&norm.k_mean, &norm.v_mean}) {
        for (size_t i = 0; i < n_ch; ++i) vec->push_back(dist(rng));
      }
      for (auto* vec : {&norm.k_scale, &norm.v_scale}) {
        for (size_t i = 0; i < n_ch; ++i) vec->push_back(0.25f + std::fabs(dist(rng)));
      }
      ASSERT_TRUE((*storage)->SetChannelNorm(norm).ok());
    }
    BlockTable table(3);
    table.append_blocks({4, 0, 2});  // non-contiguous placement, 9 slots
    std::vector<float> logits(n * V);
    ForwardBatch first;
    first.AddSequence(kTokens.data(), 4, 0, table, true);
    ASSERT_TRUE(model->Forward(first, storage->get(), nullptr, logits.data()).ok());
    table.set_num_tokens(4);
    ForwardBatch rest;
    rest.AddSequence(kTokens.data() + 4, n - 4, 4, table, true);
    ASSERT_TRUE(model->Forward(rest, storage->get(), nullptr, logits.data() + 4 * V).ok());
    for (int64_t i = 0; i < n * V; ++i) {
      ASSERT_NEAR(logits[i], dense[i], 1e-4) << "centered=" << centered << " at " << i;
    }
  }
}

// StreamingLLM's re-rotation: a key stored for position p, shifted by d, reads back as the key
// stored for position p + d, with and without channel normalization, in f32 and int8.
TEST(LlamaModelTest, ShiftStoredKeysEqualsWritingAtTheNewPosition) {
  const ModelConfig c = SmallConfig();
  auto model = MustCreate(RandomModel(c, 11));
  ASSERT_NE(model, nullptr);
  const int64_t kv_dim = c.num_kv_heads * c.head_dim;
  const std::vector<float> inv_freqs = RopeInvFreqs(c.rope);
  for (DType dtype : {DType::kF32, DType::kI8}) {
    for (bool centered : {false, true}) {
      auto storage = KvStorage::Create(model->kv_spec(dtype, 4), 4);
      ASSERT_TRUE(storage.ok());
      KvStorage& kv = **storage;
      std::mt19937 rng(5);
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      if (centered) {
        const size_t n_ch = static_cast<size_t>(c.num_layers * kv_dim);
        KvStorage::ChannelNorm norm;
        for (auto* vec : {&norm.k_mean, &norm.v_mean}) {
          for (size_t i = 0; i < n_ch; ++i) vec->push_back(dist(rng));
        }
        for (auto* vec : {&norm.k_scale, &norm.v_scale}) {
          for (size_t i = 0; i < n_ch; ++i) vec->push_back(0.5f + std::fabs(dist(rng)));
        }
        ASSERT_TRUE(kv.SetChannelNorm(norm).ok());
      }
      // Slots 0..3 get keys of positions 40, 41, 7, 100; slots 8..11 the same keys at the
      // shifted positions.
      const int64_t positions[4] = {40, 41, 7, 100};
      const int64_t deltas[4] = {-36, -36, 0, 25};
      for (int64_t i = 0; i < 4; ++i) {
        std::vector<float> k(static_cast<size_t>(kv_dim)), v(static_cast<size_t>(kv_dim));
        for (float& x : k) x = dist(rng);
        for (float& x : v) x = dist(rng);
        std::vector<float> k_new = k;
        kernels::Rope(k.data(), c.num_kv_heads, c.head_dim, positions[i], inv_freqs,
                      c.rope.layout);
        kernels::Rope(k_new.data(), c.num_kv_heads, c.head_dim, positions[i] + deltas[i],
                      inv_freqs, c.rope.layout);
        const int64_t slot = i, shifted_slot = 8 + i;
        for (int64_t l = 0; l < c.num_layers; ++l) {
          kv.Write(l, &slot, 1, k.data(), v.data());
          kv.Write(l, &shifted_slot, 1, k_new.data(), v.data());
        }
      }
      const int64_t slots[4] = {0, 1, 2, 3};
      ASSERT_TRUE(model->ShiftStoredKeys(&kv, slots, deltas, 4).ok());
      const float tolerance = dtype == DType::kF32 ? 1e-5f : 0.06f;
      std::vector<float> k_got(kv_dim), v_got(kv_dim), k_want(kv_dim), v_want(kv_dim);
      for (int64_t l = 0; l < c.num_layers; ++l) {
        for (int64_t i = 0; i < 4; ++i) {
          kv.ReadSlot(l, i, k_got.data(), v_got.data());
          kv.ReadSlot(l, 8 + i, k_want.data(), v_want.data());
          for (int64_t d = 0; d < kv_dim; ++d) {
            ASSERT_NEAR(k_got[d], k_want[d], tolerance)
                << DTypeName(dtype) << " centered=" << centered << " layer " << l << " slot "
                << i << " dim " << d;
            ASSERT_NEAR(v_got[d], v_want[d], tolerance) << "values are kept";
          }
        }
      }
      EXPECT_FALSE(model->ShiftStoredKeys(nullptr, slots, deltas, 4).ok());
      const int64_t outside[1] = {kv.num_slots()};
      EXPECT_EQ(model->ShiftStoredKeys(&kv, outside, deltas, 1).code(), StatusCode::kOutOfRange);
    }
  }
}

TEST(LlamaModelTest, PagedForwardRejectsBadBatches) {
  auto model = MustCreate(RandomModel(SmallConfig(), 5));
  ASSERT_NE(model, nullptr);
  const int64_t V = SmallConfig().vocab_size;
  std::vector<float> logits(4 * V);
  auto storage = KvStorage::Create(model->kv_spec(DType::kF32, 4), 2);
  ASSERT_TRUE(storage.ok());
  BlockTable table(4);
  table.append_blocks({1});
  ForwardBatch batch;
  batch.AddSequence({1, 2}, table);
  ForwardBatch bad = batch;
  bad.token_ids[0] = static_cast<TokenId>(V);  // out of the vocabulary
  EXPECT_EQ(model->Forward(bad, storage->get(), nullptr, logits.data()).code(),
            StatusCode::kOutOfRange);
  bad = batch;
  bad.slot_mapping[1] = 0;
  EXPECT_FALSE(model->Forward(bad, storage->get(), nullptr, logits.data()).ok());
  // Another geometry.
  KvCacheSpec wider = model->kv_spec(DType::kF32, 4);
  wider.head_dim *= 2;
  auto other = KvStorage::Create(wider, 2);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(model->Forward(batch, other->get(), nullptr, logits.data()).ok());
  // fp8 without scales.
  auto fp8 = KvStorage::Create(model->kv_spec(DType::kFp8E4M3, 4), 2);
  ASSERT_TRUE(fp8.ok());
  EXPECT_EQ(model->Forward(batch, fp8->get(), nullptr, logits.data()).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(model->Forward(batch, storage->get(), nullptr, logits.data()).ok());
}

// A GQA model equals the MHA model whose K/V projections repeat each kv head for its group.
TEST(LlamaModelTest, GqaEqualsExpandedMha) {
  ModelConfig gqa_config = SmallConfig();  // 4 heads, 2 kv heads
  LoadedModel gqa = RandomModel(gqa_config, 11);
  ModelConfig mha_config = gqa_config;
  mha_config.num_kv_heads = gqa_config.num_heads;
  LoadedModel mha = gqa;
  mha.config = mha_config;
  const int64_t hd = gqa_config.head_dim, D = gqa_config.hidden_dim;
  const int64_t group = gqa_config.num_heads / gqa_config.num_kv_heads;
  for (int64_t l = 0; l < gqa_config.num_layers; ++l) {
    for (const char* w : {"attn_k.weight", "attn_v.weight"}) {
      const std::string name = "blk." + std::to_string(l) + "." + w;
      const Tensor& src = gqa.tensors[name];
      Tensor dst = Tensor::Allocate(DType::kF32, {mha_config.num_heads * hd, D});
      for (int64_t h = 0; h < mha_config.num_heads; ++h) {
        std::memcpy(static_cast<float*>(dst.mutable_data()) + h * hd * D,
                    static_cast<const float*>(src.data) + (h / group) * hd * D,
                    hd * D * sizeof(float));
      }
      mha.tensors[name] = dst;
    }
  }
  auto gqa_model = MustCreate(std::move(gqa));
  auto mha_model = MustCreate(std::move(mha));
  ASSERT_NE(gqa_model, nullptr);
  ASSERT_NE(mha_model, nullptr);
  std::vector<float> a = StepwiseLogits(gqa_model.get(), kTokens, nullptr);
  std::vector<float> b = StepwiseLogits(mha_model.get(), kTokens, nullptr);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5);
}

TEST(LlamaModelTest, CreateRejectsWrongShapesAndMissingTensors) {
  ModelConfig c = SmallConfig();
  {
    LoadedModel m = RandomModel(c, 1);
    m.tensors["blk.1.attn_k.weight"] = Tensor::Allocate(DType::kF32, {32, 32});
    auto r = LlamaModel::Create(std::move(m));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("blk.1.attn_k.weight"), std::string::npos);
  }
  {
    LoadedModel m = RandomModel(c, 1);
    m.tensors.erase("blk.0.ffn_down.weight");
    auto r = LlamaModel::Create(std::move(m));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  }
  {
    LoadedModel m = RandomModel(c, 1);
    m.tensors["output_norm.weight"] = Tensor::Allocate(DType::kF32, {31});
    EXPECT_FALSE(LlamaModel::Create(std::move(m)).ok());
  }
  {
    LoadedModel m = RandomModel(c, 1);
    m.tensors["blk.0.ffn_norm.weight"] = Tensor::Allocate(DType::kI32, {32});
    EXPECT_FALSE(LlamaModel::Create(std::move(m)).ok());
  }
  {
    LoadedModel m = RandomModel(c, 1);  // tied: no output.weight
    m.config.tied_embeddings = false;
    EXPECT_FALSE(LlamaModel::Create(std::move(m)).ok());
  }
  {
    ModelConfig q = c;
    q.qkv_bias = true;
    LoadedModel m = RandomModel(c, 1);  // built without biases
    m.config = q;
    EXPECT_FALSE(LlamaModel::Create(std::move(m)).ok());
  }
  {
    LoadedModel m = RandomModel(c, 1);
    m.config.num_kv_heads = 3;  // 4 heads not divisible by 3
    EXPECT_FALSE(LlamaModel::Create(std::move(m)).ok());
  }
}

TEST(LlamaModelTest, ForwardRejectsBadInputsAndLeavesCacheUnchanged) {
  auto model = MustCreate(RandomModel(SmallConfig(), 5));
  ASSERT_NE(model, nullptr);
  auto cache = model->NewCache(4);
  std::vector<float> logits(64);
  ASSERT_TRUE(model->Forward({1, 2}, cache.get(), nullptr, logits.data()).ok());
  EXPECT_EQ(model->Forward({64}, cache.get(), nullptr, logits.data()).code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(model->Forward({-1}, cache.get(), nullptr, logits.data()).code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(model->Forward({1, 2, 3}, cache.get(), nullptr, logits.data()).code(),
            StatusCode::kOutOfRange);
  EXPECT_FALSE(model->Forward({}, cache.get(), nullptr, logits.data()).ok());
  EXPECT_EQ(cache->num_tokens(), 2);
  DenseKvCache other(1, 4, 16);
  EXPECT_FALSE(model->Forward({1}, &other, nullptr, logits.data()).ok());
  EXPECT_TRUE(model->Forward({3, 4}, cache.get(), nullptr, logits.data()).ok());
  EXPECT_EQ(cache->num_tokens(), 4);
  cache->Truncate(1);
  EXPECT_EQ(cache->num_tokens(), 1);
  cache->Clear();
  EXPECT_EQ(cache->num_tokens(), 0);
}

TEST(ModelConfigTest, ValidateAndNumParameters) {
  ModelConfig c = SmallConfig();
  EXPECT_TRUE(c.Validate().ok());
  // embd 64*32, per layer 2*32 + 32*32 + 2*16*32 + 32*32 + 3*48*32, final norm 32.
  EXPECT_EQ(c.NumParameters(), 64 * 32 + 2 * (64 + 1024 + 1024 + 1024 + 4608) + 32);
  c.tied_embeddings = false;
  EXPECT_EQ(c.NumParameters(), 2 * 64 * 32 + 2 * (64 + 1024 + 1024 + 1024 + 4608) + 32);
  ModelConfig bad = SmallConfig();
  bad.num_layers = 0;
  EXPECT_FALSE(bad.Validate().ok());
  bad = SmallConfig();
  bad.vocab_size = int64_t{1} << 40;
  EXPECT_FALSE(bad.Validate().ok());
  bad = SmallConfig();
  bad.num_kv_heads = 3;
  EXPECT_FALSE(bad.Validate().ok());
  bad = SmallConfig();
  bad.norm_eps = NAN;
  EXPECT_FALSE(bad.Validate().ok());
  bad = SmallConfig();
  bad.rope.head_dim = 4;
  EXPECT_FALSE(bad.Validate().ok());
}

}  // namespace
}  // namespace kvserve
