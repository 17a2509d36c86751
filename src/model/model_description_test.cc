// The model description readers: Hugging Face config.json (dense, MLA, MoE, nested, RoPE
// scaling, bad fields) and GGUF metadata (a saved model, DeepSeek2 MLA), and that the loader's
// refusals stay the loader's.
#include "model/model_description.h"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/model_loader.h"
#include "model/synthetic.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

// layers, heads, KV heads, head dim, ffn, vocabulary, context, tied embeddings.
std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool> Geometry(
    const ModelConfig& c) {
  return {c.num_layers, c.num_heads,  c.num_kv_heads, c.head_dim,
          c.ffn_dim,    c.vocab_size, c.max_seq_len,  c.tied_embeddings};
}

constexpr char kDeepSeekV2Lite[] = R"({
  "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
  "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
  "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
  "n_routed_experts": 64, "n_shared_experts": 2, "first_k_dense_replace": 1,
  "q_lora_rank": null, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "v_head_dim": 128, "vocab_size": 102400, "max_position_embeddings": 163840,
  "num_experts_per_tok": 6, "topk_method": "greedy", "scoring_func": "softmax",
  "norm_topk_prob": false, "routed_scaling_factor": 1.0, "n_group": 1, "topk_group": 1,
  "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                   "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707},
  "torch_dtype": "bfloat16"
})";

TEST(ModelDescriptionTest, HfLlama) {
  StatusOr<ModelDescription> d = DescribeHfConfigText(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "_name_or_path": "x/y",
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "torch_dtype": "float16", "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}})");
  ASSERT_TRUE(d.ok()) << d.status().message();
  const ModelConfig& c = d->config;
  EXPECT_EQ(std::tuple(c.architecture, d->hf_architecture, d->name_or_path),
            std::tuple("llama", "LlamaForCausalLM", "x/y"));
  EXPECT_EQ(d->dtype, DType::kF16);
  EXPECT_EQ(Geometry(c), std::tuple(32, 32, 8, 128, 14336, 128256, 131072, false));
  EXPECT_FLOAT_EQ(c.rope.theta, 500000.0f);
  EXPECT_EQ(c.rope.layout, RopeLayout::kNeox);
  EXPECT_EQ(c.rope.scaling, RopeScalingType::kLlama3);
  EXPECT_FLOAT_EQ(c.rope.scaling_factor, 8.0f);
  EXPECT_FALSE(d->is_mla());
  EXPECT_EQ(d->config.moe.num_experts, 0);
}

TEST(ModelDescriptionTest, HfDeepSeekMlaAndExperts) {
  StatusOr<ModelDescription> d = DescribeHfConfigText(kDeepSeekV2Lite);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->config.architecture, "deepseek_v2");
  EXPECT_TRUE(d->is_mla());
  EXPECT_EQ(std::tuple(d->config.mla.kv_lora_rank, d->config.mla.qk_rope_head_dim, d->config.mla.qk_nope_head_dim, d->config.mla.q_lora_rank),
            std::tuple(512, 64, 128, 0));
  EXPECT_EQ(d->config.head_dim, 192);
  EXPECT_EQ(std::tuple(d->config.moe.num_experts, d->config.moe.num_shared_experts, d->config.moe.expert_ffn_dim,
                       d->config.moe.first_dense_layers),
            std::tuple(64, 2, 1408, 1));
  EXPECT_EQ(std::tuple(d->config.moe.num_experts_used, d->config.moe.gating,
                       d->config.moe.selection_bias, d->config.moe.normalize_weights,
                       d->config.moe.num_groups),
            std::tuple(6, ExpertGating::kSoftmax, false, false, 1));
  EXPECT_EQ(d->config.num_kv_heads, 16);
  EXPECT_EQ(d->config.rope.layout, RopeLayout::kInterleaved);
  EXPECT_EQ(d->rope_scaling_type, "yarn");
  EXPECT_EQ(d->config.rope.scaling, RopeScalingType::kYarn);
  EXPECT_FLOAT_EQ(d->config.rope.scaling_factor, 40.0f);
  EXPECT_EQ(d->config.rope.yarn_original_max_positions, 4096);
  EXPECT_FLOAT_EQ(d->config.mla.yarn_log_multiplier, 0.707f);
  EXPECT_TRUE(d->config.Validate().ok()) << d->config.Validate().message();
}

