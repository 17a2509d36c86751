// End-to-end oracle for the forward pass through the engine core: stories260K (a real trained
// Llama model in llama2.c format) must reproduce the greedy token ids of greedy_reference.json
// exactly, under llama2.c run.c semantics. Also measures the Q8_0 export's top-1 agreement with the f32 model, and
// checks that a GGUF round trip gives identical greedy tokens.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/testing/test_dependency.h"
#include "base/thread_pool.h"
#include "model/llama.h"
#include "model/model_loader.h"
#include "runtime/engine_core.h"
#include "kv/kv_storage.h"
#include "stories_reference.h"

namespace kvserve {
namespace {

using stories::Case;
using stories::kBos;
using stories::LoadCases;
using stories::StoriesDir;

TokenId Argmax(const float* x, int64_t n) {
  return static_cast<TokenId>(std::max_element(x, x + n) - x);  // first maximum, as run.c
}

std::unique_ptr<LlamaModel> Load(const std::string& file) {
  LoadOptions options;
  auto loaded = LoadModel(StoriesDir() + "/" + file, options);
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  if (!loaded.ok()) return nullptr;
  auto model = LlamaModel::Create(std::move(loaded).value());
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? std::move(model).value() : nullptr;
}

// run.c: position 0 is BOS; prompt tokens are forced; then greedy; stop when BOS is sampled;
// `steps` positions in all. Through an EngineCore over an f32 paged cache: with batch_prompt
// the whole prompt is one forward pass, else one token per step (as run.c).
std::vector<TokenId> Generate(LlamaModel* model, const Case& c, bool batch_prompt,
                              ThreadPool* pool) {
  PagedKvCache cache;
  cache.spec = model->kv_spec(DType::kF32, 16);
  cache.max_model_len = 512;
  cache.storage = std::move(KvStorage::Create(cache.spec, 32)).value();
  auto core = EngineCore::Create(stories::CaseEngineOptions(1, 512, batch_prompt ? 0 : 1), model,
                                 &cache, pool);
  EXPECT_TRUE(core.ok()) << core.status().ToString();
  if (!core.ok()) return {};
  auto outs = stories::RunCases(**core, {c});
  EXPECT_EQ((*core)->kv_manager().stats().blocks_in_use, 0);
  return outs.empty() ? std::vector<TokenId>{} : outs[0];
}

// Logits of every position of `seq` ([n, vocab]) as one scoring request.
std::vector<float> AllLogits(LlamaModel* model, const std::vector<TokenId>& seq) {
  PagedKvCache cache;
  cache.spec = model->kv_spec(DType::kF32, 16);
  cache.max_model_len = 512;
  cache.storage = std::move(KvStorage::Create(cache.spec, 32)).value();
  auto core = EngineCore::Create(stories::CaseEngineOptions(1, 512), model, &cache, nullptr);
  EXPECT_TRUE(core.ok()) << core.status().ToString();
  return core.ok() ? stories::ScoreAllPositions(**core, seq) : std::vector<float>{};
}

class StoriesGreedyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KVSERVE_SKIP_IF_ABSENT(std::filesystem::exists(StoriesDir() + "/stories260K.bin") &&
                               std::filesystem::exists(StoriesDir() + "/greedy_reference.json"),
                           "the stories260K assets under " << StoriesDir());
    cases_ = LoadCases();
    ASSERT_FALSE(cases_.empty());
  }
  std::vector<Case> cases_;
};

TEST_F(StoriesGreedyTest, F32TokenByTokenMatchesReference) {
  auto model = Load("stories260K.bin");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->loaded().format, "llama2c");
  EXPECT_TRUE(model->loaded().vocab.has_value()) << "tok512.bin beside the model not attached";
  for (size_t i = 0; i < cases_.size(); ++i) {
    EXPECT_EQ(Generate(model.get(), cases_[i], false, nullptr), cases_[i].ids_after_bos)
        << "case " << i;
  }
}

TEST_F(StoriesGreedyTest, F32BatchedPromptMatchesReference) {
  auto model = Load("stories260K.bin");
  ASSERT_NE(model, nullptr);
  ThreadPool pool(2);
  for (size_t i = 0; i < cases_.size(); ++i) {
    EXPECT_EQ(Generate(model.get(), cases_[i], true, &pool), cases_[i].ids_after_bos)
        << "case " << i;
  }
}

// Teacher-forced on the f32 reference sequence: the fraction of positions whose argmax under
// the Q8_0 export equals the f32 model's argmax.
TEST_F(StoriesGreedyTest, Q80TopOneAgreementWithF32) {
  KVSERVE_SKIP_IF_ABSENT(std::filesystem::exists(StoriesDir() + "/stories260K_q80.bin"),
                         StoriesDir() << "/stories260K_q80.bin");
  auto f32 = Load("stories260K.bin");
  auto q80 = Load("stories260K_q80.bin");
  ASSERT_NE(f32, nullptr);
  ASSERT_NE(q80, nullptr);
  EXPECT_EQ(q80->loaded().format, "llama2c-q80");
  const int64_t V = f32->config().vocab_size;
  int64_t agree = 0, total = 0;
  for (const Case& c : cases_) {
    std::vector<TokenId> seq = {kBos};
    seq.insert(seq.end(), c.ids_after_bos.begin(), c.ids_after_bos.end());
    seq.pop_back();  // the last id is produced, never fed
    const int64_t n = static_cast<int64_t>(seq.size());
    const std::vector<float> a = AllLogits(f32.get(), seq), b = AllLogits(q80.get(), seq);
    ASSERT_EQ(static_cast<int64_t>(a.size()), n * V);
    ASSERT_EQ(static_cast<int64_t>(b.size()), n * V);
    for (int64_t i = 0; i < n; ++i) {
      agree += Argmax(a.data() + i * V, V) == Argmax(b.data() + i * V, V);
      ++total;
    }
  }
  const double agreement = static_cast<double>(agree) / total;
  std::printf("stories260K Q8_0 vs f32 top-1 agreement: %.4f (%lld / %lld positions)\n",
              agreement, static_cast<long long>(agree), static_cast<long long>(total));
  RecordProperty("q80_top1_agreement", std::to_string(agreement));
  EXPECT_GE(agreement, 0.9);
}

TEST_F(StoriesGreedyTest, GgufRoundTripGivesIdenticalGreedyTokens) {
  auto loaded = LoadModel(StoriesDir() + "/stories260K.bin");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("stories260K_roundtrip_" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  Status saved = SaveGgufModel(*loaded, path);
  ASSERT_TRUE(saved.ok()) << saved.ToString();
  auto reloaded = LoadGgufModel(path, {});
  std::filesystem::remove(path);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status().ToString();
  EXPECT_EQ(reloaded->config.num_kv_heads, 4);
  EXPECT_EQ(reloaded->config.rope.layout, RopeLayout::kInterleaved);
  auto model = LlamaModel::Create(std::move(reloaded).value());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (size_t i = 0; i < cases_.size(); ++i) {
    EXPECT_EQ(Generate(model->get(), cases_[i], true, nullptr), cases_[i].ids_after_bos)
        << "case " << i;
  }
}

}  // namespace
}  // namespace kvserve
