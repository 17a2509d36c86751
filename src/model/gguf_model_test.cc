#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/testing/test_dependency.h"
#include "model/gguf.h"
#include "model/hf_test_util.h"
#include "model/llama.h"
#include "model/model_loader.h"
#include "model/synthetic.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

class GgufModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvserve_ggufm_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

void ExpectSameConfig(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_dim, b.hidden_dim);
  EXPECT_EQ(a.ffn_dim, b.ffn_dim);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_FLOAT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_FLOAT_EQ(a.rope.theta, b.rope.theta);
  EXPECT_EQ(a.rope.scaling, b.rope.scaling);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
}

TEST_F(GgufModelTest, SyntheticTinyRoundTripsInEveryDtype) {
  const std::vector<std::pair<DType, int64_t>> dtypes = {
      {DType::kF32, 0}, {DType::kF16, 1}, {DType::kQ8_0, 7}, {DType::kBF16, 32}};
  for (const auto& [dtype, ftype] : dtypes) {
    SCOPED_TRACE(DTypeName(dtype));
    auto m = MakeSyntheticModel({.preset = "tiny", .dtype = dtype, .seed = 3});
    ASSERT_TRUE(m.ok());
    m->chat_template = "{{ messages }}";
    const std::string p = path(std::string("tiny-") + DTypeName(dtype) + ".gguf");
    Status st = SaveGgufModel(*m, p);
    ASSERT_TRUE(st.ok()) << st.ToString();

    auto file = GgufFile::Open(p);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_EQ(*(*file)->GetString("general.architecture"), "llama");
    EXPECT_EQ(*(*file)->GetInt("general.file_type"), ftype);
    EXPECT_EQ(*(*file)->GetInt("llama.block_count"), 4);
    EXPECT_EQ(*(*file)->GetString("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ((*file)->tensors().front().name, "token_embd.weight");

    auto r = LoadGgufModel(p, {});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->format, "gguf");
    EXPECT_EQ(r->chat_template, "{{ messages }}");
    ExpectSameConfig(r->config, m->config);
    EXPECT_EQ(r->config.rope.layout, RopeLayout::kInterleaved);
    ASSERT_EQ(r->tensors.size(), m->tensors.size());
    for (const auto& [name, t] : m->tensors) {
      const Tensor& u = r->tensors.at(name);
      EXPECT_EQ(u.dtype, t.dtype) << name;
      EXPECT_EQ(u.shape, t.shape) << name;
      EXPECT_EQ(std::memcmp(u.data, t.data, t.num_bytes()), 0) << name;
    }
    // Big tensors are views of the file mapping.
    EXPECT_NE(r->tensors.at("token_embd.weight").data, m->tensors.at("token_embd.weight").data);
    ASSERT_TRUE(r->vocab.has_value());
    EXPECT_EQ(r->vocab->model, VocabSpec::Model::kBpe);
    EXPECT_EQ(r->vocab->tokens, m->vocab->tokens);
    EXPECT_EQ(r->vocab->merges, m->vocab->merges);
    EXPECT_EQ(r->vocab->token_types, m->vocab->token_types);
    EXPECT_EQ(r->vocab->bos_id, m->vocab->bos_id);
    EXPECT_EQ(r->vocab->eos_id, m->vocab->eos_id);
    EXPECT_EQ(r->vocab->pre, m->vocab->pre);
    // The same text gives the same ids through both vocabularies.
    auto t1 = Tokenizer::Create(*m->vocab);
    auto t2 = Tokenizer::Create(*r->vocab);
    ASSERT_TRUE(t1.ok() && t2.ok());
    std::string text = "once upon a time there was a tiny model. 42!";
    EXPECT_EQ((*t1)->Encode(text, {}), (*t2)->Encode(text, {}));
    // The dispatcher recognises GGUF.
    auto d = LoadModel(p, {});
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->format, "gguf");
  }
}

