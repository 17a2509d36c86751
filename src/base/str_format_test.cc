#include "base/str_format.h"

#include <string>

#include <gtest/gtest.h>

namespace kvserve {
namespace {

TEST(StrFormatTest, FormatsLongerThanItsBuffer) {
  EXPECT_EQ(StrFormat("%d-%s", 7, "x"), "7-x");
  const std::string long_text(2000, 'a');
  EXPECT_EQ(StrFormat("%s!", long_text.c_str()), long_text + "!");
}

TEST(StrFormatTest, HumanCount) {
  EXPECT_EQ(HumanCount(999), "999");
  EXPECT_EQ(HumanCount(260000), "260K");
  EXPECT_EQ(HumanCount(1500), "1.5K");
  EXPECT_EQ(HumanCount(135000000), "135M");
  EXPECT_EQ(HumanCount(1240000000), "1.24B");
}

TEST(StrFormatTest, HumanBytesUsesPowersOf1024) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1536), "1.50 KB");
  EXPECT_EQ(HumanBytes(int64_t{34} * 1024 * 1024 + 512 * 1024), "34.5 MB");
  EXPECT_EQ(HumanBytes(int64_t{1} << 30), "1.00 GB");
  EXPECT_EQ(HumanBytes(int64_t{2048} << 40), "2048.0 TB");
}

TEST(StrFormatTest, HtmlEscapeAsMarkupsafe) {
  EXPECT_EQ(HtmlEscape(R"(<a href="x">Tom & 'Jerry'</a>)"),
            "&lt;a href=&#34;x&#34;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;");
  EXPECT_EQ(HtmlEscape("plain"), "plain");
}

}  // namespace
}  // namespace kvserve
