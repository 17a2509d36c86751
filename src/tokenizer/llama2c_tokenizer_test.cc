// LoadLlama2cTokenizer on hand-written files, valid and broken.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

struct Entry {
  float score;
  std::string text;
};

std::string Serialize(int32_t max_len, const std::vector<Entry>& entries) {
  std::string out;
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  put(&max_len, 4);
  for (const Entry& e : entries) {
    const auto len = static_cast<int32_t>(e.text.size());
    put(&e.score, 4);
    put(&len, 4);
    out += e.text;
  }
  return out;
}

std::vector<Entry> ValidEntries() {
  std::vector<Entry> e = {{0, "<unk>"}, {0, "\n<s>\n"}, {0, "\n</s>\n"}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    e.push_back({0, name});
  }
  e.push_back({-1, " "});
  e.push_back({-2, "h"});
  e.push_back({-3, "i"});
  e.push_back({-4, " h"});
  e.push_back({-5, " hi"});
  return e;
}

class Llama2cTokenizerTest : public testing::Test {
 protected:
  std::string Write(const std::string& bytes) {
    path_ = testing::TempDir() + "/llama2c_tok_" +
            testing::UnitTest::GetInstance()->current_test_info()->name() + ".bin";
    std::ofstream(path_, std::ios::binary) << bytes;
    return path_;
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

TEST_F(Llama2cTokenizerTest, LoadsAndEncodes) {
  const auto entries = ValidEntries();
  auto spec = LoadLlama2cTokenizer(Write(Serialize(8, entries)), entries.size());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->llama2c_format);
  EXPECT_TRUE(spec->add_bos);
  EXPECT_EQ(spec->bos_id, 1);
  EXPECT_EQ(spec->eos_id, 2);
  EXPECT_EQ(spec->tokens[1], "<s>");
  EXPECT_EQ(spec->token_types[1], TokenType::kControl);
  EXPECT_EQ(spec->token_types[3 + 'A'], TokenType::kByte);
  EXPECT_EQ(spec->scores[263], -5.0f);
  auto tok = Tokenizer::Create(*spec);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  // " hi" (-5) is merged last but only it covers the text; "x" falls back to byte 3 + 'x'.
  EXPECT_EQ((*tok)->Encode("hi x", {}), (std::vector<TokenId>{1, 263, 259, 3 + 'x'}));
  EXPECT_EQ((*tok)->Decode({1, 263, 259, 3 + 'x'}), "hi x");
}

TEST_F(Llama2cTokenizerTest, RejectsBrokenFiles) {
  const auto entries = ValidEntries();
  const std::string good = Serialize(8, entries);
  const int64_t n = static_cast<int64_t>(entries.size());
  // Truncated anywhere.
  for (size_t cut : {size_t{0}, size_t{2}, size_t{4}, size_t{9}, good.size() / 2, good.size() - 1}) {
    auto spec = LoadLlama2cTokenizer(Write(good.substr(0, cut)), n);
    EXPECT_FALSE(spec.ok()) << "cut at " << cut;
  }
  // Trailing garbage, absurd max_token_length, absurd token length, negative length.
  EXPECT_FALSE(LoadLlama2cTokenizer(Write(good + "xx"), n).ok());
  EXPECT_FALSE(LoadLlama2cTokenizer(Write(Serialize(0, entries)), n).ok());
  EXPECT_FALSE(LoadLlama2cTokenizer(Write(Serialize(1 << 30, entries)), n).ok());
  std::string bad = good;
  const int32_t huge = 0x7FFFFFF0;
  std::memcpy(&bad[4 + 4], &huge, 4);  // length of token 0
  EXPECT_FALSE(LoadLlama2cTokenizer(Write(bad), n).ok());
  const int32_t negative = -3;
  std::memcpy(&bad[4 + 4], &negative, 4);
  EXPECT_FALSE(LoadLlama2cTokenizer(Write(bad), n).ok());
  // Token longer than max_token_length.
  EXPECT_FALSE(LoadLlama2cTokenizer(Write(Serialize(3, entries)), n).ok());
  // Absurd vocab sizes fail fast instead of allocating.
  EXPECT_FALSE(LoadLlama2cTokenizer(Write(good), int64_t{1} << 40).ok());
  EXPECT_FALSE(LoadLlama2cTokenizer(Write(good), 1000000).ok());
  EXPECT_FALSE(LoadLlama2cTokenizer(Write(good), 10).ok());
  EXPECT_FALSE(LoadLlama2cTokenizer(testing::TempDir() + "/does_not_exist.bin", n).ok());
}

}  // namespace
}  // namespace kvserve
