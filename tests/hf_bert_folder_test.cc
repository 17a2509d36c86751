// A Hugging Face BertModel folder with the real all-MiniLM-L6-v2 files (config.json,
// tokenizer.json, modules.json and its Pooling config, from ../shared/assets) and synthetic
// weights of that shape: it loads as a mean-pooling encoder with the real WordPiece
// vocabulary, embeds 20 texts like the same weights read from GGUF with llama.cpp's
// vocabulary (ggml-vocab-bert-bge.gguf), and converts to a GGUF that embeds the same.
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "base/testing/test_dependency.h"
#include "model/gguf.h"
#include "model/gguf_vocab.h"
#include "model/hf_test_util.h"
#include "model/model_loader.h"
#include "runtime/embedder.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

const std::string kAssets = KVSERVE_ASSETS_DIR;

const std::vector<std::string> kTexts = {
    "How do I reset my password?", "What is the refund window for EU orders?",
    "What is the refund window for US orders?", "Cancel my card, please.",
    "Close my investment account.", "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, there was a little girl named Lily.", "Paris is the capital of France.",
    "I do not want the premium plan.", "I want the premium plan.",
    "Schedule a meeting for 3 pm tomorrow.", "Schedule a meeting for 4 pm tomorrow.",
    "naïve café résumé", "Tokenization splits words into pieces like un##believable.",
    "email me at someone@example.com", "1234567890", "What's the weather in Berlin?",
    "Translate 'good morning' into German.", "kvserve serves embeddings over HTTP.",
    "A very long sentence that keeps going and going, with many commas, clauses and words."};

double Cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  return dot / std::sqrt(na * nb);
}

std::vector<std::vector<float>> EmbedAll(LoadedModel model, std::vector<std::vector<TokenId>>* ids) {
  Embedder::Options eo;
  eo.threads = 2;
  auto e = Embedder::Create(std::move(model), eo);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (!e.ok()) return {};
  ids->clear();
  for (const std::string& t : kTexts) ids->push_back(*(*e)->Tokenize(t, EmbedTruncation::kError));
  auto out = (*e)->Embed(*ids);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? *out : std::vector<std::vector<float>>{};
}

TEST(HfBertFolder, RealAllMiniLmFilesWithSyntheticWeights) {
  const std::string src = kAssets + "/tokenizers/all-MiniLM-L6-v2";
  const std::string bge = kAssets + "/tokenizers/ggml-vocab-bert-bge.gguf";
  KVSERVE_SKIP_IF_ABSENT(fs::exists(src + "/tokenizer.json") && fs::exists(bge),
                         src << " and " << bge);
  auto vocab_file = GgufFile::Open(bge);
  ASSERT_TRUE(vocab_file.ok());
  auto vocab = VocabSpecFromGguf(**vocab_file);
  ASSERT_TRUE(vocab.ok());
  SyntheticModelOptions so;
  so.preset = "all-minilm-l6-v2";
  so.dtype = DType::kF16;
  so.seed = 9;
  so.vocab = *vocab;
  auto synthetic = MakeSyntheticModel(so);
  ASSERT_TRUE(synthetic.ok()) << synthetic.status().ToString();

  // The folder: synthetic weights under BertModel's names, then the real files over the
  // written ones (the Pooling config where modules.json says, 1_Pooling/).
  const fs::path dir = fs::temp_directory_path() / ("kvserve_hf_bert_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  testing::WriteHfBertFolder(dir.string(), *synthetic);
  fs::remove(dir / "vocab.txt");
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "modules.json"}) {
    fs::copy_file(src + "/" + f, dir / f, fs::copy_options::overwrite_existing);
  }
  fs::copy_file(src + "/1_Pooling_config.json", dir / "1_Pooling" / "config.json",
                fs::copy_options::overwrite_existing);

  auto hf = LoadModel(dir.string());
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  EXPECT_EQ(hf->config.pooling, PoolingType::kMean);
  EXPECT_EQ(hf->config.num_layers, 6);
  EXPECT_EQ(hf->config.hidden_dim, 384);
  EXPECT_EQ(hf->config.max_seq_len, 512);
  ASSERT_TRUE(hf->vocab.has_value());
  EXPECT_EQ(hf->vocab->tokens, vocab->tokens);

  // The HF folder converted to GGUF, as `kvserve convert` does.
  const std::string gguf = (dir / "converted.gguf").string();
  ASSERT_TRUE(SaveGgufModel(*hf, gguf, {}).ok());
  auto reloaded = LoadModel(gguf);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status().ToString();
  EXPECT_EQ(reloaded->config.pooling, PoolingType::kMean);

  std::vector<std::vector<TokenId>> ids_hf, ids_gguf, ids_synthetic;
  const auto from_hf = EmbedAll(std::move(hf).value(), &ids_hf);
  const auto from_gguf = EmbedAll(std::move(reloaded).value(), &ids_gguf);
  const auto from_synthetic = EmbedAll(std::move(synthetic).value(), &ids_synthetic);
  ASSERT_EQ(from_hf.size(), kTexts.size());
  ASSERT_EQ(from_gguf.size(), kTexts.size());
  ASSERT_EQ(from_synthetic.size(), kTexts.size());
  EXPECT_EQ(ids_hf, ids_synthetic);
  EXPECT_EQ(ids_gguf, ids_synthetic);
  EXPECT_EQ(ids_hf[5].front(), 101);
  EXPECT_EQ(ids_hf[5].back(), 102);
  for (size_t i = 0; i < kTexts.size(); ++i) {
    EXPECT_GT(Cosine(from_hf[i], from_synthetic[i]), 0.999999) << kTexts[i];
    EXPECT_GT(Cosine(from_gguf[i], from_synthetic[i]), 0.999999) << kTexts[i];
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvserve
