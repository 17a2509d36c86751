// Constrained decoding through the engine on the synthetic "tiny" model (random weights, a
// byte-level BPE vocabulary): with a grammar every output matches it, whatever the sampling
// settings; an accepted end of generation stops even with ignore_eos; preempted requests keep
// their grammar state; a grammar the vocabulary cannot spell ends the request with an error;
// every KV block and grammar state comes back.
#include "runtime/structured_decoding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar_cache.h"
#include "kv/kv_storage.h"
#include "model/synthetic.h"
#include "runtime/engine.h"
#include "runtime/testing/engine_test_util.h"

namespace kvserve {
namespace {

struct Fixture {
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

Fixture& Get() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    SyntheticModelOptions o;
    o.preset = "tiny";
    o.seed = 5;
    auto loaded = MakeSyntheticModel(o);
    EXPECT_TRUE(loaded.ok());
    fx->tokenizer = std::move(Tokenizer::Create(*loaded->vocab)).value();
    fx->model = std::move(LlamaModel::Create(std::move(loaded).value())).value();
    return fx;
  }();
  return *f;
}

std::shared_ptr<const grammar::CompiledGrammar> Compile(grammar::GrammarKind kind,
                                                        const std::string& text) {
  auto g = grammar::CompileGrammar({kind, text});
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : nullptr;
}

RequestInput Sampled(uint64_t seed, int64_t max_tokens) {
  RequestInput in;
  in.prompt_ids = SyntheticTokenIds(12, Get().model->config().vocab_size);
  in.max_tokens = max_tokens;
  in.sampling.temperature = 1.0f;
  in.sampling.seed = seed;
  return in;
}

struct Result {
  std::string text;
  FinishReason finish = FinishReason::kNone;
  std::string error;
};

class StructuredDecodingTest : public ::testing::Test {
 protected:
  void Start(int64_t num_blocks = 64, int64_t max_num_seqs = 8) {
    const int64_t max_model_len = std::min<int64_t>(512, num_blocks * 16);
    cache_ = testing::MakeTestCache(*Get().model, num_blocks, max_model_len, DType::kF32, 16);
    EngineOptions o;
    o.check_invariants = true;
    o.tokenizer = Get().tokenizer.get();
    o.scheduler.max_model_len = max_model_len;
    o.scheduler.max_num_batched_tokens = 256;
    o.scheduler.max_num_seqs = max_num_seqs;
    auto e = Engine::Create(o, Get().model.get(), &cache_, &pool_);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
  }
  std::vector<Result> RunAll(std::vector<RequestInput> inputs) {
    std::vector<std::unique_ptr<RequestStream>> streams;
    for (RequestInput& in : inputs) {
      auto s = engine_->submit(std::move(in));
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      if (s.ok()) streams.push_back(std::move(s).value());
    }
    std::vector<Result> out;
    for (auto& s : streams) {
      Result r;
      StreamEvent ev;
      while (s->Next(&ev)) {
        r.text += ev.text;
        if (ev.finished()) {
          r.finish = ev.finish_reason;
          r.error = ev.error;
        }
      }
      out.push_back(r);
    }
    const EngineStats st = engine_->wait_until_idle();
    EXPECT_EQ(st.blocks_in_use, 0);
    EXPECT_EQ(st.num_sequences_in_cache, 0);
    return out;
  }
  ThreadPool pool_{1};
  PagedKvCache cache_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(StructuredDecodingTest, ChoiceOutputsAreAlwaysOneOfTheChoices) {
  Start();
  auto g = Compile(grammar::GrammarKind::kChoice, R"(["yes", "no", "maybe not"])");
  std::vector<RequestInput> inputs;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    RequestInput in = Sampled(seed, 64);
    in.grammar = g;
    in.ignore_eos = seed % 2 == 0;  // the grammar's end stops it anyway
    inputs.push_back(std::move(in));
  }
  const std::set<std::string> choices = {"yes", "no", "maybe not"};
  for (const Result& r : RunAll(std::move(inputs))) {
    EXPECT_TRUE(choices.count(r.text)) << "'" << r.text << "'";
    EXPECT_EQ(r.finish, FinishReason::kStop);
  }
}

TEST_F(StructuredDecodingTest, WithoutAGrammarTheSameRequestsRambleOn) {
  // The control: the random model does not produce the choices by itself.
  Start();
  std::vector<RequestInput> inputs;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    RequestInput in = Sampled(seed, 16);
    in.ignore_eos = true;
    inputs.push_back(std::move(in));
  }
  for (const Result& r : RunAll(std::move(inputs))) {
    EXPECT_EQ(r.finish, FinishReason::kLength);
    EXPECT_NE(r.text, "yes");
  }
}

