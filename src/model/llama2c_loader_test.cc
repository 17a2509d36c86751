#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "model/llama.h"
#include "model/model_loader.h"

namespace kvserve {
namespace {

struct Params {
  int32_t dim = 32, hidden = 48, layers = 2, heads = 4, kv_heads = 2, vocab = 64, seq_len = 16;
};

class Llama2cLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("llama2c_loader_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
    return path;
  }

  std::filesystem::path dir_;
};

void Append(std::string* out, const void* p, size_t n) {
  out->append(static_cast<const char*>(p), n);
}
void AppendI32(std::string* out, int32_t v) { Append(out, &v, 4); }

struct Named {
  std::string name;
  int64_t rows, cols;
};

// Per-layer matrices in export.py order, with our GGUF names.
std::vector<Named> Matrices(const Params& p) {
  const int64_t kv = p.dim / p.heads * p.kv_heads;
  std::vector<Named> out;
  const std::pair<const char*, std::pair<int64_t, int64_t>> kinds[] = {
      {"attn_q.weight", {p.dim, p.dim}},    {"attn_k.weight", {kv, p.dim}},
      {"attn_v.weight", {kv, p.dim}},       {"attn_output.weight", {p.dim, p.dim}},
      {"ffn_gate.weight", {p.hidden, p.dim}}, {"ffn_down.weight", {p.dim, p.hidden}},
      {"ffn_up.weight", {p.hidden, p.dim}}};
  for (const auto& [suffix, shape] : kinds) {
    for (int l = 0; l < p.layers; ++l) {
      out.push_back({"blk." + std::to_string(l) + "." + suffix, shape.first, shape.second});
    }
  }
  return out;
}

// Builds a legacy float32 checkpoint; `expected` receives every tensor's values by name.
std::string LegacyFile(const Params& p, bool tied, std::map<std::string, std::vector<float>>* expected) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto fill = [&](const std::string& name, int64_t n, std::string* out) {
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    Append(out, v.data(), v.size() * 4);
    if (expected) (*expected)[name] = v;
  };
  std::string s;
  for (int32_t v : {p.dim, p.hidden, p.layers, p.heads, p.kv_heads, tied ? p.vocab : -p.vocab,
                    p.seq_len}) {
    AppendI32(&s, v);
  }
  fill("token_embd.weight", int64_t{p.vocab} * p.dim, &s);
  std::vector<Named> m = Matrices(p);
  for (int l = 0; l < p.layers; ++l) fill("blk." + std::to_string(l) + ".attn_norm.weight", p.dim, &s);
  for (size_t i = 0; i < 4u * p.layers; ++i) fill(m[i].name, m[i].rows * m[i].cols, &s);
  for (int l = 0; l < p.layers; ++l) fill("blk." + std::to_string(l) + ".ffn_norm.weight", p.dim, &s);
  for (size_t i = 4u * p.layers; i < m.size(); ++i) fill(m[i].name, m[i].rows * m[i].cols, &s);
  fill("output_norm.weight", p.dim, &s);
  fill("freq_cis", int64_t{p.seq_len} * (p.dim / p.heads), &s);
  if (!tied) fill("output.weight", int64_t{p.vocab} * p.dim, &s);
  return s;
}

// Builds a version-2 Q8_0 export; `expected` receives int8 * scale per tensor.
std::string Q80File(const Params& p, int32_t group_size,
                    std::map<std::string, std::vector<float>>* expected) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> qdist(-127, 127);
  std::uniform_real_distribution<float> sdist(0.001f, 0.05f);
  std::string s;
  AppendI32(&s, 0x616b3432);
  AppendI32(&s, 2);
  for (int32_t v : {p.dim, p.hidden, p.layers, p.heads, p.kv_heads, p.vocab, p.seq_len}) AppendI32(&s, v);
  s.push_back(1);  // shared classifier
  AppendI32(&s, group_size);
  s.resize(256, '\0');
  auto norm = [&](const std::string& name) {
    std::vector<float> v(p.dim);
    for (float& x : v) x = sdist(rng) * 20;
    Append(&s, v.data(), v.size() * 4);
    (*expected)[name] = v;
  };
  for (int l = 0; l < p.layers; ++l) norm("blk." + std::to_string(l) + ".attn_norm.weight");
  for (int l = 0; l < p.layers; ++l) norm("blk." + std::to_string(l) + ".ffn_norm.weight");
  norm("output_norm.weight");
  std::vector<Named> m = Matrices(p);
  m.insert(m.begin(), {"token_embd.weight", p.vocab, p.dim});
  for (const Named& t : m) {
    const int64_t n = t.rows * t.cols;
    std::vector<int8_t> q(n);
    std::vector<float> scales(n / group_size);
    for (int8_t& x : q) x = static_cast<int8_t>(qdist(rng));
    for (float& x : scales) x = sdist(rng);
    Append(&s, q.data(), q.size());
    Append(&s, scales.data(), scales.size() * 4);
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = q[i] * scales[i / group_size];
    (*expected)[t.name] = v;
  }
  return s;
}

