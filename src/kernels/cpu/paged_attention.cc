// Paged attention entry points: checks, the plan of work items (paged_attention_impl.h), the
// parallel run of the item kernel of the current SIMD level, and the merge of partitions.
#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/paged_attention_impl.h"
#include "kernels/cpu/vector_math.h"

namespace kvserve::kernels {
namespace {

using internal::paged::ItemKernel;
using internal::paged::ItemScratch;
using internal::paged::kPartitionKeys;
using internal::paged::Problem;
using internal::paged::WorkItem;

// The partitions of one (sequence, KV head range, query tile) whose partial results are merged.
struct MergeGroup {
  int64_t seq = 0;
  int64_t kv_head_begin = 0, kv_head_end = 0;
  int64_t query_begin = 0, query_end = 0;
  int64_t num_partitions = 0;
  int64_t partial_offset = 0;  // floats into the partial buffer: [partitions, rows, 2 + hd]
};

// Reused by every call on a thread (the engine thread), so a step allocates nothing once warm.
struct Plan {
  std::vector<WorkItem> items;
  std::vector<int64_t> partial_offsets;  // per item, -1 for items writing to `out`
  std::vector<MergeGroup> groups;
  std::vector<float> partials;
};

ItemKernel CurrentItemKernel() {
  switch (internal::CurrentSimdLevel()) {
    case internal::SimdLevel::kAvx512Vnni: return internal::paged::avx512::RunItem;
    case internal::SimdLevel::kAvx2: return internal::paged::avx2::RunItem;
    case internal::SimdLevel::kScalar: break;
  }
  return internal::paged::scalar::RunItem;
}

void CheckInputs(const PagedKv& kv, const PagedSeq* seqs, int64_t num_seqs,
                 const PagedAttentionShape& shape) {
  KV_CHECK(kv.dtype == DType::kF32 || kv.dtype == DType::kF16 || kv.dtype == DType::kBF16 ||
           kv.dtype == DType::kFp8E4M3 || kv.dtype == DType::kFp8E5M2 || kv.dtype == DType::kI8)
      << "paged KV dtype " << DTypeName(kv.dtype);
  KV_CHECK(kv.block_size > 0 && kv.num_kv_heads > 0 && kv.head_dim > 0)
      << "block_size=" << kv.block_size << " num_kv_heads=" << kv.num_kv_heads
      << " head_dim=" << kv.head_dim;
  KV_CHECK(shape.num_heads > 0 && shape.num_heads % kv.num_kv_heads == 0)
      << "num_heads=" << shape.num_heads << " num_kv_heads=" << kv.num_kv_heads;
  KV_CHECK(kv.k != nullptr && kv.v != nullptr);
  if (kv.dtype == DType::kFp8E4M3 || kv.dtype == DType::kFp8E5M2) {
    KV_CHECK(kv.k_head_scales != nullptr && kv.v_head_scales != nullptr) << "fp8 needs scales";
  }
  if (kv.dtype == DType::kI8) {
    KV_CHECK(kv.k_token_scales != nullptr && kv.v_token_scales != nullptr) << "int8 needs scales";
  }
  KV_CHECK(num_seqs >= 0);
  for (int64_t s = 0; s < num_seqs; ++s) {
    KV_CHECK(seqs[s].num_queries >= 1 && seqs[s].num_keys >= seqs[s].num_queries)
        << "sequence " << s << ": num_queries=" << seqs[s].num_queries
        << " num_keys=" << seqs[s].num_keys;
    KV_CHECK(seqs[s].block_table != nullptr && seqs[s].query_offset >= 0);
    KV_CHECK(seqs[s].key_begin >= 0 && seqs[s].key_begin <= seqs[s].num_keys - seqs[s].num_queries)
        << "sequence " << s << ": key_begin=" << seqs[s].key_begin
        << " outside [0, num_keys - num_queries = "
        << seqs[s].num_keys - seqs[s].num_queries << "]";
    KV_CHECK(seqs[s].stats_query_begin >= 0 &&
             seqs[s].stats_query_begin <= seqs[s].num_queries)
        << "sequence " << s << ": stats_query_begin=" << seqs[s].stats_query_begin
        << " outside [0, num_queries = " << seqs[s].num_queries << "]";
  }
}

// Items for every (sequence, query tile, partition of kPartitionKeys keys, range of KV heads).
// Partitions are aligned to key 0; those wholly below the sequence's key_begin get no item,
// and the first one left starts at key_begin.
// All KV heads go in one item unless that leaves fewer than kItemsPerThread items per thread:
// then heads are split into ranges (which changes no result, rows being independent).
constexpr int64_t kItemsPerThread = 4;

void BuildPlan(const PagedKv& kv, const PagedSeq* seqs, int64_t num_seqs, int64_t group,
               int num_threads, Plan& plan) {
  plan.items.clear();
  plan.partial_offsets.clear();
  plan.groups.clear();
  const int64_t tile_queries = std::max<int64_t>(1, internal::paged::kTileRows / group);
  auto first_partition = [](const PagedSeq& seq) { return seq.key_begin / kPartitionKeys; };
  // Partitions from the first one to the one holding the tile's last query's position.
  auto num_partitions = [&](const PagedSeq& seq, int64_t query_end) {
    const int64_t num_keys = seq.num_keys - seq.num_queries + query_end;  // tile's last query
    return (num_keys + kPartitionKeys - 1) / kPartitionKeys - first_partition(seq);
  };
  int64_t unsplit_items = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int64_t qb = 0; qb < seqs[s].num_queries; qb += tile_queries) {
      unsplit_items += num_partitions(seqs[s], std::min(seqs[s].num_queries, qb + tile_queries));
    }
  }
  int64_t heads_per_item = kv.num_kv_heads;
  if (num_threads > 1 && unsplit_items < kItemsPerThread * num_threads) {
    const int64_t ranges = std::min<int64_t>(
        kv.num_kv_heads, (kItemsPerThread * num_threads + unsplit_items - 1) / unsplit_items);
    heads_per_item = (kv.num_kv_heads + ranges - 1) / ranges;
  }

