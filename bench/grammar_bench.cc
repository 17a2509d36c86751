// Cost of constrained decoding per token at a 128K vocabulary (plain executable).
//
//   grammar_bench [--vocab PATH_TO_gpt2_vocab.json] [--reps N]
//
// Vocabulary: GPT-2's 50,257 byte-level BPE tokens (../shared/assets/tokenizers/gpt2_hf) grown
// to Llama 3's size, 128,256, with BPE-like merges of existing tokens (pairs of tokens
// concatenated, as merges make them); fully synthetic when the asset is absent.
// Reports, for a JSON schema at three states (mid-string, mid-number, at an object key) and
// for json_object: the mask when its automaton state is new (cold: transitions and mask built
// from nothing), when the state was seen before (cached), ApplyTokenMask over the logits
// row, and the mean cost per token of whole random generations (mask + apply + advance).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/percentile.h"
#include "grammar/grammar_cache.h"
#include "grammar/token_masker.h"

namespace {

using namespace kvserve::grammar;
// Thread CPU time, not wall time: these machines are shared, and a preempted millisecond
// would otherwise count as work.
struct Clock {
  struct time_point {
    double us;
    std::chrono::duration<double, std::micro> operator-(const time_point& o) const {
      return std::chrono::duration<double, std::micro>(us - o.us);
    }
  };
  static time_point now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return {ts.tv_sec * 1e6 + ts.tv_nsec / 1e3};
  }
};

constexpr int32_t kVocabSize = 128256;

double Micros(Clock::time_point a, Clock::time_point b) { return b.us - a.us; }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// GPT-2's byte-to-unicode table inverted: the code point that stands for each byte.
std::vector<uint32_t> Gpt2ByteChars() {
  std::vector<uint32_t> chars(256);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    chars[b] = printable ? b : 256 + n++;
  }
  return chars;
}

Vocabulary LoadVocabulary(const std::string& path, std::string* source) {
  Vocabulary v;
  std::ifstream in(path);
  if (in) {
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_discarded() && j.is_object()) {
      std::vector<uint32_t> chars = Gpt2ByteChars();
      std::vector<int> byte_of(512, -1);
      for (int b = 0; b < 256; ++b) byte_of[chars[b]] = b;
      v.token_bytes.resize(j.size());
      for (const auto& [piece, id] : j.items()) {
        std::string bytes;
        size_t pos = 0;
        uint32_t cp = 0;
        while (pos < piece.size() && DecodeUtf8(piece, &pos, &cp)) {
          if (cp < byte_of.size() && byte_of[cp] >= 0) bytes.push_back(static_cast<char>(byte_of[cp]));
        }
        v.token_bytes[id.get<size_t>()] = bytes;
      }
      v.eos_token_ids = {50256};  // <|endoftext|>
      *source = "GPT-2 vocabulary (" + std::to_string(v.token_bytes.size()) + " tokens) + BPE-like merges";
    }
  }
  if (v.token_bytes.empty()) {
    for (int b = 0; b < 256; ++b) v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
    v.token_bytes.push_back("<eos>");
    v.eos_token_ids = {256};
    *source = "synthetic (256 bytes + BPE-like merges)";
  }
  std::set<std::string> seen(v.token_bytes.begin(), v.token_bytes.end());
  std::mt19937_64 rng(1);
  const size_t base = v.token_bytes.size();
  while (static_cast<int32_t>(v.token_bytes.size()) < kVocabSize) {
    const std::string& a = v.token_bytes[rng() % base];
    const std::string& b = v.token_bytes[rng() % v.token_bytes.size()];
    std::string s = a + b;
    if (s.size() > 24 || s.empty() || !seen.insert(s).second) continue;
    v.token_bytes.push_back(std::move(s));
  }
  return v;
}

struct Scenario {
  const char* name;
  GrammarKind kind;
  const char* spec;
  const char* prefix;
};

}  // namespace

