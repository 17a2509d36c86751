// Our own quantisers for the GGML 2- to 6-bit weight types of quant_blocks.h (Q4_0 ... Q6_K).
// QuantizeRow (dtype.h) dispatches here; the blocks are byte-exact GGML layouts, so what these
// write loads in llama.cpp and decodes with the Dequantize* functions of quant_blocks.h.
//
// Approach (written from the format description; ggml-quants.c's make_qx_quants /
// make_qkx2_quants describe the same idea): per block or sub-block, try a range of candidate
// scales, round every value with each, solve weighted least squares for the scale (and offset)
// given the rounded integers, and keep the fit with the least weighted squared error. The
// k-quants then quantise their sub-block scales (and mins) against a per-super-block fp16 d
// (and dmin; rounded away from zero so the largest code is never clipped), refit each
// sub-block's integer scale/min against those, refit d and dmin by least squares for the chosen
// codes, and re-round every value with the final stored scales.
//   Legacy types (Q4_0 ... Q5_1): unweighted error; the stored fp16 scale (and min) is refit
//     once against the rounded values.
//   k-quants: errors weighted by rms(super-block) + |x| (the weighting llama.cpp's reference
//     quantiser uses for Q4_K / Q5_K; here for all five, which measured better than |x| or x^2
//     for Q2_K, Q3_K and Q6_K).
// Measured against llama.cpp's own quantiser (ggml_quantize_chunk, no importance matrix) on the
// same rows, relative RMS error: legacy types 3-11% lower, Q2_K 8-12% lower, Q3_K 1-4% lower,
// Q6_K 1-2% lower, Q4_K / Q5_K equal (within 0.5%).
//
// Inputs may hold anything: zeros, constant rows, huge outliers, inf and NaN give defined
// (possibly meaningless) blocks, never a crash or undefined behaviour. Stateless and
// thread-safe; each function writes `num_blocks` blocks from 32 (legacy) or 256 (k-quant)
// values per block.
#pragma once

#include <cstdint>

#include "tensor/quant_blocks.h"

namespace kvserve {

void QuantizeQ4_0(const float* x, BlockQ4_0* y, int64_t num_blocks);
void QuantizeQ4_1(const float* x, BlockQ4_1* y, int64_t num_blocks);
void QuantizeQ5_0(const float* x, BlockQ5_0* y, int64_t num_blocks);
void QuantizeQ5_1(const float* x, BlockQ5_1* y, int64_t num_blocks);
void QuantizeQ2_K(const float* x, BlockQ2_K* y, int64_t num_blocks);
void QuantizeQ3_K(const float* x, BlockQ3_K* y, int64_t num_blocks);
void QuantizeQ4_K(const float* x, BlockQ4_K* y, int64_t num_blocks);
void QuantizeQ5_K(const float* x, BlockQ5_K* y, int64_t num_blocks);
void QuantizeQ6_K(const float* x, BlockQ6_K* y, int64_t num_blocks);

// Packing helpers (exposed for tests): the inverses of UnpackScalesQ3K and UnpackScaleMinK4.
// scales[i] / mins[i] must be < 64.
void PackScalesQ3K(const uint8_t scales[16], uint8_t packed[kKScaleBytes]);
void PackScaleMinK4(const uint8_t scales[8], const uint8_t mins[8],
                    uint8_t packed[kKScaleBytes]);

}  // namespace kvserve