  int64_t partial_floats = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const PagedSeq& seq = seqs[s];
    for (int64_t qb = 0; qb < seq.num_queries; qb += tile_queries) {
      const int64_t qe = std::min(seq.num_queries, qb + tile_queries);
      const int64_t num_keys = seq.num_keys - seq.num_queries + qe;
      const int64_t partitions = num_partitions(seq, qe);
      for (int64_t h0 = 0; h0 < kv.num_kv_heads; h0 += heads_per_item) {
        WorkItem item;
        item.seq = s;
        item.kv_head_begin = h0;
        item.kv_head_end = std::min(kv.num_kv_heads, h0 + heads_per_item);
        item.query_begin = qb;
        item.query_end = qe;
        const int64_t p0 = first_partition(seq);
        if (partitions == 1) {
          item.key_begin = seq.key_begin;
          item.key_end = num_keys;
          plan.items.push_back(item);
          plan.partial_offsets.push_back(-1);
          continue;
        }
        const int64_t rows = item.row_map(group).num_rows(item.kv_head_end - item.kv_head_begin);
        plan.groups.push_back(
            {s, item.kv_head_begin, item.kv_head_end, qb, qe, partitions, partial_floats});
        for (int64_t p = p0; p < p0 + partitions; ++p) {
          item.key_begin = std::max(seq.key_begin, p * kPartitionKeys);
          item.key_end = std::min(num_keys, (p + 1) * kPartitionKeys);
          plan.items.push_back(item);
          plan.partial_offsets.push_back(partial_floats);
          partial_floats += rows * (2 + kv.head_dim);
        }
      }
    }
  }
  if (plan.partials.size() < static_cast<size_t>(partial_floats)) {
    plan.partials.resize(partial_floats);
  }
  for (size_t i = 0; i < plan.items.size(); ++i) {
    if (plan.partial_offsets[i] >= 0) {
      plan.items[i].partial = plan.partials.data() + plan.partial_offsets[i];
    }
  }
}

