// Attention statistics of the paged attention kernels (PagedSeq::stats_scores / stats_lse) and
// AccumulateAttentionMass, at every SIMD level, against the scalar oracle (kernels/reference).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/paged_attention_test_util.h"
#include "kernels/cpu/simd_level_test_util.h"
#include "kernels/paged_attention.h"
#include "kernels/reference/reference.h"
#include "tensor/dtype.h"

namespace kvserve {
namespace {

using kernels::internal::SimdLevel;
using namespace paged_attention_test;  // NOLINT(build/namespaces): the shared test helpers

// A value no kernel computes, marking entries that must stay unwritten.
constexpr float kUnwritten = -12345.0f;

// Statistics buffers of one sequence. They cover all num_queries rows; the kernels get
// pointers to row stats_query_begin, so rows before it (the guard) must stay unwritten.
struct SeqStats {
  std::vector<float> scores;  // [num_queries, num_heads, num_keys]
  std::vector<float> lse;     // [num_queries, num_heads]
};

// Sets every sequence's statistics to fresh kUnwritten buffers, recording queries from
// query_begins[s] on.
std::vector<SeqStats> AttachStats(Batch& b, const std::vector<int64_t>& query_begins) {
  std::vector<SeqStats> stats(b.seqs.size());
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    PagedSeq& seq = b.seqs[s];
    const int64_t row_keys = b.geo.num_heads * seq.num_keys;
    stats[s].scores.assign(seq.num_queries * row_keys, kUnwritten);
    stats[s].lse.assign(seq.num_queries * b.geo.num_heads, kUnwritten);
    seq.stats_query_begin = query_begins[s];
    seq.stats_scores = stats[s].scores.data() + query_begins[s] * row_keys;
    seq.stats_lse = stats[s].lse.data() + query_begins[s] * b.geo.num_heads;
  }
  return stats;
}

// The batch's sequences without statistics.
Batch WithoutStats(const Batch& b) {
  Batch copy;
  copy.geo = b.geo;
  copy.q = b.q;
  copy.seqs = b.seqs;
  copy.shape = b.shape;
  copy.total_rows = b.total_rows;
  for (PagedSeq& seq : copy.seqs) {
    seq.stats_scores = seq.stats_lse = nullptr;
    seq.stats_query_begin = 0;
  }
  return copy;
}

std::vector<float> RunKernelOn(const Batch& b, const PagedKv& kv, ThreadPool* pool) {
  std::vector<float> out = b.NewOutput();
  kernels::PagedAttention(b.q.data(), kv, b.seqs.data(), static_cast<int64_t>(b.seqs.size()),
                          b.shape, out.data(), pool);
  return out;
}

// Checks the kernel's statistics of one sequence against the oracle's: every attended entry
// written, its log-weight s - lse within `tolerance` of the oracle's (the relative error of the
// weight exp(s - lse)), the weights of each row summing to 1; all other entries unwritten.
// Returns the largest log-weight error.
double ExpectStatsMatch(const PagedSeq& seq, int64_t num_heads, const SeqStats& got,
                        const SeqStats& want, double tolerance, const std::string& what) {
  const int64_t first_pos = seq.num_keys - seq.num_queries;
  double worst = 0.0;
  int64_t failures = 0;
  for (int64_t i = 0; i < seq.num_queries; ++i) {
    for (int64_t h = 0; h < num_heads; ++h) {
      const int64_t row = i * num_heads + h;
      const float* s = got.scores.data() + row * seq.num_keys;
      const float* w = want.scores.data() + row * seq.num_keys;
      if (i < seq.stats_query_begin) {
        EXPECT_EQ(got.lse[row], kUnwritten) << what << " guard lse row " << i;
        for (int64_t t = 0; t < seq.num_keys; ++t) {
          if (s[t] != kUnwritten && ++failures <= 5) ADD_FAILURE() << what << " guard row " << i;
        }
        continue;
      }
      double weight_sum = 0.0;
      for (int64_t t = 0; t < seq.num_keys; ++t) {
        const bool attended = t >= seq.key_begin && t <= first_pos + i;
        if (!attended) {
          if (s[t] != kUnwritten && ++failures <= 5) {
            ADD_FAILURE() << what << " query " << i << " head " << h << " key " << t
                          << " is not attended but written";
          }
          continue;
        }
        const double log_weight = static_cast<double>(s[t]) - got.lse[row];
        const double err = std::fabs(log_weight - (static_cast<double>(w[t]) - want.lse[row]));
        worst = std::max(worst, err);
        if (!(err <= tolerance) && ++failures <= 5) {
          ADD_FAILURE() << what << " query " << i << " head " << h << " key " << t << ": score "
                        << s[t] << " lse " << got.lse[row] << ", oracle " << w[t] << " "
                        << want.lse[row];
        }
        weight_sum += std::exp(log_weight);
      }
      if (!(std::fabs(weight_sum - 1.0) <= tolerance) && ++failures <= 5) {
        ADD_FAILURE() << what << " query " << i << " head " << h << ": weights sum to "
                      << weight_sum;
      }
    }
  }
  return worst;
}

class PagedAttentionStatsTest : public SimdLevelTest {
 protected:
  std::mt19937 rng_{4321};
};

// Prefill over several partitions (merged lse), chunks recording their last queries, decode
// rows with one or several partitions, key_begin inside and at partition boundaries, a
// sequence recording nothing (stats_query_begin == num_queries).
TEST_P(PagedAttentionStatsTest, StatsMatchReferenceAndLeaveOutputsUnchanged) {
  ThreadPool pool(3);
  struct Case {
    SeqSpec spec;
    int64_t key_begin;
    int64_t stats_query_begin;
  };
  const Case cases[] = {
      {{600, 600}, 0, 0},    {{900, 300}, 300, 250}, {{1000, 1}, 999, 0}, {{3000, 1}, 1234, 0},
      {{700, 100}, 512, 60}, {{300, 1}, 256, 0},     {{300, 1}, 0, 1},    {{70, 70}, 0, 37},
      {{257, 1}, 3, 0},
  };
  std::vector<SeqSpec> specs;
  std::vector<int64_t> query_begins;
  for (const Case& c : cases) {
    specs.push_back(c.spec);
    query_begins.push_back(c.stats_query_begin);
  }
  double worst = 0.0;
  for (DType dtype : kAllDtypes) {
    for (auto [group, block_size] : {std::pair<int64_t, int64_t>{1, 16}, {2, 1}, {4, 32}}) {
      Geometry geo;
      geo.dtype = dtype;
      geo.num_kv_heads = 2;
      geo.num_heads = 2 * group;
      geo.block_size = block_size;
      geo.head_dim = block_size == 1 ? 128 : 64;
      Batch b = MakeBatch(geo, specs, rng_);
      for (size_t s = 0; s < specs.size(); ++s) SetKeyBegin(b, s, cases[s].key_begin);
      const PagedKv kv = b.pool->view();
      const std::vector<float> plain = RunKernelOn(WithoutStats(b), kv, nullptr);

      const std::vector<SeqStats> want = AttachStats(b, query_begins);
      std::vector<float> ref_out = b.NewOutput();
      reference::PagedAttention(b.q.data(), kv, b.seqs.data(), static_cast<int64_t>(specs.size()),
                                b.shape, ref_out.data(), nullptr);
      EXPECT_LE(Compare(plain, ref_out).relative(), kSameDataTolerance) << Describe(geo);

      std::vector<SeqStats> got[2];
      for (int with_pool = 0; with_pool < 2; ++with_pool) {
        got[with_pool] = AttachStats(b, query_begins);
        EXPECT_EQ(RunKernelOn(b, kv, with_pool ? &pool : nullptr), plain)
            << Describe(geo) << ": outputs differ with statistics on";
      }
      for (size_t s = 0; s < specs.size(); ++s) {
        const std::string what = Describe(geo) + " seq " + std::to_string(s);
        worst = std::max(worst, ExpectStatsMatch(b.seqs[s], geo.num_heads, got[0][s], want[s],
                                                 1e-5, what));
        EXPECT_EQ(got[1][s].scores, got[0][s].scores) << what << ": pool changes scores";
        EXPECT_EQ(got[1][s].lse, got[0][s].lse) << what << ": pool changes lse";
      }
    }
  }
  std::printf("stats: largest |log-weight error| vs the oracle %.2g\n", worst);
}

// Decode steps through PagedDecodeAttention record the same scores and lse as the same
// positions recorded in a prefill (partitions are fixed, whatever the batch).
TEST_P(PagedAttentionStatsTest, DecodeStatsEqualPrefillStats) {
  for (DType dtype : {DType::kF32, DType::kFp8E4M3, DType::kI8}) {
    Geometry geo;
    geo.dtype = dtype;
    geo.num_heads = 8;
    geo.num_kv_heads = 2;
    Batch b = MakeBatch(geo, {{800, 700}}, rng_);
    SetKeyBegin(b, 0, 40);
    const std::vector<SeqStats> full = AttachStats(b, {0});
    RunKernelOn(b, b.pool->view(), nullptr);
    const PagedSeq& seq = b.seqs[0];
    const int64_t rf = b.row_floats(), heads = geo.num_heads;
    for (int64_t pos : {100, 255, 256, 257, 600, 799}) {
      const int64_t i = pos - 100;  // query index in the prefill
      PagedSeq step = seq;
      step.num_keys = pos + 1;
      step.num_queries = 1;
      step.stats_query_begin = 0;
      std::vector<float> scores(heads * step.num_keys, kUnwritten), lse(heads, kUnwritten);
      step.stats_scores = scores.data();
      step.stats_lse = lse.data();
      std::vector<float> out(rf);
      kernels::PagedDecodeAttention(b.q.data() + i * rf, b.pool->view(), &step, 1, b.shape,
                                    out.data(), nullptr);
      for (int64_t h = 0; h < heads; ++h) {
        EXPECT_EQ(lse[h], full[0].lse[i * heads + h]) << Describe(geo) << " pos " << pos;
        const float* want = full[0].scores.data() + (i * heads + h) * seq.num_keys;
        EXPECT_TRUE(std::equal(scores.begin() + h * step.num_keys + seq.key_begin,
                               scores.begin() + (h + 1) * step.num_keys, want + seq.key_begin))
            << Describe(geo) << " pos " << pos << " head " << h;
      }
    }
  }
}

// AccumulateAttentionMass on real statistics (a chunk recording its last queries) against the
// oracle's double sums: accumulates into existing mass, touches only the visible keys of each
// KV head, and the total added is one per (row, head).
TEST_P(PagedAttentionStatsTest, AccumulateAttentionMassMatchesDoubleSums) {
  std::uniform_real_distribution<float> uniform(0.0f, 3.0f);
  for (int64_t group : {1, 2, 4}) {
    Geometry geo;
    geo.dtype = DType::kBF16;
    geo.num_kv_heads = 2;
    geo.num_heads = 2 * group;
    Batch b = MakeBatch(geo, {{1100, 64}}, rng_);
    for (int64_t key_begin : {0, 37, 256}) {
      SetKeyBegin(b, 0, key_begin);
      const int64_t query_begin = 32;
      const std::vector<SeqStats> stats = AttachStats(b, {query_begin});
      RunKernelOn(b, b.pool->view(), nullptr);
      const PagedSeq& seq = b.seqs[0];
      const int64_t num_rows = seq.num_queries - query_begin;
      const int64_t row0_last_key = seq.num_keys - seq.num_queries + query_begin;
      const int64_t stride = seq.num_keys + 9;
      std::vector<float> initial(geo.num_kv_heads * stride);
      for (float& x : initial) x = uniform(rng_);
      std::vector<float> got = initial, want = initial;
      kernels::AccumulateAttentionMass(seq.stats_scores, seq.stats_lse, num_rows, geo.num_heads,
                                       geo.num_kv_heads, seq.num_keys, key_begin, row0_last_key,
                                       got.data(), stride);
      reference::AccumulateAttentionMass(seq.stats_scores, seq.stats_lse, num_rows,
                                         geo.num_heads, geo.num_kv_heads, seq.num_keys,
                                         key_begin, row0_last_key, want.data(), stride);
      const std::string what = "group " + std::to_string(group) + " key_begin " +
                               std::to_string(key_begin);
      double added = 0.0;
      for (int64_t kvh = 0; kvh < geo.num_kv_heads; ++kvh) {
        for (int64_t t = 0; t < stride; ++t) {
          const int64_t at = kvh * stride + t;
          if (t < key_begin || t >= row0_last_key + num_rows) {
            EXPECT_EQ(got[at], initial[at]) << what << " kv head " << kvh << " key " << t;
            continue;
          }
          EXPECT_NEAR(got[at], want[at], 1e-5 * want[at]) << what << " kv head " << kvh
                                                          << " key " << t;
          added += static_cast<double>(want[at]) - initial[at];
        }
      }
      EXPECT_NEAR(added, static_cast<double>(num_rows * geo.num_heads), 1e-3) << what;
      // Deterministic: the same sums again.
      std::vector<float> again = initial;
      kernels::AccumulateAttentionMass(seq.stats_scores, seq.stats_lse, num_rows, geo.num_heads,
                                       geo.num_kv_heads, seq.num_keys, key_begin, row0_last_key,
                                       again.data(), stride);
      EXPECT_EQ(again, got) << what;
    }
  }
}

// PagedAttentionWithMass: outputs bit-identical to PagedAttention; each request's mass equal to
// AccumulateAttentionMass over one unsliced recording, whatever the scratch limit (down to one
// tile per slice, forcing many slices and parallel sections), for requests starting inside a
// tile, at a tile boundary, at the end (nothing recorded), with key_begin, next to sequences
// without requests.
TEST_P(PagedAttentionStatsTest, PagedAttentionWithMassEqualsOneUnslicedRecording) {
  ThreadPool pool(3);
  for (int64_t group : {1, 3}) {
    Geometry geo;
    geo.dtype = DType::kI8;
    geo.num_kv_heads = 2;
    geo.num_heads = 2 * group;
    const std::vector<SeqSpec> specs = {{700, 300}, {400, 1}, {300, 300}, {900, 1}, {500, 50}};
    const std::vector<int64_t> query_begins = {37, 0, 290, 1, 50};  // -1: no request
    const std::vector<bool> has_request = {true, true, true, false, true};
    Batch b = MakeBatch(geo, specs, rng_);
    SetKeyBegin(b, 0, 100);
    SetKeyBegin(b, 1, 256);
    const PagedKv kv = b.pool->view();
    const std::vector<float> plain = RunKernelOn(b, kv, &pool);

    // The oracle: one recording of every requested row, accumulated once.
    std::vector<std::vector<float>> want(specs.size());
    {
      const std::vector<SeqStats> stats = AttachStats(b, query_begins);
      RunKernelOn(b, kv, nullptr);
      for (size_t s = 0; s < specs.size(); ++s) {
        const PagedSeq& seq = b.seqs[s];
        want[s].assign(geo.num_kv_heads * (seq.num_keys + 3), 0.5f);
        if (!has_request[s]) continue;
        kernels::AccumulateAttentionMass(
            seq.stats_scores, seq.stats_lse, seq.num_queries - query_begins[s], geo.num_heads,
            geo.num_kv_heads, seq.num_keys, seq.key_begin,
            seq.num_keys - seq.num_queries + query_begins[s], want[s].data(), seq.num_keys + 3);
      }
    }
    const Batch plain_batch = WithoutStats(b);
    for (int64_t max_floats : {int64_t{1}, int64_t{50000}, int64_t{1} << 23}) {
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<std::vector<float>> got(specs.size());
        std::vector<kernels::PagedMassRequest> requests;
        for (size_t s = 0; s < specs.size(); ++s) {
          got[s].assign(want[s].size(), 0.5f);
          if (!has_request[s]) continue;
          requests.push_back({static_cast<int64_t>(s), query_begins[s], got[s].data(),
                              plain_batch.seqs[s].num_keys + 3});
        }
        std::vector<float> out = plain_batch.NewOutput();
        kernels::PagedAttentionWithMass(plain_batch.q.data(), kv, plain_batch.seqs.data(),
                                        static_cast<int64_t>(specs.size()), plain_batch.shape,
                                        requests.data(), static_cast<int64_t>(requests.size()),
                                        out.data(), p, max_floats);
        const std::string what = "group " + std::to_string(group) + " max_score_floats " +
                                 std::to_string(max_floats) + (p ? " pool" : "");
        EXPECT_EQ(out, plain) << what << ": outputs differ";
        for (size_t s = 0; s < specs.size(); ++s) {
          EXPECT_EQ(got[s], want[s]) << what << " seq " << s;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, PagedAttentionStatsTest,
                         ::testing::Values(SimdLevel::kScalar, SimdLevel::kAvx2,
                                           SimdLevel::kAvx512Vnni),
                         [](const auto& info) {
                           return std::to_string(static_cast<int>(info.param));
                         });

}  // namespace
}  // namespace kvserve
