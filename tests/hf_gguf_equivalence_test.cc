// The real test of RoPE layouts: a Hugging Face Llama folder (NeoX pairs) run directly, the
// same weights saved as GGUF (Q/K rows permuted to interleaved pairs) and reloaded, and a
// hand-written scalar reference of the HF model must all give the same logits.
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "base/testing/test_dependency.h"
#include "model/hf_test_util.h"
#include "model/llama.h"
#include "model/model_loader.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

// Logits for every position of `tokens`, run one token at a time and as one batch.
std::vector<float> RunModel(LoadedModel model, const std::vector<TokenId>& tokens) {
  auto m = LlamaModel::Create(std::move(model));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  const int64_t vocab = (*m)->config().vocab_size;
  std::vector<float> all(tokens.size() * vocab);
  auto cache = (*m)->NewCache(static_cast<int64_t>(tokens.size()));
  ThreadPool pool(2);
  Status st = (*m)->Forward(tokens, cache.get(), &pool, all.data(), /*all_logits=*/true);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return all;
}

float Row(const Tensor& t, int64_t r, int64_t c) {
  float out[1];
  std::vector<float> row(t.cols());
  DequantizeRow(t.dtype, t.row(r), row.data(), t.cols());
  out[0] = row[c];
  return out[0];
}

std::vector<double> MatVec(const Tensor& w, const std::vector<double>& x) {
  std::vector<double> y(w.shape[0]);
  std::vector<float> row(w.cols());
  for (int64_t r = 0; r < w.shape[0]; ++r) {
    DequantizeRow(w.dtype, w.row(r), row.data(), w.cols());
    double s = 0;
    for (int64_t c = 0; c < w.cols(); ++c) s += row[c] * x[c];
    y[r] = s;
  }
  return y;
}

std::vector<double> RmsNorm(const std::vector<double>& x, const Tensor& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  double scale = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * Row(w, 0, i);
  return y;
}

// Scalar double-precision forward of an HF-layout model (NeoX rotate_half RoPE, no scaling),
// straight from the HF safetensors tensors.
std::vector<float> ReferenceForward(const std::map<std::string, Tensor>& w,
                                    const testing::TinyHfOptions& o,
                                    const std::vector<TokenId>& tokens) {
  const int64_t hd = o.hidden / o.heads, half = hd / 2, group = o.heads / o.kv_heads;
  const double eps = 1e-5, theta = 10000.0;
  std::vector<std::vector<std::vector<double>>> keys(o.layers), values(o.layers);
  std::vector<float> logits;
  const bool bias = o.architecture == "Qwen2ForCausalLM";
  for (size_t pos = 0; pos < tokens.size(); ++pos) {
    const Tensor& emb = w.at("model.embed_tokens.weight");
    std::vector<double> x(o.hidden);
    for (int64_t i = 0; i < o.hidden; ++i) x[i] = Row(emb, tokens[pos], i);
    for (int64_t l = 0; l < o.layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      auto xn = RmsNorm(x, w.at(p + "input_layernorm.weight"), eps);
      auto q = MatVec(w.at(p + "self_attn.q_proj.weight"), xn);
      auto k = MatVec(w.at(p + "self_attn.k_proj.weight"), xn);
      auto v = MatVec(w.at(p + "self_attn.v_proj.weight"), xn);
      if (bias) {
        for (size_t i = 0; i < q.size(); ++i) q[i] += Row(w.at(p + "self_attn.q_proj.bias"), 0, i);
        for (size_t i = 0; i < k.size(); ++i) k[i] += Row(w.at(p + "self_attn.k_proj.bias"), 0, i);
        for (size_t i = 0; i < v.size(); ++i) v[i] += Row(w.at(p + "self_attn.v_proj.bias"), 0, i);
      }
      auto rope = [&](std::vector<double>& vec, int64_t heads) {
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t i = 0; i < half; ++i) {
            double angle = pos * std::pow(theta, -2.0 * i / hd);
            double a = vec[h * hd + i], b = vec[h * hd + i + half];
            vec[h * hd + i] = a * std::cos(angle) - b * std::sin(angle);
            vec[h * hd + i + half] = a * std::sin(angle) + b * std::cos(angle);
          }
        }
      };
      rope(q, o.heads);
      rope(k, o.kv_heads);
      keys[l].push_back(k);
      values[l].push_back(v);
      std::vector<double> attn(o.heads * hd, 0.0);
      for (int64_t h = 0; h < o.heads; ++h) {
        const int64_t kvh = h / group;
        std::vector<double> s(pos + 1);
        double mx = -1e300;
        for (size_t t = 0; t <= pos; ++t) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += q[h * hd + i] * keys[l][t][kvh * hd + i];
          s[t] = d / std::sqrt(double(hd));
          mx = std::max(mx, s[t]);
        }
        double z = 0;
        for (double& e : s) z += (e = std::exp(e - mx));
        for (size_t t = 0; t <= pos; ++t) {
          for (int64_t i = 0; i < hd; ++i) attn[h * hd + i] += s[t] / z * values[l][t][kvh * hd + i];
        }
      }
      auto out = MatVec(w.at(p + "self_attn.o_proj.weight"), attn);
      for (int64_t i = 0; i < o.hidden; ++i) x[i] += out[i];
      xn = RmsNorm(x, w.at(p + "post_attention_layernorm.weight"), eps);
      auto g = MatVec(w.at(p + "mlp.gate_proj.weight"), xn);
      auto u = MatVec(w.at(p + "mlp.up_proj.weight"), xn);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      auto down = MatVec(w.at(p + "mlp.down_proj.weight"), g);
      for (int64_t i = 0; i < o.hidden; ++i) x[i] += down[i];
    }
    auto xn = RmsNorm(x, w.at("model.norm.weight"), eps);
    auto out = MatVec(w.at(o.tied ? "model.embed_tokens.weight" : "lm_head.weight"), xn);
    for (double v : out) logits.push_back(static_cast<float>(v));
  }
  return logits;
}

