#include "grammar/matcher.h"

#include <algorithm>

#include "base/check.h"

namespace kvserve::grammar {

namespace {

// Number of bytes of the UTF-8 sequence that starts with `lead`; 0 when invalid as a lead.
int Utf8Length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// The code points whose UTF-8 encoding starts with bytes[0..n) (a valid prefix of a sequence
// of length `len`), clipped to valid, non-overlong, non-surrogate values. False when empty.
bool PrefixRange(const uint8_t* bytes, int n, int len, uint32_t* lo, uint32_t* hi) {
  static constexpr uint32_t kLeadMask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  uint32_t v = bytes[0] & kLeadMask[len];
  for (int k = 1; k < n; ++k) v = (v << 6) | (bytes[k] & 0x3F);
  const int rest_bits = 6 * (len - n);
  uint32_t l = v << rest_bits;
  uint32_t h = l | ((uint32_t{1} << rest_bits) - 1);
  l = std::max(l, kMin[len]);
  h = std::min(h, kMaxCodePoint);
  if (l > h) return false;
  if (l >= 0xD800 && h <= 0xDFFF) return false;
  *lo = l;
  *hi = h;
  return true;
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)) {
  KV_CHECK(grammar_ != nullptr);
  Stack stack;
  std::vector<std::pair<uint32_t, uint64_t>> path;
  for (uint32_t alt : grammar_->alternatives(grammar_->root())) Expand(alt, &stack, &stacks_, &path);
  Canonicalize(&stacks_);
}

void GrammarMatcher::Canonicalize(std::vector<Stack>* stacks) {
  std::sort(stacks->begin(), stacks->end());
  stacks->erase(std::unique(stacks->begin(), stacks->end()), stacks->end());
}

// Adds to `out` every stack reachable from position `pos` with `stack` below it without
// consuming a character. `stack` is restored before returning. `path` holds the rule
// references being expanded (position, stack hash) so an empty-string cycle that comes back
// to the same position with the same stack (`(a*)*`) stops instead of looping; Validate()
// rules out the cycles that grow the stack.
void GrammarMatcher::Expand(uint32_t pos, Stack* stack, std::vector<Stack>* out,
                            std::vector<std::pair<uint32_t, uint64_t>>* path) const {
  const auto& elements = grammar_->elements();
  const CompiledGrammar::FlatElement& e = elements[pos];
  switch (e.op) {
    case CompiledGrammar::Op::kCharSet:
      stack->push_back(pos);
      out->push_back(*stack);
      stack->pop_back();
      return;
    case CompiledGrammar::Op::kEnd: {
      if (stack->empty()) {
        out->push_back(Stack());
        return;
      }
      const uint32_t ret = stack->back();
      stack->pop_back();
      Expand(ret, stack, out, path);
      stack->push_back(ret);
      return;
    }
    case CompiledGrammar::Op::kRuleRef: {
      uint64_t h = 1469598103934665603ull ^ stack->size();
      for (uint32_t v : *stack) h = (h ^ v) * 1099511628211ull;
      for (const auto& [p, ph] : *path) {
        if (p == pos && ph == h) return;
      }
      path->push_back({pos, h});
      // A call in tail position returns straight to our caller: push nothing.
      const bool push = elements[pos + 1].op != CompiledGrammar::Op::kEnd;
      if (push) stack->push_back(pos + 1);
      for (uint32_t alt : grammar_->alternatives(e.arg)) Expand(alt, stack, out, path);
      if (push) stack->pop_back();
      path->pop_back();
      return;
    }
  }
}

bool GrammarMatcher::AcceptCodePoint(uint32_t cp) {
  if (pending_len_ != 0) return false;
  std::vector<Stack> next;
  std::vector<std::pair<uint32_t, uint64_t>> path;
  for (const Stack& s : stacks_) {
    if (s.empty()) continue;
    const uint32_t top = s.back();
    if (!grammar_->charset(grammar_->elements()[top].arg).Contains(cp)) continue;
    Stack rest(s.begin(), s.end() - 1);
    Expand(top + 1, &rest, &next, &path);
  }
  if (next.empty()) return false;
  Canonicalize(&next);
  stacks_ = std::move(next);
  return true;
}

bool GrammarMatcher::AcceptByte(uint8_t byte) {
  if (pending_len_ == 0 && byte < 0x80) return AcceptCodePoint(byte);
  uint8_t bytes[4];
  std::copy(pending_, pending_ + pending_len_, bytes);
  int n = pending_len_;
  if (n > 0 && (byte & 0xC0) != 0x80) return false;
  bytes[n++] = byte;
  const int len = Utf8Length(bytes[0]);
  if (len < 2) return false;
  uint32_t lo = 0, hi = 0;
  if (!PrefixRange(bytes, n, len, &lo, &hi)) return false;
  if (n == len) {
    pending_len_ = 0;
    if (AcceptCodePoint(lo)) return true;
    pending_len_ = n - 1;  // restore
    return false;
  }
  bool any = false;
  for (const Stack& s : stacks_) {
    if (!s.empty() && grammar_->charset(grammar_->elements()[s.back()].arg).Intersects(lo, hi)) {
      any = true;
      break;
    }
  }
  if (!any) return false;
  std::copy(bytes, bytes + n, pending_);
  pending_len_ = n;
  return true;
}

bool GrammarMatcher::AcceptString(std::string_view bytes) {
  GrammarMatcher copy = *this;
  for (char c : bytes) {
    if (!copy.AcceptByte(static_cast<uint8_t>(c))) return false;
  }
  *this = std::move(copy);
  return true;
}

bool GrammarMatcher::IsComplete() const {
  // Stacks are sorted, so the empty stack (if any) comes first.
  return pending_len_ == 0 && !stacks_.empty() && stacks_.front().empty();
}

void GrammarMatcher::AppendKey(std::string* key) const {
  key->push_back(static_cast<char>(pending_len_));
  key->append(reinterpret_cast<const char*>(pending_), pending_len_);
  for (const Stack& s : stacks_) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    key->append(reinterpret_cast<const char*>(&n), sizeof(n));
    key->append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(uint32_t));
  }
}

}  // namespace kvserve::grammar
