#include "model/safetensors.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

namespace kvserve {
namespace {

std::string Image(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

TEST(SafetensorsTest, WriteThenRead) {
  Tensor a = Tensor::Allocate(DType::kF32, {3, 4});
  for (int i = 0; i < 12; ++i) static_cast<float*>(a.mutable_data())[i] = i * 0.5f;
  Tensor b = Tensor::Allocate(DType::kBF16, {5});
  for (int i = 0; i < 5; ++i) static_cast<uint16_t*>(b.mutable_data())[i] = Fp32ToBf16(i - 2.0f);
  Tensor c = Tensor::Allocate(DType::kF16, {2, 1, 3});
  for (int i = 0; i < 6; ++i) static_cast<uint16_t*>(c.mutable_data())[i] = Fp32ToFp16(i * 0.25f);
  std::string path = std::filesystem::temp_directory_path() /
                     ("kvserve_st_" + std::to_string(::getpid()) + ".safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"z.a", a}, {"b", b}, {"c", c}}, {{"format", "pt"}}).ok());
  auto f = SafetensorsFile::Open(path);
  std::filesystem::remove(path);  // the mapping stays valid
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  EXPECT_EQ((*f)->tensors().size(), 3u);
  for (const auto& [name, want] : std::vector<std::pair<std::string, Tensor>>{{"z.a", a}, {"b", b}, {"c", c}}) {
    auto t = (*f)->tensor(name);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->dtype, want.dtype);
    EXPECT_EQ(t->shape, want.shape);
    EXPECT_EQ(std::memcmp(t->data, want.data, want.num_bytes()), 0) << name;
  }
  auto missing = (*f)->tensor("nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(SafetensorsTest, ParsesHandWrittenImage) {
  std::string data(16, '\0');
  float v[4] = {1, 2, 3, 4};
  std::memcpy(data.data(), v, 16);
  auto f = SafetensorsFile::FromBytes(Image(
      R"({"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", data));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto t = (*f)->tensor("w");
  ASSERT_TRUE(t.ok());
  // The data section starts right after a header of odd length: the tensor must still come
  // back aligned for float reads.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % alignof(float), 0u);
  EXPECT_EQ(static_cast<const float*>(t->data)[3], 4.0f);
}

TEST(SafetensorsTest, RefusesHostileHeaders) {
  std::string data(16, '\0');
  auto err = [&](const std::string& header, const std::string& bytes) {
    auto f = SafetensorsFile::FromBytes(Image(header, bytes));
    EXPECT_FALSE(f.ok()) << header;
    return f.ok() ? std::string() : f.status().message();
  };
  // Header length beyond the file.
  std::string img = Image("{}", "");
  img[0] = static_cast<char>(0xff);
  img[5] = 1;
  EXPECT_FALSE(SafetensorsFile::FromBytes(img).ok());
  EXPECT_FALSE(SafetensorsFile::FromBytes("abc").ok());
  err("{not json", data);
  err("[1,2]", data);
  // Offsets outside the data.
  err(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,20]}})", data);
  err(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", data);
  err(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", data);
  // Overlap.
  err(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", data);
  // Unsupported dtype, named.
  std::string m = err(R"({"w":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", data);
  EXPECT_NE(m.find("I64"), std::string::npos) << m;
  // Shape product vs bytes; overflowing shapes.
  err(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", data);
  err(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,16]}})", data);
  err(R"({"w":{"dtype":"F32","shape":"x","data_offsets":[0,16]}})", data);
  err(R"({"w":{"dtype":"F32","shape":[4]}})", data);
  err(R"({"__metadata__":{"k":1}})", data);
}

}  // namespace
}  // namespace kvserve
