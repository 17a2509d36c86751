#include "eval/windows.h"

#include <string>

#include <gtest/gtest.h>

#include "model/synthetic.h"

namespace kvserve::eval {
namespace {

TEST(WindowsTest, ValidateWindowFlagsNamesTheFlag) {
  EXPECT_TRUE(ValidateWindowFlags(3, 0, 0).ok());
  Status ctx = ValidateWindowFlags(2, 0, 0);
  EXPECT_EQ(ctx.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ctx.message(), "--ctx must be at least 3 (a window scores its second half), got 2");
  EXPECT_EQ(ValidateWindowFlags(8, -1, 0).message(), "--batch-size must be >= 1");
  EXPECT_EQ(ValidateWindowFlags(8, 4, -1).message(), "--max-windows must be >= 0");
}

TEST(WindowsTest, CtxIsCappedByMaxModelLenAndRefusedPastTheModelContext) {
  auto g = ResolveWindowGeometry(128, 0, 512, 0);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->ctx_tokens, 128);
  EXPECT_EQ(g->batch_tokens, 128);
  EXPECT_EQ(g->capped_note, "");

  g = ResolveWindowGeometry(1024, 32, 512, 100);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->ctx_tokens, 100);
  EXPECT_EQ(g->batch_tokens, 32);
  EXPECT_EQ(g->capped_note, "--ctx 1024 exceeds --max-model-len (100 tokens); using --ctx 100");

  // Past the trained context: refused, naming the way out.
  g = ResolveWindowGeometry(1024, 2048, 512, 0);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("trained context (512 tokens)"), std::string::npos)
      << g.status().message();
  EXPECT_NE(g.status().message().find("--kv-eviction streaming"), std::string::npos);
  // A --max-model-len above the model's context does not raise the limit.
  EXPECT_FALSE(ResolveWindowGeometry(1024, 0, 512, 4096).ok());
  // StreamingLLM: any length.
  g = ResolveWindowGeometry(2048, 0, 512, 0, true);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->ctx_tokens, 2048);
  EXPECT_EQ(g->capped_note, "");
}

TEST(WindowsTest, TokenizeForWindowsAddsBosWhenTheVocabularyDoes) {
  auto vocab = MakeSyntheticVocab(512, 0);
  ASSERT_TRUE(vocab.ok()) << vocab.status().message();
  for (bool add_bos : {true, false}) {
    VocabSpec spec = *vocab;
    spec.add_bos = add_bos;
    auto tok = Tokenizer::Create(spec);
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    const WindowText w = TokenizeForWindows(**tok, "hello world, once more");
    ASSERT_FALSE(w.tokens.empty());
    if (add_bos) {
      EXPECT_EQ(w.bos_id, (*tok)->bos_id());
      EXPECT_EQ(w.tokens.front(), (*tok)->bos_id());
    } else {
      EXPECT_EQ(w.bos_id, kNoToken);
      EXPECT_EQ(w.tokens, (*tok)->Encode("hello world, once more", EncodeOptions{}));
    }
  }
}

TEST(WindowsTest, TextMustFillAWindow) {
  EXPECT_TRUE(CheckTextFillsAWindow(128, 128).ok());
  Status s = CheckTextFillsAWindow(100, 128);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "the text has 100 tokens, fewer than one window of --ctx 128 needs; pass a longer "
            "text or a smaller --ctx");
}

}  // namespace
}  // namespace kvserve::eval
