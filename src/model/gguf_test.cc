#include "model/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "base/testing/test_dependency.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the test temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "gguf_test_XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Fills a tensor of `dtype` and `shape` with deterministic pseudo-random bytes (valid
// values are not needed: the reader never interprets tensor data).
Tensor RandomTensor(DType dtype, std::vector<int64_t> shape, uint32_t seed) {
  Tensor t = Tensor::Allocate(dtype, std::move(shape));
  std::mt19937 rng(seed);
  auto* p = static_cast<uint8_t*>(t.mutable_data());
  for (int64_t i = 0; i < t.num_bytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  return t;
}

TEST(GgufTest, RoundTripsEveryMetadataType) {
  GgufWriter w;
  auto scalar = [](GgufType type, int64_t i, uint64_t u) {
    GgufValue v;
    v.type = type;
    v.i = i;
    v.u = u;
    return v;
  };
  w.Set("u8", scalar(GgufType::kUint8, 250, 250));
  w.Set("i8", scalar(GgufType::kInt8, -128, 0));
  w.Set("u16", scalar(GgufType::kUint16, 65535, 65535));
  w.Set("i16", scalar(GgufType::kInt16, -32768, 0));
  w.Set("u32", GgufValue::U32(4000000000u));
  w.Set("i32", GgufValue::I32(-2000000000));
  w.Set("f32", GgufValue::F32(0.1f));
  w.Set("bool", GgufValue::Bool(true));
  w.Set("string", GgufValue::String(std::string("h\0llo \xe2\x9c\x93", 10)));
  w.Set("u64", GgufValue::U64(std::numeric_limits<uint64_t>::max()));
  w.Set("i64", scalar(GgufType::kInt64, std::numeric_limits<int64_t>::min(), 0));
  GgufValue f64;
  f64.type = GgufType::kFloat64;
  f64.f = -1.0 / 3.0;
  w.Set("f64", f64);
  w.Set("arr.str", GgufValue::StringArray({"a", "", "long string"}));
  w.Set("arr.f32", GgufValue::F32Array({1.5f, -2.25f}));
  w.Set("arr.i32", GgufValue::I32Array({-1, 0, 7}));
  GgufValue u8s;
  u8s.type = GgufType::kArray;
  u8s.array_type = GgufType::kUint8;
  u8s.ints = {0, 255};
  w.Set("arr.u8", u8s);
  GgufValue u64s = u8s;
  u64s.array_type = GgufType::kUint64;
  u64s.ints = {1, -1};  // -1 stands for 2^64 - 1
  w.Set("arr.u64", u64s);
  GgufValue bools = u8s;
  bools.array_type = GgufType::kBool;
  bools.ints = {1, 0, 1};
  w.Set("arr.bool", bools);
  GgufValue f64s;
  f64s.type = GgufType::kArray;
  f64s.array_type = GgufType::kFloat64;
  f64s.floats = {1e300, -0.0};
  w.Set("arr.f64", f64s);
  GgufValue nested;
  nested.type = GgufType::kArray;
  nested.array_type = GgufType::kArray;
  nested.arrays = {GgufValue::I32Array({1, 2}), GgufValue::StringArray({"x"})};
  w.Set("arr.nested", nested);
  w.Set("replaced", GgufValue::U32(1));
  w.Set("replaced", GgufValue::String("second"));  // replaces, keeps its position

  TempDir dir;
  ASSERT_TRUE(w.Write(dir.file("meta.gguf")).ok());
  auto f = GgufFile::Open(dir.file("meta.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_TRUE(g.tensors().empty());

  std::vector<std::string> keys;
  for (const auto& [k, v] : g.metadata()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                            "string", "u64", "i64", "f64", "arr.str", "arr.f32",
                                            "arr.i32", "arr.u8", "arr.u64", "arr.bool", "arr.f64",
                                            "arr.nested", "replaced"}));

  EXPECT_EQ(g.Find("u8")->type, GgufType::kUint8);
  EXPECT_EQ(*g.GetInt("u8"), 250);
  EXPECT_EQ(*g.GetInt("i8"), -128);
  EXPECT_EQ(*g.GetInt("u16"), 65535);
  EXPECT_EQ(*g.GetInt("i16"), -32768);
  EXPECT_EQ(*g.GetInt("u32"), 4000000000);
  EXPECT_EQ(*g.GetInt("i32"), -2000000000);
  EXPECT_EQ(g.Find("f32")->type, GgufType::kFloat32);
  EXPECT_EQ(*g.GetFloat("f32"), static_cast<double>(0.1f));
  EXPECT_TRUE(*g.GetBool("bool"));
  EXPECT_EQ(*g.GetString("string"), std::string("h\0llo \xe2\x9c\x93", 10));
  EXPECT_EQ(g.Find("u64")->u, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(g.GetInt("u64").status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(*g.GetInt("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(g.Find("f64")->type, GgufType::kFloat64);
  EXPECT_EQ(*g.GetFloat("f64"), -1.0 / 3.0);

  const GgufValue* v = g.Find("arr.str");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->type, GgufType::kArray);
  EXPECT_EQ(v->array_type, GgufType::kString);
  EXPECT_EQ(v->strings, (std::vector<std::string>{"a", "", "long string"}));
  EXPECT_EQ(v->array_size(), 3u);
  EXPECT_EQ(g.Find("arr.f32")->floats, (std::vector<double>{1.5, -2.25}));
  EXPECT_EQ(g.Find("arr.i32")->ints, (std::vector<int64_t>{-1, 0, 7}));
  EXPECT_EQ(g.Find("arr.i32")->array_type, GgufType::kInt32);
  EXPECT_EQ(g.Find("arr.u8")->ints, (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(g.Find("arr.u64")->ints, (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(g.Find("arr.bool")->ints, (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(g.Find("arr.bool")->array_type, GgufType::kBool);
  EXPECT_EQ(g.Find("arr.f64")->floats[0], 1e300);
  EXPECT_TRUE(std::signbit(g.Find("arr.f64")->floats[1]));
  const GgufValue* n = g.Find("arr.nested");
  ASSERT_EQ(n->arrays.size(), 2u);
  EXPECT_EQ(n->array_size(), 2u);
  EXPECT_EQ(n->arrays[0].array_type, GgufType::kInt32);
  EXPECT_EQ(n->arrays[0].ints, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(n->arrays[1].strings, (std::vector<std::string>{"x"}));
  EXPECT_EQ(*g.GetString("replaced"), "second");
}

TEST(GgufTest, GettersReportMissingAndWrongKinds) {
  GgufWriter w;
  w.Set("s", GgufValue::String("x"));
  w.Set("n", GgufValue::U32(7));
  w.Set("b", GgufValue::Bool(false));
  TempDir dir;
  ASSERT_TRUE(w.Write(dir.file("g.gguf")).ok());
  auto f = GgufFile::Open(dir.file("g.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->GetString("missing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*f)->GetInt("s").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*f)->GetString("n").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*f)->GetBool("n").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*f)->GetFloat("s").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*(*f)->GetFloat("n"), 7.0);  // integers convert
  EXPECT_FALSE(*(*f)->GetBool("b"));
  EXPECT_EQ((*f)->Find("missing"), nullptr);
  EXPECT_EQ((*f)->FindTensor("missing"), nullptr);
  EXPECT_EQ((*f)->tensor("missing").status().code(), StatusCode::kNotFound);
  EXPECT_NE((*f)->GetString("missing").status().message().find("missing"), std::string::npos);
}

struct TensorCase {
  const char* name;
  DType dtype;
  std::vector<int64_t> shape;
};

void CheckTensorRoundTrip(uint64_t alignment) {
  const std::vector<TensorCase> cases = {
      {"f32.weight", DType::kF32, {3, 5}},
      {"f16.weight", DType::kF16, {2, 3, 7}},
      {"bf16.bias", DType::kBF16, {9}},
      {"q8.weight", DType::kQ8_0, {3, 64}},
      {"f32.4d", DType::kF32, {2, 1, 3, 2}},
      // The 2- to 6-bit types: block bytes as they are (random bytes: any bits round-trip).
      {"q4_0.weight", DType::kQ4_0, {3, 64}},
      {"q4_1.weight", DType::kQ4_1, {2, 96}},
      {"q5_0.weight", DType::kQ5_0, {5, 32}},
      {"q5_1.weight", DType::kQ5_1, {1, 160}},
      {"q2_k.weight", DType::kQ2_K, {3, 256}},
      {"q3_k.weight", DType::kQ3_K, {2, 512}},
      {"q4_k.experts", DType::kQ4_K, {2, 3, 256}},
      {"q5_k.weight", DType::kQ5_K, {1, 768}},
      {"q6_k.weight", DType::kQ6_K, {3, 256}},
  };
  std::vector<Tensor> originals;
  GgufWriter w;
  if (alignment != 32) w.Set("general.alignment", GgufValue::U32(alignment));
  w.Set("general.architecture", GgufValue::String("test"));
  for (size_t k = 0; k < cases.size(); ++k) {
    originals.push_back(RandomTensor(cases[k].dtype, cases[k].shape, 100 + k));
    ASSERT_TRUE(w.AddTensor(cases[k].name, originals.back()).ok());
  }
  TempDir dir;
  std::string path = dir.file("t.gguf");
  ASSERT_TRUE(w.Write(path).ok());
  // Written through a temporary file: nothing else is left in the directory.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);

  for (bool from_bytes : {false, true}) {
    SCOPED_TRACE(from_bytes ? "FromBytes" : "Open");
    auto f = from_bytes ? GgufFile::FromBytes(ReadFileBytes(path)) : GgufFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ((*f)->alignment(), alignment);
    ASSERT_EQ((*f)->tensors().size(), cases.size());
    std::vector<Tensor> views;
    for (size_t k = 0; k < cases.size(); ++k) {
      const GgufTensorInfo& info = (*f)->tensors()[k];
      EXPECT_EQ(info.name, cases[k].name);
      EXPECT_EQ(info.dtype, cases[k].dtype);
      EXPECT_EQ(info.shape, cases[k].shape);
      EXPECT_EQ(info.num_bytes, static_cast<uint64_t>(originals[k].num_bytes()));
      EXPECT_EQ(info.offset % alignment, 0u);
      auto t = (*f)->tensor(cases[k].name);
      ASSERT_TRUE(t.ok());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % std::min<uint64_t>(alignment, 64), 0u);
      views.push_back(*t);
    }
    f = Status(StatusCode::kInternal, "destroyed");  // the views must keep the data alive
    for (size_t k = 0; k < cases.size(); ++k) {
      EXPECT_EQ(views[k].shape, originals[k].shape);
      EXPECT_EQ(std::memcmp(views[k].data, originals[k].data, originals[k].num_bytes()), 0)
          << cases[k].name;
    }
  }
}

TEST(GgufTest, RoundTripsTensorsOfAllDtypes) { CheckTensorRoundTrip(32); }
TEST(GgufTest, RoundTripsTensorsWithCustomAlignment) { CheckTensorRoundTrip(256); }

TEST(GgufTest, WriterRefusesBadInput) {
  GgufWriter w;
  Tensor fp8 = Tensor::Allocate(DType::kFp8E4M3, {4});
  EXPECT_FALSE(w.AddTensor("fp8", fp8).ok());
  Tensor q8 = Tensor::Allocate(DType::kQ8_0, {2, 32});
  q8.shape = {2, 33};
  EXPECT_FALSE(w.AddTensor("q8", q8).ok());
  Tensor f = Tensor::Allocate(DType::kF32, {2, 2});
  EXPECT_TRUE(w.AddTensor("f", f).ok());
  EXPECT_FALSE(w.AddTensor("f", f).ok());                    // duplicate
  EXPECT_FALSE(w.AddTensor(std::string(65, 'x'), f).ok());   // name too long
  EXPECT_FALSE(w.AddTensor("", f).ok());
  Tensor five = Tensor::Allocate(DType::kF32, {1, 1, 1, 1, 2});
  EXPECT_FALSE(w.AddTensor("five", five).ok());
  Tensor empty;
  empty.shape = {4};
  EXPECT_FALSE(w.AddTensor("nodata", empty).ok());

  TempDir dir;
  GgufWriter bad_align;
  bad_align.Set("general.alignment", GgufValue::U32(48));
  EXPECT_FALSE(bad_align.Write(dir.file("a.gguf")).ok());
  GgufWriter out_of_range;
  GgufValue u8;
  u8.type = GgufType::kUint8;
  u8.i = 300;
  out_of_range.Set("x", u8);
  EXPECT_FALSE(out_of_range.Write(dir.file("b.gguf")).ok());
  EXPECT_FALSE(w.Write(dir.file("no/such/dir/c.gguf")).ok());
  // Failed writes leave nothing behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 0);
}

TEST(GgufTest, OpenReportsMissingFilesAndDirectories) {
  auto missing = GgufFile::Open("/nonexistent/model.gguf");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/model.gguf"), std::string::npos);
  TempDir dir;
  EXPECT_FALSE(GgufFile::Open(dir.path().string()).ok());
}

// Hand-built file with one tensor of ggml type `ggml_type`.
std::string OneTensorFile(const std::string& name, uint32_t ggml_type, uint64_t ne0) {
  std::string b = "GGUF";
  auto u32 = [&](uint32_t x) { b.append(reinterpret_cast<const char*>(&x), 4); };
  auto u64 = [&](uint64_t x) { b.append(reinterpret_cast<const char*>(&x), 8); };
  u32(3);
  u64(1);  // tensors
  u64(0);  // metadata
  u64(name.size());
  b += name;
  u32(1);
  u64(ne0);
  u32(ggml_type);
  u64(0);
  b.resize((b.size() + 31) / 32 * 32, '\0');
  b.append(4096, '\0');
  return b;
}

TEST(GgufTest, RefusesUnsupportedTensorTypesByName) {
  const std::string loads =
      "kvserve loads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K";
  // ggml ids of types we refuse: Q8_1, Q8_K, the IQ types, TQ1_0/TQ2_0, the repacked
  // Q4_0_4_4 ... and the removed Q4_2 / Q4_3.
  const std::vector<std::pair<uint32_t, std::string>> refused = {
      {9, "Q8_1"},    {15, "Q8_K"},  {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"},
      {19, "IQ1_S"},  {20, "IQ4_NL"}, {21, "IQ3_S"},  {22, "IQ2_S"},  {23, "IQ4_XS"},
      {29, "IQ1_M"},  {31, "Q4_0_4_4"}, {34, "TQ1_0"}, {35, "TQ2_0"}, {4, "Q4_2"},
      {5, "Q4_3"}};
  for (const auto& [id, name] : refused) {
    auto f = GgufFile::FromBytes(OneTensorFile("blk.3.attn_k.weight", id, 256));
    ASSERT_FALSE(f.ok()) << name;
    const std::string m = f.status().message();
    EXPECT_NE(m.find("tensor type " + name + " (ggml type " + std::to_string(id) + ")"),
              std::string::npos) << m;
    EXPECT_NE(m.find("blk.3.attn_k.weight"), std::string::npos) << m;
    EXPECT_NE(m.find(loads), std::string::npos) << m;
  }
  auto unknown = GgufFile::FromBytes(OneTensorFile("w", 1234, 4));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("1234"), std::string::npos);
  EXPECT_NE(unknown.status().message().find(loads), std::string::npos);
  // The supported ids parse (256 values: one block of every type).
  for (uint32_t id : {0u, 1u, 2u, 3u, 6u, 7u, 8u, 10u, 11u, 12u, 13u, 14u, 30u}) {
    auto ok = GgufFile::FromBytes(OneTensorFile("w", id, 256));
    EXPECT_TRUE(ok.ok()) << id << ": " << ok.status().ToString();
  }
  // A k-quant row must be whole 256-value blocks.
  auto q6k = GgufFile::FromBytes(OneTensorFile("output.weight", 14, 576));
  ASSERT_FALSE(q6k.ok());
  EXPECT_NE(q6k.status().message().find("576 is not a multiple of 256, the Q6_K block size"),
            std::string::npos)
      << q6k.status().message();
}

std::string AssetPath(const std::string& rel) { return std::string(KVSERVE_ASSETS_DIR) + "/" + rel; }

TEST(GgufTest, ReadsLlama2TinyRandom) {
  std::string path = AssetPath("models/llama-2-tiny-random/llama-2-tiny-random.gguf");
  KVSERVE_SKIP_IF_ABSENT(fs::exists(path), path);
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(*g.GetString("general.architecture"), "llama");
  EXPECT_EQ(*g.GetString("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(*g.GetInt("llama.embedding_length"), 8);
  EXPECT_EQ(*g.GetInt("llama.block_count"), 1);
  const GgufValue* tokens = g.Find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->array_type, GgufType::kString);
  ASSERT_EQ(tokens->strings.size(), 32000u);
  EXPECT_EQ(tokens->strings[0], "<unk>");
  EXPECT_EQ(tokens->strings[1], "<s>");
  EXPECT_EQ(tokens->strings[2], "</s>");
  EXPECT_EQ(g.Find("tokenizer.ggml.scores")->floats.size(), 32000u);
  ASSERT_FALSE(g.tensors().empty());
  const GgufTensorInfo* embd = g.FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->shape, (std::vector<int64_t>{32000, 8}));
  uint64_t total_bytes = 0;
  for (const GgufTensorInfo& info : g.tensors()) {
    EXPECT_TRUE(info.dtype == DType::kF16 || info.dtype == DType::kF32) << info.name;
    total_bytes += info.num_bytes;
    auto t = g.tensor(info.name);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(static_cast<uint64_t>(t->num_bytes()), info.num_bytes);
  }
  EXPECT_LE(total_bytes, g.file_bytes());
  // The embedding values are finite (random weights, but real numbers).
  auto t = g.tensor("token_embd.weight");
  std::vector<float> row(8);
  DequantizeRow(t->dtype, t->row(31999), row.data(), 8);
  for (float x : row) EXPECT_TRUE(std::isfinite(x));
}

TEST(GgufTest, ReadsVocabFiles) {
  struct Vocab {
    const char* file;
    const char* model;
    size_t num_tokens;
  };
  const Vocab vocabs[] = {
      {"ggml-vocab-llama-spm.gguf", "llama", 32000}, {"ggml-vocab-phi-3.gguf", "llama", 32064},
      {"ggml-vocab-gpt-2.gguf", "gpt2", 50257},      {"ggml-vocab-falcon.gguf", "gpt2", 65024},
      {"ggml-vocab-mpt.gguf", "gpt2", 50432},        {"ggml-vocab-starcoder.gguf", "gpt2", 49152},
      {"ggml-vocab-bert-bge.gguf", "bert", 30522},
  };
  int num_read = 0;
  for (const Vocab& v : vocabs) {
    std::string path = AssetPath(std::string("tokenizers/") + v.file);
    if (!fs::exists(path)) continue;
    SCOPED_TRACE(v.file);
    auto f = GgufFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_TRUE((*f)->version() == 2 || (*f)->version() == 3);
    EXPECT_EQ(*(*f)->GetString("tokenizer.ggml.model"), v.model);
    EXPECT_TRUE((*f)->GetString("general.architecture").ok());
    const GgufValue* tokens = (*f)->Find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->strings.size(), v.num_tokens);
    EXPECT_TRUE((*f)->tensors().empty());
    ++num_read;
  }
  KVSERVE_SKIP_IF_ABSENT(num_read > 0, "vocab files under " << AssetPath("tokenizers"));
}

}  // namespace
}  // namespace kvserve
