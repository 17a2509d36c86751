#include "grammar/grammar_cache.h"

#include "grammar/gbnf.h"
#include "grammar/regex.h"

namespace kvserve::grammar {

const char* GrammarKindName(GrammarKind kind) {
  switch (kind) {
    case GrammarKind::kGbnf: return "grammar";
    case GrammarKind::kJsonSchema: return "json_schema";
    case GrammarKind::kJsonObject: return "json_object";
    case GrammarKind::kRegex: return "regex";
    case GrammarKind::kChoice: return "choice";
  }
  return "unknown";
}

StatusOr<std::shared_ptr<const CompiledGrammar>> CompileGrammar(const GrammarSpec& spec) {
  switch (spec.kind) {
    case GrammarKind::kGbnf: {
      KV_ASSIGN_OR_RETURN(Grammar g, ParseGbnf(spec.text));
      return CompiledGrammar::Compile(g);
    }
    case GrammarKind::kJsonSchema: {
      KV_ASSIGN_OR_RETURN(Grammar g, JsonSchemaTextToGrammar(spec.text));
      return CompiledGrammar::Compile(g);
    }
    case GrammarKind::kJsonObject:
      return CompiledGrammar::Compile(JsonObjectGrammar());
    case GrammarKind::kRegex: {
      KV_ASSIGN_OR_RETURN(Grammar g, RegexToGrammar(spec.text));
      return CompiledGrammar::Compile(g);
    }
    case GrammarKind::kChoice: {
      nlohmann::json list = nlohmann::json::parse(spec.text, nullptr, false);
      if (list.is_discarded() || !list.is_array()) {
        return InvalidArgumentError("choice: expected a JSON array of strings");
      }
      std::vector<std::string> choices;
      for (const auto& c : list) {
        if (!c.is_string()) return InvalidArgumentError("choice: every choice must be a string");
        choices.push_back(c.get<std::string>());
      }
      KV_ASSIGN_OR_RETURN(Grammar g, ChoiceToGrammar(choices));
      return CompiledGrammar::Compile(g);
    }
  }
  return InvalidArgumentError("unknown grammar kind");
}

StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCache::Get(const GrammarSpec& spec) {
  std::string key(1, static_cast<char>(spec.kind));
  if (spec.kind != GrammarKind::kJsonObject) key += spec.text;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->grammar;
    }
    ++stats_.misses;
  }
  auto compiled = CompileGrammar(spec);
  std::lock_guard<std::mutex> lock(mu_);
  if (!compiled.ok()) {
    ++stats_.errors;
    return compiled.status();
  }
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->grammar;
  const size_t bytes = (*compiled)->memory_bytes() + key.size();
  lru_.push_front(Entry{key, *compiled, bytes});
  index_[key] = lru_.begin();
  bytes_ += bytes;
  while (lru_.size() > 1 && (lru_.size() > options_.max_entries || bytes_ > options_.max_bytes)) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
    ++stats_.evictions;
  }
  return *compiled;
}

GrammarCacheStats GrammarCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  GrammarCacheStats s = stats_;
  s.entries = static_cast<int64_t>(lru_.size());
  s.bytes = static_cast<int64_t>(bytes_);
  return s;
}

std::shared_ptr<TokenMasker> TokenMaskerCache::Get(const std::shared_ptr<const CompiledGrammar>& grammar) {
  auto it = index_.find(grammar.get());
  if (it != index_.end() && it->second->second->grammar() == grammar) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  auto masker = std::make_shared<TokenMasker>(grammar, trie_, options_);
  lru_.emplace_front(grammar.get(), masker);
  index_[grammar.get()] = lru_.begin();
  while (lru_.size() > max_entries_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return masker;
}

}  // namespace kvserve::grammar
