// TokenTrie, TokenMasker (against brute force), ApplyTokenMask, GrammarCache.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "grammar/gbnf.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/test_vocab.h"
#include "grammar/token_masker.h"

namespace kvserve::grammar {
namespace {

using testing::kTestEosId;
using testing::kTestSpecialId;
using testing::MakeTestVocabulary;

std::shared_ptr<const CompiledGrammar> Compile(GrammarKind kind, const std::string& text) {
  auto g = CompileGrammar({kind, text});
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return *g;
}

bool Allowed(const std::vector<uint64_t>& mask, int32_t id) { return (mask[id >> 6] >> (id & 63)) & 1; }

TEST(TokenTrieTest, HoldsEveryTextTokenOnce) {
  Vocabulary v = MakeTestVocabulary();
  v.token_bytes.push_back("");             // empty: never allowed
  v.token_bytes.push_back(v.token_bytes[300]);  // duplicate text, another id
  auto trie = TokenTrie::Build(v);
  EXPECT_EQ(trie->vocab_size(), static_cast<int32_t>(v.token_bytes.size()));
  std::vector<int> seen(v.token_bytes.size(), 0);
  for (int32_t id : trie->tokens()) ++seen[id];
  for (size_t id = 0; id < v.token_bytes.size(); ++id) {
    const bool text = id != kTestEosId && id != kTestSpecialId && !v.token_bytes[id].empty();
    EXPECT_EQ(seen[id], text ? 1 : 0) << id;
    EXPECT_EQ(trie->is_text_token(static_cast<int32_t>(id)), text);
  }
  // Reconstruct each token's string from the preorder layout.
  const auto& nodes = trie->nodes();
  std::vector<std::string> path(trie->max_depth() + 1);
  for (size_t i = 1; i + 1 < nodes.size(); ++i) {
    path[nodes[i].depth] = path[nodes[i].depth - 1] + static_cast<char>(nodes[i].byte);
    for (uint32_t k = nodes[i].token_begin; k < nodes[i + 1].token_begin; ++k) {
      EXPECT_EQ(path[nodes[i].depth], v.token_bytes[trie->tokens()[k]]);
    }
    EXPECT_GT(nodes[i].subtree_end, i);
  }
}

// Every mask equals the brute-force answer: token t is allowed iff the matcher accepts its
// bytes (or t is EOS and the grammar is complete).
void CheckAgainstBruteForce(const std::shared_ptr<const CompiledGrammar>& g, int num_walks, int num_steps,
                            const TokenMaskerOptions& options = {}) {
  const Vocabulary v = MakeTestVocabulary();
  auto trie = TokenTrie::Build(v);
  TokenMasker masker(g, trie, options);
  std::mt19937_64 rng(42);
  for (int walk = 0; walk < num_walks; ++walk) {
    TokenMasker::State state = masker.Start();
    for (int step = 0; step < num_steps; ++step) {
      const std::vector<uint64_t> mask = masker.Mask(&state);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < trie->vocab_size(); ++id) {
        bool expected = false;
        if (id == kTestEosId) {
          expected = state.matcher.IsComplete();
        } else if (trie->is_text_token(id)) {
          GrammarMatcher m = state.matcher;
          expected = m.AcceptString(v.token_bytes[id]);
        }
        ASSERT_EQ(Allowed(mask, id), expected)
            << "token " << id << " '" << v.token_bytes[id] << "' at step " << step << "\n" << g->gbnf();
        if (expected) allowed.push_back(id);
      }
      masker.check_invariants();
      if (allowed.empty()) break;
      const int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(masker.Advance(&state, pick));
      if (pick == kTestEosId) {
        EXPECT_TRUE(state.finished);
        break;
      }
    }
  }
}

TEST(TokenMaskerTest, JsonObjectMatchesBruteForce) {
  CheckAgainstBruteForce(Compile(GrammarKind::kJsonObject, ""), 6, 40);
}

TEST(TokenMaskerTest, SchemaMatchesBruteForce) {
  CheckAgainstBruteForce(Compile(GrammarKind::kJsonSchema, R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 8}, "n": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["red", "green", "日本"]}, "maxItems": 3}},
      "required": ["name"]})"),
                         6, 40);
}

TEST(TokenMaskerTest, UnicodeGrammarMatchesBruteForce) {
  CheckAgainstBruteForce(Compile(GrammarKind::kGbnf, R"(root ::= ([\u4e00-\u9fff] | "😀" | [a-c])+ "!")"), 6, 20);
}

TEST(TokenMaskerTest, SmallCachesStillExact) {
  TokenMaskerOptions tiny;
  tiny.max_states = 8;
  tiny.max_mask_bytes = 300;
  CheckAgainstBruteForce(Compile(GrammarKind::kRegex, "(ab|a[0-9]+|\\w\\w\\w)*!"), 4, 30, tiny);
}

