#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

#include <gtest/gtest.h>

#include "model/hf_test_util.h"
#include "model/model_loader.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;
using testing::TinyHfOptions;
using testing::WriteTinyHfModel;

class HfModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvserve_hf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }
  fs::path dir_;
};

// Each GGUF-named tensor must hold the bytes of its HF source (norms converted to f32).
void ExpectSameTensors(const LoadedModel& m,
                       const std::vector<std::pair<std::string, Tensor>>& hf) {
  std::map<std::string, std::string> names = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  for (const auto& [hf_name, t] : hf) {
    std::string g;
    if (names.count(hf_name)) {
      g = names[hf_name];
    } else {
      size_t dot = hf_name.find('.', 13);
      std::string layer = hf_name.substr(13, dot - 13);
      std::string part = hf_name.substr(dot + 1);
      std::map<std::string, std::string> parts = {
          {"input_layernorm.weight", "attn_norm.weight"},
          {"self_attn.q_proj.weight", "attn_q.weight"},
          {"self_attn.k_proj.weight", "attn_k.weight"},
          {"self_attn.v_proj.weight", "attn_v.weight"},
          {"self_attn.q_proj.bias", "attn_q.bias"},
          {"self_attn.k_proj.bias", "attn_k.bias"},
          {"self_attn.v_proj.bias", "attn_v.bias"},
          {"self_attn.o_proj.weight", "attn_output.weight"},
          {"post_attention_layernorm.weight", "ffn_norm.weight"},
          {"mlp.gate_proj.weight", "ffn_gate.weight"},
          {"mlp.up_proj.weight", "ffn_up.weight"},
          {"mlp.down_proj.weight", "ffn_down.weight"}};
      ASSERT_TRUE(parts.count(part)) << part;
      g = "blk." + layer + "." + parts[part];
    }
    auto got = m.Get(g);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->shape, t.shape) << g;
    std::vector<float> a(t.num_elements()), b(t.num_elements());
    DequantizeRow(t.dtype, t.data, a.data(), t.num_elements());
    DequantizeRow(got->dtype, got->data, b.data(), got->num_elements());
    EXPECT_EQ(a, b) << g;
    if (t.shape.size() == 2) {
      EXPECT_EQ(got->dtype, t.dtype) << g;  // matrices stay views in their dtype
    } else {
      EXPECT_EQ(got->dtype, DType::kF32) << g;
    }
  }
  EXPECT_EQ(m.tensors.size(), hf.size());
}

TEST_F(HfModelTest, LoadsLlamaF32) {
  TinyHfOptions o;
  auto written = WriteTinyHfModel(dir(), o);
  auto m = LoadHfModel(dir(), {});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.hidden_dim, 64);
  EXPECT_EQ(c.ffn_dim, 96);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.vocab_size, 300);
  EXPECT_EQ(c.max_seq_len, 256);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.rope.layout, RopeLayout::kNeox);
  EXPECT_EQ(c.rope.scaling, RopeScalingType::kNone);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(m->format, "hf");
  EXPECT_EQ(m->chat_template, "{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_TRUE(m->vocab.has_value());
  EXPECT_EQ(m->vocab->tokens.size(), 300u);
  EXPECT_EQ(m->vocab->bos_id, 299);
  EXPECT_EQ(m->vocab->eos_id, 299);
  EXPECT_FALSE(m->vocab->add_bos);
  ExpectSameTensors(*m, written);
  // Matrices are views of the mapping, not copies.
  EXPECT_NE(m->tensors.at("blk.0.attn_q.weight").owner, nullptr);
  // Through the LoadModel dispatch as well.
  auto m2 = LoadModel(dir(), {});
  ASSERT_TRUE(m2.ok()) << m2.status().ToString();
  EXPECT_EQ(m2->format, "hf");

  // The tokenizer built from tokenizer.json round-trips text.
  auto tok = Tokenizer::Create(*m->vocab);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  std::string text = "the quick brown fox, 123!";
  auto ids = (*tok)->Encode(text, {});
  EXPECT_EQ((*tok)->Decode(ids), text);
}

