// The exact-repeat normalisation and the lexical vetoes, on pairs an embedding would find
// close: they differ only in a number, a capitalised name or a negation.
#include "semcache/text_match.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace kvserve::semcache {
namespace {

TEST(NormalizeForExactMatchTest, WhitespaceOnly) {
  EXPECT_EQ(NormalizeForExactMatch("  What is\n\tthe  refund   window? "), "What is the refund window?");
  EXPECT_EQ(NormalizeForExactMatch(""), "");
  EXPECT_NE(NormalizeForExactMatch("US orders"), NormalizeForExactMatch("us orders"));
}

TEST(VetoReasonTest, NumbersNamesAndNegations) {
  // Numbers.
  EXPECT_NE(VetoReason("Book 3 nights in Rome", "Book 4 nights in Rome"), "");
  EXPECT_NE(VetoReason("What changed in v1.2?", "What changed in v1.3?"), "");
  EXPECT_NE(VetoReason("Compare the gpt4 and gpt5 results", "Compare the gpt4 and gpt4 results"), "");
  EXPECT_NE(VetoReason("Meet at 10:30", "Meet at 10:45"), "");
  // Names (capitalised words), the sentence's first word excepted.
  EXPECT_NE(VetoReason("refund window for EU orders", "refund window for US orders"), "");
  EXPECT_NE(VetoReason("flights from Paris to Lyon", "flights from Paris to Nice"), "");
  EXPECT_NE(VetoReason("cancel my Visa card", "cancel my Amex card"), "");
  // Negations.
  EXPECT_NE(VetoReason("Is the update safe to install?", "Is the update not safe to install?"), "");
  EXPECT_NE(VetoReason("I can cancel the order", "I can't cancel the order"), "");
  EXPECT_NE(VetoReason("orders with a receipt", "orders without a receipt"), "");
  // The reasons say what differs.
  EXPECT_EQ(VetoReason("3 nights", "4 nights"), "numbers differ (3 vs 4)");
  EXPECT_EQ(VetoReason("for EU orders", "for US orders"), "names differ (EU vs US)");
  // No veto: same numbers, names and negations; wording, punctuation and a sentence-initial
  // capital may differ.
  EXPECT_EQ(VetoReason("What is the refund window for EU orders?",
                       "what's the refund window for EU orders"), "");
  EXPECT_EQ(VetoReason("Please cancel order 1234.", "please cancel order 1234 now"), "");
  EXPECT_EQ(VetoReason("It is not ready. Why?", "Why is it not ready?"), "");
}


// The vetoes' effect on a labelled set of request pairs (tests/data/semantic_cache_pairs.tsv):
// pairs that must not share an answer, by what differs (a number, a capitalised name, a
// negation, or other words), and true paraphrases that must. The counts are the figures of
// docs/semantic-cache.md ("What the vetoes catch"); a change to the rules changes them here.
TEST(VetoReasonTest, EffectOnLabelledPairs) {
  std::ifstream in(std::string(KVSERVE_TESTDATA_DIR) + "/semantic_cache_pairs.tsv");
  ASSERT_TRUE(in) << "tests/data/semantic_cache_pairs.tsv";
  std::map<std::string, std::pair<int, int>> by_kind;  // kind -> (vetoed, pairs)
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f;
    size_t pos = 0;
    for (size_t tab; (tab = line.find('\t', pos)) != std::string::npos; pos = tab + 1) {
      f.push_back(line.substr(pos, tab - pos));
    }
    f.push_back(line.substr(pos));
    ASSERT_EQ(f.size(), 4u) << line;
    const std::string reason = VetoReason(f[2], f[3]);
    EXPECT_EQ(reason.empty(), VetoReason(f[3], f[2]).empty()) << "not symmetric: " << line;
    auto& [vetoed, pairs] = by_kind[f[0] + " " + f[1]];
    vetoed += reason.empty() ? 0 : 1;
    ++pairs;
    std::cout << "[ veto     ] " << f[0] << " " << f[1] << ": "
              << (reason.empty() ? "-" : reason) << " | " << f[2] << " | " << f[3] << "\n";
  }
  for (const auto& [kind, c] : by_kind) {
    std::cout << "[ vetoes   ] " << kind << ": " << c.first << " of " << c.second << " vetoed\n";
  }
  // Every pair that differs in a number, a capitalised name or a negation word is caught;
  // pairs that differ in other words are not (the threshold must guard those).
  EXPECT_EQ(by_kind["different number"], std::make_pair(10, 10));
  EXPECT_EQ(by_kind["different name"], std::make_pair(10, 10));
  EXPECT_EQ(by_kind["different negation"], std::make_pair(7, 7));
  EXPECT_EQ(by_kind["different lexical"], std::make_pair(0, 9));
  // True paraphrases refused (each a hit turned into a miss, never a wrong answer).
  // Only "Why is my order late?" / "... has not arrived yet, why?" (a negation word).
  EXPECT_EQ(by_kind["same paraphrase"], std::make_pair(1, 24));
}

}  // namespace
}  // namespace kvserve::semcache