TEST(TokenMaskerTest, EosOnlyWhenCompleteAndNothingAfter) {
  auto trie = TokenTrie::Build(MakeTestVocabulary());
  TokenMasker masker(Compile(GrammarKind::kChoice, R"(["yes", "yes!"])"), trie);
  auto state = masker.Start();
  EXPECT_FALSE(Allowed(masker.Mask(&state), kTestEosId));
  EXPECT_FALSE(masker.Advance(&state, kTestEosId));
  EXPECT_FALSE(masker.Advance(&state, kTestSpecialId));
  EXPECT_FALSE(masker.Advance(&state, 'n'));
  ASSERT_TRUE(masker.Advance(&state, 'y'));
  ASSERT_TRUE(masker.Advance(&state, 'e'));
  ASSERT_TRUE(masker.Advance(&state, 's'));
  EXPECT_TRUE(masker.IsComplete(state));
  EXPECT_TRUE(Allowed(masker.Mask(&state), kTestEosId));
  EXPECT_TRUE(Allowed(masker.Mask(&state), '!'));
  ASSERT_TRUE(masker.Advance(&state, kTestEosId));
  const auto& after = masker.Mask(&state);
  for (uint64_t w : after) EXPECT_EQ(w, 0u);
  EXPECT_FALSE(masker.Advance(&state, '!'));
}

TEST(TokenMaskerTest, CharacterSplitAcrossTokens) {
  Vocabulary v;
  v.token_bytes = {"\xe6\x97", "\xa5", "\xa5\xe6\x9c", "\xac", "!", "\xe6", "x"};
  v.eos_token_ids = {};
  auto trie = TokenTrie::Build(v);
  TokenMasker masker(Compile(GrammarKind::kGbnf, R"(root ::= "日本" "!")"), trie);  // E6 97 A5, E6 9C AC
  auto state = masker.Start();
  auto m = masker.Mask(&state);
  EXPECT_TRUE(Allowed(m, 0));
  EXPECT_TRUE(Allowed(m, 5));
  EXPECT_FALSE(Allowed(m, 1));
  EXPECT_FALSE(Allowed(m, 6));
  ASSERT_TRUE(masker.Advance(&state, 0));
  m = masker.Mask(&state);
  EXPECT_TRUE(Allowed(m, 1));
  EXPECT_TRUE(Allowed(m, 2));
  EXPECT_FALSE(Allowed(m, 4));
  ASSERT_TRUE(masker.Advance(&state, 2));
  ASSERT_TRUE(masker.Advance(&state, 3));
  ASSERT_TRUE(masker.Advance(&state, 4));
  EXPECT_TRUE(masker.IsComplete(state));
}

TEST(TokenMaskerTest, StatesRepeatInsideStrings) {
  auto trie = TokenTrie::Build(MakeTestVocabulary());
  TokenMasker masker(Compile(GrammarKind::kJsonObject, ""), trie);
  auto state = masker.Start();
  for (int32_t id : {'{', '"', 'a', 'b', 'c', 'd', 'e'}) ASSERT_TRUE(masker.Advance(&state, id));
  masker.Mask(&state);
  const auto before = masker.stats();
  for (int32_t id : {'x', 'y', 'z'}) {
    ASSERT_TRUE(masker.Advance(&state, id));
    masker.Mask(&state);
  }
  const auto after = masker.stats();
  EXPECT_EQ(after.mask_misses, before.mask_misses);
  EXPECT_EQ(after.mask_hits, before.mask_hits + 3);
}

TEST(ApplyTokenMaskTest, MasksDisallowedAndPadding) {
  std::vector<uint64_t> mask(2, 0);
  mask[0] = (uint64_t{1} << 3) | (uint64_t{1} << 63);
  mask[1] = 1;
  std::vector<float> logits(70, 1.0f);
  EXPECT_EQ(ApplyTokenMask(mask, 65, logits.data(), 70), 3);
  for (int i = 0; i < 70; ++i) {
    const bool keep = i == 3 || i == 63 || i == 64;
    EXPECT_EQ(std::isinf(logits[i]), !keep) << i;
  }
}

TEST(GrammarCacheTest, CachesEvictsAndReportsErrors) {
  GrammarCacheOptions o;
  o.max_entries = 2;
  GrammarCache cache(o);
  auto a = cache.Get({GrammarKind::kRegex, "a+"});
  ASSERT_TRUE(a.ok());
  auto a2 = cache.Get({GrammarKind::kRegex, "a+"});
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(a->get(), a2->get());
  EXPECT_FALSE(cache.Get({GrammarKind::kGbnf, "a+"}).ok());
  auto bad = cache.Get({GrammarKind::kJsonSchema, R"({"type": "string", "minimum": 3})"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'minimum' at /minimum"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(cache.Get({GrammarKind::kJsonSchema, "{not json"}).ok());
  EXPECT_FALSE(cache.Get({GrammarKind::kChoice, R"(["a", 1])"}).ok());
  ASSERT_TRUE(cache.Get({GrammarKind::kChoice, R"(["a", "b"])"}).ok());
  ASSERT_TRUE(cache.Get({GrammarKind::kJsonObject, ""}).ok());
  const auto s = cache.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.errors, 4);
  EXPECT_EQ(s.entries, 2);
  EXPECT_EQ(s.evictions, 1);
  // The evicted grammar stays valid for its holders.
  GrammarMatcher m(*a);
  EXPECT_TRUE(m.AcceptString("aaa") && m.IsComplete());
}

TEST(TokenMaskerCacheTest, OneMaskerPerGrammar) {
  auto trie = TokenTrie::Build(MakeTestVocabulary());
  TokenMaskerCache cache(trie, 2);
  auto g1 = Compile(GrammarKind::kRegex, "a");
  auto g2 = Compile(GrammarKind::kRegex, "b");
  auto g3 = Compile(GrammarKind::kRegex, "c");
  auto m1 = cache.Get(g1);
  EXPECT_EQ(cache.Get(g1), m1);
  cache.Get(g2);
  cache.Get(g3);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.Get(g1), m1);  // evicted, rebuilt
}

}  // namespace
}  // namespace kvserve::grammar