// out row = sum_p exp(m_p - M) acc_p * (v_factor / sum_p exp(m_p - M) l_p), M = max_p m_p;
// partitions a row does not see (m = -inf) are skipped, so a row's result does not depend on
// how many partitions its tile had. With statistics on, the row's lse is M + log(that sum).
void MergeGroupRows(const Problem& problem, const MergeGroup& g, const float* partials,
                    std::vector<float>& sum) {
  const PagedKv& kv = *problem.kv;
  const PagedSeq& seq = problem.seqs[g.seq];
  const int64_t hd = kv.head_dim;
  const internal::paged::RowMap map{g.kv_head_begin, g.query_begin,
                                    (g.query_end - g.query_begin) * problem.group,
                                    problem.group};
  const int64_t rows = map.num_rows(g.kv_head_end - g.kv_head_begin);
  const int64_t row_floats = 2 + hd;
  sum.resize(hd);
  for (int64_t r = 0; r < rows; ++r) {
    float max_score = -INFINITY;
    for (int64_t p = 0; p < g.num_partitions; ++p) {
      max_score = std::max(max_score, partials[g.partial_offset + (p * rows + r) * row_floats]);
    }
    float l = 0.0f;
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int64_t p = 0; p < g.num_partitions; ++p) {
      const float* part = partials + g.partial_offset + (p * rows + r) * row_floats;
      if (part[0] == -INFINITY) continue;
      const float w = std::exp(part[0] - max_score);
      l += part[1] * w;
      for (int64_t d = 0; d < hd; ++d) sum[d] += part[2 + d] * w;
    }
    float* o = problem.out +
               ((seq.query_offset + map.query(r)) * problem.num_heads + map.head(r)) * hd;
    const float inv = internal::paged::VFactor(kv, map.kv_head(r)) / l;
    for (int64_t d = 0; d < hd; ++d) o[d] = sum[d] * inv;
    if (seq.stats_lse != nullptr && map.query(r) >= seq.stats_query_begin) {
      seq.stats_lse[(map.query(r) - seq.stats_query_begin) * problem.num_heads + map.head(r)] =
          max_score + std::log(l);
    }
  }
}

void RunPaged(const float* q, const PagedKv& kv, const PagedSeq* seqs, int64_t num_seqs,
              const PagedAttentionShape& shape, float* out, ThreadPool* pool) {
  CheckInputs(kv, seqs, num_seqs, shape);
  if (num_seqs == 0) return;
  Problem problem;
  problem.q = q;
  problem.out = out;
  problem.kv = &kv;
  problem.seqs = seqs;
  problem.num_heads = shape.num_heads;
  problem.group = shape.num_heads / kv.num_kv_heads;
  problem.scale = shape.scale;

  // The caller's plan; lambdas name it through this reference (a thread_local named inside
  // them would be the running worker's own instance).
  thread_local Plan caller_plan;
  Plan& plan = caller_plan;
  const int num_threads = pool != nullptr ? pool->num_threads() : 1;
  BuildPlan(kv, seqs, num_seqs, problem.group, num_threads, plan);
  const ItemKernel kernel = CurrentItemKernel();
  auto run_items = [&](int64_t begin, int64_t end) {
    thread_local ItemScratch scratch;
    for (int64_t i = begin; i < end; ++i) {
      kernel(problem, plan.items[i], i + 1 < end ? &plan.items[i + 1] : nullptr, scratch);
    }
  };
  auto merge = [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> sum;
    for (int64_t g = begin; g < end; ++g) {
      MergeGroupRows(problem, plan.groups[g], plan.partials.data(), sum);
    }
  };
  const auto num_items = static_cast<int64_t>(plan.items.size());
  const auto num_groups = static_cast<int64_t>(plan.groups.size());
  if (num_threads > 1) {
    pool->ParallelFor(num_items, 1, run_items);
    if (num_groups > 0) pool->ParallelFor(num_groups, 1, merge);
  } else {
    run_items(0, num_items);
    merge(0, num_groups);
  }
}

}  // namespace

void PagedPrefillAttention(const float* q, const PagedKv& kv, const PagedSeq& seq,
                           const PagedAttentionShape& shape, float* out, ThreadPool* pool) {
  RunPaged(q, kv, &seq, 1, shape, out, pool);
}

void PagedDecodeAttention(const float* q, const PagedKv& kv, const PagedSeq* seqs,
                          int64_t num_seqs, const PagedAttentionShape& shape, float* out,
                          ThreadPool* pool) {
  for (int64_t s = 0; s < num_seqs; ++s) {
    KV_CHECK(seqs[s].num_queries == 1) << "decode sequence " << s << " has "
                                       << seqs[s].num_queries << " queries";
  }
  RunPaged(q, kv, seqs, num_seqs, shape, out, pool);
}

// One plan for the whole batch (decode and prefill items share one parallel section); the
// items are those PagedDecodeAttention and PagedPrefillAttention would run.
void PagedAttention(const float* q, const PagedKv& kv, const PagedSeq* seqs, int64_t num_seqs,
                    const PagedAttentionShape& shape, float* out, ThreadPool* pool) {
  RunPaged(q, kv, seqs, num_seqs, shape, out, pool);
}

