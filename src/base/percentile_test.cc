#include "base/percentile.h"

#include <vector>

#include <gtest/gtest.h>

namespace kvserve {
namespace {

TEST(Percentile, MatchesNumpyLinearInterpolation) {
  // numpy.percentile([1, 2, 3, 4], [0, 50, 90, 99, 100]) = 1, 2.5, 3.7, 3.97, 4
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  EXPECT_NEAR(Percentile(v, 90), 3.7, 1e-12);
  EXPECT_NEAR(Percentile(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4.0);
  EXPECT_DOUBLE_EQ(Percentile({5.0}, 99), 5.0);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0.0);
  std::vector<double> hundred;
  for (int i = 1; i <= 101; ++i) hundred.push_back(i);
  EXPECT_DOUBLE_EQ(Percentile(hundred, 99), 100.0);
  EXPECT_DOUBLE_EQ(Percentile(hundred, 90), 91.0);
}

TEST(Percentile, SortedFormAgreesAndMatchesLlamaCppKldFigures) {
  // llama.cpp's KLD percentiles over [1, 2, 3, 4, 5]: median 3, p99 4.96.
  const std::vector<double> v = {1, 2, 3, 4, 5};
  EXPECT_DOUBLE_EQ(PercentileOfSorted(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(v, 50), 3.0);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(v, 99), 4.96);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(v, 100), 5.0);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(std::vector<double>{7.0}, 99.9), 7.0);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(v, 37.5), Percentile({5, 3, 1, 4, 2}, 37.5));
  EXPECT_DOUBLE_EQ(PercentileOfSorted({}, 10), 0.0);
}

TEST(PercentileDeathTest, RejectsPercentOutsideTheRange) {
  EXPECT_DEATH(Percentile({1.0}, 101.0), "p=101");
  EXPECT_DEATH(Percentile({1.0}, -1.0), "p=-1");
}

}  // namespace
}  // namespace kvserve