TEST_F(HfModelTest, LoadsBf16QwenTiedAndSharded) {
  TinyHfOptions o;
  o.architecture = "Qwen2ForCausalLM";
  o.dtype = DType::kBF16;
  o.tied = true;
  o.num_shards = 2;
  auto written = WriteTinyHfModel(dir(), o);
  ASSERT_TRUE(fs::exists(dir_ / "model.safetensors.index.json"));
  auto m = LoadHfModel(dir(), {});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->config.architecture, "qwen2");
  EXPECT_TRUE(m->config.qkv_bias);
  EXPECT_TRUE(m->config.tied_embeddings);
  EXPECT_EQ(m->config.rope.layout, RopeLayout::kNeox);
  EXPECT_EQ(m->tensors.count("output.weight"), 0u);
  EXPECT_EQ(m->tensors.at("blk.1.ffn_down.weight").dtype, DType::kBF16);
  ExpectSameTensors(*m, written);
}

TEST_F(HfModelTest, Llama3RopeScaling) {
  TinyHfOptions o;
  o.llama3_scaling = true;
  WriteTinyHfModel(dir(), o);
  auto m = LoadHfModel(dir(), {});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->config.rope.scaling, RopeScalingType::kLlama3);
  EXPECT_FLOAT_EQ(m->config.rope.scaling_factor, 8.0f);
  EXPECT_FLOAT_EQ(m->config.rope.llama3_low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(m->config.rope.llama3_high_freq_factor, 4.0f);
  EXPECT_EQ(m->config.rope.llama3_original_max_positions, 64);
}

