// Detection of volatile spans on synthetic token lists (exact offsets), and the replays through
// the prefix cache that give the hit rates before and after reordering.
#include "promptlint/prompt_lint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "promptlint/prompt_lint_report.h"

namespace kvserve::promptlint {
namespace {

constexpr TokenId kBos = 1;

std::vector<TokenId> RandomTokens(int64_t n, uint64_t seed, TokenId lo = 1000, TokenId hi = 30000) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<TokenId> d(lo, hi - 1);
  std::vector<TokenId> out(static_cast<size_t>(n));
  for (TokenId& t : out) t = d(rng);
  return out;
}

void Append(std::vector<TokenId>* to, const std::vector<TokenId>& more) {
  to->insert(to->end(), more.begin(), more.end());
}

// BOS, "Current time:" (2 tokens), a timestamp of 3 tokens of which the first is the same in
// every request and the second in groups of ten, a newline token, a 2,000-token system
// prompt, then a question of 20 tokens starting with a token of its own.
std::vector<LintPrompt> TimestampPrompts(int n, const std::vector<TokenId>& system) {
  std::vector<LintPrompt> out;
  for (int i = 0; i < n; ++i) {
    LintPrompt p;
    p.line = i + 1;
    p.tokens = {kBos, 500, 501, 610, 620 + i / 10, 700 + i, 999};
    Append(&p.tokens, system);
    p.tokens.push_back(40000 + i);
    Append(&p.tokens, RandomTokens(19, 100 + static_cast<uint64_t>(i)));
    out.push_back(std::move(p));
  }
  return out;
}

TEST(PromptLintTest, TimestampBeforeSharedSystemPromptIsFoundWithItsOffsets) {
  const std::vector<TokenId> system = RandomTokens(2000, 1);
  const std::vector<LintPrompt> prompts = TimestampPrompts(64, system);
  auto report = AnalyzePrompts(prompts, PromptLintOptions{});
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_EQ(report->spans.size(), 1u);
  const VolatileSpan& s = report->spans[0];
  // [BOS, 500, 501, 610] is common; tokens 4 and 5 vary; the newline (6) is the same in all.
  EXPECT_EQ(s.begin_tokens, 4);
  EXPECT_EQ(s.min_end_tokens, 6);
  EXPECT_EQ(s.max_end_tokens, 6);
  EXPECT_EQ(s.min_span_tokens, 2);
  EXPECT_EQ(s.num_requests, 64);
  EXPECT_EQ(s.num_cluster_requests, 64);
  EXPECT_EQ(s.shared_tokens, 2001);  // the newline and the system prompt
  EXPECT_EQ(s.first_line, 1);
  ASSERT_EQ(s.examples.size(), 3u);
  EXPECT_EQ(s.examples[0].line, 1);
  EXPECT_EQ(s.examples[0].tokens, (std::vector<TokenId>{620, 700}));
  EXPECT_EQ(s.examples[1].tokens, (std::vector<TokenId>{620, 701}));
  EXPECT_EQ(s.examples[0].text, "[620 700]");  // no decoder: the ids
  // Today every prompt diverges within its first block: nothing is cached.
  EXPECT_EQ(s.cached_tokens_before, 0);
  EXPECT_EQ(report->hit_rate, 0.0);
  // Reordered, prompts 2..64 share [BOS 500 501 610] + 2,001 tokens = 2,005 tokens: 125 blocks.
  EXPECT_EQ(s.cached_tokens_after, 63 * 2000);
  EXPECT_LT(s.hit_rate_before, s.hit_rate_after);
  EXPECT_DOUBLE_EQ(s.hit_rate_after, 63.0 * 2000 / static_cast<double>(report->num_prompt_tokens));
  EXPECT_DOUBLE_EQ(report->hit_rate_all_reordered, s.hit_rate_after);
}

TEST(PromptLintTest, DecoderNamesTheSpanAndTheReportsRender) {
  // Eight requests: the timestamp's second token (620) is common to all of them here.
  const std::vector<LintPrompt> prompts = TimestampPrompts(8, RandomTokens(300, 2));
  auto decode = [](const std::vector<TokenId>& ids) {
    std::string s;
    for (TokenId t : ids) s += "<" + std::to_string(t) + ">";
    return s;
  };
  auto report = AnalyzePrompts(prompts, PromptLintOptions{}, decode);
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->spans.size(), 1u);
  EXPECT_EQ(report->spans[0].examples[0].text, "<700>");
  EXPECT_EQ(report->spans[0].context_before_text, "<1><500><501><610><620>");
  const std::string text = FormatPromptLintText(*report);
  EXPECT_NE(text.find("span 1: tokens [5, 6) vary in 8 of 8 requests"), std::string::npos) << text;
  EXPECT_NE(text.find("\"<700>\""), std::string::npos) << text;
  const auto j = PromptLintToJson(*report);
  EXPECT_EQ(j["spans"][0]["begin_tokens"], 5);
  EXPECT_EQ(j["spans"][0]["end_tokens_max"], 6);
  EXPECT_EQ(j["spans"][0]["examples"][1]["line"], 2);
  EXPECT_GT(j["spans"][0]["hit_rate_after"].get<double>(), j["hit_rate"].get<double>());
}

