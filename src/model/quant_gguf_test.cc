// Writing models in the 2- to 6-bit types (what `kvserve mkmodel --dtype q4_k_m` and
// `kvserve convert --dtype q4_k_m` do through MakeSyntheticModel / SaveGgufModel): each tensor
// in its mixed type, general.file_type set, the file loads, and the quantised model
// greedy-generates like its f32 source within a tolerance.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "base/testing/test_dependency.h"
#include "base/thread_pool.h"
#include "model/gguf.h"
#include "model/hf_test_util.h"
#include "model/llama.h"
#include "model/model_description.h"
#include "model/model_loader.h"
#include "model/quant_mix.h"
#include "model/synthetic.h"
#include "model/weight_bytes.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

class QuantGgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvserve_quantgguf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// Every tensor of the file at `p` has the type QuantMixDType gives it for `type`.
void ExpectMixedTypes(const std::string& p, QuantFileType type, const ModelConfig& config) {
  auto file = GgufFile::Open(p);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(*(*file)->GetInt("general.file_type"), LlamaFtype(type));
  const QuantMixModel mix = QuantMixModelFor(config);
  for (const GgufTensorInfo& t : (*file)->tensors()) {
    EXPECT_EQ(t.dtype, QuantMixDType(type, mix, t.name, t.shape)) << t.name;
  }
}

// The f32 model's greedy continuation of `prompt` (num_steps tokens), and every position's
// logits of both models over prompt + that continuation (teacher-forced).
struct GreedyComparison {
  int num_positions = 0;
  int argmax_agree = 0;
  double rel_rms_error = 0;  // ||logits_q - logits_f32|| / ||logits_f32||
};

GreedyComparison CompareGreedy(const LoadedModel& f32, const LoadedModel& quant,
                               std::vector<TokenId> tokens, int num_steps) {
  ThreadPool pool(2);
  auto a = LlamaModel::Create(f32);
  auto b = LlamaModel::Create(quant);
  EXPECT_TRUE(a.ok() && b.ok());
  const int64_t V = f32.config.vocab_size;
  const size_t prompt = tokens.size();
  {
    auto cache = (*a)->NewCache(static_cast<int64_t>(prompt) + num_steps);
    std::vector<float> logits(static_cast<size_t>(V));
    std::vector<TokenId> next = tokens;
    for (int s = 0; s < num_steps; ++s) {
      EXPECT_TRUE((*a)->Forward(next, cache.get(), &pool, logits.data()).ok());
      const TokenId t = static_cast<TokenId>(
          std::max_element(logits.begin(), logits.end()) - logits.begin());
      tokens.push_back(t);
      next = {t};
    }
  }
  std::vector<float> la(tokens.size() * V), lb(tokens.size() * V);
  auto ca = (*a)->NewCache(static_cast<int64_t>(tokens.size()));
  auto cb = (*b)->NewCache(static_cast<int64_t>(tokens.size()));
  EXPECT_TRUE((*a)->Forward(tokens, ca.get(), &pool, la.data(), /*all_logits=*/true).ok());
  EXPECT_TRUE((*b)->Forward(tokens, cb.get(), &pool, lb.data(), /*all_logits=*/true).ok());
  GreedyComparison c;
  double err = 0, ref = 0;
  for (size_t pos = prompt - 1; pos < tokens.size(); ++pos) {
    const float* x = la.data() + pos * V;
    const float* y = lb.data() + pos * V;
    ++c.num_positions;
    if (std::max_element(x, x + V) - x == std::max_element(y, y + V) - y) ++c.argmax_agree;
    for (int64_t i = 0; i < V; ++i) {
      err += (double{x[i]} - y[i]) * (double{x[i]} - y[i]);
      ref += double{x[i]} * x[i];
    }
  }
  c.rel_rms_error = std::sqrt(err / ref);
  return c;
}