// An HF Llama folder (NeoX RoPE) saved as GGUF gets its Q/K rows permuted to interleaved
// order within each head, as convert_hf_to_gguf.py does; V and the rest are unchanged.
TEST_F(GgufModelTest, BertRoundTripsWithLlamaCppsKeys) {
  for (PoolingType pooling : {PoolingType::kMean, PoolingType::kCls}) {
    auto m = MakeSyntheticModel({.preset = "bert-tiny", .dtype = DType::kQ8_0, .seed = 3});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    m->config.pooling = pooling;
    const std::string p = path("bert.gguf");
    ASSERT_TRUE(SaveGgufModel(*m, p).ok());
    auto file = GgufFile::Open(p);
    ASSERT_TRUE(file.ok());
    EXPECT_EQ(*(*file)->GetString("general.architecture"), "bert");
    EXPECT_EQ(*(*file)->GetBool("bert.attention.causal"), false);
    EXPECT_EQ(*(*file)->GetInt("bert.pooling_type"), static_cast<int64_t>(pooling));
    EXPECT_EQ(*(*file)->GetInt("tokenizer.ggml.token_type_count"), 2);
    EXPECT_EQ(*(*file)->GetString("tokenizer.ggml.model"), "bert");
    EXPECT_EQ((*file)->Find("bert.rope.freq_base"), nullptr);
    EXPECT_EQ((*file)->tensors().size(), 5u + 16u * 2u);  // nothing llama.cpp would not create
    auto r = LoadGgufModel(p, {});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ExpectSameConfig(m->config, r->config);
    EXPECT_EQ(r->config.pooling, pooling);
    EXPECT_FALSE(r->config.causal);
    EXPECT_EQ(r->config.token_type_count, 2);
    EXPECT_EQ(r->tensors.at("position_embd.weight").dtype, DType::kF32);
    EXPECT_EQ(r->tensors.at("blk.1.ffn_up.weight").dtype, DType::kQ8_0);
    // A generator refuses it with a message that says what it is.
    auto llama = LlamaModel::Create(std::move(r).value());
    ASSERT_FALSE(llama.ok());
    EXPECT_NE(llama.status().message().find("embedding model"), std::string::npos);
  }
}

TEST_F(GgufModelTest, HfLlamaQkRowsArePermutedToInterleaved) {
  testing::TinyHfOptions o;
  o.llama3_scaling = true;
  testing::WriteTinyHfModel(path("hf"), o);
  auto hf = LoadHfModel(path("hf"), {});
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  ASSERT_TRUE(SaveGgufModel(*hf, path("m.gguf")).ok());
  auto file = GgufFile::Open(path("m.gguf"));
  ASSERT_TRUE(file.ok());
  ASSERT_NE((*file)->FindTensor("rope_freqs.weight"), nullptr);  // llama.cpp's llama3 form
  auto g = LoadGgufModel(path("m.gguf"), {});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ExpectSameConfig(g->config, hf->config);
  EXPECT_EQ(g->config.rope.layout, RopeLayout::kInterleaved);
  EXPECT_EQ(g->tensors.count("rope_freqs.weight"), 0u);
  // The llama3 parameters are recovered from rope_freqs.weight.
  EXPECT_NEAR(g->config.rope.scaling_factor, 8.0f, 1e-4);
  EXPECT_NEAR(g->config.rope.llama3_low_freq_factor, 1.0f, 1e-3);
  EXPECT_NEAR(g->config.rope.llama3_high_freq_factor, 4.0f, 1e-3);
  EXPECT_EQ(g->config.rope.llama3_original_max_positions, 64);

  const int64_t hd = hf->config.head_dim, half = hd / 2;
  for (const char* name : {"blk.1.attn_q.weight", "blk.1.attn_k.weight"}) {
    const Tensor& a = hf->tensors.at(name);
    const Tensor& b = g->tensors.at(name);
    const int64_t heads = a.shape[0] / hd;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t j = 0; j < half; ++j) {
        for (int64_t t = 0; t < 2; ++t) {
          EXPECT_EQ(std::memcmp(b.row(h * hd + 2 * j + t), a.row(h * hd + t * half + j),
                                a.row_bytes()), 0) << name << " head " << h << " pair " << j;
        }
      }
    }
  }
  const Tensor& va = hf->tensors.at("blk.0.attn_v.weight");
  EXPECT_EQ(std::memcmp(va.data, g->tensors.at("blk.0.attn_v.weight").data, va.num_bytes()), 0);
  // Saving the GGUF-loaded model again is the identity on Q (already interleaved).
  ASSERT_TRUE(SaveGgufModel(*g, path("m2.gguf")).ok());
  auto g2 = LoadGgufModel(path("m2.gguf"), {});
  ASSERT_TRUE(g2.ok());
  const Tensor& q1 = g->tensors.at("blk.0.attn_q.weight");
  EXPECT_EQ(std::memcmp(q1.data, g2->tensors.at("blk.0.attn_q.weight").data, q1.num_bytes()), 0);
}