namespace {

// AccumulateAttentionMass for the query heads of KV heads [kv_begin, kv_end) and the keys
// [key_lo, key_hi) only (so that disjoint ranges can run in parallel, each entry's rows still
// added in order). Per (row, head): exp(score - lse) over the row's visible keys in range,
// added to the KV head's mass (8 lanes at a time at SIMD levels).
void AccumulateKvHeads(const float* scores, const float* lse, int64_t num_rows, int64_t num_heads,
                       int64_t num_kv_heads, int64_t num_keys, int64_t key_begin,
                       int64_t row0_last_key, float* mass, int64_t mass_stride,
                       int64_t kv_begin, int64_t kv_end, int64_t key_lo = 0,
                       int64_t key_hi = INT64_MAX) {
  const int64_t group = num_heads / num_kv_heads;
  const bool simd = internal::CurrentSimdLevel() != internal::SimdLevel::kScalar;
  const int64_t t0 = std::max(key_begin, key_lo);
  for (int64_t i = 0; i < num_rows; ++i) {
    const int64_t t1 = std::min(row0_last_key + i + 1, key_hi);
    if (t1 <= t0) continue;
    for (int64_t h = kv_begin * group; h < kv_end * group; ++h) {
      const float* s = scores + (i * num_heads + h) * num_keys;
      const float shift = lse[i * num_heads + h];
      float* m = mass + (h / group) * mass_stride;
      if (simd) {
        internal::simd::AddExpSubtract(s + t0, t1 - t0, shift, m + t0);
      } else {
        for (int64_t t = t0; t < t1; ++t) m[t] += std::exp(s[t] - shift);
      }
    }
  }
}

}  // namespace

void AccumulateAttentionMass(const float* scores, const float* lse, int64_t num_rows,
                             int64_t num_heads, int64_t num_kv_heads, int64_t num_keys,
                             int64_t key_begin, int64_t row0_last_key, float* mass,
                             int64_t mass_stride) {
  KV_CHECK(num_rows >= 0 && num_kv_heads > 0 && num_heads > 0 && num_heads % num_kv_heads == 0)
      << "num_rows=" << num_rows << " num_heads=" << num_heads
      << " num_kv_heads=" << num_kv_heads;
  if (num_rows == 0) return;
  KV_CHECK(key_begin >= 0 && key_begin <= row0_last_key && row0_last_key + num_rows <= num_keys)
      << "key_begin=" << key_begin << " row0_last_key=" << row0_last_key
      << " num_rows=" << num_rows << " num_keys=" << num_keys;
  KV_CHECK(num_kv_heads == 1 || mass_stride >= num_keys)
      << "mass_stride=" << mass_stride << " < num_keys=" << num_keys;
  AccumulateKvHeads(scores, lse, num_rows, num_heads, num_kv_heads, num_keys, key_begin,
                    row0_last_key, mass, mass_stride, 0, num_kv_heads);
}

