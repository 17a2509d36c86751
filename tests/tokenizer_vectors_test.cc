// Tokenizer conformance against real vocabularies from ../shared/assets:
//  * every tokenizers/ggml-vocab-*.gguf with .inp/.out vectors (llama.cpp's own test vectors:
//    no BOS, no special-token parsing) must match exactly;
//  * stories260K prompts encode with tok512.bin to the ids of greedy_reference.json;
//  * the llama2.c export of the Llama 2 vocabulary (tokenizer.bin) encodes like llama-spm;
//  * decode(encode(x)) == x for the SentencePiece vocabularies.
// Every test skips with a message when the assets are absent.
#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/testing/test_dependency.h"
#include "model/gguf.h"
#include "model/gguf_vocab.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

const std::string kAssets = KVSERVE_ASSETS_DIR;
const std::string kTokenizerDir = kAssets + "/tokenizers";

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

struct Vectors {
  std::vector<std::string> inputs;
  std::vector<std::vector<TokenId>> expected;
};

// .inp: strings each followed by "\n__ggml_vocab_test__\n"; .out: one line of ids each.
bool LoadVectors(const std::string& gguf_path, Vectors* v) {
  std::string inp, out;
  if (!ReadFile(gguf_path + ".inp", &inp) || !ReadFile(gguf_path + ".out", &out)) return false;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0; pos < inp.size();) {
    size_t end = inp.find(sep, pos);
    if (end == std::string::npos) end = inp.size();
    v->inputs.push_back(inp.substr(pos, end - pos));
    pos = end == inp.size() ? end : end + sep.size();
  }
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ids(line);
    std::vector<TokenId> row;
    for (long id; ids >> id;) row.push_back(static_cast<TokenId>(id));
    v->expected.push_back(std::move(row));
  }
  return true;
}

std::string Join(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) s += " " + std::to_string(id);
  return s;
}

// "llama-spm" for .../ggml-vocab-llama-spm.gguf, for every vocabulary with vectors.
std::vector<std::string> VocabNamesWithVectors() {
  std::vector<std::string> names;
  if (DIR* dir = opendir(kTokenizerDir.c_str())) {
    while (dirent* e = readdir(dir)) {
      const std::string f = e->d_name;
      const std::string prefix = "ggml-vocab-", suffix = ".gguf";
      if (f.size() > prefix.size() + suffix.size() && f.rfind(prefix, 0) == 0 &&
          f.compare(f.size() - suffix.size(), suffix.size(), suffix) == 0) {
        std::string dummy;
        if (ReadFile(kTokenizerDir + "/" + f + ".inp", &dummy) &&
            ReadFile(kTokenizerDir + "/" + f + ".out", &dummy)) {
          names.push_back(f.substr(prefix.size(), f.size() - prefix.size() - suffix.size()));
        }
      }
    }
    closedir(dir);
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) names.push_back("assets_absent");
  return names;
}

std::string VocabPath(const std::string& name) {
  return kTokenizerDir + "/ggml-vocab-" + name + ".gguf";
}

std::unique_ptr<Tokenizer> LoadGgufTokenizer(const std::string& path) {
  auto file = GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << path << ": " << file.status().ToString();
  if (!file.ok()) return nullptr;
  auto spec = VocabSpecFromGguf(**file);
  EXPECT_TRUE(spec.ok()) << path << ": " << spec.status().ToString();
  if (!spec.ok()) return nullptr;
  auto tok = Tokenizer::Create(std::move(*spec));
  EXPECT_TRUE(tok.ok()) << path << ": " << tok.status().ToString();
  if (!tok.ok()) return nullptr;
  return std::move(*tok);
}