// `kvserve convert --dtype X`: an f32 Hugging Face folder (hidden 256, ffn 512: rows of whole
// k-quant blocks) requantised by SaveGgufModel. Bounds are about 2x the measured errors.
TEST_F(QuantGgufTest, ConvertedMixesLoadAndGenerateLikeF32) {
  testing::TinyHfOptions o;
  o.hidden = 256;
  o.ffn = 512;
  o.layers = 4;
  o.heads = 4;
  o.kv_heads = 1;  // GQA 4: q2_k's attn_v gets q4_k
  o.vocab_size = 320;
  const std::string hf = path("hf");
  testing::WriteTinyHfModel(hf, o);
  auto source = LoadModel(hf);
  ASSERT_TRUE(source.ok()) << source.status().ToString();

  struct Case {
    QuantFileType type;
    double max_rel_rms;  // of the logits
    int min_agree;       // positions (of 13) whose argmax matches f32's
  };
  // A random-weight model amplifies weight errors about 6-10x into its logits (f16: 0.2%,
  // q8_0: 5%), so these bounds (about 1.6x the errors measured) check the plumbing and catch
  // regressions; stories260K below checks greedy generation on a trained model.
  const Case cases[] = {
      {QuantFileType::kF32, 1e-5, 13},    {QuantFileType::kF16, 0.005, 13},
      {QuantFileType::kQ8_0, 0.08, 9},    {QuantFileType::kQ6_K, 0.2, 8},
      {QuantFileType::kQ5_K_M, 0.35, 7},  {QuantFileType::kQ5_0, 0.35, 6},
      {QuantFileType::kQ5_1, 0.35, 6},    {QuantFileType::kQ4_K_M, 0.65, 2},
      {QuantFileType::kQ4_K_S, 0.65, 2},  {QuantFileType::kQ4_0, 0.7, 2},
      {QuantFileType::kQ4_1, 0.65, 2},    {QuantFileType::kQ3_K_M, 1.0, 1},
      {QuantFileType::kQ3_K_L, 1.0, 1},   {QuantFileType::kQ3_K_S, 1.2, 1},
      {QuantFileType::kQ2_K, 1.6, 0},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(QuantFileTypeName(k.type));
    const std::string p = path(std::string(QuantFileTypeName(k.type)) + ".gguf");
    SaveGgufOptions save;
    save.file_type = k.type;
    save.num_threads = 2;
    int64_t last_done = -1, total = 0;
    save.progress = [&](int64_t done, int64_t t) { last_done = done, total = t; };
    Status s = SaveGgufModel(*source, p, save);
    ASSERT_TRUE(s.ok()) << s.ToString();
    if (k.type != QuantFileType::kF32) {  // f32 tensors are written as they are
      EXPECT_GT(total, 0);
      EXPECT_EQ(last_done, total);
    }
    ExpectMixedTypes(p, k.type, source->config);
    auto loaded = LoadModel(p);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    const GreedyComparison c = CompareGreedy(*source, *loaded, {1, 17, 42, 99, 7, 250}, 12);
    std::printf("%-7s logits rel rms error %.4f, argmax agrees at %d of %d positions\n",
                QuantFileTypeName(k.type), c.rel_rms_error, c.argmax_agree, c.num_positions);
    EXPECT_LT(c.rel_rms_error, k.max_rel_rms);
    EXPECT_GE(c.argmax_agree, k.min_agree);
    // Written again from the loaded file: every tensor is already in its type, so the bytes
    // are the same (nothing is requantised).
    const std::string again = path("again.gguf");
    ASSERT_TRUE(SaveGgufModel(*loaded, again, save).ok());
    auto f1 = GgufFile::Open(p);
    auto f2 = GgufFile::Open(again);
    ASSERT_TRUE(f1.ok() && f2.ok());
    for (const GgufTensorInfo& t : (*f1)->tensors()) {
      auto x = (*f1)->tensor(t.name);
      auto y = (*f2)->tensor(t.name);
      ASSERT_TRUE(x.ok() && y.ok()) << t.name;
      ASSERT_EQ(x->num_bytes(), y->num_bytes());
      EXPECT_EQ(std::memcmp(x->data, y->data, x->num_bytes()), 0) << t.name;
    }
  }
}