std::vector<float> ToFloat(const Tensor& t) {
  std::vector<float> out(t.num_elements());
  for (int64_t r = 0; r < t.rows(); ++r) DequantizeRow(t.dtype, t.row(r), out.data() + r * t.cols(), t.cols());
  return out;
}

TEST_F(Llama2cLoaderTest, LoadsLegacyFloat32TiedAndUntied) {
  Params p;
  for (bool tied : {true, false}) {
    std::map<std::string, std::vector<float>> expected;
    std::string path = Write("legacy.bin", LegacyFile(p, tied, &expected));
    auto loaded = LoadModel(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    const LoadedModel& m = *loaded;
    EXPECT_EQ(m.format, "llama2c");
    EXPECT_EQ(m.config.hidden_dim, 32);
    EXPECT_EQ(m.config.ffn_dim, 48);
    EXPECT_EQ(m.config.num_kv_heads, 2);
    EXPECT_EQ(m.config.head_dim, 8);
    EXPECT_EQ(m.config.vocab_size, 64);
    EXPECT_EQ(m.config.max_seq_len, 16);
    EXPECT_EQ(m.config.tied_embeddings, tied);
    EXPECT_EQ(m.config.rope.layout, RopeLayout::kInterleaved);
    EXPECT_FALSE(m.vocab.has_value());
    EXPECT_EQ(m.tensors.size(), 2u + 9u * p.layers + (tied ? 0u : 1u));
    for (const auto& [name, values] : expected) {
      if (name == "freq_cis") continue;
      auto t = m.Get(name);
      ASSERT_TRUE(t.ok()) << name;
      EXPECT_EQ(ToFloat(*t), values) << name;
    }
    EXPECT_EQ(m.WeightTypeSummary(), "f32");
    EXPECT_TRUE(LlamaModel::Create(m).ok());
  }
}

TEST_F(Llama2cLoaderTest, LoadsQ80ExportAsQ8BlocksOrExactF32) {
  Params p;
  std::map<std::string, std::vector<float>> expected;
  std::string path = Write("q80.bin", Q80File(p, 32, &expected));
  auto loaded = LoadModel(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const LoadedModel& m = *loaded;
  EXPECT_EQ(m.format, "llama2c-q80");
  EXPECT_TRUE(m.config.tied_embeddings);
  EXPECT_EQ(m.tensors.size(), 2u + 9u * p.layers);
  for (const auto& [name, values] : expected) {
    auto t = m.Get(name);
    ASSERT_TRUE(t.ok()) << name;
    std::vector<float> got = ToFloat(*t);
    ASSERT_EQ(got.size(), values.size());
    if (name.find("ffn_down") != std::string::npos || name.find("norm") != std::string::npos) {
      // Rows of 48 are not whole Q8_0 blocks: exact float32.
      EXPECT_EQ(t->dtype, DType::kF32) << name;
      EXPECT_EQ(got, values) << name;
    } else {
      EXPECT_EQ(t->dtype, DType::kQ8_0) << name;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], values[i], std::fabs(values[i]) * (1.0f / 2048) + 1e-9f) << name;
      }
    }
  }
  EXPECT_EQ(m.WeightTypeSummary(), "q8_0");
  EXPECT_TRUE(LlamaModel::Create(m).ok());
}

