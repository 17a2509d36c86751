// IncrementalDetokenizer (declared in tokenizer.h).
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Moves the complete characters at the front of `pending` to the result (invalid bytes as
// U+FFFD) and leaves a trailing incomplete-but-valid prefix in `pending`.
std::string TakeComplete(std::string* pending) {
  std::string out;
  size_t i = 0;
  while (i < pending->size()) {
    const int n = Utf8ValidPrefix(std::string_view(*pending).substr(i));
    if (n > 0) {
      out.append(*pending, i, static_cast<size_t>(n));
      i += static_cast<size_t>(n);
    } else if (n < 0) {
      out.append(kReplacement);
      i += static_cast<size_t>(-n);
    } else {
      break;  // incomplete: wait for more bytes
    }
  }
  pending->erase(0, i);
  return out;
}

}  // namespace

std::string IncrementalDetokenizer::Push(TokenId id) {
  const bool special = render_special_ != nullptr && id >= 0 &&
                       static_cast<size_t>(id) < render_special_->size() &&
                       (*render_special_)[static_cast<size_t>(id)] != 0;
  std::string piece = tokenizer_->TokenToPiece(id, special);
  const VocabSpec& spec = tokenizer_->spec();
  const bool is_bos = id == spec.bos_id && id != kNoToken;
  // llama2.c / llama.cpp: the dummy-prefix space of the first piece after BOS is dropped.
  if (first_ && after_bos_ && !is_bos && spec.model == VocabSpec::Model::kSpm &&
      spec.add_space_prefix && !piece.empty() && piece[0] == ' ') {
    piece.erase(0, 1);
  }
  if (!is_bos) first_ = false;
  after_bos_ = is_bos;
  pending_ += piece;
  return TakeComplete(&pending_);
}

std::string IncrementalDetokenizer::Flush() {
  std::string out = TakeComplete(&pending_);
  if (!pending_.empty()) out.append(kReplacement);  // an incomplete character at the end
  pending_.clear();
  return out;
}

}  // namespace kvserve