TEST_F(StructuredDecodingTest, RegexAndJsonSchemaOutputsMatch) {
  Start();
  auto regex = Compile(grammar::GrammarKind::kRegex, "[a-f]{2,6}-[0-9]{3}");
  auto schema = Compile(grammar::GrammarKind::kJsonSchema, R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 12},
      "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3},
      "ok": {"type": "boolean"}
    },
    "required": ["name", "tags", "ok"]
  })");
  std::vector<RequestInput> inputs;
  for (uint64_t seed = 1; seed <= 16; ++seed) {
    RequestInput in = Sampled(seed, 200);
    in.grammar = seed % 2 == 0 ? regex : schema;
    in.sampling.temperature = seed % 4 == 1 ? 0.0f : 1.5f;
    in.sampling.top_k = seed % 3 == 0 ? 5 : 0;
    in.sampling.repetition_penalty = 1.3f;
    inputs.push_back(std::move(in));
  }
  const std::vector<Result> results = RunAll(std::move(inputs));
  const std::regex pattern("[a-f]{2,6}-[0-9]{3}");
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    ASSERT_EQ(r.finish, FinishReason::kStop) << r.text << " " << r.error;
    if ((i + 1) % 2 == 0) {
      EXPECT_TRUE(std::regex_match(r.text, pattern)) << r.text;
      continue;
    }
    const nlohmann::json j = nlohmann::json::parse(r.text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.text;
    ASSERT_TRUE(j.is_object() && j.size() == 3) << r.text;
    EXPECT_TRUE(j["name"].is_string() && j["name"].get<std::string>().size() <= 12 * 4);
    ASSERT_TRUE(j["tags"].is_array()) << r.text;
    EXPECT_GE(j["tags"].size(), 1u);
    EXPECT_LE(j["tags"].size(), 3u);
    for (const auto& t : j["tags"]) EXPECT_TRUE(t == "a" || t == "b" || t == "c") << r.text;
    EXPECT_TRUE(j["ok"].is_boolean());
  }
}

TEST_F(StructuredDecodingTest, PreemptedRequestsKeepTheirGrammarState) {
  // 10 blocks of 16 tokens for 6 sequences growing to ~100 tokens each: the scheduler must
  // preempt, and recomputed requests continue where their grammar left off.
  Start(/*num_blocks=*/10, /*max_num_seqs=*/6);
  auto g = Compile(grammar::GrammarKind::kRegex, "(ab|cd|ef){40}\\.");
  std::vector<RequestInput> inputs;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    RequestInput in = Sampled(seed, 100);
    in.grammar = g;
    inputs.push_back(std::move(in));
  }
  const std::regex pattern("(ab|cd|ef){40}\\.");
  for (const Result& r : RunAll(std::move(inputs))) {
    EXPECT_EQ(r.finish, FinishReason::kStop) << r.text << " " << r.error;
    EXPECT_TRUE(std::regex_match(r.text, pattern)) << r.text;
  }
  EXPECT_GT(engine_->stats().num_preemptions_total, 0);
}