TEST(PromptLintTest, NoSpanWhenPromptsShareEverything) {
  std::vector<LintPrompt> prompts;
  const std::vector<TokenId> same = RandomTokens(500, 3);
  for (int i = 0; i < 10; ++i) prompts.push_back({i + 1, "", same});
  auto report = AnalyzePrompts(prompts, PromptLintOptions{});
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->spans.empty());
  EXPECT_EQ(report->num_clusters, 1);
  EXPECT_GT(report->hit_rate, 0.8);
  EXPECT_EQ(report->hit_rate_all_reordered, report->hit_rate);
  EXPECT_NE(FormatPromptLintText(*report).find("no volatile span"), std::string::npos);
}

TEST(PromptLintTest, NoSpanWhenOnlyTheEndDiffers) {
  // A shared system prompt first, then each request's own question: already cache-friendly.
  const std::vector<TokenId> system = RandomTokens(1000, 4);
  std::vector<LintPrompt> prompts;
  for (int i = 0; i < 20; ++i) {
    LintPrompt p{i + 1, "", {kBos}};
    Append(&p.tokens, system);
    Append(&p.tokens, RandomTokens(100, 50 + static_cast<uint64_t>(i)));
    prompts.push_back(std::move(p));
  }
  auto report = AnalyzePrompts(prompts, PromptLintOptions{});
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->spans.empty());
  EXPECT_GT(report->hit_rate, 0.8);
}

TEST(PromptLintTest, NoSpanWhenPromptsShareNothing) {
  std::vector<LintPrompt> prompts;
  for (int i = 0; i < 20; ++i) prompts.push_back({i + 1, "", RandomTokens(800, 200 + static_cast<uint64_t>(i))});
  auto report = AnalyzePrompts(prompts, PromptLintOptions{});
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->spans.empty());
  EXPECT_EQ(report->num_clusters, 0);
  EXPECT_EQ(report->hit_rate, 0.0);
}

TEST(PromptLintTest, ShortSharedRegionIsNotASpan) {
  // 40 shared tokens after the varying one: below min_shared_tokens (64).
  const std::vector<TokenId> shared = RandomTokens(40, 5);
  std::vector<LintPrompt> prompts;
  for (int i = 0; i < 10; ++i) {
    LintPrompt p{i + 1, "", {kBos, 100 + i}};
    Append(&p.tokens, shared);
    prompts.push_back(std::move(p));
  }
  auto report = AnalyzePrompts(prompts, PromptLintOptions{});
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->spans.empty());
  PromptLintOptions o;
  o.min_shared_tokens = 32;
  report = AnalyzePrompts(prompts, o);
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->spans.size(), 1u);
  EXPECT_EQ(report->spans[0].begin_tokens, 1);
  EXPECT_EQ(report->spans[0].max_end_tokens, 2);
}

TEST(PromptLintTest, UserIdsOfDifferentLengthsAndAMissingOne) {
  // "user <id>:" with ids of 1-3 tokens; request 5 has no id line at all (an empty span).
  const std::vector<TokenId> system = RandomTokens(600, 6);
  std::vector<LintPrompt> prompts;
  for (int i = 0; i < 12; ++i) {
    LintPrompt p{i + 1, "", {kBos, 300}};
    if (i != 4) {
      for (int j = 0; j <= i % 3; ++j) p.tokens.push_back(5000 + 10 * i + j);
    }
    Append(&p.tokens, system);
    Append(&p.tokens, RandomTokens(10, 300 + static_cast<uint64_t>(i)));
    prompts.push_back(std::move(p));
  }
  auto report = AnalyzePrompts(prompts, PromptLintOptions{});
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->spans.size(), 1u);
  const VolatileSpan& s = report->spans[0];
  EXPECT_EQ(s.begin_tokens, 2);
  EXPECT_EQ(s.min_end_tokens, 2);  // request 5
  EXPECT_EQ(s.max_end_tokens, 5);
  EXPECT_EQ(s.min_span_tokens, 1);
  EXPECT_EQ(s.max_span_tokens, 3);
  EXPECT_EQ(s.num_requests, 11);
  EXPECT_EQ(s.num_cluster_requests, 12);
  EXPECT_LT(s.hit_rate_before, s.hit_rate_after);
}

