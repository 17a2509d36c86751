// The exact-repeat normalisation and the lexical vetoes, on pairs an embedding would find
// close: they differ only in a number, a capitalised name or a negation.
#include "semcache/text_match.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kvserve::semcache