// Encodes every input and reports mismatches; returns the number of matching cases.
size_t CheckVectors(const Tokenizer& tok, const Vectors& v, const std::string& label,
                    const std::vector<size_t>& skip = {}) {
  EXPECT_EQ(v.inputs.size(), v.expected.size()) << label;
  const EncodeOptions options{.add_bos = false, .parse_special = false};
  size_t num_ok = 0;
  for (size_t i = 0; i < std::min(v.inputs.size(), v.expected.size()); ++i) {
    if (std::find(skip.begin(), skip.end(), i) != skip.end()) continue;
    const std::vector<TokenId> got = tok.Encode(v.inputs[i], options);
    if (got == v.expected[i]) {
      ++num_ok;
    } else {
      ADD_FAILURE() << label << " case " << i << " input \"" << v.inputs[i] << "\"\n  expected"
                    << Join(v.expected[i]) << "\n  got     " << Join(got);
    }
  }
  return num_ok;
}

class VocabVectorsTest : public testing::TestWithParam<std::string> {};

std::string VocabParamName(const testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s) {
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

TEST_P(VocabVectorsTest, EncodesLikeLlamaCpp) {
  const std::string name = GetParam();
  Vectors v;
  KVSERVE_SKIP_IF_ABSENT(name != "assets_absent" && LoadVectors(VocabPath(name), &v),
                         "tokenizer vectors under " << kTokenizerDir);
  auto tok = LoadGgufTokenizer(VocabPath(name));
  ASSERT_NE(tok, nullptr);
  const size_t num_ok = CheckVectors(*tok, v, name);
  std::cout << "[ vectors  ] " << name << ": " << num_ok << "/" << v.inputs.size()
            << " cases match\n";
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, VocabVectorsTest, testing::ValuesIn(VocabNamesWithVectors()),
                         VocabParamName);

// The vocabularies with vectors whose tokenizer is lossless: all but WordPiece ("bert"), which
// lowercases and strips accents (a round trip there is not expected, so it is not a test case).
std::vector<std::string> LosslessVocabNames() {
  std::vector<std::string> names;
  for (const std::string& name : VocabNamesWithVectors()) {
    auto file = GgufFile::Open(VocabPath(name));
    if (file.ok()) {
      auto model = (*file)->GetString("tokenizer.ggml.model");
      if (model.ok() && *model == "bert") continue;
    }
    names.push_back(name);  // unreadable ones (or "assets_absent") fail or skip in the test
  }
  return names;
}

class VocabRoundTripTest : public testing::TestWithParam<std::string> {};

// decode(encode(x)) == x: SentencePiece and byte-level BPE are lossless.
TEST_P(VocabRoundTripTest, DecodeRoundTrips) {
  const std::string name = GetParam();
  Vectors v;
  KVSERVE_SKIP_IF_ABSENT(name != "assets_absent" && LoadVectors(VocabPath(name), &v),
                         "tokenizer vectors under " << kTokenizerDir);
  auto tok = LoadGgufTokenizer(VocabPath(name));
  ASSERT_NE(tok, nullptr);
  ASSERT_NE(tok->spec().model, VocabSpec::Model::kWpm) << name << ": WordPiece is lossy";
  for (const std::string& text : v.inputs) {
    EXPECT_EQ(tok->Decode(tok->Encode(text, {.add_bos = false})), text);
    EXPECT_EQ(tok->Decode(tok->Encode(text, {.add_bos = true})), text);
  }
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, VocabRoundTripTest, testing::ValuesIn(LosslessVocabNames()),
                         VocabParamName);

TEST(Stories260KTokenizer, PromptsEncodeLikeReference) {
  const std::string dir = kAssets + "/models/stories260K";
  std::string json_text;
  KVSERVE_SKIP_IF_ABSENT(ReadFile(dir + "/greedy_reference.json", &json_text),
                         dir << "/greedy_reference.json");
  auto spec = LoadLlama2cTokenizer(dir + "/tok512.bin", 512);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto tok = Tokenizer::Create(std::move(*spec));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const auto json = nlohmann::json::parse(json_text);
  ASSERT_GE(json["cases"].size(), 1u);
  for (const auto& c : json["cases"]) {
    const std::string prompt = c["prompt"];
    const std::vector<TokenId> want = c["prompt_ids_with_bos"].get<std::vector<TokenId>>();
    const std::vector<TokenId> got = (*tok)->Encode(prompt, {});
    EXPECT_EQ(got, want) << "prompt \"" << prompt << "\"";
    // And back: the text after BOS is the prompt again.
    EXPECT_EQ((*tok)->Decode(got), prompt);
  }
}

// An independent, literal transcription of llama2.c's encode(): characters (lead byte plus
// continuation bytes) looked up whole or as byte tokens 3 + b, then the adjacent pair whose
// concatenated text is the best-scoring token is merged (the first on ties) until none is.
std::vector<TokenId> NaiveLlama2cEncode(const VocabSpec& spec,
                                        const std::map<std::string, TokenId>& index,
                                        const std::string& text) {
  auto lookup = [&](const std::string& s) {
    auto it = index.find(s);
    return it == index.end() ? kNoToken : it->second;
  };
  std::vector<TokenId> tokens = {spec.bos_id};
  if (!text.empty()) tokens.push_back(lookup(" "));
  for (size_t i = 0; i < text.size();) {
    size_t j = i + 1;
    while (j < text.size() && j - i < 4 && (static_cast<uint8_t>(text[j]) & 0xC0) == 0x80) ++j;
    const std::string ch = text.substr(i, j - i);
    const TokenId id = lookup(ch);
    if (id != kNoToken) {
      tokens.push_back(id);
    } else {
      for (char c : ch) tokens.push_back(3 + static_cast<uint8_t>(c));
    }
    i = j;
  }
  while (true) {
    float best_score = -1e10f;
    TokenId best_id = kNoToken;
    size_t best_idx = 0;
    for (size_t i = 1; i + 1 < tokens.size(); ++i) {
      const TokenId id = lookup(spec.tokens[tokens[i]] + spec.tokens[tokens[i + 1]]);
      if (id != kNoToken && spec.scores[id] > best_score) {
        best_score = spec.scores[id];
        best_id = id;
        best_idx = i;
      }
    }
    if (best_id == kNoToken) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_idx) + 1);
  }
  return tokens;
}

