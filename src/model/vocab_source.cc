#include "model/vocab_source.h"

#include <cstring>
#include <fstream>

#include "model/gguf.h"
#include "model/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

StatusOr<VocabSpec> LoadVocabFromPath(const std::string& path, int64_t vocab_size) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    return LoadHfTokenizerJson(path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open tokenizer file '" + path + "'");
  char magic[4] = {0, 0, 0, 0};
  in.read(magic, 4);
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) {
    KV_ASSIGN_OR_RETURN(auto file, GgufFile::Open(path));
    return VocabSpecFromGguf(*file);
  }
  return LoadLlama2cTokenizer(path, vocab_size);
}

}  // namespace kvserve