TEST(StructuredDecodingCoreTest, AGrammarTheVocabularyCannotSpellEndsWithAnError) {
  // A vocabulary without the letter 'q': the grammar "q+" has no first token.
  const Tokenizer& tok = *Get().tokenizer;
  grammar::Vocabulary v = GrammarVocabulary(tok, {tok.eos_id()});
  for (std::string& bytes : v.token_bytes) {
    if (bytes.find('q') != std::string::npos) bytes.clear();
  }
  PagedKvCache cache = testing::MakeTestCache(*Get().model, 16, 128, DType::kF32, 16);
  EngineCoreOptions o = testing::TestCoreOptions(cache, 64);
  o.grammar_vocabulary = grammar::TokenTrie::Build(v);
  ThreadPool pool(1);
  auto core = testing::MakeTestCore(o, *Get().model, &cache, &pool);
  ASSERT_NE(core, nullptr);
  RequestInput in = testing::GreedyRequest(SyntheticTokenIds(8, tok.vocab_size()), 8);
  in.grammar = Compile(grammar::GrammarKind::kRegex, "q+");
  ASSERT_TRUE(core->add_request(1, in).ok());
  RequestInput fine = testing::GreedyRequest(SyntheticTokenIds(8, tok.vocab_size()), 4);
  fine.grammar = Compile(grammar::GrammarKind::kRegex, "[a-p]+");
  ASSERT_TRUE(core->add_request(2, fine).ok());
  const std::vector<RequestOutput> outs = testing::RunToEnd(*core);
  bool saw_error = false;
  for (const RequestOutput& r : outs) {
    if (r.id == 1 && r.finished()) {
      saw_error = true;
      EXPECT_EQ(r.finish_reason, FinishReason::kError);
      EXPECT_NE(r.error.find("no token of the vocabulary"), std::string::npos) << r.error;
      EXPECT_TRUE(r.new_token_ids.empty());
    }
    if (r.id == 2 && r.finished()) {
      EXPECT_EQ(r.finish_reason, FinishReason::kLength);
    }
  }
  EXPECT_TRUE(saw_error);
  // The runner drops a finished request's state when the next step reports it finished.
  ASSERT_TRUE(core->add_request(3, testing::GreedyRequest({1, 2, 3}, 1)).ok());
  testing::RunToEnd(*core);
  EXPECT_EQ(core->num_grammar_states(), 0);
  EXPECT_EQ(core->kv_manager().num_sequences(), 0);
}

TEST(StructuredDecodingCoreTest, AGrammarWithoutAVocabularyIsRefused) {
  PagedKvCache cache = testing::MakeTestCache(*Get().model, 16, 128, DType::kF32, 16);
  ThreadPool pool(1);
  auto core = testing::MakeTestCore(testing::TestCoreOptions(cache, 64), *Get().model, &cache,
                                    &pool);
  ASSERT_NE(core, nullptr);
  RequestInput in = testing::GreedyRequest(SyntheticTokenIds(8, 100), 4);
  in.grammar = Compile(grammar::GrammarKind::kRegex, "a+");
  const Status s = core->add_request(1, in);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("structured output"), std::string::npos) << s.message();
}

TEST(GrammarVocabularyTest, ControlTokensAreNeverText) {
  const Tokenizer& tok = *Get().tokenizer;
  const grammar::Vocabulary v = GrammarVocabulary(tok, {tok.eos_id()});
  ASSERT_EQ(static_cast<int64_t>(v.token_bytes.size()), tok.vocab_size());
  EXPECT_EQ(v.eos_token_ids, std::vector<int32_t>{tok.eos_id()});
  for (int32_t id : v.special_token_ids) EXPECT_TRUE(v.token_bytes[id].empty());
  // Byte tokens spell their byte.
  int64_t single_bytes = 0;
  for (const std::string& b : v.token_bytes) single_bytes += b.size() == 1 ? 1 : 0;
  EXPECT_GE(single_bytes, 256);
}

}  // namespace
}  // namespace kvserve
