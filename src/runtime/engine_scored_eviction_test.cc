// H2O, SnapKV and PyramidKV through the EngineCore on the synthetic "tiny" model: the tokens
// each (layer, KV head) keeps at the compression point are those the dense reference's
// attention selects (LlamaModel's double-precision mass over the dense cache); compactions and
// outputs do not depend on chunking, threads, prefix-cache hits or preemption; memory stays at
// the budget and every block comes back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/kv_calibration.h"
#include "model/synthetic.h"
#include "model/testing/synthetic_model.h"
#include "runtime/engine_core.h"
#include "runtime/testing/engine_test_util.h"

namespace kvserve {
namespace {

constexpr int64_t kBlockSize = 4;

LlamaModel& Model() { return kvserve::testing::SharedSyntheticModel("tiny", 11); }

RequestInput Scored(KvEvictionMethod method, int64_t prompt_len, int64_t max_tokens,
                    int64_t budget) {
  RequestInput in;
  in.prompt_ids = SyntheticTokenIds(prompt_len, Model().config().vocab_size);
  in.max_tokens = max_tokens;
  in.sampling.temperature = 0.0f;
  in.ignore_eos = true;
  in.kv_policy.method = method;
  in.kv_policy.budget_tokens = budget;
  in.kv_policy.observation_window = 8;
  in.kv_policy.pyramid_beta = 4;
  return in;
}

// Every compaction of every request, in order.
struct EngineRun {
  std::map<SeqId, std::vector<TokenId>> tokens;
  std::map<SeqId, std::vector<KvKeptTokens>> kept;
  std::map<SeqId, RequestOutput> last;
  std::map<SeqId, int64_t> cached_prompt_tokens;
  int64_t max_slots_compacted = 0;  // the largest table seen after a first compaction
  int64_t num_preemptions = 0;
};

struct RunOptions {
  int64_t step_budget = 64;
  int64_t num_blocks = 256;
  bool prefix_caching = true;
  ThreadPool* pool = nullptr;
  int64_t max_num_seqs = 4;
  int64_t max_model_len = 512;
};

EngineRun RunAll(const std::vector<RequestInput>& inputs, const RunOptions& ro,
           const std::vector<RequestInput>& warmup = {}) {
  PagedKvCache cache = testing::MakeTestCache(Model(), ro.num_blocks, ro.max_model_len, DType::kF32,
                                              kBlockSize);
  EngineRun run;
  EngineCoreOptions o = testing::TestCoreOptions(cache, ro.step_budget, ro.prefix_caching);
  o.scheduler.max_num_seqs = ro.max_num_seqs;
  o.on_compaction = [&run](SeqId id, const KvCompaction& c) { run.kept[id].push_back(c.kept); };
  auto core = testing::MakeTestCore(o, Model(), &cache, ro.pool);
  SeqId id = 100;
  for (const RequestInput& in : warmup) {
    EXPECT_TRUE(core->add_request(id++, in).ok());
    testing::RunToEnd(*core);
  }
  run.kept.clear();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Status s = core->add_request(static_cast<SeqId>(i), inputs[i]);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  while (core->has_unfinished()) {
    for (RequestOutput& out : core->step().outputs) {
      auto& t = run.tokens[out.id];
      t.insert(t.end(), out.new_token_ids.begin(), out.new_token_ids.end());
      int64_t& cached = run.cached_prompt_tokens[out.id];
      cached = std::max(cached, out.num_cached_prompt_tokens);
      if (out.finished()) run.last[out.id] = out;
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      const SeqId id = static_cast<SeqId>(i);
      if (core->kv_manager().has_sequence(id) && !run.kept[id].empty()) {
        run.max_slots_compacted = std::max(run.max_slots_compacted,
                                           core->kv_manager().block_table(id).num_tokens());
      }
    }
  }
  EXPECT_EQ(core->kv_manager().stats().blocks_in_use, 0);
  run.num_preemptions = core->scheduler().stats().num_preemptions_total;
  return run;
}

// The dense reference's mass at the compression point: h2o every prompt row, snapkv and
// pyramidkv the observation window's rows; [layers, kv_heads, prompt_len].
std::vector<float> ReferenceMass(const RequestInput& in) {
  const ModelConfig& c = Model().config();
  const int64_t n = static_cast<int64_t>(in.prompt_ids.size());
  const int64_t first_row =
      in.kv_policy.method == KvEvictionMethod::kH2o ? 0 : n - in.kv_policy.observation_window;
  auto dense = Model().NewCache(n);
  std::vector<float> logits(c.vocab_size), mass;
  if (first_row > 0) {
    const std::vector<TokenId> head(in.prompt_ids.begin(), in.prompt_ids.begin() + first_row);
    EXPECT_TRUE(Model().Forward(head, dense.get(), nullptr, logits.data()).ok());
  }
  const std::vector<TokenId> tail(in.prompt_ids.begin() + first_row, in.prompt_ids.end());
  EXPECT_TRUE(Model().Forward(tail, dense.get(), nullptr, logits.data(), false, &mass).ok());
  return mass;  // stride max_tokens == n
}

// The score each position is ranked by: the mass (h2o) or its max-pooled vote over the prefix
// (snapkv, pyramidkv; -inf in the window, which is always kept).
std::vector<float> RankingScores(const KvEvictionPolicy& p, std::span<const float> list) {
  if (p.method == KvEvictionMethod::kH2o) return {list.begin(), list.end()};
  const int64_t n = static_cast<int64_t>(list.size());
  std::vector<float> votes = MaxPool1dSame(list.first(n - p.observation_window), p.pooling_kernel);
  votes.resize(n, -INFINITY);
  return votes;
}

// Kept sets equal, except for positions whose reference scores tie within float rounding with
// the positions they swapped with (a kernel's float sums against the reference's doubles).
void ExpectSameSelection(const KvKeptTokens& got, const KvKeptTokens& want,
                         const KvEvictionPolicy& policy, const std::vector<float>& mass,
                         int64_t n, const std::string& what) {
  ASSERT_EQ(got.positions.size(), want.positions.size()) << what;
  int64_t swapped = 0;
  for (size_t i = 0; i < got.positions.size(); ++i) {
    const std::vector<int64_t>& g = got.positions[i];
    const std::vector<int64_t>& w = want.positions[i];
    ASSERT_EQ(g.size(), w.size()) << what << " list " << i;
    if (g == w) continue;
    const std::vector<float> scores =
        RankingScores(policy, std::span<const float>(mass).subspan(i * n, n));
    std::vector<int64_t> diff;
    std::set_symmetric_difference(g.begin(), g.end(), w.begin(), w.end(),
                                  std::back_inserter(diff));
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t p : diff) {
      lo = std::min(lo, scores[p]);
      hi = std::max(hi, scores[p]);
    }
    EXPECT_LE(hi - lo, 1e-4f * std::max(1.0f, hi)) << what << " list " << i << ": "
                                                    << diff.size() << " positions differ";
    swapped += static_cast<int64_t>(diff.size()) / 2;
  }
  EXPECT_LE(swapped, 2) << what;
}

TEST(EngineScoredEvictionTest, KeptTokensAreTheDenseReferenceSelection) {
  const ModelConfig& c = Model().config();
  for (KvEvictionMethod method :
       {KvEvictionMethod::kH2o, KvEvictionMethod::kSnapKv, KvEvictionMethod::kPyramidKv}) {
    const std::string what = KvEvictionMethodName(method);
    const int64_t n = 120, budget = 40;
    const RequestInput in = Scored(method, n, 3, budget);
    RunOptions ro;
    ro.step_budget = 32;  // the prompt in 4 chunks
    const EngineRun run = RunAll({in}, ro);
    ASSERT_FALSE(run.kept.at(0).empty()) << what;
    const KvKeptTokens& first = run.kept.at(0).front();
    const KvEvictionShape shape{c.num_layers, c.num_heads, c.num_kv_heads, n};
    const std::vector<float> mass = ReferenceMass(in);
    const KvKeptTokens want = SelectKeptTokensFromMass(in.kv_policy, shape, mass);
    ExpectSameSelection(first, want, in.kv_policy, mass, n, what);
    // The selection is not trivial: some layer keeps other tokens than StreamingLLM would.
    KvEvictionPolicy streaming = in.kv_policy;
    streaming.method = KvEvictionMethod::kStreaming;
    EXPECT_NE(first.positions, SelectStreaming(streaming, shape).positions) << what;
    if (method == KvEvictionMethod::kPyramidKv) {
      const std::vector<int64_t> budgets = PyramidKvLayerBudgets(in.kv_policy, c.num_layers, n);
      for (int64_t l = 0; l < c.num_layers; ++l) {
        EXPECT_EQ(static_cast<int64_t>(first.at(l, 0).size()), budgets[l]) << "layer " << l;
      }
      EXPECT_GT(budgets.front(), budgets.back());
    }
    EXPECT_EQ(run.tokens.at(0).size(), 3u) << what;
    EXPECT_GT(run.last.at(0).num_kv_tokens_evicted, 0) << what;
  }
}

// The same compactions (kept lists) and tokens whatever the step budget (chunk sizes), the
// threads and a prefix-cache hit on the prompt (snapkv computes at least its window); H2O
// compacts again and again while decoding, keeping its slots within budget + one block.
TEST(EngineScoredEvictionTest, CompactionsDoNotDependOnChunkingThreadsOrCacheHits) {
  ThreadPool pool(2);
  for (KvEvictionMethod method :
       {KvEvictionMethod::kH2o, KvEvictionMethod::kSnapKv, KvEvictionMethod::kPyramidKv}) {
    const std::string what = KvEvictionMethodName(method);
    const RequestInput in = Scored(method, 70, 50, 24);
    RequestInput plain = in;
    plain.kv_policy = KvEvictionPolicy{};
    plain.max_tokens = 1;
    const EngineRun reference = RunAll({in}, RunOptions{});
    ASSERT_FALSE(reference.kept.at(0).empty());
    if (method == KvEvictionMethod::kH2o) {
      EXPECT_GT(reference.kept.at(0).size(), 5u) << "h2o compacts while decoding";
      EXPECT_LE(reference.max_slots_compacted, 24 + kBlockSize);
    } else {
      EXPECT_EQ(reference.kept.at(0).size(), 1u) << what << " compacts once";
      // PyramidKV's table holds its largest layer's budget.
      EXPECT_LE(reference.max_slots_compacted,
                (method == KvEvictionMethod::kSnapKv ? 24 : 48) + 50) << what;
    }
    RunOptions small_steps;
    small_steps.step_budget = 5;
    RunOptions threads;
    threads.pool = &pool;
    threads.step_budget = 17;
    for (const RunOptions& ro : {small_steps, threads}) {
      const EngineRun run = RunAll({in}, ro);
      EXPECT_EQ(run.tokens, reference.tokens) << what << " step budget " << ro.step_budget;
      EXPECT_EQ(run.kept.at(0).size(), reference.kept.at(0).size()) << what;
      for (size_t i = 0; i < run.kept.at(0).size() && i < reference.kept.at(0).size(); ++i) {
        EXPECT_EQ(run.kept.at(0)[i].positions, reference.kept.at(0)[i].positions)
            << what << " compaction " << i << " step budget " << ro.step_budget;
      }
    }
    // The prompt cached by a plain request first: snapkv reads up to its window from the
    // cache, h2o nothing; the compactions are the same.
    const EngineRun cached = RunAll({in}, RunOptions{}, {plain});
    EXPECT_EQ(cached.tokens, reference.tokens) << what << " after a cache hit";
    EXPECT_EQ(cached.kept.at(0).front().positions, reference.kept.at(0).front().positions)
        << what << " after a cache hit";
    if (method == KvEvictionMethod::kH2o) {
      EXPECT_EQ(cached.cached_prompt_tokens.at(0), 0);
    } else {
      EXPECT_GT(cached.cached_prompt_tokens.at(0), 0) << what;
      EXPECT_LE(cached.cached_prompt_tokens.at(0), 70 - 8) << what;
    }
  }
}

// Two requests in a cache too small for both: the scheduler preempts one, which recomputes
// from the start (its attention mass reset); both end with the tokens they produce alone.
// H2O: prompts within the budget, preempted while decoding towards the first compaction;
// SnapKV: compacted prompts whose outputs grow.
TEST(EngineScoredEvictionTest, PreemptionRecomputesTheSameCompactions) {
  for (KvEvictionMethod method : {KvEvictionMethod::kH2o, KvEvictionMethod::kSnapKv}) {
    const std::string what = KvEvictionMethodName(method);
    const bool h2o = method == KvEvictionMethod::kH2o;
    std::vector<RequestInput> inputs = {
        h2o ? Scored(method, 30, 33, 40) : Scored(method, 40, 50, 16),
        h2o ? Scored(method, 31, 32, 40) : Scored(method, 44, 50, 16)};
    inputs[1].prompt_ids[0] = 9;
    RunOptions tight;  // the prompts prefill side by side in 8-token chunks
    tight.step_budget = 8;
    tight.max_model_len = h2o ? 64 : 112;
    tight.num_blocks = tight.max_model_len / kBlockSize;
    RunOptions alone = tight;
    alone.num_blocks = 256;
    const EngineRun a = RunAll({inputs[0]}, alone);
    const EngineRun b = RunAll({inputs[1]}, alone);
    const EngineRun both = RunAll(inputs, tight);
    EXPECT_GT(both.num_preemptions, 0) << what << ": the test needs a preemption";
    EXPECT_EQ(both.tokens.at(0), a.tokens.at(0)) << what;
    EXPECT_EQ(both.tokens.at(1), b.tokens.at(0)) << what;
    EXPECT_EQ(both.tokens.at(0).size(), inputs[0].max_tokens) << what;
    // A recomputed request compacts again: its compactions are those made before it was
    // preempted (a prefix of the run alone), then every compaction of the run alone.
    for (SeqId id : {0, 1}) {
      const std::vector<KvKeptTokens>& want = (id == 0 ? a : b).kept.at(0);
      const std::vector<KvKeptTokens>& got = both.kept.at(id);
      ASSERT_GE(got.size(), want.size()) << what << " request " << id;
      const size_t before = got.size() - want.size();
      ASSERT_LE(before, want.size()) << what << " request " << id;
      for (size_t i = 0; i < got.size(); ++i) {
        const size_t j = i < before ? i : i - before;
        EXPECT_EQ(got[i].positions, want[j].positions)
            << what << " request " << id << " compaction " << i;
      }
    }
  }
}

// int8 and fp8 KV (calibrated, with channel normalization) with every scored method: the
// statistics come from the quantized keys, the compactions move quantized rows and their
// scales, every request runs to its end and every block comes back.
TEST(EngineScoredEvictionTest, QuantizedKvWorksWithEveryMethod) {
  for (DType dtype : {DType::kI8, DType::kFp8E4M3}) {
    const std::vector<TokenId> calibration_text = SyntheticTokenIds(300, 512);
    auto calibration = CalibrateKvCache(Model(), dtype, calibration_text, nullptr, "test");
    ASSERT_TRUE(calibration.ok()) << calibration.status().ToString();
    for (KvEvictionMethod method :
         {KvEvictionMethod::kH2o, KvEvictionMethod::kSnapKv, KvEvictionMethod::kPyramidKv}) {
      const std::string what = std::string(DTypeName(dtype)) + " " + KvEvictionMethodName(method);
      PagedKvCache cache = testing::MakeTestCache(Model(), 256, 512, dtype, kBlockSize);
      ASSERT_TRUE(ApplyKvCalibration(*calibration, cache.storage.get()).ok()) << what;
      int64_t num_compactions = 0;
      EngineCoreOptions o = testing::TestCoreOptions(cache, 32);
      o.on_compaction = [&](SeqId, const KvCompaction&) { ++num_compactions; };
      auto core = testing::MakeTestCore(o, Model(), &cache, nullptr);
      ASSERT_TRUE(core->add_request(1, Scored(method, 90, 30, 24)).ok());
      std::vector<TokenId> tokens;
      for (const RequestOutput& out : testing::RunToEnd(*core)) {
        tokens.insert(tokens.end(), out.new_token_ids.begin(), out.new_token_ids.end());
        EXPECT_NE(out.finish_reason, FinishReason::kError) << what << ": " << out.error;
      }
      EXPECT_EQ(tokens.size(), 30u) << what;
      EXPECT_GE(num_compactions, 1) << what;
      EXPECT_EQ(core->kv_manager().stats().blocks_in_use, 0) << what;
    }
  }
}

// Agents' shape: requests sharing a 2,000-token prefix, each compressed by SnapKV to 256
// tokens, get their prefix-cache hits (up to the observation window) and the tokens they
// would get without the cache; a request without eviction afterwards finds the whole prefix.
TEST(EngineScoredEvictionTest, SharedPrefixStaysCachedUnderCompression) {
  const std::vector<TokenId> prefix = SyntheticTokenIds(2000, Model().config().vocab_size);
  auto with_question = [&](KvEvictionMethod method, int64_t q) {
    RequestInput in = Scored(method, 40, 4, 256);
    in.kv_policy.observation_window = 32;
    for (TokenId& t : in.prompt_ids) t = static_cast<TokenId>((t + 13 * q) % 500 + 1);
    in.prompt_ids.insert(in.prompt_ids.begin(), prefix.begin(), prefix.end());
    return in;
  };
  RunOptions ro;
  ro.num_blocks = 2048;
  ro.max_model_len = 2048;
  const EngineRun cached =
      RunAll({with_question(KvEvictionMethod::kSnapKv, 2)}, ro,
             {with_question(KvEvictionMethod::kSnapKv, 1)});
  EXPECT_GE(cached.cached_prompt_tokens.at(0), 2000 - kBlockSize);
  ASSERT_EQ(cached.kept.at(0).size(), 1u);
  EXPECT_EQ(cached.kept.at(0).front().at(0, 0).size(), 256u);
  RunOptions no_cache = ro;
  no_cache.prefix_caching = false;
  const EngineRun fresh = RunAll({with_question(KvEvictionMethod::kSnapKv, 2)}, no_cache);
  EXPECT_EQ(cached.tokens.at(0), fresh.tokens.at(0));
  EXPECT_EQ(cached.kept.at(0).front().positions, fresh.kept.at(0).front().positions);
  // Two compressed requests, then one without eviction: the whole prefix is still there.
  const EngineRun full =
      RunAll({with_question(KvEvictionMethod::kNone, 3)}, ro,
             {with_question(KvEvictionMethod::kSnapKv, 1),
              with_question(KvEvictionMethod::kH2o, 2)});
  EXPECT_EQ(full.cached_prompt_tokens.at(0), 2000);
}

}  // namespace
}  // namespace kvserve
