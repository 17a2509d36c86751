// Opens every file in tests/data/gguf_malformed (made by scripts/make_malformed_gguf.py) and
// checks that the reader refuses it with a message naming the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "model/gguf.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

const std::string kMalformedDir = std::string(KVSERVE_TESTDATA_DIR) + "/gguf_malformed";
const std::string kValidDir = std::string(KVSERVE_TESTDATA_DIR) + "/gguf";

// File name -> substrings the error message must contain.
const std::map<std::string, std::vector<std::string>>& Expected() {
  static const auto* table = new std::map<std::string, std::vector<std::string>>{
      {"empty.gguf", {"too small for the GGUF magic"}},
      {"bad_magic.gguf", {"bad magic", "47 47 4d 4c"}},
      {"version1.gguf", {"version 1 is not supported"}},
      {"version4.gguf", {"unsupported GGUF version 4"}},
      {"big_endian.gguf", {"big-endian"}},
      {"truncated_header.gguf", {"truncated file: tensor count needs 8 bytes at byte offset 8"}},
      {"absurd_tensor_count.gguf", {"tensor count 1099511627776 exceeds the limit"}},
      {"tensor_count_too_big_for_file.gguf", {"tensor count 1000 cannot fit"}},
      {"absurd_metadata_count.gguf", {"metadata count 4611686018427387904 exceeds the limit"}},
      {"metadata_count_too_big_for_file.gguf", {"metadata count 500 cannot fit"}},
      {"huge_key_length.gguf", {"metadata key #0", "string length 1099511627776"}},
      {"huge_string_length.gguf",
       {"metadata key 'general.name'", "string length 9223372036854775808"}},
      {"huge_array_length.gguf",
       {"'tokenizer.ggml.scores'", "array length 1099511627776", "exceeds the limit"}},
      {"array_too_long_for_file.gguf",
       {"'tokenizer.ggml.token_type'", "array length 1000 of int32", "cannot fit"}},
      {"string_array_too_long_for_file.gguf",
       {"'tokenizer.ggml.tokens'", "array length 5 of string", "cannot fit"}},
      {"nested_array_too_deep.gguf", {"'deep'", "nested deeper than the limit of 4"}},
      {"unknown_value_type.gguf", {"'general.name'", "unknown value type 13"}},
      {"unknown_array_element_type.gguf", {"'general.tags'", "unknown value type 99"}},
      {"bad_bool.gguf", {"'general.flag'", "bool value 2"}},
      {"empty_key.gguf", {"metadata key #0", "is empty"}},
      {"duplicate_key.gguf", {"duplicate metadata key 'general.name'"}},
      {"bad_alignment_not_pow2.gguf", {"general.alignment 48 is not a power of two"}},
      {"bad_alignment_zero.gguf", {"general.alignment 0 is not a power of two"}},
      {"bad_alignment_huge.gguf", {"general.alignment 1099511627776 is not a power of two"}},
      {"bad_alignment_type.gguf", {"general.alignment must be an unsigned integer, got string"}},
      {"tensor_offset_past_end.gguf", {"tensor 'a'", "data offset 4096 is past the end"}},
      {"tensor_data_past_end.gguf", {"tensor 'a'", "32 bytes", "runs past the end of the file"}},
      {"misaligned_offset.gguf", {"tensor 'a'", "offset 16 is not a multiple of the alignment 32"}},
      {"misaligned_element.gguf", {"tensor 'a'", "not aligned to its 4-byte elements"}},
      {"zero_dim.gguf", {"tensor 'a'", "dimension 1 is 0"}},
      {"negative_dim.gguf", {"tensor 'a'", "dimension 1 is negative (-2)"}},
      {"overflowing_dims.gguf", {"tensor 'a'", "element count overflows"}},
      {"overflowing_bytes.gguf", {"tensor 'a'", "byte size overflows"}},
      {"too_many_dims.gguf", {"tensor 'a'", "n_dims is 5"}},
      {"zero_dims.gguf", {"tensor 'a'", "n_dims is 0"}},
      {"duplicate_tensor_name.gguf", {"duplicate tensor name 'a'"}},
      {"overlapping_tensors.gguf", {"tensor 'c' at data offset 64 overlaps tensor 'b'"}},
      {"too_many_nested_arrays.gguf", {"'n'", "nested arrays over the limit of 1024"}},
      {"unsupported_type_iq2_xxs.gguf",
       {"tensor 'blk.0.ffn_up.weight'", "IQ2_XXS (ggml type 16) is not supported",
        "kvserve loads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, "
        "Q6_K"}},
      {"unsupported_type_q8_k.gguf",
       {"tensor 'output.weight'", "Q8_K (ggml type 15) is not supported", "kvserve loads"}},
      {"unknown_tensor_type.gguf", {"tensor 'a'", "unknown ggml type 99", "kvserve loads"}},
      {"q8_0_inner_not_multiple.gguf",
       {"tensor 'a'", "row length (inner dimension) 33 is not a multiple of 32, the Q8_0 block"}},
      {"q6_k_inner_not_multiple.gguf",
       {"tensor 'output.weight'",
        "row length (inner dimension) 576 is not a multiple of 256, the Q6_K block size",
        "Q6_K rows must be whole blocks"}},
      {"truncated_q4_k.gguf",
       {"tensor 'blk.0.attn_q.weight'", "data (288 bytes at data offset 0)",
        "runs past the end of the file"}},
      {"tensor_name_too_long.gguf", {"tensor #0", "over the limit of 64"}},
      {"empty_tensor_name.gguf", {"tensor #0", "has an empty name"}},
      {"truncated_metadata.gguf", {"metadata key 'llama.block_count'", "truncated file"}},
      {"truncated_tensor_info.gguf", {"tensor 'b'", "truncated file"}},
      {"data_section_past_end.gguf", {"data section starts at byte offset", "past the end"}},
  };
  return *table;
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(GgufMalformedTest, TableCoversEveryFile) {
  std::set<std::string> on_disk;
  for (const auto& entry : fs::directory_iterator(kMalformedDir)) {
    if (entry.path().extension() == ".gguf") on_disk.insert(entry.path().filename().string());
  }
  std::set<std::string> in_table;
  for (const auto& [name, substrings] : Expected()) in_table.insert(name);
  EXPECT_EQ(on_disk, in_table) << "regenerate with scripts/make_malformed_gguf.py and update "
                                  "the table in this test";
}

TEST(GgufMalformedTest, EveryFileIsRefusedWithItsMessage) {
  for (const auto& [name, substrings] : Expected()) {
    SCOPED_TRACE(name);
    std::string path = kMalformedDir + "/" + name;
    ASSERT_TRUE(fs::exists(path));
    // A small array budget makes too_many_nested_arrays.gguf (2000 nested arrays) fail.
    GgufLimits limits;
    limits.max_array_elems = 1 << 16;
    auto opened = GgufFile::Open(path, limits);
    ASSERT_FALSE(opened.ok());
    const std::string message = opened.status().message();
    EXPECT_NE(message.find(path), std::string::npos) << message;  // Open names the file
    for (const std::string& s : substrings) {
      EXPECT_NE(message.find(s), std::string::npos) << "missing '" << s << "' in: " << message;
    }
    // FromBytes reaches the same verdict.
    auto from_bytes = GgufFile::FromBytes(ReadFileBytes(path), limits);
    ASSERT_FALSE(from_bytes.ok());
    EXPECT_NE(message.find(from_bytes.status().message()), std::string::npos)
        << message << " vs " << from_bytes.status().message();
  }
}

TEST(GgufMalformedTest, ValidFilesParse) {
  for (const char* name : {"small_valid.gguf", "all_types.gguf", "quant_types.gguf"}) {
    auto f = GgufFile::Open(kValidDir + "/" + name);
    ASSERT_TRUE(f.ok()) << name << ": " << f.status().ToString();
  }
  auto f = GgufFile::Open(kValidDir + "/small_valid.gguf");
  ASSERT_EQ((*f)->tensors().size(), 3u);
  EXPECT_EQ((*f)->tensors()[2].dtype, DType::kQ8_0);
  auto q = (*f)->tensor("q");
  std::vector<float> row(32);
  DequantizeRow(DType::kQ8_0, q->data, row.data(), 32);
  EXPECT_EQ(row[3], 1.5f);  // scale 0.5 times qs[3] = 3
  auto all = GgufFile::Open(kValidDir + "/all_types.gguf");
  EXPECT_EQ((*all)->alignment(), 64u);
  EXPECT_EQ((*all)->Find("t.u64")->u, ~uint64_t{0});
  EXPECT_EQ(*(*all)->GetInt("t.i64"), INT64_MIN);
  EXPECT_EQ((*all)->Find("t.arr_arr")->arrays[1].strings[0], "n");
  EXPECT_EQ((*all)->tensors()[0].dtype, DType::kBF16);
}

// quant_types.gguf: one [2, block] tensor per 2- to 6-bit type, named after it; each loads
// in place with its GGML block size and rows of DTypeRowBytes.
TEST(GgufMalformedTest, QuantTypesLoadInPlace) {
  auto f = GgufFile::Open(kValidDir + "/quant_types.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"q4_0", 18}, {"q4_1", 20}, {"q5_0", 22}, {"q5_1", 24}, {"q2_k", 84},
      {"q3_k", 110}, {"q4_k", 144}, {"q5_k", 176}, {"q6_k", 210}};
  ASSERT_EQ((*f)->tensors().size(), expected.size());
  for (const auto& [name, block_bytes] : expected) {
    SCOPED_TRACE(name);
    const GgufTensorInfo* info = (*f)->FindTensor(name);
    ASSERT_NE(info, nullptr);
    EXPECT_STREQ(DTypeName(info->dtype), name.c_str());
    const int64_t elems = DTypeBlockElems(info->dtype);
    EXPECT_EQ(info->shape, (std::vector<int64_t>{2, elems}));
    EXPECT_EQ(DTypeBlockBytes(info->dtype), block_bytes);
    EXPECT_EQ(info->num_bytes, static_cast<uint64_t>(2 * block_bytes));
    auto t = (*f)->tensor(name);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->row_bytes(), block_bytes);
    std::vector<float> row(static_cast<size_t>(elems));
    DequantizeRow(t->dtype, t->row(1), row.data(), elems);  // any bytes decode
  }
}

// The last tensor of small_valid.gguf ends at the end of the file, so every strict prefix
// must be refused (and none may crash).
TEST(GgufMalformedTest, EveryPrefixOfAValidFileIsRefused) {
  std::string bytes = ReadFileBytes(kValidDir + "/small_valid.gguf");
  ASSERT_GT(bytes.size(), 100u);
  ASSERT_TRUE(GgufFile::FromBytes(bytes).ok());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto f = GgufFile::FromBytes(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_FALSE(f.status().message().empty());
  }
}

// Every single-byte corruption of the header and metadata either parses or is refused;
// with a byte flipped to 0xff the counts and lengths become huge and must be caught.
TEST(GgufMalformedTest, SingleByteCorruptionsNeverCrash) {
  std::string bytes = ReadFileBytes(kValidDir + "/small_valid.gguf");
  int refused = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (char c : {'\xff', '\x00', '\x80'}) {
      std::string b = bytes;
      b[i] = c;
      auto f = GgufFile::FromBytes(b);
      if (!f.ok()) ++refused;
    }
  }
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace kvserve
