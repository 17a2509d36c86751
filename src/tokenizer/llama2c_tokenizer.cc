// LoadLlama2cTokenizer (declared in tokenizer.h): llama2.c's tokenizer.bin / tok512.bin.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

constexpr int64_t kMaxVocabSize = 1 << 22;
constexpr int32_t kMaxTokenBytes = 1 << 16;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

StatusOr<VocabSpec> LoadLlama2cTokenizer(const std::string& path, int64_t vocab_size) {
  if (vocab_size < 259 || vocab_size > kMaxVocabSize) {
    return InvalidArgumentError("llama2.c tokenizer: vocab_size " + std::to_string(vocab_size) +
                                " is outside [259, " + std::to_string(kMaxVocabSize) +
                                "] (ids 3..258 are byte tokens)");
  }
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) {
    return NotFoundError("llama2.c tokenizer: cannot open " + path + ": " + std::strerror(errno));
  }
  if (std::fseek(file.get(), 0, SEEK_END) != 0) return DataLossError("cannot seek " + path);
  const long file_bytes_signed = std::ftell(file.get());
  if (file_bytes_signed < 0) return DataLossError("cannot size " + path);
  const auto file_bytes = static_cast<uint64_t>(file_bytes_signed);
  std::rewind(file.get());
  uint64_t pos = 0;
  auto read = [&](void* dst, size_t n, const char* what, int64_t index) -> Status {
    if (file_bytes - pos < n || std::fread(dst, 1, n, file.get()) != n) {
      return DataLossError("llama2.c tokenizer " + path + ": truncated while reading " + what +
                           (index >= 0 ? " of token " + std::to_string(index) : std::string()) +
                           " at byte " + std::to_string(pos));
    }
    pos += n;
    return OkStatus();
  };

  int32_t max_token_length = 0;
  KV_RETURN_IF_ERROR(read(&max_token_length, 4, "max_token_length", -1));
  if (max_token_length <= 0 || max_token_length > kMaxTokenBytes) {
    return DataLossError("llama2.c tokenizer " + path + ": max_token_length " +
                         std::to_string(max_token_length) + " is not in [1, " +
                         std::to_string(kMaxTokenBytes) + "]");
  }
  // Each token needs at least 8 bytes: refuse a vocab_size the file cannot hold before
  // allocating for it.
  if (static_cast<uint64_t>(vocab_size) * 8 > file_bytes - pos) {
    return DataLossError("llama2.c tokenizer " + path + ": " + std::to_string(file_bytes) +
                         " bytes cannot hold " + std::to_string(vocab_size) + " tokens");
  }

  VocabSpec spec;
  spec.model = VocabSpec::Model::kSpm;
  spec.tokens.resize(static_cast<size_t>(vocab_size));
  spec.scores.resize(static_cast<size_t>(vocab_size));
  spec.token_types.assign(static_cast<size_t>(vocab_size), TokenType::kNormal);
  for (int64_t i = 0; i < vocab_size; ++i) {
    float score = 0.0f;
    int32_t len = 0;
    KV_RETURN_IF_ERROR(read(&score, 4, "score", i));
    KV_RETURN_IF_ERROR(read(&len, 4, "length", i));
    if (len < 0 || len > max_token_length) {
      return DataLossError("llama2.c tokenizer " + path + ": token " + std::to_string(i) +
                           " has length " + std::to_string(len) + " (max_token_length " +
                           std::to_string(max_token_length) + ")");
    }
    if (std::isnan(score)) {
      return DataLossError("llama2.c tokenizer " + path + ": token " + std::to_string(i) +
                           " has a NaN score");
    }
    std::string& text = spec.tokens[static_cast<size_t>(i)];
    text.resize(static_cast<size_t>(len));
    if (len > 0) KV_RETURN_IF_ERROR(read(text.data(), static_cast<size_t>(len), "text", i));
    spec.scores[static_cast<size_t>(i)] = score;
  }
  if (pos != file_bytes) {
    return DataLossError("llama2.c tokenizer " + path + ": " + std::to_string(file_bytes - pos) +
                         " unexpected bytes after " + std::to_string(vocab_size) + " tokens");
  }

  // llama2.c's export writes BOS/EOS as "\n<s>\n" and "\n</s>\n"; keep the bare names so
  // that parse_special and special rendering see "<s>" / "</s>".
  for (size_t id : {size_t{1}, size_t{2}}) {
    std::string& t = spec.tokens[id];
    const size_t b = t.find_first_not_of('\n');
    const size_t e = t.find_last_not_of('\n');
    t = b == std::string::npos ? std::string() : t.substr(b, e - b + 1);
  }
  spec.token_types[0] = TokenType::kUnknown;
  spec.token_types[1] = TokenType::kControl;
  spec.token_types[2] = TokenType::kControl;
  for (size_t id = 3; id < 259; ++id) spec.token_types[id] = TokenType::kByte;
  spec.unk_id = 0;
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.add_bos = true;
  spec.add_eos = false;
  spec.add_space_prefix = true;
  spec.byte_fallback = true;
  spec.llama2c_format = true;
  return spec;
}

}  // namespace kvserve