// Sequences without requests, and the rows before a request's first whole tile, go in as they
// are; a request's rows from its first tile on go in slices of whole tiles recording the
// request's queries. Slices are gathered until the next would overflow the scratch, then the
// gathered sequences run as one PagedAttention call and their weights are added.
void PagedAttentionWithMass(const float* q, const PagedKv& kv, const PagedSeq* seqs,
                            int64_t num_seqs, const PagedAttentionShape& shape,
                            const PagedMassRequest* requests, int64_t num_requests, float* out,
                            ThreadPool* pool, int64_t max_score_floats) {
  CheckInputs(kv, seqs, num_seqs, shape);
  const int64_t heads = shape.num_heads;
  const int64_t group = heads / kv.num_kv_heads;
  const int64_t tile = std::max<int64_t>(1, internal::paged::kTileRows / group);
  std::vector<int64_t> request_of(static_cast<size_t>(num_seqs), -1);
  for (int64_t i = 0; i < num_requests; ++i) {
    const PagedMassRequest& r = requests[i];
    KV_CHECK(r.seq >= 0 && r.seq < num_seqs && request_of[r.seq] < 0)
        << "mass request " << i << " for sequence " << r.seq << " of " << num_seqs;
    const PagedSeq& seq = seqs[r.seq];
    KV_CHECK(r.query_begin >= 0 && r.query_begin <= seq.num_queries && r.mass != nullptr &&
             r.mass_stride >= seq.num_keys)
        << "mass request " << i << ": query_begin=" << r.query_begin
        << " mass_stride=" << r.mass_stride << " num_keys=" << seq.num_keys;
    request_of[r.seq] = i;
  }
  for (int64_t s = 0; s < num_seqs; ++s) {
    KV_CHECK(seqs[s].stats_scores == nullptr && seqs[s].stats_lse == nullptr)
        << "sequence " << s << " sets its own statistics";
  }

  // A recorded slice: the sub-sequence's index in `batch`, where its statistics go, its request.
  struct Slice {
    size_t sub = 0;
    int64_t scores_offset = 0, lse_offset = 0;
    const PagedMassRequest* request = nullptr;
  };
  // The caller's buffers; lambdas name them through these references (a thread_local named
  // inside them would be the running worker's own instance).
  thread_local std::vector<PagedSeq> caller_batch;
  thread_local std::vector<Slice> caller_slices;
  thread_local std::vector<float> caller_scores, caller_lse;
  std::vector<PagedSeq>& batch = caller_batch;
  std::vector<Slice>& slices = caller_slices;
  std::vector<float>& scores = caller_scores;
  std::vector<float>& lse = caller_lse;
  batch.clear();
  slices.clear();
  int64_t scores_used = 0, lse_used = 0;
  auto flush = [&] {
    if (batch.empty()) return;
    if (static_cast<int64_t>(scores.size()) < scores_used) scores.resize(scores_used);
    if (static_cast<int64_t>(lse.size()) < lse_used) lse.resize(lse_used);
    for (const Slice& sl : slices) {
      batch[sl.sub].stats_scores = scores.data() + sl.scores_offset;
      batch[sl.sub].stats_lse = lse.data() + sl.lse_offset;
    }
    RunPaged(q, kv, batch.data(), static_cast<int64_t>(batch.size()), shape, out, pool);
    // In parallel over (KV head, range of kKeyChunk keys): each mass entry is one task's,
    // its rows added in order, so the sums do not depend on the threads.
    constexpr int64_t kKeyChunk = 1024;
    int64_t max_keys = 0;
    for (const Slice& sl : slices) max_keys = std::max(max_keys, batch[sl.sub].num_keys);
    const int64_t num_chunks = (max_keys + kKeyChunk - 1) / kKeyChunk;
    auto accumulate = [&](int64_t task_begin, int64_t task_end) {
      for (int64_t task = task_begin; task < task_end; ++task) {
        const int64_t h = task / num_chunks, chunk = task % num_chunks;
        for (const Slice& sl : slices) {
          const PagedSeq& sub = batch[sl.sub];
          AccumulateKvHeads(sub.stats_scores, sub.stats_lse,
                            sub.num_queries - sub.stats_query_begin, heads, kv.num_kv_heads,
                            sub.num_keys, sub.key_begin,
                            sub.num_keys - sub.num_queries + sub.stats_query_begin,
                            sl.request->mass, sl.request->mass_stride, h, h + 1,
                            chunk * kKeyChunk, (chunk + 1) * kKeyChunk);
        }
      }
    };
    const int64_t num_tasks = kv.num_kv_heads * num_chunks;
    if (pool != nullptr && pool->num_threads() > 1 && num_tasks > 1) {
      pool->ParallelFor(num_tasks, 1, accumulate);
    } else {
      accumulate(0, num_tasks);
    }
    batch.clear();
    slices.clear();
    scores_used = lse_used = 0;
  };
  for (int64_t s = 0; s < num_seqs; ++s) {
    const PagedSeq& seq = seqs[s];
    if (request_of[s] < 0) {
      batch.push_back(seq);
      continue;
    }
    const PagedMassRequest& r = requests[request_of[s]];
    if (r.query_begin == seq.num_queries) {  // records nothing
      batch.push_back(seq);
      continue;
    }
    const int64_t first_tile = r.query_begin / tile * tile;
    auto sub_seq = [&](int64_t begin, int64_t end) {
      PagedSeq sub = seq;
      sub.num_keys = seq.num_keys - seq.num_queries + end;
      sub.num_queries = end - begin;
      sub.query_offset = seq.query_offset + begin;
      sub.stats_query_begin = 0;
      return sub;
    };
    if (first_tile > 0) batch.push_back(sub_seq(0, first_tile));
    const int64_t row_floats = heads * seq.num_keys;
    const int64_t rows_per_slice =
        std::max<int64_t>(1, max_score_floats / row_floats / tile) * tile;
    for (int64_t begin = first_tile; begin < seq.num_queries; begin += rows_per_slice) {
      const int64_t end = std::min(seq.num_queries, begin + rows_per_slice);
      PagedSeq sub = sub_seq(begin, end);
      sub.stats_query_begin = std::max<int64_t>(0, r.query_begin - begin);
      const int64_t recorded = sub.num_queries - sub.stats_query_begin;
      const int64_t floats = recorded * heads * sub.num_keys;
      if (!slices.empty() && scores_used + floats > max_score_floats) flush();
      slices.push_back({batch.size(), scores_used, lse_used, &r});
      batch.push_back(sub);
      scores_used += floats;
      lse_used += recorded * heads;
    }
  }
  flush();
}

}  // namespace kvserve::kernels
