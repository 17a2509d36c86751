#include "model/model_stats.h"

namespace kvserve {

int64_t EmbeddingBytes(const LoadedModel& model) {
  auto it = model.tensors.find("token_embd.weight");
  return it == model.tensors.end() ? 0 : it->second.num_bytes();
}

int64_t WeightBytesPerToken(const LoadedModel& model) {
  const int64_t total = model.WeightBytes();
  if (model.config.tied_embeddings) return total;
  return total - EmbeddingBytes(model);
}

int64_t ParametersPerToken(const LoadedModel& model) {
  const int64_t total = model.config.NumParameters();
  if (model.config.tied_embeddings) return total;
  return total - model.config.vocab_size * model.config.hidden_dim;  // the embedding table
}

int64_t OutputParameters(const LoadedModel& model) {
  return model.config.vocab_size * model.config.hidden_dim;
}

}  // namespace kvserve
