#include "cli/scheduler_flags.h"

#include <gtest/gtest.h>

namespace kvserve::cli {
namespace {

TEST(SchedulerFlagsTest, ParsesEveryFlagAndKeepsTheCallersDefaults) {
  CLI::App app("test");
  SchedulerFlags flags;
  flags.max_num_batched_tokens = 8192;  // a command's own default (sim's)
  AddSchedulerFlags(&app, &flags);
  const char* none[] = {"test"};
  app.parse(1, none);
  EXPECT_EQ(flags.max_num_batched_tokens, 8192);
  EXPECT_EQ(flags.max_num_seqs, 256);
  EXPECT_TRUE(flags.enable_chunked_prefill);
  EXPECT_TRUE(flags.enable_prefix_caching);
  EXPECT_EQ(flags.policy, SchedulingPolicy::kFcfs);

  const char* argv[] = {"test",
                        "--max-num-seqs", "8",
                        "--max-num-batched-tokens", "512",
                        "--no-enable-chunked-prefill",
                        "--no-enable-prefix-caching",
                        "--long-prefill-token-threshold", "64",
                        "--scheduling-policy", "priority"};
  app.parse(static_cast<int>(std::size(argv)), argv);
  EXPECT_EQ(flags.max_num_seqs, 8);
  EXPECT_EQ(flags.max_num_batched_tokens, 512);
  EXPECT_FALSE(flags.enable_chunked_prefill);
  EXPECT_FALSE(flags.enable_prefix_caching);
  EXPECT_EQ(flags.long_prefill_token_threshold, 64);
  EXPECT_EQ(flags.policy, SchedulingPolicy::kPriority);

  const char* bad[] = {"test", "--scheduling-policy", "lifo"};
  EXPECT_THROW(app.parse(3, bad), CLI::ValidationError);
}

}  // namespace
}  // namespace kvserve::cli
