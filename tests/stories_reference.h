// Test-only: the stories260K greedy reference cases (../shared/assets/models/stories260K/
// greedy_reference.json), shared by the tests that check generation against them.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/vocab_spec.h"

namespace kvserve::stories {

inline constexpr TokenId kBos = 1;

inline std::string StoriesDir() {
  return std::string(KVSERVE_ASSETS_DIR) + "/models/stories260K";
}

struct Case {
  std::vector<TokenId> prompt;  // with BOS
  int64_t steps = 0;
  std::vector<TokenId> ids_after_bos;
};

inline std::vector<Case> LoadCases() {
  std::ifstream in(StoriesDir() + "/greedy_reference.json");
  nlohmann::json j = nlohmann::json::parse(in);
  std::vector<Case> cases;
  for (const auto& c : j.at("cases")) {
    Case x;
    x.prompt = c.at("prompt_ids_with_bos").get<std::vector<TokenId>>();
    x.steps = c.at("steps").get<int64_t>();
    x.ids_after_bos = c.at("ids_after_bos").get<std::vector<TokenId>>();
    cases.push_back(std::move(x));
  }
  return cases;
}

}  // namespace kvserve::stories