class HfGgufEquivalenceTest : public ::testing::TestWithParam<testing::TinyHfOptions> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvserve_equiv_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(counter_++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  static inline int counter_ = 0;
};

TEST_P(HfGgufEquivalenceTest, SameLogits) {
  const testing::TinyHfOptions o = GetParam();
  auto written = testing::WriteTinyHfModel((dir_ / "hf").string(), o);
  auto hf = LoadHfModel((dir_ / "hf").string(), {});
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  ASSERT_TRUE(SaveGgufModel(*hf, (dir_ / "m.gguf").string()).ok());
  auto gguf = LoadGgufModel((dir_ / "m.gguf").string(), {});
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  EXPECT_NE(gguf->config.rope.layout == RopeLayout::kNeox, o.architecture != "Qwen2ForCausalLM");

  const std::vector<TokenId> tokens = {5, 120, 7, 299, 33, 250, 1, 64, 64, 180, 2, 42};
  auto a = RunModel(*hf, tokens);
  auto b = RunModel(*gguf, tokens);
  ASSERT_EQ(a.size(), tokens.size() * o.vocab_size);
  ASSERT_EQ(a.size(), b.size());
  double max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_abs = std::max(max_abs, double(std::fabs(a[i])));
    max_diff = std::max(max_diff, double(std::fabs(a[i] - b[i])));
  }
  EXPECT_GT(max_abs, 0.1);  // logits carry signal
  EXPECT_LT(max_diff, 1e-5 * std::max(1.0, max_abs)) << "HF vs GGUF logits differ";

  if (!o.llama3_scaling) {
    std::map<std::string, Tensor> hf_tensors(written.begin(), written.end());
    auto ref = ReferenceForward(hf_tensors, o, tokens);
    ASSERT_EQ(ref.size(), a.size());
    double ref_diff = 0;
    for (size_t i = 0; i < a.size(); ++i) ref_diff = std::max(ref_diff, double(std::fabs(a[i] - ref[i])));
    EXPECT_LT(ref_diff, 1e-4 * std::max(1.0, max_abs)) << "HF model vs scalar reference";
  }
}

testing::TinyHfOptions Opt(const std::string& arch, DType dtype, bool tied, bool llama3) {
  testing::TinyHfOptions o;
  o.architecture = arch;
  o.dtype = dtype;
  o.tied = tied;
  o.llama3_scaling = llama3;
  return o;
}

INSTANTIATE_TEST_SUITE_P(
    Models, HfGgufEquivalenceTest,
    ::testing::Values(Opt("LlamaForCausalLM", DType::kF32, false, false),
                      Opt("LlamaForCausalLM", DType::kBF16, true, true),
                      Opt("MistralForCausalLM", DType::kF16, false, false),
                      Opt("Qwen2ForCausalLM", DType::kF32, true, false)),
    [](const ::testing::TestParamInfo<testing::TinyHfOptions>& info) {
      const auto& o = info.param;
      return o.architecture.substr(0, o.architecture.find("For")) + "_" + DTypeName(o.dtype) +
             (o.tied ? "_tied" : "") + (o.llama3_scaling ? "_llama3" : "");
    });

// stories260K (llama2.c, interleaved RoPE) saved as GGUF runs to the same logits.
TEST(Llama2cGgufEquivalenceTest, StoriesSameLogits) {
  const std::string dir = std::string(KVSERVE_ASSETS_DIR) + "/models/stories260K";
  KVSERVE_SKIP_IF_ABSENT(fs::exists(dir + "/stories260K.bin"), dir << "/stories260K.bin");
  auto m = LoadModel(dir + "/stories260K.bin", {});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::string path =
      (fs::temp_directory_path() / ("kvserve_stories_" + std::to_string(::getpid()) + ".gguf")).string();
  ASSERT_TRUE(SaveGgufModel(*m, path).ok());
  auto g = LoadGgufModel(path, {});
  fs::remove(path);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::vector<TokenId> tokens = {1, 403, 407, 261, 378, 432, 383, 286};
  auto a = RunModel(*m, tokens);
  auto b = RunModel(*g, tokens);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
}

}  // namespace
}  // namespace kvserve