TEST(PromptLintTest, ShuffledToolListIsOneSpan) {
  // Three tool descriptions (11 tokens each, all starting with the same token) in the six
  // orders, twice each, then "</tools>" and a shared 500-token prompt.
  std::vector<std::vector<TokenId>> tools;
  for (int t = 0; t < 3; ++t) {
    std::vector<TokenId> d = {997};
    Append(&d, RandomTokens(10, 400 + static_cast<uint64_t>(t)));
    tools.push_back(d);
  }
  const std::vector<TokenId> system = RandomTokens(500, 7);
  std::vector<int> order = {0, 1, 2};
  std::vector<LintPrompt> prompts;
  for (int perm = 0; perm < 6; ++perm) {
    for (int copy = 0; copy < 2; ++copy) {
      LintPrompt p{static_cast<int64_t>(prompts.size()) + 1, "", {kBos}};
      for (int t : order) Append(&p.tokens, tools[static_cast<size_t>(t)]);
      p.tokens.push_back(998);
      Append(&p.tokens, system);
      Append(&p.tokens, RandomTokens(8, 500 + prompts.size()));
      prompts.push_back(std::move(p));
    }
    std::next_permutation(order.begin(), order.end());
  }
  auto report = AnalyzePrompts(prompts, PromptLintOptions{});
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->spans.size(), 1u);
  const VolatileSpan& s = report->spans[0];
  EXPECT_EQ(s.begin_tokens, 2);   // BOS and the tools' common first token
  EXPECT_EQ(s.min_end_tokens, 34);  // "</tools>" starts the shared region
  EXPECT_EQ(s.max_end_tokens, 34);
  EXPECT_EQ(s.shared_tokens, 501);
  EXPECT_EQ(s.num_requests, 12);
  EXPECT_EQ(s.examples.size(), 3u);  // distinct orders
  EXPECT_LT(s.hit_rate_before, s.hit_rate_after);
}

TEST(PromptLintTest, NamespacesAreAnalysedApartAndSpansSortedByGain) {
  // The same timestamped prompts under two cache salts: one span per namespace; the bigger
  // cluster gains more and comes first.
  const std::vector<TokenId> system = RandomTokens(800, 8);
  std::vector<LintPrompt> prompts;
  for (const auto& [salt, n] : std::vector<std::pair<std::string, int>>{{"a", 4}, {"b", 10}}) {
    for (LintPrompt p : TimestampPrompts(n, system)) {
      p.cache_namespace = salt;
      p.line = static_cast<int64_t>(prompts.size()) + 1;
      prompts.push_back(std::move(p));
    }
  }
  auto report = AnalyzePrompts(prompts, PromptLintOptions{});
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->num_namespaces, 2);
  ASSERT_EQ(report->spans.size(), 2u);
  EXPECT_EQ(report->spans[0].cache_namespace, "b");
  EXPECT_EQ(report->spans[0].num_requests, 10);
  EXPECT_EQ(report->spans[1].cache_namespace, "a");
  // Namespaces never share: each replay gains only its own cluster's blocks.
  EXPECT_EQ(report->spans[0].cached_tokens_after, 9 * 800);
  EXPECT_EQ(report->spans[1].cached_tokens_after, 3 * 800);
  EXPECT_EQ(report->cached_tokens_all_reordered, 12 * 800);
  PromptLintOptions one;
  one.max_spans = 1;
  report = AnalyzePrompts(prompts, one);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->spans.size(), 1u);
  EXPECT_EQ(report->num_spans_found, 2);
}

TEST(PromptLintTest, ReplayCountsWholeBlocksAndNeverTheLastToken) {
  std::vector<LintPrompt> prompts = {{1, "", RandomTokens(40, 9)}, {2, "", RandomTokens(40, 9)},
                                     {3, "", RandomTokens(32, 9)}, {4, "x", RandomTokens(40, 9)}};
  auto r = ReplayPrefixCache(prompts, 16, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->cached_tokens_per_prompt, (std::vector<int64_t>{0, 32, 16, 0}));
  EXPECT_EQ(r->prompt_tokens, 152);
  EXPECT_EQ(r->cached_tokens, 48);
  // A capacity too small for one prompt is an error naming its line.
  auto small = ReplayPrefixCache(prompts, 16, 2);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("line 1"), std::string::npos) << small.status().message();
  // A bounded cache evicts: 3 blocks hold one prompt, so the second still hits.
  auto bounded = ReplayPrefixCache(prompts, 16, 3);
  ASSERT_TRUE(bounded.ok());
  EXPECT_EQ(bounded->cached_tokens_per_prompt[1], 32);
}

TEST(PromptLintTest, BadOptionsAreErrors) {
  PromptLintOptions o;
  o.kgram_tokens = 128;  // > min_shared_tokens
  auto r = AnalyzePrompts({}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("min shared tokens"), std::string::npos);
  o = PromptLintOptions{};
  o.block_size_tokens = 0;
  EXPECT_FALSE(AnalyzePrompts({}, o).ok());
  o = PromptLintOptions{};
  o.min_requests = 1;
  EXPECT_FALSE(AnalyzePrompts({}, o).ok());
}

TEST(PromptLintTest, EmptyAndTinyInputsDoNotCrash) {
  auto r = AnalyzePrompts({}, PromptLintOptions{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->num_requests, 0);
  r = AnalyzePrompts({{1, "", {}}, {2, "", {kBos}}, {3, "", {kBos, 2}}}, PromptLintOptions{});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->spans.empty());
}

}  // namespace
}  // namespace kvserve::promptlint
