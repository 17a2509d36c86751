// Tests: a synthetic model (model/synthetic.h) built once per (preset, seed) and shared by
// every test of the process, so that a suite does not rebuild its weights per test.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "base/check.h"
#include "model/llama.h"
#include "model/synthetic.h"

namespace kvserve::testing {

// Thread-safe. The model lives until the process exits.
inline LlamaModel& SharedSyntheticModel(const std::string& preset, uint64_t seed) {
  static std::mutex mu;
  // Never destroyed, so the models stay reachable at exit (no leak report under ASan).
  static auto* models = new std::map<std::pair<std::string, uint64_t>, LlamaModel*>();
  std::lock_guard<std::mutex> lock(mu);
  LlamaModel*& model = (*models)[{preset, seed}];
  if (model == nullptr) {
    SyntheticModelOptions o;
    o.preset = preset;
    o.seed = seed;
    auto loaded = MakeSyntheticModel(o);
    KV_CHECK(loaded.ok()) << loaded.status().ToString();
    auto created = LlamaModel::Create(std::move(loaded).value());
    KV_CHECK(created.ok()) << created.status().ToString();
    model = std::move(created).value().release();
  }
  return *model;
}

}  // namespace kvserve::testing