TEST_F(HfModelTest, RefusesBadFolders) {
  TinyHfOptions o;
  WriteTinyHfModel(dir(), o);
  // Unknown architecture, named.
  auto cfg = nlohmann::json::parse(std::ifstream(dir() + "/config.json"));
  auto write_cfg = [&](const nlohmann::json& j) { testing::WriteTextFile(dir() + "/config.json", j.dump()); };
  nlohmann::json bad = cfg;
  bad["architectures"] = {"GPTNeoXForCausalLM"};
  write_cfg(bad);
  auto m = LoadHfModel(dir(), {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("GPTNeoXForCausalLM"), std::string::npos);
  // Shape mismatch with the config.
  bad = cfg;
  bad["intermediate_size"] = 128;
  write_cfg(bad);
  m = LoadHfModel(dir(), {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("ffn_gate"), std::string::npos) << m.status().ToString();
  // Unsupported rope scaling, named.
  bad = cfg;
  bad["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  write_cfg(bad);
  m = LoadHfModel(dir(), {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("yarn"), std::string::npos);
  // Not JSON.
  testing::WriteTextFile(dir() + "/config.json", "{not json");
  EXPECT_FALSE(LoadHfModel(dir(), {}).ok());
  // Missing weights.
  write_cfg(cfg);
  fs::remove(dir_ / "model.safetensors");
  m = LoadHfModel(dir(), {});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
}

TEST_F(HfModelTest, MissingTensorIsNamed) {
  TinyHfOptions o;
  auto tensors = testing::MakeTinyHfTensors(o);
  WriteTinyHfModel(dir(), o);
  std::vector<std::pair<std::string, Tensor>> kept;
  for (auto& [n, t] : tensors) {
    if (n != "model.layers.1.mlp.up_proj.weight") kept.emplace_back(n, t);
  }
  ASSERT_TRUE(WriteSafetensors(dir() + "/model.safetensors", kept).ok());
  auto m = LoadHfModel(dir(), {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.layers.1.mlp.up_proj.weight"), std::string::npos)
      << m.status().ToString();
}

}  // namespace
}  // namespace kvserve

namespace kvserve {
namespace {

LoadedModel SyntheticBert(uint64_t seed) {
  SyntheticModelOptions o;
  o.preset = "bert-tiny";
  o.seed = seed;
  auto m = MakeSyntheticModel(o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

// An HF BertModel folder loads as the bert model it was written from: the same tensors under
// GGUF names, the same WordPiece vocabulary (from vocab.txt), the pooling of modules.json.
TEST_F(HfModelTest, BertModelFolderLoadsLikeTheModelItWasWrittenFrom) {
  const LoadedModel want = SyntheticBert(4);
  for (const auto& [pooling, prefix, old_names] :
       {std::tuple{PoolingType::kCls, std::string(), false},
        std::tuple{PoolingType::kMean, std::string("bert."), true}}) {
    SCOPED_TRACE(prefix + PoolingTypeName(pooling));
    fs::remove_all(dir_);
    testing::HfBertOptions ho;
    ho.pooling = pooling;
    ho.prefix = prefix;
    ho.old_layer_norm_names = old_names;
    testing::WriteHfBertFolder(dir(), want, ho);
    auto got = LoadModel(dir());
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->format, "hf");
    EXPECT_TRUE(got->config.is_encoder());
    EXPECT_FALSE(got->config.causal);
    EXPECT_EQ(got->config.pooling, pooling);
    EXPECT_EQ(got->config.token_type_count, 2);
    EXPECT_FLOAT_EQ(got->config.norm_eps, want.config.norm_eps);
    EXPECT_EQ(got->config.max_seq_len, want.config.max_seq_len);
    ASSERT_EQ(got->tensors.size(), want.tensors.size());
    for (const auto& [name, t] : want.tensors) {
      auto g = got->Get(name);
      ASSERT_TRUE(g.ok()) << name;
      ASSERT_EQ(g->shape, t.shape) << name;
      std::vector<float> a(static_cast<size_t>(t.cols())), b(a.size());
      for (int64_t r = 0; r < t.rows(); r += std::max<int64_t>(1, t.rows() / 7)) {
        DequantizeRow(t.dtype, t.row(r), a.data(), t.cols());
        DequantizeRow(g->dtype, g->row(r), b.data(), t.cols());
        ASSERT_EQ(a, b) << name << " row " << r;
      }
    }
    ASSERT_TRUE(got->vocab.has_value());
    EXPECT_EQ(got->vocab->tokens, want.vocab->tokens);
    auto a = Tokenizer::Create(*want.vocab);
    auto b = Tokenizer::Create(*got->vocab);
    ASSERT_TRUE(a.ok() && b.ok());
    const EncodeOptions eo{.add_bos = true, .parse_special = false};
    EXPECT_EQ((*b)->Encode("The refund window, for orders!", eo),
              (*a)->Encode("The refund window, for orders!", eo));
  }
}

TEST_F(HfModelTest, BertModelFolderErrors) {
  const LoadedModel m = SyntheticBert(4);
  testing::HfBertOptions ho;
  ho.write_modules = false;  // no modules.json: mean pooling
  testing::WriteHfBertFolder(dir(), m, ho);
  auto mean = LoadModel(dir());
  ASSERT_TRUE(mean.ok()) << mean.status().ToString();
  EXPECT_EQ(mean->config.pooling, PoolingType::kMean);

  testing::WriteTextFile(dir() + "/modules.json",
                         R"([{"type": "sentence_transformers.models.Pooling", "path": "../x"}])");
  EXPECT_FALSE(LoadModel(dir()).ok());
  testing::WriteTextFile(dir() + "/modules.json",
                         R"([{"type": "sentence_transformers.models.Pooling", "path": "p"}])");
  fs::create_directories(dir_ / "p");
  testing::WriteTextFile(dir() + "/p/config.json", R"({"pooling_mode_max_tokens": true})");
  auto max = LoadModel(dir());
  ASSERT_FALSE(max.ok());
  EXPECT_NE(max.status().message().find("not supported"), std::string::npos);
  fs::remove(dir_ / "modules.json");

  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir() + "/config.json"));
  cfg["hidden_act"] = "relu";
  testing::WriteTextFile(dir() + "/config.json", cfg.dump());
  auto relu = LoadModel(dir());
  ASSERT_FALSE(relu.ok());
  EXPECT_NE(relu.status().message().find("hidden_act 'relu'"), std::string::npos);
  cfg["hidden_act"] = "gelu";
  cfg["position_embedding_type"] = "relative_key";
  testing::WriteTextFile(dir() + "/config.json", cfg.dump());
  EXPECT_FALSE(LoadModel(dir()).ok());
}

}  // namespace
}  // namespace kvserve
