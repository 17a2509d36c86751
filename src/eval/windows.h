// The windows of a perplexity run before any scoring (perplexity.h scores them): --ctx and
// --batch-size checked and capped by the model's context and --max-model-len, and the text
// tokenized with BOS the way RunPerplexity expects. Plain functions; no state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/ids.h"
#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::eval {

// The flags checked before the model loads (InvalidArgument naming the flag): --ctx 0 (the
// default, resolved once the model is known) or at least 3 (a window scores its second half), --batch-size not negative (0: the window),
// --max-windows not negative (0: all).
Status ValidateWindowFlags(int64_t ctx_tokens, int64_t batch_tokens, int64_t max_windows);

// Tokens per window and per forward pass of a run.
struct WindowGeometry {
  int64_t ctx_tokens = 0;    // the requested --ctx, capped
  int64_t batch_tokens = 0;  // --batch-size (0: ctx_tokens), at most ctx_tokens
  // When --ctx was capped: "--ctx 1024 exceeds the model's context (512 tokens); using --ctx
  // 512" (or "exceeds --max-model-len"); empty otherwise.
  std::string capped_note;
};

// Caps `ctx_tokens` at `max_model_len` when that is set (> 0) and lower than the model's
// context (a note). A `ctx_tokens` past the model's trained context is InvalidArgument (its
// positions were never trained), unless `positions_within_cache` (StreamingLLM assigns
// positions within its window, so any length runs). A capped context under 3 tokens is
// InvalidArgument.
StatusOr<WindowGeometry> ResolveWindowGeometry(int64_t ctx_tokens, int64_t batch_tokens,
                                               int64_t model_context_tokens,
                                               int64_t max_model_len,
                                               bool positions_within_cache = false);

// A text as RunPerplexity takes it: its tokens with BOS first when the vocabulary adds one,
// and that BOS id for the start of every window (kNoToken when the vocabulary adds none).
struct WindowText {
  std::vector<TokenId> tokens;
  TokenId bos_id = kNoToken;
};
WindowText TokenizeForWindows(const Tokenizer& tokenizer, std::string_view text);

// InvalidArgument (asking for a longer text or a smaller --ctx) when `num_tokens` do not fill
// one window of `ctx_tokens`.
Status CheckTextFillsAWindow(int64_t num_tokens, int64_t ctx_tokens);

}  // namespace kvserve::eval
