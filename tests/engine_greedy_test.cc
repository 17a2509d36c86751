// The engine with real forward passes (synthetic "tiny" model, f32 KV): greedy outputs of 16
// requests of mixed lengths run together equal each request run alone, with and without
// prefix caching, with chunked prefill (chunks of 1, 7 and 64 tokens) and without, and under
// memory pressure (preemption by recompute). Every block returns once the engine is idle.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/testing/test_dependency.h"
#include "base/thread_pool.h"
#include "kv/kv_storage.h"
#include "model/llama.h"
#include "model/model_loader.h"
#include "model/testing/synthetic_model.h"
#include "runtime/engine.h"
#include "runtime/kv_cache_config.h"

namespace kvserve {
namespace {

constexpr int64_t kMaxModelLen = 256;

LlamaModel& Model() { return kvserve::testing::SharedSyntheticModel("tiny", 7); }

PagedKvCache MakeCache(int64_t num_blocks, int64_t block_size = 16) {
  PagedKvCache cache;
  cache.spec = Model().kv_spec(DType::kF32, block_size);
  cache.max_model_len = kMaxModelLen;
  auto storage = KvStorage::Create(cache.spec, num_blocks);
  EXPECT_TRUE(storage.ok());
  cache.storage = std::move(storage).value();
  return cache;
}

struct Req {
  std::vector<TokenId> prompt;
  int64_t max_tokens = 0;
};

// 16 requests of mixed lengths; half share a 40-token prefix (prefix-cache hits).
std::vector<Req> Requests() {
  const int64_t V = Model().config().vocab_size;
  const std::vector<TokenId> shared = SyntheticTokenIds(40, V);
  std::vector<Req> reqs;
  for (int i = 0; i < 16; ++i) {
    Req r;
    const int64_t len = 1 + (i * 37) % 90;
    std::vector<TokenId> own = SyntheticTokenIds(len + 50 + i, V);
    own.erase(own.begin(), own.begin() + 50 + i);  // differs per request
    if (i % 2 == 0) r.prompt = shared;
    r.prompt.insert(r.prompt.end(), own.begin(), own.end());
    r.max_tokens = 1 + (i * 13) % 40;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

struct Config {
  bool prefix_caching = true;
  int64_t chunk = 0;  // 0: unchunked prefill
  int64_t num_blocks = 512;
};

EngineOptions Options(const Config& c) {
  EngineOptions o;
  o.enable_prefix_caching = c.prefix_caching;
  o.check_invariants = true;
  o.scheduler.max_model_len = kMaxModelLen;
  o.scheduler.max_num_seqs = 16;
  o.scheduler.max_num_batched_tokens = 512;
  o.scheduler.enable_chunked_prefill = c.chunk > 0;
  o.scheduler.long_prefill_token_threshold = c.chunk;
  return o;
}

std::vector<TokenId> Drain(RequestStream* s, FinishReason* reason = nullptr) {
  std::vector<TokenId> ids;
  StreamEvent ev;
  while (s->Next(&ev)) {
    ids.insert(ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finished() && reason != nullptr) *reason = ev.finish_reason;
  }
  return ids;
}

RequestInput Input(const Req& r) {
  RequestInput in;
  in.prompt_ids = r.prompt;
  in.max_tokens = r.max_tokens;
  in.sampling.temperature = 0.0f;
  return in;
}

// Each request alone on a fresh engine (no prefix caching, no chunking).
const std::vector<std::vector<TokenId>>& Alone() {
  static const std::vector<std::vector<TokenId>> outputs = [] {
    ThreadPool pool(1);
    std::vector<std::vector<TokenId>> out;
    for (const Req& r : Requests()) {
      PagedKvCache cache = MakeCache(64);
      auto engine = Engine::Create(Options({false, 0, 64}), &Model(), &cache, &pool);
      EXPECT_TRUE(engine.ok()) << engine.status().ToString();
      auto stream = (*engine)->submit(Input(r));
      EXPECT_TRUE(stream.ok());
      out.push_back(Drain(stream->get()));
    }
    return out;
  }();
  return outputs;
}

EngineStats ExpectBatchedEqualsAlone(const Config& c, int rounds = 1) {
  EngineStats last;
  // First: the reference runs use the same model, which runs one Forward at a time.
  const std::vector<std::vector<TokenId>>& alone = Alone();
  ThreadPool pool(2);
  PagedKvCache cache = MakeCache(c.num_blocks);
  auto engine = Engine::Create(Options(c), &Model(), &cache, &pool);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return last;
  const std::vector<Req> reqs = Requests();
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::unique_ptr<RequestStream>> streams;
    for (const Req& r : reqs) {
      auto s = (*engine)->submit(Input(r));
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      if (!s.ok()) return last;
      streams.push_back(std::move(s).value());
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
      FinishReason reason = FinishReason::kNone;
      EXPECT_EQ(Drain(streams[i].get(), &reason), alone[i])
          << "request " << i << " round " << round;
      EXPECT_NE(reason, FinishReason::kAbort);
      EXPECT_NE(reason, FinishReason::kError);
    }
    const EngineStats st = (*engine)->wait_until_idle();
    last = st;
    EXPECT_EQ(st.blocks_in_use, 0);
    EXPECT_EQ(st.num_sequences_in_cache, 0);
    EXPECT_EQ(st.num_running + st.num_waiting, 0);
    if (c.prefix_caching && round > 0 && c.num_blocks >= 512) {
      EXPECT_GT(st.prefix_hits_tokens, 0);
    }
    if (!c.prefix_caching) {
      EXPECT_EQ(st.prefix_hits_tokens, 0);
    }
  }
  return last;
}

TEST(EngineGreedyTest, AloneOutputsAreNotTrivial) {
  int64_t total = 0;
  for (const auto& o : Alone()) total += static_cast<int64_t>(o.size());
  EXPECT_GT(total, 16);
}

TEST(EngineGreedyTest, BatchedEqualsAloneUnchunkedNoPrefixCaching) {
  ExpectBatchedEqualsAlone({false, 0});
}
TEST(EngineGreedyTest, BatchedEqualsAloneUnchunkedPrefixCaching) {
  ExpectBatchedEqualsAlone({true, 0}, 2);
}
TEST(EngineGreedyTest, ChunkedPrefill1EqualsUnchunked) {
  ExpectBatchedEqualsAlone({false, 1});
  ExpectBatchedEqualsAlone({true, 1}, 2);
}
TEST(EngineGreedyTest, ChunkedPrefill7EqualsUnchunked) {
  ExpectBatchedEqualsAlone({false, 7});
  ExpectBatchedEqualsAlone({true, 7}, 2);
}
TEST(EngineGreedyTest, ChunkedPrefill64EqualsUnchunked) {
  ExpectBatchedEqualsAlone({false, 64});
  ExpectBatchedEqualsAlone({true, 64}, 2);
}
// 24 blocks of 16 tokens cannot hold all 16 requests at once: preemption by recompute.
TEST(EngineGreedyTest, UnderMemoryPressureEqualsAlone) {
  EXPECT_GT(ExpectBatchedEqualsAlone({true, 7, 24}, 2).num_preemptions_total, 0);
  EXPECT_GT(ExpectBatchedEqualsAlone({false, 0, 24}).num_preemptions_total, 0);
}

TEST(EngineGreedyTest, AbortedRequestReturnsAllItsBlocks) {
  ThreadPool pool(1);
  for (bool prefix_caching : {false, true}) {
    PagedKvCache cache = MakeCache(64);
    auto engine = Engine::Create(Options({prefix_caching, 7}), &Model(), &cache, &pool);
    ASSERT_TRUE(engine.ok());
    RequestInput in = Input(Requests()[3]);
    in.max_tokens = 200;
    in.ignore_eos = true;
    // Explicit abort after the first token.
    auto a = (*engine)->submit(in);
    ASSERT_TRUE(a.ok());
    StreamEvent ev;
    ASSERT_TRUE((*a)->Next(&ev));
    (*engine)->abort((*a)->id());
    FinishReason reason = FinishReason::kNone;
    Drain(a->get(), &reason);
    // kLength only if the engine ran all 200 tokens before the abort arrived.
    EXPECT_TRUE(reason == FinishReason::kAbort || reason == FinishReason::kLength);
    EngineStats st = (*engine)->wait_until_idle();
    EXPECT_EQ(st.blocks_in_use, 0);
    EXPECT_EQ(st.num_sequences_in_cache, 0);
    // Dropping the stream aborts.
    {
      auto b = (*engine)->submit(in);
      ASSERT_TRUE(b.ok());
      ASSERT_TRUE((*b)->Next(&ev));
    }
    st = (*engine)->wait_until_idle();
    EXPECT_EQ(st.blocks_in_use, 0);
    EXPECT_EQ(st.num_sequences_in_cache, 0);
    EXPECT_EQ(st.num_running + st.num_waiting, 0);
    if (!prefix_caching) {
      EXPECT_EQ(st.blocks_cached, 0);
    }
  }
}

// stories260K's greedy reference (llama2.c run.c semantics: `steps` positions, a sampled BOS
// ends the text) through the engine, all cases together, chunked and not, with and without
// prefix caching.
TEST(EngineStoriesTest, GreedyReferenceAllCasesTogether) {
  const std::string dir = std::string(KVSERVE_ASSETS_DIR) + "/models/stories260K";
  std::ifstream in(dir + "/greedy_reference.json");
  KVSERVE_SKIP_IF_ABSENT(static_cast<bool>(in), dir << "/greedy_reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  auto loaded = LoadModel(dir + "/stories260K.bin");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto model = LlamaModel::Create(std::move(loaded).value());
  ASSERT_TRUE(model.ok());
  constexpr TokenId kBos = 1;
  ThreadPool pool(2);
  for (int64_t chunk : {0, 5}) {
    for (bool prefix_caching : {false, true}) {
      PagedKvCache cache;
      cache.spec = (*model)->kv_spec(DType::kF32, 8);
      cache.max_model_len = 512;
      cache.storage = std::move(KvStorage::Create(cache.spec, 200)).value();
      EngineOptions o;
      o.enable_prefix_caching = prefix_caching;
      o.check_invariants = true;
      o.scheduler.max_model_len = 512;
      o.scheduler.max_num_batched_tokens = 512;
      o.scheduler.enable_chunked_prefill = chunk > 0;
      o.scheduler.long_prefill_token_threshold = chunk;
      o.scheduler.eos_token_ids = {kBos};
      auto engine = Engine::Create(o, model->get(), &cache, &pool);
      ASSERT_TRUE(engine.ok()) << engine.status().ToString();
      std::vector<std::unique_ptr<RequestStream>> streams;
      for (const auto& c : ref.at("cases")) {
        RequestInput r;
        r.prompt_ids = c.at("prompt_ids_with_bos").get<std::vector<TokenId>>();
        r.max_tokens = c.at("steps").get<int64_t>() - static_cast<int64_t>(r.prompt_ids.size()) + 1;
        r.sampling.temperature = 0.0f;
        auto s = (*engine)->submit(r);
        ASSERT_TRUE(s.ok()) << s.status().ToString();
        streams.push_back(std::move(s).value());
      }
      size_t i = 0;
      for (const auto& c : ref.at("cases")) {
        std::vector<TokenId> ids = c.at("prompt_ids_with_bos").get<std::vector<TokenId>>();
        ids.erase(ids.begin());  // ids after BOS
        for (TokenId t : Drain(streams[i].get())) {
          if (t != kBos) ids.push_back(t);
        }
        EXPECT_EQ(ids, c.at("ids_after_bos").get<std::vector<TokenId>>())
            << "case " << i << " chunk " << chunk << " prefix caching " << prefix_caching;
        ++i;
      }
      const EngineStats st = (*engine)->wait_until_idle();
      EXPECT_EQ(st.blocks_in_use, 0);
    }
  }
}

// `kvserve generate --prompts-file`: one JSON line per prompt in file order, then a summary;
// greedy tokens equal the single-prompt path's.
std::string RunKvserve(const std::string& args, int* exit_code) {
  const std::string cmd = std::string(KVSERVE_BINARY) + " " + args + " 2>/dev/null";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return out;
}

TEST(GeneratePromptsFileTest, JsonLinesInFileOrderEqualSinglePromptRuns) {
  char dir_tmpl[] = "/tmp/kvserve_prompts_XXXXXX";
  const std::string dir = ::mkdtemp(dir_tmpl);
  const std::string file = dir + "/prompts.txt";
  const std::vector<std::string> prompts = {
      "Once upon a time there was a little robot", "hello",
      "",  // skipped
      "Once upon a time there was a little robot who liked to dance",
      "The KV cache decides how many requests a machine can serve"};
  {
    std::ofstream f(file);
    for (const std::string& p : prompts) f << p << "\n";
  }
  int rc = -1;
  const std::string common = " --temperature 0 -n 6 --output-format json";
  const std::string out = RunKvserve("generate --prompts-file " + file + common, &rc);
  ASSERT_EQ(rc, 0) << out;
  std::istringstream lines(out);
  std::vector<nlohmann::json> objs;
  std::string line;
  while (std::getline(lines, line)) objs.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(objs.size(), 5u) << out;
  int k = 0;
  for (const std::string& p : prompts) {
    if (p.empty()) continue;
    const nlohmann::json& o = objs[static_cast<size_t>(k)];
    EXPECT_EQ(o.at("index").get<int>(), k);
    EXPECT_EQ(o.at("prompt").get<std::string>(), p);
    for (const char* key : {"output_token_ids", "text", "cached_tokens", "ttft_ms"}) {
      EXPECT_TRUE(o.contains(key)) << key;
    }
    int single_rc = -1;
    const std::string single = RunKvserve("generate -p '" + p + "'" + common, &single_rc);
    ASSERT_EQ(single_rc, 0);
    const nlohmann::json s = nlohmann::json::parse(single);
    EXPECT_EQ(o.at("output_token_ids"), s.at("output_token_ids")) << p;
    EXPECT_EQ(o.at("text"), s.at("text")) << p;
    ++k;
  }
  const nlohmann::json& summary = objs.back();
  EXPECT_EQ(summary.at("num_requests").get<int>(), 4);
  for (const char* key :
       {"total_prompt_tokens", "total_output_tokens", "elapsed_s", "output_tokens_per_s",
        "mean_ttft_ms", "mean_tpot_ms", "prefix_cache_hit_rate"}) {
    EXPECT_TRUE(summary.contains(key)) << key;
  }
  // Text mode: every prompt's text, in file order.
  const std::string text = RunKvserve("generate --temperature 0 -n 4 --prompts-file " + file, &rc);
  EXPECT_EQ(rc, 0);
  size_t at = 0;
  for (const std::string& p : prompts) {
    if (p.empty()) continue;
    const size_t found = text.find(p, at);
    EXPECT_NE(found, std::string::npos) << p;
    if (found != std::string::npos) at = found + p.size();
  }
  // Errors: a missing file, and --prompts-file with -p.
  RunKvserve("generate --prompts-file " + dir + "/missing.txt", &rc);
  EXPECT_NE(rc, 0);
  RunKvserve("generate -p hi --prompts-file " + file, &rc);
  EXPECT_NE(rc, 0);
  std::remove(file.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace kvserve