TEST_F(GgufModelTest, HfQwen2KeepsNeoxAndBiases) {
  testing::TinyHfOptions o;
  o.architecture = "Qwen2ForCausalLM";
  o.dtype = DType::kBF16;
  o.tied = true;
  testing::WriteTinyHfModel(path("hf"), o);
  auto hf = LoadHfModel(path("hf"), {});
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  ASSERT_TRUE(SaveGgufModel(*hf, path("q.gguf")).ok());
  auto g = LoadGgufModel(path("q.gguf"), {});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->config.architecture, "qwen2");
  EXPECT_EQ(g->config.rope.layout, RopeLayout::kNeox);
  ExpectSameConfig(g->config, hf->config);
  for (const auto& [name, t] : hf->tensors) {
    const Tensor& u = g->tensors.at(name);
    EXPECT_EQ(u.dtype, t.dtype) << name;
    EXPECT_EQ(std::memcmp(u.data, t.data, t.num_bytes()), 0) << name;
  }
  EXPECT_EQ(g->vocab->tokens, hf->vocab->tokens);
  EXPECT_EQ(g->chat_template, hf->chat_template);
}

TEST_F(GgufModelTest, RefusesUnknownArchitectureAndBadTensors) {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("gptneox"));
  ASSERT_TRUE(w.Write(path("a.gguf")).ok());
  auto r = LoadGgufModel(path("a.gguf"), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("gptneox"), std::string::npos) << r.status().ToString();

  auto m = MakeSyntheticModel({.preset = "tiny"});
  ASSERT_TRUE(m.ok());
  LoadedModel bad = *m;
  bad.tensors["blk.2.ffn_up.weight"] = Tensor::Allocate(DType::kF32, {352, 64});
  ASSERT_TRUE(SaveGgufModel(bad, path("b.gguf")).ok());
  r = LoadGgufModel(path("b.gguf"), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("blk.2.ffn_up.weight"), std::string::npos)
      << r.status().ToString();

  // A missing tensor is named (write the file by hand without it).
  GgufWriter w2;
  w2.Set("general.architecture", GgufValue::String("llama"));
  for (const char* k : {"llama.context_length", "llama.embedding_length", "llama.feed_forward_length",
                        "llama.block_count", "llama.attention.head_count"}) {
    const std::string key = k;
    w2.Set(k, GgufValue::U32(key == "llama.block_count" ? 1 : key == "llama.attention.head_count" ? 4 : 64));
  }
  Tensor e = Tensor::Allocate(DType::kF32, {16, 64});
  ASSERT_TRUE(w2.AddTensor("token_embd.weight", e).ok());
  ASSERT_TRUE(w2.Write(path("c.gguf")).ok());
  r = LoadGgufModel(path("c.gguf"), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("output_norm.weight"), std::string::npos)
      << r.status().ToString();
}

