// The per-tensor type mixes of quant_mix.h on the presets' tensor names, against the rules of
// llama.cpp's llama_tensor_get_type (worked out by hand for each preset's shapes).
#include "model/quant_mix.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "model/model_tensors.h"
#include "model/synthetic.h"

namespace kvserve {
namespace {

// Tensor name -> the type `type` gives it in `preset`.
std::map<std::string, DType> Mix(const std::string& preset, QuantFileType type) {
  StatusOr<ModelConfig> c = SyntheticPresetConfig(preset);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  const QuantMixModel m = QuantMixModelFor(*c);
  std::map<std::string, DType> out;
  for (const ExpectedTensor& e : ExpectedModelTensors(*c)) {
    out[e.name] = QuantMixDType(type, m, e.name, e.shape);
  }
  return out;
}

std::string Layer(int64_t l, const std::string& part) {
  return "blk." + std::to_string(l) + "." + part;
}

TEST(QuantMixTest, NamesParseAndRoundTrip) {
  const std::vector<std::string> names = QuantFileTypeNames();
  ASSERT_EQ(names.size(), 17u);
  for (const std::string& n : names) {
    std::optional<QuantFileType> t = ParseQuantFileType(n);
    ASSERT_TRUE(t.has_value()) << n;
    EXPECT_EQ(QuantFileTypeName(*t), n);
  }
  EXPECT_EQ(ParseQuantFileType("Q4_K_M"), QuantFileType::kQ4_K_M);
  EXPECT_EQ(ParseQuantFileType("q4_k"), QuantFileType::kQ4_K_M);
  EXPECT_EQ(ParseQuantFileType("q3_k"), QuantFileType::kQ3_K_M);
  EXPECT_EQ(ParseQuantFileType("q5_k"), QuantFileType::kQ5_K_M);
  EXPECT_FALSE(ParseQuantFileType("iq2_xxs").has_value());
  EXPECT_FALSE(ParseQuantFileType("q4_k_x").has_value());
  StatusOr<QuantFileType> bad = ParseQuantFileTypeFlag("iq4_nl");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--dtype must be one of f32, f16, bf16, q8_0"),
            std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("'iq4_nl'"), std::string::npos);
}

// LLAMA_FTYPE values of llama.h.
TEST(QuantMixTest, LlamaFtypeValues) {
  const std::map<std::string, uint32_t> expected = {
      {"f32", 0},     {"f16", 1},     {"q4_0", 2},    {"q4_1", 3},    {"q8_0", 7},
      {"q5_0", 8},    {"q5_1", 9},    {"q2_k", 10},   {"q3_k_s", 11}, {"q3_k_m", 12},
      {"q3_k_l", 13}, {"q4_k_s", 14}, {"q4_k_m", 15}, {"q5_k_s", 16}, {"q5_k_m", 17},
      {"q6_k", 18},   {"bf16", 32}};
  for (const auto& [name, ftype] : expected) {
    EXPECT_EQ(LlamaFtype(*ParseQuantFileType(name)), ftype) << name;
  }
  EXPECT_EQ(QuantFileTypeBaseDType(QuantFileType::kQ4_K_M), DType::kQ4_K);
  EXPECT_EQ(QuantFileTypeBaseDType(QuantFileType::kQ3_K_L), DType::kQ3_K);
  EXPECT_EQ(UniformQuantFileType(DType::kQ4_K), QuantFileType::kQ4_K_M);
  EXPECT_EQ(UniformQuantFileType(DType::kQ5_1), QuantFileType::kQ5_1);
  EXPECT_FALSE(UniformQuantFileType(DType::kI8).has_value());
}

TEST(QuantMixTest, UseMoreBits) {
  // 16 layers: the first and last two, and 4, 7, 10, 13.
  std::vector<int64_t> picked;
  for (int64_t l = 0; l < 16; ++l) {
    if (QuantMixUseMoreBits(l, 16)) picked.push_back(l);
  }
  EXPECT_EQ(picked, (std::vector<int64_t>{0, 1, 4, 7, 10, 13, 14, 15}));
}

// Llama 3.2 1B (hidden 2048, ffn 8192, 16 layers, GQA 4, tied embeddings): every row is whole
// 256-value blocks, so no fallbacks.
TEST(QuantMixTest, Llama32Q4KM) {
  auto mix = Mix("llama-3.2-1b", QuantFileType::kQ4_K_M);
  EXPECT_EQ(mix.count("output.weight"), 0u);
  EXPECT_EQ(mix["token_embd.weight"], DType::kQ6_K);  // tied: the output's treatment
  EXPECT_EQ(mix["output_norm.weight"], DType::kF32);
  for (int64_t l = 0; l < 16; ++l) {
    SCOPED_TRACE(l);
    const bool more = l < 2 || l >= 14 || l % 3 == 1;  // 0, 1, 4, 7, 10, 13, 14, 15
    const DType v = more ? DType::kQ6_K : DType::kQ4_K;
    EXPECT_EQ(mix[Layer(l, "attn_v.weight")], v);
    EXPECT_EQ(mix[Layer(l, "ffn_down.weight")], v);
    for (const char* part : {"attn_q.weight", "attn_k.weight", "attn_output.weight",
                             "ffn_gate.weight", "ffn_up.weight"}) {
      EXPECT_EQ(mix[Layer(l, part)], DType::kQ4_K) << part;
    }
    EXPECT_EQ(mix[Layer(l, "attn_norm.weight")], DType::kF32);
    EXPECT_EQ(mix[Layer(l, "ffn_norm.weight")], DType::kF32);
  }
}

TEST(QuantMixTest, Llama32OtherMixes) {
  auto s = Mix("llama-3.2-1b", QuantFileType::kQ4_K_S);
  EXPECT_EQ(s[Layer(0, "attn_v.weight")], DType::kQ5_K);  // the first 4 attn_v
  EXPECT_EQ(s[Layer(3, "attn_v.weight")], DType::kQ5_K);
  EXPECT_EQ(s[Layer(4, "attn_v.weight")], DType::kQ4_K);
  EXPECT_EQ(s[Layer(1, "ffn_down.weight")], DType::kQ5_K);  // layers < 16 / 8
  EXPECT_EQ(s[Layer(2, "ffn_down.weight")], DType::kQ4_K);

  auto m3 = Mix("llama-3.2-1b", QuantFileType::kQ3_K_M);
  EXPECT_EQ(m3[Layer(1, "attn_v.weight")], DType::kQ5_K);
  EXPECT_EQ(m3[Layer(2, "attn_v.weight")], DType::kQ4_K);
  EXPECT_EQ(m3[Layer(0, "ffn_down.weight")], DType::kQ5_K);  // layers < 16 / 16
  EXPECT_EQ(m3[Layer(1, "ffn_down.weight")], DType::kQ4_K);
  EXPECT_EQ(m3[Layer(5, "attn_output.weight")], DType::kQ4_K);
  EXPECT_EQ(m3[Layer(5, "attn_q.weight")], DType::kQ3_K);
  EXPECT_EQ(m3["token_embd.weight"], DType::kQ6_K);

  auto l3 = Mix("llama-3.2-1b", QuantFileType::kQ3_K_L);
  EXPECT_EQ(l3[Layer(9, "attn_v.weight")], DType::kQ5_K);
  EXPECT_EQ(l3[Layer(9, "ffn_down.weight")], DType::kQ5_K);
  EXPECT_EQ(l3[Layer(9, "attn_output.weight")], DType::kQ5_K);

  auto q2 = Mix("llama-3.2-1b", QuantFileType::kQ2_K);
  EXPECT_EQ(q2[Layer(9, "attn_v.weight")], DType::kQ4_K);  // GQA 4
  EXPECT_EQ(q2[Layer(9, "ffn_down.weight")], DType::kQ3_K);
  EXPECT_EQ(q2[Layer(9, "attn_output.weight")], DType::kQ3_K);
  EXPECT_EQ(q2[Layer(9, "ffn_up.weight")], DType::kQ2_K);

  auto q5m = Mix("llama-3.2-1b", QuantFileType::kQ5_K_M);
  EXPECT_EQ(q5m[Layer(0, "attn_v.weight")], DType::kQ6_K);
  EXPECT_EQ(q5m[Layer(2, "ffn_down.weight")], DType::kQ5_K);

  auto q8 = Mix("llama-3.2-1b", QuantFileType::kQ8_0);
  for (const auto& [name, dtype] : q8) {
    EXPECT_EQ(dtype, name.ends_with("norm.weight") ? DType::kF32 : DType::kQ8_0) << name;
  }
  auto q40 = Mix("llama-3.2-1b", QuantFileType::kQ4_0);
  EXPECT_EQ(q40["token_embd.weight"], DType::kQ6_K);  // as llama.cpp: output gets q6_k
  EXPECT_EQ(q40[Layer(0, "ffn_down.weight")], DType::kQ4_0);
  auto f16 = Mix("llama-3.2-1b", QuantFileType::kF16);
  EXPECT_EQ(f16["token_embd.weight"], DType::kF16);
  EXPECT_EQ(f16[Layer(0, "attn_norm.weight")], DType::kF32);
}

// SmolLM2 135M: hidden 576 is not a multiple of 256, so the q4_k tensors fall back to q5_0;
// ffn_down's 1536-wide rows are whole blocks (q4_k, or q6_k in use_more_bits layers); the tied
// embedding (the output) gets q8_0 (rows not whole q4_k blocks).
TEST(QuantMixTest, Smollm2Q4KM) {
  auto mix = Mix("smollm2-135m", QuantFileType::kQ4_K_M);
  EXPECT_EQ(mix["token_embd.weight"], DType::kQ8_0);
  std::map<DType, int> counts;
  int num_more = 0;
  for (int64_t l = 0; l < 30; ++l) {
    SCOPED_TRACE(l);
    const bool more = l < 3 || l >= 26 || (l - 3) % 3 == 2;
    num_more += more ? 1 : 0;
    EXPECT_EQ(mix[Layer(l, "ffn_down.weight")], more ? DType::kQ6_K : DType::kQ4_K);
    // attn_v: q6_k -> q8_0 (fallback), q4_k -> q5_0.
    EXPECT_EQ(mix[Layer(l, "attn_v.weight")], more ? DType::kQ8_0 : DType::kQ5_0);
    for (const char* part : {"attn_q.weight", "attn_k.weight", "attn_output.weight",
                             "ffn_gate.weight", "ffn_up.weight"}) {
      EXPECT_EQ(mix[Layer(l, part)], DType::kQ5_0) << part;
    }
  }
  for (const auto& [name, dtype] : mix) ++counts[dtype];
  EXPECT_EQ(num_more, 14);  // 0-2, 5, 8, ..., 23, 26-29
  EXPECT_EQ(counts[DType::kQ5_0], 30 * 5 + 30 - num_more);
  EXPECT_EQ(counts[DType::kQ6_K], num_more);
  EXPECT_EQ(counts[DType::kQ4_K], 30 - num_more);
  EXPECT_EQ(counts[DType::kQ8_0], 1 + num_more);
  EXPECT_EQ(counts[DType::kF32], 1 + 2 * 30);  // output_norm, attn_norm, ffn_norm

  auto q5m = Mix("smollm2-135m", QuantFileType::kQ5_K_M);
  EXPECT_EQ(q5m[Layer(4, "attn_q.weight")], DType::kQ5_1);  // q5_k -> q5_1
  auto q3 = Mix("smollm2-135m", QuantFileType::kQ3_K_S);
  EXPECT_EQ(q3[Layer(4, "attn_q.weight")], DType::kQ4_0);  // q3_k -> q4_0 (llama.cpp: IQ4_NL)
  EXPECT_EQ(q3[Layer(4, "ffn_down.weight")], DType::kQ3_K);
}

// tiny (hidden 128, ffn 352, 4 layers, separate output.weight): nothing is whole 256-value
// blocks.
TEST(QuantMixTest, TinyQ4KM) {
  auto mix = Mix("tiny", QuantFileType::kQ4_K_M);
  EXPECT_EQ(mix["output.weight"], DType::kQ8_0);
  EXPECT_EQ(mix["token_embd.weight"], DType::kQ5_0);  // not the output: q4_k -> q5_0
  for (int64_t l = 0; l < 4; ++l) {
    const bool more = l >= 2;  // 4 layers: 7 * 4 / 8 = 3, and (2 - 0) % 3 == 2
    EXPECT_EQ(mix[Layer(l, "attn_v.weight")], more ? DType::kQ8_0 : DType::kQ5_0) << l;
    EXPECT_EQ(mix[Layer(l, "ffn_down.weight")], more ? DType::kQ8_0 : DType::kQ5_0) << l;
    EXPECT_EQ(mix[Layer(l, "ffn_up.weight")], DType::kQ5_0);
  }
}

// DeepSeek (MoE, MLA with split attn_k_b / attn_v_b): expert tensors follow ffn_down's rule
// by the layer in their name; the router stays f32; attn_k_b / attn_v_b are no category.
TEST(QuantMixTest, DeepseekTiny) {
  StatusOr<ModelConfig> c = SyntheticPresetConfig("deepseek-v2-tiny");
  ASSERT_TRUE(c.ok());
  auto mix = Mix("deepseek-v2-tiny", QuantFileType::kQ4_K_M);
  const QuantMixModel m = QuantMixModelFor(*c);
  EXPECT_TRUE(m.has_output_weight);
  for (const auto& [name, dtype] : mix) {
    SCOPED_TRACE(name);
    if (name.find("ffn_gate_inp") != std::string::npos || name.ends_with("norm.weight") ||
        name.ends_with(".bias")) {
      EXPECT_EQ(dtype, DType::kF32);
    } else {
      EXPECT_TRUE(IsGgmlBlockType(dtype));
    }
  }
  const int64_t last = c->num_layers - 1;  // use_more_bits: the last layer always
  const std::string down = Layer(last, c->moe.IsMoeLayer(last) ? "ffn_down_exps.weight"
                                                               : "ffn_down.weight");
  ASSERT_EQ(mix.count(down), 1u);
  const int64_t cols = c->moe.IsMoeLayer(last) ? c->moe.expert_ffn_dim : c->ffn_dim;
  EXPECT_EQ(mix[down], cols % 256 == 0 ? DType::kQ6_K : DType::kQ8_0);
}

TEST(QuantMixTest, FallbacksAndUnquantised) {
  QuantMixModel m;
  m.num_layers = 8;
  EXPECT_EQ(QuantMixDType(QuantFileType::kQ6_K, m, "blk.0.attn_q.weight", {64, 96}),
            DType::kQ8_0);
  EXPECT_EQ(QuantMixDType(QuantFileType::kQ2_K, m, "blk.0.ffn_up.weight", {64, 96}),
            DType::kQ4_0);
  // Rows of 48: not even whole 32-value blocks.
  EXPECT_EQ(QuantMixDType(QuantFileType::kQ4_K_M, m, "blk.0.attn_q.weight", {64, 48}),
            DType::kF16);
  EXPECT_EQ(QuantMixDType(QuantFileType::kQ4_0, m, "blk.0.attn_q.weight", {64, 48}),
            DType::kF16);
  EXPECT_EQ(QuantMixDType(QuantFileType::kQ4_K_M, m, "blk.0.attn_q.bias", {64}), DType::kF32);
  EXPECT_EQ(QuantMixDType(QuantFileType::kQ4_K_M, m, "rope_freqs.weight", {32}), DType::kF32);
  EXPECT_EQ(QuantMixDType(QuantFileType::kQ4_K_M, m, "blk.3.ffn_gate_inp.weight", {8, 256}),
            DType::kF32);
  // Mixtral-like (8 experts): attn_v and attn_k in q8_0.
  m.num_experts = 8;
  EXPECT_EQ(QuantMixDType(QuantFileType::kQ4_K_M, m, "blk.3.attn_k.weight", {256, 256}),
            DType::kQ8_0);
  EXPECT_EQ(QuantMixDType(QuantFileType::kQ4_K_M, m, "blk.3.attn_output.weight", {256, 256}),
            DType::kQ5_K);
  // 70B: attn_v q4_k becomes q5_k.
  m.num_experts = 0;
  m.is_70b = true;
  m.num_layers = 80;
  EXPECT_EQ(QuantMixDType(QuantFileType::kQ4_K_M, m, "blk.11.attn_v.weight", {1024, 8192}),
            DType::kQ5_K);
}

}  // namespace
}  // namespace kvserve
