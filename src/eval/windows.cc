#include "eval/windows.h"

#include <algorithm>

#include "base/str_format.h"

namespace kvserve::eval {

Status ValidateWindowFlags(int64_t ctx_tokens, int64_t batch_tokens, int64_t max_windows) {
  if (ctx_tokens != 0 && ctx_tokens < 3) {  // 0: the default
    return InvalidArgumentError(
        "--ctx must be at least 3 (a window scores its second half), got " +
        std::to_string(ctx_tokens));
  }
  if (batch_tokens < 0) return InvalidArgumentError("--batch-size must be >= 1");
  if (max_windows < 0) return InvalidArgumentError("--max-windows must be >= 0");
  return OkStatus();
}

StatusOr<WindowGeometry> ResolveWindowGeometry(int64_t ctx_tokens, int64_t batch_tokens,
                                               int64_t model_context_tokens,
                                               int64_t max_model_len,
                                               bool positions_within_cache) {
  WindowGeometry g;
  g.ctx_tokens = ctx_tokens;
  if (max_model_len > 0 && max_model_len < model_context_tokens && g.ctx_tokens > max_model_len) {
    g.capped_note = StrFormat("--ctx %lld exceeds --max-model-len (%lld tokens); using --ctx %lld",
                              static_cast<long long>(g.ctx_tokens),
                              static_cast<long long>(max_model_len),
                              static_cast<long long>(max_model_len));
    g.ctx_tokens = max_model_len;
  }
  if (g.ctx_tokens > model_context_tokens && !positions_within_cache) {
    return InvalidArgumentError(StrFormat(
        "--ctx %lld exceeds the model's trained context (%lld tokens): positions past it were "
        "never trained; use --ctx %lld or less, or --kv-eviction streaming (positions within "
        "the cache, any length)",
        static_cast<long long>(g.ctx_tokens), static_cast<long long>(model_context_tokens),
        static_cast<long long>(model_context_tokens)));
  }
  if (g.ctx_tokens < 3) {
    return InvalidArgumentError("the context (" + std::to_string(g.ctx_tokens) +
                                " tokens) is too short to score a window");
  }
  g.batch_tokens = batch_tokens > 0 ? std::min(batch_tokens, g.ctx_tokens) : g.ctx_tokens;
  return g;
}

WindowText TokenizeForWindows(const Tokenizer& tokenizer, std::string_view text) {
  EncodeOptions encode;
  encode.add_bos = true;  // when the vocabulary asks for BOS
  WindowText w;
  w.tokens = tokenizer.Encode(text, encode);
  const bool add_bos = tokenizer.spec().add_bos && tokenizer.bos_id() != kNoToken;
  w.bos_id = add_bos ? tokenizer.bos_id() : kNoToken;
  return w;
}

Status CheckTextFillsAWindow(int64_t num_tokens, int64_t ctx_tokens) {
  if (num_tokens >= ctx_tokens) return OkStatus();
  return InvalidArgumentError("the text has " + std::to_string(num_tokens) +
                              " tokens, fewer than one window of --ctx " +
                              std::to_string(ctx_tokens) +
                              " needs; pass a longer text or a smaller --ctx");
}

}  // namespace kvserve::eval
