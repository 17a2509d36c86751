// The body of the GGUF fuzz target, shared by fuzz/gguf_fuzz.cc (libFuzzer) and
// src/model/gguf_corpus_test.cc (replays the corpus under g++ in ordinary CI).
//
// Parses `bytes` with GgufFile::FromBytes and, when that succeeds, touches everything a
// caller could: every metadata value (all array contents), every typed getter, the first
// and last byte of every tensor's data, and (for rows of at most 64K values) the dequantised
// first row, so hostile block bytes of every weight type reach the dequantisers. Returns the status of the parse so tests can assert
// on it; crashes, sanitizer reports and hangs are the fuzzer's findings.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "model/gguf.h"

namespace kvserve::fuzz {

namespace internal {

// Folds a value into `*sink` so the reads are not optimized away.
inline void Touch(const GgufValue& v, uint64_t* sink) {
  *sink += static_cast<uint64_t>(v.type) + static_cast<uint64_t>(v.i) + v.u + (v.b ? 1 : 0);
  *sink += std::bit_cast<uint64_t>(v.f) + v.s.size() + v.array_size();
  for (int64_t x : v.ints) *sink += static_cast<uint64_t>(x);
  for (double x : v.floats) *sink += std::bit_cast<uint64_t>(x);
  for (const auto& s : v.strings) *sink += s.size() + (s.empty() ? 0 : static_cast<uint8_t>(s[0]));
  for (const auto& a : v.arrays) Touch(a, sink);
}

}  // namespace internal

inline Status RunGgufFuzzBody(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto file = GgufFile::FromBytes(bytes);
  if (!file.ok()) return file.status();
  volatile uint64_t out = 0;
  uint64_t sink = (*file)->version() + (*file)->alignment() + (*file)->file_bytes();
  for (const auto& [key, value] : (*file)->metadata()) {
    sink += key.size();
    internal::Touch(value, &sink);
    const GgufValue* found = (*file)->Find(key);
    if (found != &value) return InternalError("Find returned another value for " + key);
    if (auto s = (*file)->GetString(key); s.ok()) sink += s->size();
    if (auto i = (*file)->GetInt(key); i.ok()) sink += static_cast<uint64_t>(*i);
    if (auto f = (*file)->GetFloat(key); f.ok()) sink += (*f == *f) ? 1 : 0;
    if (auto b = (*file)->GetBool(key); b.ok()) sink += *b ? 1 : 0;
  }
  for (const GgufTensorInfo& info : (*file)->tensors()) {
    if ((*file)->FindTensor(info.name) != &info) {
      return InternalError("FindTensor returned another tensor for " + info.name);
    }
    auto t = (*file)->tensor(info.name);
    if (!t.ok()) return t.status();
    if (static_cast<uint64_t>(t->num_bytes()) != info.num_bytes) {
      return InternalError("tensor size disagrees with its info for " + info.name);
    }
    const auto* p = static_cast<const uint8_t*>(t->data);
    sink += p[0] + p[info.num_bytes - 1];
    if (const int64_t cols = t->cols(); cols <= (int64_t{1} << 16)) {
      std::vector<float> row(static_cast<size_t>(cols));
      DequantizeRow(t->dtype, t->data, row.data(), cols);
      sink += std::bit_cast<uint32_t>(row[0]) + std::bit_cast<uint32_t>(row[cols - 1]);
    }
  }
  out = sink;
  (void)out;
  return OkStatus();
}

}  // namespace kvserve::fuzz
