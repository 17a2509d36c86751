// GenerateBatch on the synthetic "tiny" model: every request's whole output in input order,
// each equal to the request run alone, the summary's counts, and a refused input.
#include "runtime/batch_generate.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kv/kv_storage.h"
#include "model/synthetic.h"

namespace kvserve {
namespace {

TEST(GenerateBatchTest, GathersEveryRequestInOrder) {
  SyntheticModelOptions mo;
  mo.preset = "tiny";
  mo.seed = 5;
  auto loaded = MakeSyntheticModel(mo);
  ASSERT_TRUE(loaded.ok());
  auto model = LlamaModel::Create(std::move(loaded).value());
  ASSERT_TRUE(model.ok());
  const int64_t V = (*model)->config().vocab_size;
  PagedKvCache cache;
  cache.spec = (*model)->kv_spec(DType::kF32, 16);
  cache.max_model_len = 128;
  cache.storage = std::move(KvStorage::Create(cache.spec, 64)).value();
  ThreadPool pool(2);
  EngineOptions eo;
  eo.check_invariants = true;
  eo.scheduler.max_model_len = 128;
  eo.scheduler.max_num_seqs = 4;
  auto engine = Engine::Create(eo, model->get(), &cache, &pool);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();

  std::vector<RequestInput> inputs;
  for (int i = 0; i < 5; ++i) {
    RequestInput in;
    in.prompt_ids = SyntheticTokenIds(3 + 7 * i, V);
    in.max_tokens = 2 + i;
    in.sampling.temperature = 0.0f;
    in.ignore_eos = true;
    inputs.push_back(in);
  }
  EXPECT_EQ(BatchKvBlocks(cache, inputs), 1 + 1 + 2 + 2 + 3);  // prompt + output per request
  auto batch = GenerateBatch(**engine, inputs);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->outputs.size(), 5u);
  int64_t total_prompt = 0, total_output = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const BatchOutput& out = batch->outputs[i];
    EXPECT_EQ(out.finish_reason, FinishReason::kLength);
    EXPECT_EQ(static_cast<int64_t>(out.token_ids.size()), inputs[i].max_tokens);
    EXPECT_GT(out.ttft_ms, 0.0);
    // The same tokens alone.
    auto alone = GenerateBatch(**engine, {inputs[i]});
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ(alone->outputs[0].token_ids, out.token_ids) << "request " << i;
    total_prompt += static_cast<int64_t>(inputs[i].prompt_ids.size());
    total_output += inputs[i].max_tokens;
  }
  const BatchSummary& s = batch->summary;
  EXPECT_EQ(s.num_requests, 5);
  EXPECT_EQ(s.total_prompt_tokens, total_prompt);
  EXPECT_EQ(s.total_output_tokens, total_output);
  EXPECT_EQ(s.num_failed, 0);
  EXPECT_GT(s.num_steps, 0);
  EXPECT_GT(s.output_tokens_per_s, 0.0);
  EXPECT_GE(s.max_num_running, 2);  // they ran side by side
  EXPECT_LE(s.max_num_running, 5);

  inputs[3].prompt_ids.clear();  // refused: the error names it
  auto bad = GenerateBatch(**engine, inputs);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("request 3"), std::string::npos) << bad.status().message();
  EXPECT_EQ((*engine)->wait_until_idle().blocks_in_use, 0);
}

}  // namespace
}  // namespace kvserve