TEST_F(Llama2cLoaderTest, Q80GroupOf64KeepsBlocks) {
  Params p;
  p.hidden = 64;
  std::map<std::string, std::vector<float>> expected;
  auto loaded = LoadModel(Write("q80_64.bin", Q80File(p, 64, &expected)));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto t = loaded->Get("blk.1.ffn_down.weight");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->dtype, DType::kQ8_0);
  std::vector<float> got = ToFloat(*t);
  const std::vector<float>& want = expected["blk.1.ffn_down.weight"];
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], std::fabs(want[i]) / 2048);
}

TEST_F(Llama2cLoaderTest, RejectsTruncatedAndOversizedFiles) {
  Params p;
  std::string good = LegacyFile(p, true, nullptr);
  for (size_t cut : {size_t{1}, size_t{4}, good.size() / 2, good.size() - 28}) {
    auto r = LoadLlama2cModel(Write("cut.bin", good.substr(0, good.size() - cut)), {});
    EXPECT_FALSE(r.ok()) << "cut " << cut;
  }
  EXPECT_FALSE(LoadLlama2cModel(Write("long.bin", good + "xyz!"), {}).ok());
  EXPECT_FALSE(LoadLlama2cModel(Write("tiny.bin", good.substr(0, 10)), {}).ok());
  EXPECT_FALSE(LoadLlama2cModel(Write("empty.bin", ""), {}).ok());
  EXPECT_FALSE(LoadLlama2cModel((dir_ / "missing.bin").string(), {}).ok());

  std::map<std::string, std::vector<float>> expected;
  std::string q = Q80File(p, 32, &expected);
  EXPECT_FALSE(LoadLlama2cModel(Write("qcut.bin", q.substr(0, q.size() - 1)), {}).ok());
  EXPECT_FALSE(LoadLlama2cModel(Write("qhdr.bin", q.substr(0, 200)), {}).ok());
}

TEST_F(Llama2cLoaderTest, RejectsHostileHeaders) {
  Params p;
  const std::string good = LegacyFile(p, true, nullptr);
  auto with_param = [&](int index, int32_t value) {
    std::string s = good;
    std::memcpy(s.data() + 4 * index, &value, 4);
    return s;
  };
  const std::vector<std::pair<int, int32_t>> bad = {
      {0, 0},          {0, -32},        {0, 33},  // dim: zero, negative, not a multiple of heads
      {1, 0},          {1, 1 << 30},    // hidden_dim
      {2, 0},          {2, 1 << 30},    {2, 4000},  // layers: huge counts must not allocate
      {3, 0},          {3, 3},          // heads
      {4, 0},          {4, 3},          {4, 8},  // kv heads: zero, not dividing heads, > heads
      {5, 0},          {5, INT32_MIN},  {5, 1 << 30},  // vocab
      {6, 0},          {6, -1},         // seq_len
  };
  for (const auto& [index, value] : bad) {
    auto r = LoadLlama2cModel(Write("bad.bin", with_param(index, value)), {});
    EXPECT_FALSE(r.ok()) << "param " << index << " = " << value;
  }
  // Version-2 header problems.
  std::map<std::string, std::vector<float>> expected;
  const std::string q = Q80File(p, 32, &expected);
  auto patch = [&](size_t offset, int32_t value) {
    std::string s = q;
    std::memcpy(s.data() + offset, &value, 4);
    return s;
  };
  EXPECT_FALSE(LoadLlama2cModel(Write("g0.bin", patch(37, 0)), {}).ok());
  EXPECT_FALSE(LoadLlama2cModel(Write("g7.bin", patch(37, 7)), {}).ok());
  EXPECT_FALSE(LoadLlama2cModel(Write("gneg.bin", patch(37, -32)), {}).ok());
  auto v3 = LoadLlama2cModel(Write("v3.bin", patch(4, 3)), {});
  ASSERT_FALSE(v3.ok());
  EXPECT_EQ(v3.status().code(), StatusCode::kUnimplemented);
}

TEST_F(Llama2cLoaderTest, LoadModelRejectsMissingPathAndEmptyDirectory) {
  EXPECT_FALSE(LoadModel((dir_ / "nope").string()).ok());
  EXPECT_FALSE(LoadModel(dir_.string()).ok());  // a directory without config.json
}

}  // namespace
}  // namespace kvserve
