// What one token's forward pass touches of a loaded model, for throughput figures
// (bytes/s of weights read, FLOP/s): plain functions of a LoadedModel, no state.
#pragma once

#include <cstdint>

#include "model/model_loader.h"

namespace kvserve {

// Bytes of the token embedding table (`token_embd.weight`); 0 when the model has none.
int64_t EmbeddingBytes(const LoadedModel& model);

// Weight bytes and parameters a single token's forward pass touches: all weights but the
// embedding table (one row is read), which counts again when it doubles as the output matrix.
int64_t WeightBytesPerToken(const LoadedModel& model);
int64_t ParametersPerToken(const LoadedModel& model);

// Parameters of the output projection (vocab x hidden), part of ParametersPerToken. A prefill
// applies it to the last prompt token only.
int64_t OutputParameters(const LoadedModel& model);

}  // namespace kvserve
