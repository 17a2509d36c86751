// Compiling a request's structured-output spec, and the caches that keep compiled grammars and
// their token maskers.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/token_masker.h"

namespace kvserve::grammar {

enum class GrammarKind : uint8_t {
  kGbnf,        // text: GBNF (guided_grammar, llama.cpp `grammar`)
  kJsonSchema,  // text: the schema as JSON text (response_format json_schema, guided_json)
  kJsonObject,  // text: ignored (response_format json_object)
  kRegex,       // text: the pattern (guided_regex)
  kChoice,      // text: a JSON array of strings (guided_choice)
};

const char* GrammarKindName(GrammarKind kind);

struct GrammarSpec {
  GrammarKind kind = GrammarKind::kJsonObject;
  std::string text;
};

// Parses and compiles a spec. Errors are InvalidArgument and name what is wrong (the server
// answers 400 with them).
StatusOr<std::shared_ptr<const CompiledGrammar>> CompileGrammar(const GrammarSpec& spec);

struct GrammarCacheOptions {
  size_t max_entries = 512;
  size_t max_bytes = size_t{64} << 20;  // CompiledGrammar::memory_bytes() summed
};

struct GrammarCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t errors = 0;
  int64_t evictions = 0;
  int64_t entries = 0;
  int64_t bytes = 0;
};

// An LRU cache of compiled grammars keyed by (kind, text), bounded in entries and bytes.
// Thread-safe (HTTP threads compile here, so bad specs fail before reaching the engine).
// Compilation runs outside the lock; two threads compiling the same spec at once both compile
// and one result is kept. Errors are not cached.
class GrammarCache {
 public:
  explicit GrammarCache(const GrammarCacheOptions& options = {}) : options_(options) {}
  StatusOr<std::shared_ptr<const CompiledGrammar>> Get(const GrammarSpec& spec);
  GrammarCacheStats stats() const;

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const CompiledGrammar> grammar;
    size_t bytes;
  };
  GrammarCacheOptions options_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front = most recent
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
  GrammarCacheStats stats_;
};

// The engine's maskers, one per compiled grammar, for one vocabulary; LRU-bounded.
// Engine thread only (TokenMasker is not thread-safe). A masker evicted while sequences still
// use it stays alive through their shared_ptr.
class TokenMaskerCache {
 public:
  TokenMaskerCache(std::shared_ptr<const TokenTrie> trie, size_t max_entries = 32,
                   const TokenMaskerOptions& options = {})
      : trie_(std::move(trie)), max_entries_(max_entries), options_(options) {}
  std::shared_ptr<TokenMasker> Get(const std::shared_ptr<const CompiledGrammar>& grammar);
  size_t size() const { return lru_.size(); }

 private:
  std::shared_ptr<const TokenTrie> trie_;
  size_t max_entries_;
  TokenMaskerOptions options_;
  std::list<std::pair<const CompiledGrammar*, std::shared_ptr<TokenMasker>>> lru_;
  std::unordered_map<const CompiledGrammar*, decltype(lru_)::iterator> index_;
};

}  // namespace kvserve::grammar
