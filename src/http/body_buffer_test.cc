#include "http/body_buffer.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace kvserve::http {
namespace {

TEST(BodyBufferTest, AppendsGrowsAndMoves) {
  BodyBuffer b;
  EXPECT_EQ(b.view(), "");
  std::string want;
  for (int i = 0; i < 5000; ++i) {
    const std::string piece = std::to_string(i) + ",";
    ASSERT_TRUE(b.Append(piece.data(), piece.size()));
    want += piece;
  }
  EXPECT_EQ(b.view(), want);
  EXPECT_GE(b.capacity_bytes(), want.size());
  EXPECT_LE(b.capacity_bytes(), 2 * want.size() + 4096);
  BodyBuffer moved = std::move(b);
  EXPECT_EQ(moved.view(), want);
  EXPECT_EQ(b.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty
  moved.Clear();
  EXPECT_EQ(moved.view(), "");
}

TEST(BodyBufferTest, ReserveKeepsTheBytesAndIsExactForAKnownLength) {
  BodyBuffer b;
  ASSERT_TRUE(b.Append("abc", 3));
  ASSERT_TRUE(b.Reserve(10 << 20));
  EXPECT_EQ(b.view(), "abc");
  EXPECT_EQ(b.capacity_bytes(), size_t{10} << 20);
  const std::string big(10 << 20, 'x');
  ASSERT_TRUE(b.Append(big.data(), big.size() - 3));
  EXPECT_EQ(b.capacity_bytes(), size_t{10} << 20);  // filled exactly, no growth
  EXPECT_EQ(b.view().substr(0, 4), "abcx");
}

}  // namespace
}  // namespace kvserve::http