// Greedy continuation (num_tokens ids) of `prompt`.
std::vector<TokenId> Greedy(const LoadedModel& loaded, std::vector<TokenId> prompt,
                            int num_tokens) {
  ThreadPool pool(1);
  auto model = LlamaModel::Create(loaded);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  auto cache = (*model)->NewCache(static_cast<int64_t>(prompt.size()) + num_tokens);
  std::vector<float> logits(static_cast<size_t>(loaded.config.vocab_size));
  std::vector<TokenId> out;
  for (int i = 0; i < num_tokens; ++i) {
    EXPECT_TRUE((*model)->Forward(prompt, cache.get(), &pool, logits.data()).ok());
    out.push_back(static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) -
                                       logits.begin()));
    prompt = {out.back()};
  }
  return out;
}

// `kvserve convert --dtype X` of a trained model (stories260K: rows of 64 and 172 values, so
// q5_0 / q5_1 / q4_0 / q8_0 fallbacks and f16 for the 172-wide ffn_down): greedy generation
// follows the f32 model's for the first tokens at least (measured: q8_0 ... q4_k_m all 40,
// q3_k_m 39, q4_0 23).
TEST_F(QuantGgufTest, TrainedModelGreedyMatchesF32) {
  const std::string dir = std::string(KVSERVE_ASSETS_DIR) + "/models/stories260K";
  KVSERVE_SKIP_IF_ABSENT(fs::exists(dir + "/stories260K.bin"), dir << "/stories260K.bin");
  LoadOptions load;
  load.tokenizer_path = dir + "/tok512.bin";
  auto source = LoadModel(dir + "/stories260K.bin", load);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};  // "Once upon a time"
  const std::vector<TokenId> want = Greedy(*source, prompt, 40);
  struct Case {
    QuantFileType type;
    int min_prefix;  // leading generated tokens equal to f32's (of 40)
  };
  for (const Case& k : {Case{QuantFileType::kQ8_0, 40}, Case{QuantFileType::kQ6_K, 40},
                        Case{QuantFileType::kQ5_K_M, 30}, Case{QuantFileType::kQ4_K_M, 20},
                        Case{QuantFileType::kQ4_0, 10}, Case{QuantFileType::kQ3_K_M, 15}}) {
    SCOPED_TRACE(QuantFileTypeName(k.type));
    const std::string p = path(std::string(QuantFileTypeName(k.type)) + ".gguf");
    SaveGgufOptions save;
    save.file_type = k.type;
    ASSERT_TRUE(SaveGgufModel(*source, p, save).ok());
    ExpectMixedTypes(p, k.type, source->config);
    auto loaded = LoadModel(p);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    const std::vector<TokenId> got = Greedy(*loaded, prompt, 40);
    int prefix = 0;
    while (prefix < 40 && got[prefix] == want[prefix]) ++prefix;
    std::printf("stories260K %-7s greedy matches f32 for %d of 40 tokens\n",
                QuantFileTypeName(k.type), prefix);
    EXPECT_GE(prefix, k.min_prefix);
  }
}

