#include "runtime/structured_decoding.h"

#include <chrono>
#include <utility>

#include "base/check.h"

namespace kvserve {

grammar::Vocabulary GrammarVocabulary(const Tokenizer& tokenizer,
                                      const std::vector<TokenId>& eos_token_ids) {
  grammar::Vocabulary v;
  const VocabSpec& spec = tokenizer.spec();
  const int64_t n = tokenizer.vocab_size();
  v.token_bytes.resize(static_cast<size_t>(n));
  for (int64_t id = 0; id < n; ++id) {
    const TokenType type = spec.token_types.empty() ? TokenType::kNormal
                                                    : spec.token_types[static_cast<size_t>(id)];
    const auto tid = static_cast<TokenId>(id);
    if (type == TokenType::kControl || type == TokenType::kUnknown ||
        type == TokenType::kUnused || tid == spec.bos_id) {
      v.special_token_ids.push_back(tid);
      continue;
    }
    v.token_bytes[static_cast<size_t>(id)] = tokenizer.TokenToPiece(tid, /*special=*/false);
  }
  for (TokenId t : eos_token_ids) v.eos_token_ids.push_back(t);
  return v;
}

StructuredDecoder::StructuredDecoder(std::shared_ptr<const grammar::TokenTrie> trie)
    : trie_(std::move(trie)), maskers_(trie_) {
  KV_CHECK(trie_ != nullptr);
}

namespace {

// Adds the time from construction to destruction to *seconds.
class Timed {
 public:
  explicit Timed(double* seconds) : seconds_(seconds), start_(std::chrono::steady_clock::now()) {}
  ~Timed() {
    *seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  double* seconds_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

int64_t StructuredDecoder::Constrain(
    SeqId id, const std::shared_ptr<const grammar::CompiledGrammar>& g,
    const std::vector<TokenId>& output_ids, float* logits, int64_t num_logits) {
  Timed timed(&seconds_total_);
  ++num_tokens_total_;
  auto it = sequences_.find(id);
  if (it == sequences_.end()) {
    std::shared_ptr<grammar::TokenMasker> masker = maskers_.Get(g);
    Sequence seq{masker, masker->Start()};
    for (TokenId t : output_ids) {
      KV_CHECK(seq.masker->Advance(&seq.state, t))
          << "request " << id << ": its output does not match its grammar";
    }
    it = sequences_.emplace(id, std::move(seq)).first;
  }
  Sequence& seq = it->second;
  if (seq.state.finished) return 0;  // nothing may follow an accepted end of generation
  const std::vector<uint64_t>& mask = seq.masker->Mask(&seq.state);
  return grammar::ApplyTokenMask(mask, trie_->vocab_size(), logits, num_logits);
}

bool StructuredDecoder::Advance(SeqId id, TokenId token) {
  Timed timed(&seconds_total_);
  auto it = sequences_.find(id);
  KV_CHECK(it != sequences_.end()) << "request " << id << " has no grammar state";
  Sequence& seq = it->second;
  KV_CHECK(seq.masker->Advance(&seq.state, token))
      << "request " << id << ": sampled token " << token << ", which its grammar mask forbids";
  return seq.state.finished;
}

}  // namespace kvserve
