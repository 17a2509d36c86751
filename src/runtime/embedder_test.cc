// Embedder against BertModel called directly: the same embeddings whatever the batching,
// [CLS] text [SEP] tokenization, truncation rules, L2 normalisation, concurrent callers, errors.
#include "runtime/embedder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "model/synthetic.h"

namespace kvserve {
namespace {

LoadedModel TinyBert() {
  SyntheticModelOptions o;
  o.preset = "bert-tiny";  // 32 positions, 300 WordPiece tokens
  o.seed = 5;
  auto m = MakeSyntheticModel(o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

std::unique_ptr<Embedder> MakeEmbedder(int64_t max_batch_tokens, int threads = 2) {
  Embedder::Options o;
  o.threads = threads;
  o.max_batch_tokens = max_batch_tokens;
  auto e = Embedder::Create(TinyBert(), o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

const std::vector<std::string> kTexts = {
    "the cat sat on the mat", "refund window for eu orders", "a", "how do i cancel my card?",
    "one two three four five"};

TEST(EmbedderTest, MatchesBertModelWhateverTheBatching) {
  auto one_batch = MakeEmbedder(4096);
  auto small_batches = MakeEmbedder(32);  // one sequence per BertModel call
  std::vector<std::vector<TokenId>> inputs;
  for (const std::string& t : kTexts) {
    auto ids = one_batch->Tokenize(t, EmbedTruncation::kError);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    inputs.push_back(*ids);
  }
  auto a = one_batch->Embed(inputs);
  auto b = small_batches->Embed(inputs);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), kTexts.size());

  // Reference: BertModel on each sequence alone, normalised.
  BertModel::Options bo;
  bo.normalize = true;
  auto bert = BertModel::Create(TinyBert(), bo);
  ASSERT_TRUE(bert.ok());
  ThreadPool pool(1);
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<float> ref(static_cast<size_t>((*bert)->dim()));
    const std::vector<int64_t> starts = {0, static_cast<int64_t>(inputs[i].size())};
    ASSERT_TRUE((*bert)->Embed(inputs[i], starts, &pool, ref.data()).ok());
    double norm = 0;
    for (size_t d = 0; d < ref.size(); ++d) {
      EXPECT_NEAR((*a)[i][d], ref[d], 1e-5) << "input " << i << " dim " << d;
      EXPECT_NEAR((*b)[i][d], ref[d], 1e-5) << "input " << i << " dim " << d;
      norm += static_cast<double>((*a)[i][d]) * (*a)[i][d];
    }
    EXPECT_NEAR(norm, 1.0, 1e-5);
  }
  auto one = one_batch->EmbedText(kTexts[1], EmbedTruncation::kError);
  ASSERT_TRUE(one.ok());
  for (size_t d = 0; d < one->size(); ++d) EXPECT_NEAR((*one)[d], (*a)[1][d], 1e-5);
}

TEST(EmbedderTest, TokenizesAsLlamaCppAndTruncates) {
  auto e = MakeEmbedder(4096);
  const VocabSpec& spec = e->tokenizer().spec();
  auto ids = e->Tokenize("the cat", EmbedTruncation::kError);
  ASSERT_TRUE(ids.ok());
  ASSERT_GE(ids->size(), 3u);
  EXPECT_EQ(ids->front(), spec.cls_id != kNoToken ? spec.cls_id : spec.bos_id);
  EXPECT_EQ(ids->back(), spec.sep_id);

  std::string long_text;
  for (int i = 0; i < 60; ++i) long_text += "word" + std::to_string(i % 10) + " ";
  auto refused = e->Tokenize(long_text, EmbedTruncation::kError);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("at most 32"), std::string::npos)
      << refused.status().ToString();

  auto full = e->tokenizer().Encode(long_text, EncodeOptions{.add_bos = true, .parse_special = false});
  auto kept = e->Tokenize(long_text, EmbedTruncation::kKeepEnd);
  ASSERT_TRUE(kept.ok());
  ASSERT_EQ(kept->size(), 32u);
  EXPECT_EQ(kept->front(), full.front());
  EXPECT_TRUE(std::equal(kept->begin() + 1, kept->end(), full.end() - 31));
  EXPECT_TRUE(e->Embed({*kept}).ok());
  auto shorter = e->Tokenize(long_text, EmbedTruncation::kKeepEnd, 10);
  ASSERT_TRUE(shorter.ok());
  ASSERT_EQ(shorter->size(), 10u);
  EXPECT_TRUE(std::equal(shorter->begin() + 1, shorter->end(), full.end() - 9));
  EXPECT_FALSE(e->Tokenize(long_text, EmbedTruncation::kError, 10).ok());
}

TEST(EmbedderTest, ConcurrentCallersGetTheSameAnswers) {
  auto e = MakeEmbedder(64);
  auto expected = e->EmbedText(kTexts[0], EmbedTruncation::kError);
  ASSERT_TRUE(expected.ok());
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        auto got = e->EmbedText(kTexts[static_cast<size_t>(i) % 2 == 0 ? 0 : 3], EmbedTruncation::kError);
        if (!got.ok()) {
          ++mismatches[static_cast<size_t>(t)];
        } else if (i % 2 == 0 && *got != *expected) {
          ++mismatches[static_cast<size_t>(t)];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(EmbedderTest, StopsBetweenBatchesWhenCancelled) {
  auto e = MakeEmbedder(32);  // one input per batch
  std::vector<std::vector<TokenId>> inputs;
  for (const std::string& t : kTexts) inputs.push_back(*e->Tokenize(t, EmbedTruncation::kError));
  int asked = 0;
  auto out = e->Embed(inputs, [&] { return ++asked > 2; });
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(asked, 3);  // two batches ran, the third was not started
  EXPECT_TRUE(e->Embed(inputs, [] { return false; }).ok());
}

TEST(EmbedderTest, Errors) {
  auto e = MakeEmbedder(4096);
  EXPECT_FALSE(e->Embed({{}}).ok());                                   // empty input
  EXPECT_FALSE(e->Embed({{1, 2, 100000}}).ok());                        // outside the vocabulary
  EXPECT_FALSE(e->Embed({std::vector<TokenId>(33, 101)}).ok());         // too long
  EXPECT_TRUE(e->Embed({}).ok());                                       // nothing to do

  SyntheticModelOptions llama;
  llama.preset = "tiny";
  auto generator = MakeSyntheticModel(llama);
  ASSERT_TRUE(generator.ok());
  auto refused = Embedder::Create(std::move(generator).value(), {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("not an embedding model"), std::string::npos);
}

}  // namespace
}  // namespace kvserve