int main(int argc, char** argv) {
  std::string vocab_path = std::string(KVSERVE_BENCH_ASSETS) + "/tokenizers/gpt2_hf/gpt2_vocab.json";
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--vocab") vocab_path = argv[i + 1];
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
  }
  std::string source;
  auto t0 = Clock::now();
  const Vocabulary vocab = LoadVocabulary(vocab_path, &source);
  auto t1 = Clock::now();
  auto trie = TokenTrie::Build(vocab);
  auto t2 = Clock::now();
  printf("vocabulary: %s -> %d tokens (load %.0f ms)\n", source.c_str(), trie->vocab_size(), Micros(t0, t1) / 1000);
  printf("token trie: %zu nodes, %.1f MiB, built in %.0f ms\n", trie->nodes().size(),
         trie->memory_bytes() / 1048576.0, Micros(t1, t2) / 1000);

  const char* schema = R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "score": {"type": "number"},
      "email": {"type": "string", "format": "email"},
      "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
      "address": {"type": "object", "properties": {"street": {"type": "string"}, "zip": {"type": "string", "pattern": "[0-9]{5}"}},
                  "required": ["street", "zip"]}},
    "required": ["name", "age", "tags"]})";
  const Scenario scenarios[] = {
      {"schema, mid-string", GrammarKind::kJsonSchema, schema, R"({"name": "John Sm)"},
      {"schema, mid-number", GrammarKind::kJsonSchema, schema, R"({"name": "John", "age": 4)"},
      {"schema, at object key", GrammarKind::kJsonSchema, schema, R"({"name": "John", "age": 42, )"},
      {"schema, nested key", GrammarKind::kJsonSchema, schema, R"({"name": "J", "age": 1, "tags": [], "address": {)"},
      {"json_object, mid-string", GrammarKind::kJsonObject, "", R"({"a": [1, {"b": "some te)"},
      {"json_object, at key", GrammarKind::kJsonObject, "", R"({"a": 1, )"},
      {"regex, phone", GrammarKind::kRegex, R"(\(\d{3}\) \d{3}-\d{4})", "(555) 1"},
  };
  std::vector<float> logits(kVocabSize);
  printf("\ncold: new automaton state (transitions and mask built); walk: transitions known, mask\n"
         "not cached (one trie scan); cached: mask seen before; apply: ApplyTokenMask on 128,256 logits\n");
  printf("%-26s %10s %10s %10s %10s %10s %10s\n", "state", "cold_us", "walk_us", "cached_us", "apply_us", "allowed",
         "visited");
  for (const Scenario& sc : scenarios) {
    auto g = CompileGrammar({sc.kind, sc.spec});
    if (!g.ok()) {
      printf("%s: %s\n", sc.name, g.status().ToString().c_str());
      return 1;
    }
    TokenMasker masker(*g, trie);
    std::vector<double> cold, walk, cached, apply;
    int64_t allowed = 0, visited = 0;
    for (int r = 0; r < reps; ++r) {
      masker.Reset();
      TokenMasker::State st = masker.Start();
      if (!st.matcher.AcceptString(sc.prefix)) {
        GrammarMatcher m = masker.Start().matcher;
        size_t k = 0;
        while (sc.prefix[k] && m.AcceptByte(static_cast<uint8_t>(sc.prefix[k]))) ++k;
        printf("%s: prefix rejected at byte %zu\n%s\n", sc.name, k, (*g)->gbnf().c_str());
        return 1;
      }
      st.id = -1;
      auto a = Clock::now();
      masker.Mask(&st);
      auto b = Clock::now();
      masker.DropMasks();
      const int64_t visited_before = masker.stats().trie_nodes_visited;
      auto b2 = Clock::now();
      masker.Mask(&st);
      auto b3 = Clock::now();
      visited = masker.stats().trie_nodes_visited - visited_before;
      const auto& mask = masker.Mask(&st);
      auto c = Clock::now();
      std::fill(logits.begin(), logits.end(), 0.5f);
      auto d = Clock::now();
      allowed = ApplyTokenMask(mask, trie->vocab_size(), logits.data(), kVocabSize);
      auto e = Clock::now();
      cold.push_back(Micros(a, b));
      walk.push_back(Micros(b2, b3));
      cached.push_back(Micros(b3, c));
      apply.push_back(Micros(d, e));
    }
    printf("%-26s %10.1f %10.1f %10.2f %10.1f %10lld %10lld\n", sc.name, Median(cold), Median(walk), Median(cached),
           Median(apply), static_cast<long long>(allowed), static_cast<long long>(visited));
  }

  // Whole generations: random allowed tokens (steered to close after a while), one masker per
  // grammar kept across generations as the engine would, mean cost per generated token.
  printf("\n%-26s %8s %10s %12s %12s %10s\n", "generation", "tokens", "per_tok_us", "first_gen_us", "later_us",
         "states");
  const Scenario gens[] = {
      {"schema", GrammarKind::kJsonSchema, schema, ""},
      {"json_object", GrammarKind::kJsonObject, "", ""},
  };
  for (const Scenario& sc : gens) {
    auto g = CompileGrammar({sc.kind, sc.spec});
    TokenMasker masker(*g, trie);
    std::mt19937_64 rng(3);
    double total_us = 0, first_us = 0;
    int64_t total_tokens = 0, first_tokens = 0;
    for (int gen = 0; gen < 10; ++gen) {
      TokenMasker::State st = masker.Start();
      int64_t tokens = 0;
      double us = 0;
      for (int step = 0; step < 300; ++step) {
        auto a = Clock::now();
        const auto& mask = masker.Mask(&st);
        ApplyTokenMask(mask, trie->vocab_size(), logits.data(), kVocabSize);
        auto b = Clock::now();
        std::vector<int32_t> allowed, closing;
        for (int32_t id = 0; id < trie->vocab_size(); ++id) {
          if (!((mask[id >> 6] >> (id & 63)) & 1)) continue;
          allowed.push_back(id);
          const std::string& t = trie->token_bytes(id);
          if (t.find_first_of("\"}]") != std::string::npos || id == 50256) closing.push_back(id);
        }
        if (allowed.empty()) break;
        const auto& pool = (step > 30 && !closing.empty()) ? closing : allowed;
        const int32_t id = pool[rng() % pool.size()];
        auto c = Clock::now();
        masker.Advance(&st, id);
        auto d = Clock::now();
        us += Micros(a, b) + Micros(c, d);
        ++tokens;
        if (st.finished) break;
      }
      total_us += us;
      total_tokens += tokens;
      if (gen == 0) {
        first_us = us;
        first_tokens = tokens;
      }
    }
    const double later = (total_us - first_us) / std::max<int64_t>(1, total_tokens - first_tokens);
    printf("%-26s %8lld %10.1f %12.1f %12.1f %10lld\n", sc.name, static_cast<long long>(total_tokens),
           total_us / std::max<int64_t>(1, total_tokens), first_us / std::max<int64_t>(1, first_tokens), later,
           static_cast<long long>(masker.stats().num_states));
  }
  return 0;
}