TEST(ModelDescriptionTest, HfVariants) {
  // Mixtral and Qwen MoE name their expert counts differently.
  StatusOr<ModelDescription> d = DescribeHfConfigText(
      R"({"model_type": "mixtral", "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_local_experts": 8, "sliding_window": 4096})");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->config.moe.num_experts, 8);
  EXPECT_EQ(d->sliding_window_tokens, 4096);
  d = DescribeHfConfigText(
      R"({"model_type": "qwen2_moe", "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_experts": 60, "shared_expert_intermediate_size": 5632,
          "sliding_window": 4096, "use_sliding_window": false})");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->config.moe.num_experts, 60);
  EXPECT_EQ(d->shared_expert_ffn_dim, 5632);
  EXPECT_EQ(d->sliding_window_tokens, 0);
  EXPECT_TRUE(d->config.qkv_bias);
  // The decoder of a multimodal config is in text_config.
  d = DescribeHfConfigText(
      R"({"model_type": "vlm", "torch_dtype": "bfloat16", "text_config": {
          "hidden_size": 512, "num_hidden_layers": 3, "num_attention_heads": 4}})");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->config.num_layers, 3);
  EXPECT_EQ(d->config.head_dim, 128);
  EXPECT_EQ(d->config.architecture, "vlm");
  EXPECT_EQ(d->dtype, DType::kBF16);
  EXPECT_EQ(d->config.max_seq_len, 0) << "not stated";
}

TEST(ModelDescriptionTest, BadHfConfigsAreErrors) {
  for (const char* bad :
       {"", "[1]", "{", R"({"num_attention_heads": 8})", R"({"num_hidden_layers": 2})",
        R"({"num_hidden_layers": "2", "num_attention_heads": 8})",
        R"({"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": -1})",
        R"({"num_hidden_layers": 99999999, "num_attention_heads": 8})",
        R"({"num_hidden_layers": 2, "num_attention_heads": 8, "rope_scaling": 3})",
        R"({"num_hidden_layers": 2, "num_attention_heads": 8, "kv_lora_rank": 1.5})"}) {
    EXPECT_FALSE(DescribeHfConfigText(bad).ok()) << bad;
  }
  EXPECT_FALSE(ReadHfConfigFile("/nonexistent/config.json").ok());
}

class GgufDescriptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvserve_desc_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(GgufDescriptionTest, SavedModelDescribesItsConfig) {
  StatusOr<LoadedModel> tiny = MakeSyntheticModel({.preset = "tiny"});
  ASSERT_TRUE(tiny.ok()) << tiny.status().message();
  ASSERT_TRUE(SaveGgufModel(*tiny, path("tiny.gguf")).ok());
  StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path("tiny.gguf"));
  ASSERT_TRUE(file.ok());
  StatusOr<ModelDescription> d = DescribeGgufModel(**file, path("tiny.gguf"));
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->config.architecture, "llama");
  EXPECT_EQ(Geometry(d->config), Geometry(tiny->config));
  EXPECT_EQ(d->config.NumParameters(), tiny->config.NumParameters());
}

// An MLA file of the older layout (attn_kv_b; per-head widths in key_length / value_length).
TEST_F(GgufDescriptionTest, DeepSeek2OlderLayoutIsMlaWithYarn) {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("deepseek2"));
  w.Set("deepseek2.rope.scaling.type", GgufValue::String("yarn"));
  const std::pair<const char*, uint32_t> keys[] = {
      {"block_count", 27},          {"context_length", 163840},
      {"embedding_length", 2048},   {"feed_forward_length", 10944},
      {"attention.head_count", 16}, {"attention.key_length", 192},
      {"attention.value_length", 128}, {"attention.kv_lora_rank", 512},
      {"rope.dimension_count", 64}, {"expert_count", 64},
      {"expert_shared_count", 2},   {"leading_dense_block_count", 1}};
  for (const auto& [key, value] : keys) {
    w.Set(std::string("deepseek2.") + key, GgufValue::U32(value));
  }
  ASSERT_TRUE(w.Write(path("ds.gguf")).ok());
  StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path("ds.gguf"));
  ASSERT_TRUE(file.ok());
  StatusOr<ModelDescription> d = DescribeGgufModel(**file, path("ds.gguf"));
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->config.name, "ds.gguf");
  EXPECT_EQ(d->config.num_kv_heads, 16);
  EXPECT_EQ(std::tuple(d->config.mla.kv_lora_rank, d->config.mla.qk_rope_head_dim, d->config.mla.qk_nope_head_dim, d->config.mla.v_head_dim),
            std::tuple(512, 64, 128, 128));
  EXPECT_EQ(std::tuple(d->config.moe.num_experts, d->config.moe.num_shared_experts, d->config.moe.first_dense_layers),
            std::tuple(64, 2, 1));
  EXPECT_EQ(d->rope_scaling_type, "yarn");
  EXPECT_EQ(d->config.rope.scaling, RopeScalingType::kYarn);
  EXPECT_EQ(d->config.rope.yarn_original_max_positions, 163840) << "context_length when unstated";
  EXPECT_FALSE(d->config.mla.split_kv_b);
  StatusOr<LoadedModel> loaded = LoadGgufModel(path("ds.gguf"), {});
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("token_embd.weight is missing"), std::string::npos)
      << loaded.status().message();  // YaRN and the layout are accepted; the tensors are not there
}

}  // namespace
}  // namespace kvserve