// `kvserve mkmodel --dtype q4_k_m`: the synthetic tiny model (rows of 128 and 352 values, so
// the q4_k tensors fall back to q5_0 and the q6_k ones to q8_0) made directly in its mix.
TEST_F(QuantGgufTest, SyntheticMixRoundTripsAndRunsLikeF32) {
  auto q = MakeSyntheticModel(
      {.preset = "tiny", .seed = 5, .file_type = QuantFileType::kQ4_K_M, .num_threads = 2});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->tensors.at("output.weight").dtype, DType::kQ8_0);
  EXPECT_EQ(q->tensors.at("blk.0.ffn_up.weight").dtype, DType::kQ5_0);
  EXPECT_EQ(q->tensors.at("blk.3.ffn_down.weight").dtype, DType::kQ8_0);
  EXPECT_EQ(q->tensors.at("blk.0.attn_norm.weight").dtype, DType::kF32);
  const std::string p = path("tiny-q4_k_m.gguf");
  SaveGgufOptions save;
  save.file_type = QuantFileType::kQ4_K_M;
  ASSERT_TRUE(SaveGgufModel(*q, p, save).ok());
  ExpectMixedTypes(p, QuantFileType::kQ4_K_M, q->config);
  auto loaded = LoadModel(p);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  for (const auto& [name, t] : q->tensors) {
    const Tensor& u = loaded->tensors.at(name);
    ASSERT_EQ(u.dtype, t.dtype) << name;
    EXPECT_EQ(std::memcmp(u.data, t.data, t.num_bytes()), 0) << name;
  }
  // The banner's and plan's tally: q5_0 bulk, then q8_0 (output + 2 layers' attn_v and
  // ffn_down), f32 norms.
  const WeightBytesByType tally = TallyWeightBytes(loaded->tensors);
  ASSERT_EQ(tally.by_type.size(), 3u);
  EXPECT_EQ(tally.by_type[0].first, DType::kQ5_0);
  EXPECT_EQ(tally.by_type[1].first, DType::kQ8_0);
  EXPECT_EQ(tally.by_type[2].first, DType::kF32);
  int64_t sum = 0;
  for (const auto& [d, b] : tally.by_type) sum += b;
  EXPECT_EQ(sum, tally.total_bytes);
  EXPECT_EQ(tally.total_bytes, loaded->WeightBytes());
  // (No comparison of outputs with the f32 synthetic model: q8_0 tensors are drawn directly
  // as int8 values, not quantised from the f32 stream.)
}

TEST(WeightBytesTest, FormatsByTypeLargestFirst) {
  const WeightBytesByType t = TallyWeightBytes(std::vector<std::pair<DType, int64_t>>{
      {DType::kF32, 200 * 1024}, {DType::kQ4_K, 62 * 1024 * 1024}, {DType::kQ6_K, 25 << 20},
      {DType::kQ4_K, 1 << 20}});
  EXPECT_EQ(t.total_bytes, (88 << 20) + 200 * 1024);
  EXPECT_EQ(t.ToString(), "88.2 MiB (q4_k 63.0 MiB, q6_k 25.0 MiB, f32 0.2 MiB)");
  EXPECT_EQ(t.main_type(), "q4_k");
  EXPECT_EQ(TallyWeightBytes(
                std::vector<std::pair<DType, int64_t>>{{DType::kQ8_0, int64_t{3} << 30}})
                .ToString(),
            "3.00 GiB (q8_0)");
  EXPECT_EQ(TallyWeightBytes(std::vector<std::pair<DType, int64_t>>{}).ToString(), "0 B");
  EXPECT_EQ(FormatWeightBytes(512), "512 B");
  EXPECT_EQ(FormatWeightBytes(40 * 1024 + 512), "40.5 KiB");
}

// Pre-quantised Hugging Face folders are refused, saying why.
TEST_F(QuantGgufTest, RefusesPreQuantisedHfFolders) {
  const std::string hf = path("gptq");
  testing::WriteTinyHfModel(hf, testing::TinyHfOptions{});
  // A quantization_config in config.json.
  auto config = ReadJsonFile(hf + "/config.json");
  ASSERT_TRUE(config.ok());
  (*config)["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  testing::WriteTextFile(hf + "/config.json", config->dump());
  auto m = LoadModel(hf);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("quantization_config (gptq)"), std::string::npos)
      << m.status().message();
  EXPECT_NE(m.status().message().find("pre-quantised Hugging Face weights"), std::string::npos);
  EXPECT_NE(m.status().message().find("use a GGUF file"), std::string::npos);

  // GPTQ-style tensors (I32 qweight) without a quantization_config: the safetensors dtype.
  const std::string packed = path("packed");
  testing::WriteTinyHfModel(packed, testing::TinyHfOptions{});
  const std::string header =
      R"({"model.layers.0.self_attn.q_proj.qweight":{"dtype":"I32","shape":[2],)"
      R"("data_offsets":[0,8]}})";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header + std::string(8, '\0');
  testing::WriteTextFile(packed + "/model.safetensors", bytes);
  auto p = LoadModel(packed);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("unsupported safetensors dtype 'I32'"), std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("pre-quantised Hugging Face weights"), std::string::npos)
      << p.status().message();
}

}  // namespace
}  // namespace kvserve