std::vector<std::string> ReadLines(const std::string& path, size_t max_lines) {
  std::vector<std::string> lines;
  std::ifstream f(path);
  for (std::string line; lines.size() < max_lines && std::getline(f, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

TEST(Llama2cTokenizer, MatchesLiteralLlama2cEncode) {
  const std::string tok512 = kAssets + "/models/stories260K/tok512.bin";
  const std::string bin = kTokenizerDir + "/llama2/tokenizer.bin";
  std::string probe;
  KVSERVE_SKIP_IF_ABSENT(ReadFile(tok512, &probe) && ReadFile(bin, &probe), tok512 << " and " << bin);
  std::vector<std::string> texts =
      ReadLines(kAssets + "/text/tinystories_validation_head.txt", 150);
  const std::vector<std::string> wiki = ReadLines(kAssets + "/text/wikitext-2-raw/wiki.test.raw", 60);
  texts.insert(texts.end(), wiki.begin(), wiki.end());
  Vectors v;
  if (LoadVectors(VocabPath("llama-spm"), &v)) texts.insert(texts.end(), v.inputs.begin(), v.inputs.end());
  ASSERT_GT(texts.size(), 46u) << "text assets missing";
  for (const auto& [path, vocab_size] : {std::pair{tok512, 512}, std::pair{bin, 32000}}) {
    auto spec = LoadLlama2cTokenizer(path, vocab_size);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    auto tok = Tokenizer::Create(*spec);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    std::map<std::string, TokenId> index;
    for (size_t i = 0; i < spec->tokens.size(); ++i) {
      index.emplace(spec->tokens[i], static_cast<TokenId>(i));
    }
    size_t num_ok = 0;
    for (const std::string& text : texts) {
      const std::vector<TokenId> want = NaiveLlama2cEncode(*spec, index, text);
      const std::vector<TokenId> got = (*tok)->Encode(text, {});
      EXPECT_EQ(got, want) << path << " text \"" << text << "\"";
      num_ok += got == want;
    }
    std::cout << "[ llama2.c ] " << path << ": " << num_ok << "/" << texts.size()
              << " texts encode like llama2.c encode()\n";
  }
}

// llama2.c's encode() differs from SentencePiece (llama.cpp) only where characters outside
// the vocabulary could merge into a token before byte fallback; the Llama 2 vectors contain
// no such case, so every case must agree.
TEST(Llama2cTokenizer, EncodesLlamaSpmVectors) {
  const std::string bin = kTokenizerDir + "/llama2/tokenizer.bin";
  Vectors v;
  std::string probe;
  KVSERVE_SKIP_IF_ABSENT(ReadFile(bin, &probe) && LoadVectors(VocabPath("llama-spm"), &v),
                         bin << " and the llama-spm vectors under " << kTokenizerDir);
  auto spec = LoadLlama2cTokenizer(bin, 32000);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto tok = Tokenizer::Create(std::move(*spec));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const size_t num_ok = CheckVectors(**tok, v, "llama2.c tokenizer.bin");
  std::cout << "[ vectors  ] llama2.c tokenizer.bin: " << num_ok << "/" << v.inputs.size()
            << " cases match llama-spm\n";
  for (const std::string& text : v.inputs) {
    EXPECT_EQ((*tok)->Decode((*tok)->Encode(text, {})), text);
  }
}

}  // namespace
}  // namespace kvserve

namespace kvserve {
namespace {

// The Llama 2 vocabulary embedded in a full model GGUF encodes like ggml-vocab-llama-spm.
TEST(GgufModelVocab, Llama2TinyRandomMatchesLlamaSpmVectors) {
  const std::string path = kAssets + "/models/llama-2-tiny-random/llama-2-tiny-random.gguf";
  Vectors v;
  std::ifstream probe(path);
  KVSERVE_SKIP_IF_ABSENT(probe && LoadVectors(VocabPath("llama-spm"), &v),
                         path << " and the llama-spm vectors under " << kTokenizerDir);
  auto tok = LoadGgufTokenizer(path);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(CheckVectors(*tok, v, "llama-2-tiny-random"), v.inputs.size());
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_TRUE(tok->IsEndOfGeneration(2));
}

}  // namespace
}  // namespace kvserve

namespace kvserve {
namespace {

// The all-MiniLM-L6-v2 Hugging Face tokenizer (tokenizer.json's WordPiece model, and the
// older vocab.txt) converts to the vocabulary llama.cpp's converter wrote into
// ggml-vocab-bert-bge.gguf (the same bert-base-uncased pieces) and encodes its vectors.
TEST(HfWordPiece, AllMiniLmTokenizerEncodesLikeTheBertBgeVectors) {
  const std::string dir = kTokenizerDir + "/all-MiniLM-L6-v2";
  Vectors v;
  std::ifstream probe(dir + "/tokenizer.json");
  KVSERVE_SKIP_IF_ABSENT(probe && LoadVectors(VocabPath("bert-bge"), &v),
                         dir << " and the bert-bge vectors under " << kTokenizerDir);
  auto gguf = GgufFile::Open(VocabPath("bert-bge"));
  ASSERT_TRUE(gguf.ok());
  auto want = VocabSpecFromGguf(**gguf);
  ASSERT_TRUE(want.ok());
  for (const char* file : {"tokenizer.json", "vocab.txt"}) {
    SCOPED_TRACE(file);
    const std::string path = dir + "/" + file;
    auto spec = std::string(file) == "vocab.txt" ? LoadHfWordPieceVocabTxt(path)
                                                 : LoadHfTokenizerJson(path);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    EXPECT_EQ(spec->model, VocabSpec::Model::kWpm);
    EXPECT_EQ(spec->tokens, want->tokens);
    EXPECT_EQ(spec->cls_id, 101);
    EXPECT_EQ(spec->sep_id, 102);
    EXPECT_EQ(spec->unk_id, 100);
    auto tok = Tokenizer::Create(std::move(*spec));
    ASSERT_TRUE(tok.ok());
    EXPECT_EQ(CheckVectors(**tok, v, file), v.inputs.size());
    const std::vector<TokenId> ids =
        (*tok)->Encode("Hello world", EncodeOptions{.add_bos = true, .parse_special = false});
    EXPECT_EQ(ids, (std::vector<TokenId>{101, 7592, 2088, 102}));
  }
}

}  // namespace
}  // namespace kvserve