TEST_F(GgufModelTest, LoadsRealLlamaGguf) {
  const std::string p =
      std::string(KVSERVE_ASSETS_DIR) + "/models/llama-2-tiny-random/llama-2-tiny-random.gguf";
  KVSERVE_SKIP_IF_ABSENT(fs::exists(p), p);
  auto m = LoadGgufModel(p, {});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->config.architecture, "llama");
  EXPECT_EQ(m->config.rope.layout, RopeLayout::kInterleaved);
  EXPECT_EQ(m->config.num_layers, 1);
  EXPECT_EQ(m->config.vocab_size, 32000);
  ASSERT_TRUE(m->vocab.has_value());
  EXPECT_EQ(m->vocab->tokens.size(), 32000u);
  EXPECT_EQ(m->tensors.at("blk.0.attn_q.weight").dtype, DType::kF16);
  // Save and reload keeps everything.
  ASSERT_TRUE(SaveGgufModel(*m, path("copy.gguf")).ok());
  auto c = LoadGgufModel(path("copy.gguf"), {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectSameConfig(c->config, m->config);
  EXPECT_EQ(c->vocab->tokens, m->vocab->tokens);
  EXPECT_EQ(c->vocab->scores, m->vocab->scores);
  auto t1 = Tokenizer::Create(*m->vocab);
  auto t2 = Tokenizer::Create(*c->vocab);
  ASSERT_TRUE(t1.ok() && t2.ok());
  std::string text = " Hello world, this is a test of the Llama 2 vocabulary. 日本";
  EXPECT_EQ((*t1)->Encode(text, {}), (*t2)->Encode(text, {}));
}

// A llama2.c model saved as GGUF gets a proper SentencePiece vocabulary (U+2581, <0xXX>
// byte tokens) that encodes the stories prompts to the same ids as the llama2.c tokenizer.
TEST_F(GgufModelTest, Llama2cStoriesToGgufKeepsTokenIds) {
  const std::string dir = std::string(KVSERVE_ASSETS_DIR) + "/models/stories260K";
  KVSERVE_SKIP_IF_ABSENT(fs::exists(dir + "/stories260K.bin"), dir << "/stories260K.bin");
  LoadOptions lo;
  lo.tokenizer_path = dir + "/tok512.bin";
  auto m = LoadModel(dir + "/stories260K.bin", lo);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE(m->vocab.has_value());
  ASSERT_TRUE(SaveGgufModel(*m, path("stories.gguf")).ok());
  auto file = GgufFile::Open(path("stories.gguf"));
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*(*file)->GetString("tokenizer.ggml.model"), "llama");
  const GgufValue* tokens = (*file)->Find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->strings[3], "<0x00>");
  EXPECT_EQ(tokens->strings[259], "\xE2\x96\x81t");  // " t"
  const GgufValue* types = (*file)->Find("tokenizer.ggml.token_type");
  EXPECT_EQ(types->ints[3], static_cast<int64_t>(TokenType::kByte));
  EXPECT_EQ(types->ints[1], static_cast<int64_t>(TokenType::kControl));

  auto g = LoadGgufModel(path("stories.gguf"), {});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_FALSE(g->vocab->llama2c_format);
  ExpectSameConfig(g->config, m->config);
  for (const auto& [name, t] : m->tensors) {
    ASSERT_TRUE(g->tensors.count(name)) << name;
    EXPECT_EQ(std::memcmp(g->tensors.at(name).data, t.data, t.num_bytes()), 0) << name;
  }
  auto t1 = Tokenizer::Create(*m->vocab);
  auto t2 = Tokenizer::Create(*g->vocab);
  ASSERT_TRUE(t1.ok()) << t1.status().ToString();
  ASSERT_TRUE(t2.ok()) << t2.status().ToString();
  std::vector<std::string> prompts = {"", "Once upon a time", "Lily and Ben went to the park.",
                                      "The cat said \"hi\" \xC3\xA9\xE2\x82\xAC!\n  two  spaces"};
  std::ifstream ref(dir + "/greedy_reference.json");
  if (ref) {
    auto j = nlohmann::json::parse(ref, nullptr, false);
    if (!j.is_discarded()) {
      for (const auto& c : j["cases"]) prompts.push_back(c["prompt"].get<std::string>());
    }
  }
  for (const std::string& p : prompts) {
    auto a = (*t1)->Encode(p, {});
    auto b = (*t2)->Encode(p, {});
    EXPECT_EQ(a, b) << "prompt: " << p;
    EXPECT_EQ((*t2)->Decode(b), p) << "prompt: " << p;
  }
}

}  // namespace
}  // namespace kvserve
