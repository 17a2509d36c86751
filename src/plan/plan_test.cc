// The planner: presets, config.json, GGUF metadata, the arithmetic against brute force,
// errors, the text and JSON reports. The command line is tested in cli/plan_cmd_test.cc.
#include "plan/plan.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/gguf.h"
#include "model/llama.h"
#include "model/model_loader.h"
#include "model/synthetic.h"

namespace kvserve::plan {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A fresh folder under the test's temporary directory, removed with its files at the end.
class ScratchDir {
 public:
  ScratchDir() : dir_(fs::path(::testing::TempDir()) / NextName()) { fs::create_directories(dir_); }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  std::string path() const { return dir_.string(); }

 private:
  static std::string NextName() {
    static int count = 0;
    return "kvserve_plan_" + std::to_string(::getpid()) + "_" + std::to_string(count++);
  }
  fs::path dir_;
};

constexpr char kStandardLine[] = "KV per request (64000 tokens): 20.97 GB (19.53 GiB)";

PlanModel Preset(const std::string& name) {
  StatusOr<PlanModel> m = PlanModelFromPreset(name);
  EXPECT_TRUE(m.ok()) << name << ": " << m.status().message();
  return m.ok() ? *m : PlanModel{};
}

PlanResult Plan(const PlanModel& model, const PlanOptions& options) {
  StatusOr<PlanResult> p = ComputePlan(model, options);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? *p : PlanResult{};
}

PlanOptions Options(int64_t context, const std::string& dtype = "auto") {
  PlanOptions o;
  o.context_tokens = context;
  o.kv_cache_dtype = dtype;
  return o;
}

const PlanDtypeRow& Row(const PlanResult& p, DType dtype) {
  for (const PlanDtypeRow& r : p.dtypes) {
    if (r.dtype == dtype) return r;
  }
  ADD_FAILURE() << "no row for " << DTypeName(dtype);
  static const PlanDtypeRow kNone;
  return kNone;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// ---------------------------------------------------------------------------------------------
// The standard figure.

TEST(PlanTest, Llama33_70BAt64kTokensBf16Is20_97GB) {
  const PlanModel m = Preset("llama-3.3-70b");
  EXPECT_EQ(m.num_layers, 80);
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);
  const PlanResult p = Plan(m, Options(64000, "bf16"));
  EXPECT_EQ(p.bytes_per_token, 2 * 80 * 8 * 128 * 2);
  EXPECT_EQ(p.kv_bytes_per_request, 20971520000);
  EXPECT_EQ(p.blocks_per_request, 4000);
  EXPECT_EQ(p.paged_bytes_per_request, 20971520000);
  EXPECT_EQ(p.contiguous_bytes_per_request, int64_t{131072} * 327680);
  const std::string text = FormatPlanText(p);
  EXPECT_NE(text.find(kStandardLine), std::string::npos) << text;
  EXPECT_NE(text.find("KV bytes per token: 327680 B = 327.68 KB (320.00 KiB)"), std::string::npos)
      << text;
}

// ---------------------------------------------------------------------------------------------
// Presets.

TEST(PlanPresetTest, EveryPresetPlansAndCountsPublishedParameters) {
  const std::vector<std::string> required = {"llama-3.3-70b", "llama-3.1-8b",     "mistral-7b",
                                             "qwen2.5-7b",    "deepseek-v2-lite", "smollm2-135m"};
  const std::vector<std::string> names = PlanPresetNames();
  for (const std::string& r : required) {
    EXPECT_NE(std::find(names.begin(), names.end(), r), names.end()) << r;
  }
  for (const std::string& name : names) {
    const PlanModel m = Preset(name);
    EXPECT_TRUE(ValidatePlanModel(m).ok()) << name;
    EXPECT_GT(m.max_context_tokens, 0) << name;
    EXPECT_EQ(m.dtype, DType::kBF16) << name;
    EXPECT_EQ(m.weight_bytes, 2 * m.num_parameters) << name;
    EXPECT_TRUE(ComputePlan(m, PlanOptions{}).ok()) << name;
  }
  // The parameter counts Hugging Face reports for these checkpoints.
  EXPECT_EQ(Preset("llama-3.3-70b").num_parameters, 70553706496);
  EXPECT_EQ(Preset("llama-3.1-8b").num_parameters, 8030261248);
  EXPECT_EQ(Preset("mistral-7b").num_parameters, 7248023552);
  EXPECT_EQ(Preset("qwen2.5-7b").num_parameters, 7615616512);
  EXPECT_EQ(Preset("smollm2-135m").num_parameters, 134515008);
  const int64_t deepseek = Preset("deepseek-v2-lite").num_parameters;
  EXPECT_GT(deepseek, 15'650'000'000);  // "15.7B"
  EXPECT_LT(deepseek, 15'750'000'000);
}

TEST(PlanPresetTest, GeometriesOfThePresets) {
  struct Case {
    const char* name;
    int64_t layers, kv_heads, head_dim, max_context;
  } cases[] = {
      {"llama-3.1-8b", 32, 8, 128, 131072},
      {"mistral-7b", 32, 8, 128, 32768},
      {"qwen2.5-7b", 28, 4, 128, 131072},
      {"smollm2-135m", 30, 3, 64, 8192},
  };
  for (const Case& c : cases) {
    const PlanModel m = Preset(c.name);
    EXPECT_EQ(m.kv_layout, KvLayout::kSeparateKv) << c.name;
    EXPECT_EQ(m.num_layers, c.layers) << c.name;
    EXPECT_EQ(m.num_kv_heads, c.kv_heads) << c.name;
    EXPECT_EQ(m.head_dim, c.head_dim) << c.name;
    EXPECT_EQ(m.max_context_tokens, c.max_context) << c.name;
    EXPECT_EQ(Plan(m, Options(1, "f16")).bytes_per_token,
              2 * c.layers * c.kv_heads * c.head_dim * 2)
        << c.name;
  }
}

TEST(PlanPresetTest, DeepSeekV2LiteCachesTheMlaLatent) {
  const PlanModel m = Preset("deepseek-v2-lite");
  EXPECT_EQ(m.kv_layout, KvLayout::kMlaLatent);
  EXPECT_EQ(m.num_layers, 27);
  EXPECT_EQ(m.kv_lora_rank, 512);
  EXPECT_EQ(m.qk_rope_head_dim, 64);
  const PlanResult p = Plan(m, Options(32768, "bf16"));
  EXPECT_EQ(p.bytes_per_token, 27 * (512 + 64) * 2);
  EXPECT_EQ(Row(p, DType::kI8).bytes_per_token, 27 * (512 + 64 + 4));
  EXPECT_EQ(Row(p, DType::kFp8E4M3).fixed_scale_bytes, 27 * 4);
  const std::string text = FormatPlanText(p);
  EXPECT_NE(text.find("MLA (kv_lora_rank 512, qk_rope_head_dim 64)"), std::string::npos) << text;
  EXPECT_NE(text.find("27 layers x (512 latent + 64 rope) x 2 B"), std::string::npos) << text;
}

TEST(PlanPresetTest, UnknownPresetListsTheKnownOnes) {
  StatusOr<PlanModel> m = PlanModelFromPreset("llama-4");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'llama-4'"), std::string::npos);
  for (const std::string& name : PlanPresetNames()) {
    EXPECT_NE(m.status().message().find(name), std::string::npos) << name;
  }
}

// ---------------------------------------------------------------------------------------------
// Arithmetic.

TEST(PlanPresetTest, ResolvePlanModelTakesExactlyOneSource) {
  StatusOr<PlanModel> preset = ResolvePlanModel("llama-3.1-8b", "");
  ASSERT_TRUE(preset.ok()) << preset.status().ToString();
  EXPECT_EQ(preset->name, PlanModelFromPreset("llama-3.1-8b")->name);
  for (const auto& [p, m] : {std::pair<std::string, std::string>{"", ""},
                             std::pair<std::string, std::string>{"llama-3.1-8b", "/x.gguf"}}) {
    StatusOr<PlanModel> bad = ResolvePlanModel(p, m);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(bad.status().message(), "pass exactly one of --preset NAME and --model PATH");
  }
  StatusOr<PlanModel> missing = ResolvePlanModel("", "/nonexistent/model.gguf");
  EXPECT_FALSE(missing.ok());
}

TEST(PlanTest, DtypeTableFollowsTheSpec) {
  const PlanResult p = Plan(Preset("llama-3.1-8b"), Options(10000));
  ASSERT_EQ(p.dtypes.size(), 6u);
  const int64_t f16 = Row(p, DType::kF16).bytes_per_token;
  EXPECT_EQ(f16, 2 * 32 * 8 * 128 * 2);
  EXPECT_EQ(Row(p, DType::kBF16).bytes_per_token, f16);
  EXPECT_EQ(Row(p, DType::kF32).bytes_per_token, 2 * f16);
  EXPECT_EQ(Row(p, DType::kFp8E4M3).bytes_per_token * 2, f16);
  EXPECT_EQ(Row(p, DType::kFp8E5M2).bytes_per_token * 2, f16);
  EXPECT_EQ(Row(p, DType::kFp8E4M3).fixed_scale_bytes, 32 * 2 * 8 * 4);
  EXPECT_EQ(Row(p, DType::kI8).bytes_per_token, f16 / 2 + 32 * 2 * 8 * 4);
  EXPECT_EQ(Row(p, DType::kI8).fixed_scale_bytes, 0);
  for (const PlanDtypeRow& r : p.dtypes) {
    EXPECT_EQ(r.kv_bytes_per_request, 10000 * r.bytes_per_token) << DTypeName(r.dtype);
    EXPECT_EQ(r.requests_paged, -1) << "no budget, no counts";
  }
  EXPECT_EQ(p.spec.dtype, DType::kBF16) << "auto is the preset's bf16";
  EXPECT_TRUE(p.kv_dtype_auto);
}

TEST(PlanTest, EveryKvCacheDtypeNameIsAccepted) {
  const PlanModel m = Preset("smollm2-135m");
  for (const char* name : {"auto", "f32", "float32", "float", "f16", "float16", "half", "bf16",
                           "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8"}) {
    StatusOr<PlanResult> p = ComputePlan(m, Options(100, name));
    EXPECT_TRUE(p.ok()) << name << ": " << p.status().message();
  }
  EXPECT_EQ(Plan(m, Options(100, "fp8")).spec.dtype, DType::kFp8E4M3);
}

TEST(PlanTest, BudgetCountsMatchBruteForce) {
  const PlanModel m = Preset("llama-3.1-8b");
  for (const int64_t context : {1, 15, 16, 17, 1000, 8192, 100000, 131072}) {
    for (const int64_t block_size : {1, 16, 32, 256}) {
      for (const char* dtype : {"bf16", "fp8", "int8", "f32"}) {
        PlanOptions o = Options(context, dtype);
        o.block_size = block_size;
        o.kv_cache_memory = "50GiB";
        o.avg_context_tokens = 777;
        const PlanResult p = Plan(m, o);
        const int64_t budget = int64_t{50} << 30;
        const int64_t usable = budget - p.fixed_scale_bytes;
        const int64_t block_bytes = p.bytes_per_token * block_size;
        // Blocks: as many whole blocks as fit. Paged: each request takes its blocks, the last
        // partly used. Contiguous: each request reserves max_model_len tokens.
        int64_t blocks = 0;
        while ((blocks + 1) * block_bytes <= usable) ++blocks;
        int64_t per_request = 0;
        while (per_request * block_size < context) ++per_request;
        int64_t paged = 0;
        while ((paged + 1) * per_request <= blocks) ++paged;
        int64_t contiguous = 0;
        while ((contiguous + 1) * 131072 * p.bytes_per_token <= usable) ++contiguous;
        const std::string what =
            std::to_string(context) + " tokens, block " + std::to_string(block_size) + ", " + dtype;
        EXPECT_EQ(p.kv_budget_bytes, budget) << what;
        EXPECT_EQ(p.num_blocks, blocks) << what;
        EXPECT_EQ(p.blocks_per_request, per_request) << what;
        EXPECT_EQ(p.requests_paged, paged) << what;
        EXPECT_EQ(p.requests_contiguous, contiguous) << what;
        EXPECT_EQ(p.requests_avg_context, blocks / ((777 + block_size - 1) / block_size)) << what;
        EXPECT_GE(p.requests_paged, p.requests_contiguous) << what;
        EXPECT_EQ(p.paged_bytes_per_request, per_request * block_bytes) << what;
      }
    }
  }
}

// --kv-budget: a compressed request holds min(context, budget + one block) slots; the count of
// such requests, the ratio over plain paging, and the refusal of a negative budget.
TEST(PlanTest, KvBudgetCountsCompressedRequests) {
  const PlanModel m = Preset("smollm2-135m");
  PlanOptions o = Options(4224, "bf16");
  o.kv_cache_memory = "1GiB";
  o.kv_budget_tokens = 512;
  const PlanResult p = Plan(m, o);
  EXPECT_EQ(p.evicted_tokens_per_request, 528);
  EXPECT_EQ(p.evicted_blocks_per_request, 33);
  EXPECT_EQ(p.requests_evicted, p.num_blocks / 33);
  EXPECT_EQ(p.requests_paged, p.num_blocks / 264);
  const std::string text = FormatPlanText(p);
  EXPECT_NE(text.find("with token eviction to --kv-budget 512 (33 blocks each):"),
            std::string::npos) << text;
  const nlohmann::json j = nlohmann::json::parse(FormatPlanJson(p));
  EXPECT_EQ(j["requests_evicted"], p.requests_evicted);
  EXPECT_EQ(j["kv_budget_tokens"], 512);
  for (const auto& row : j["dtypes"]) EXPECT_TRUE(row["requests_evicted"].is_number());
  // A budget past the context evicts nothing: the request's own blocks.
  o.kv_budget_tokens = 10000;
  EXPECT_EQ(Plan(m, o).requests_evicted, p.requests_paged);
  o.kv_budget_tokens = -1;
  EXPECT_FALSE(ComputePlan(m, o).ok());
  // Without --kv-budget the JSON says null.
  o.kv_budget_tokens = 0;
  EXPECT_TRUE(nlohmann::json::parse(FormatPlanJson(Plan(m, o)))["requests_evicted"].is_null());
}

TEST(PlanTest, Fp8ScalesComeOffTheBudgetOnce) {
  const PlanModel m = Preset("llama-3.1-8b");
  PlanOptions o = Options(16, "fp8");
  const int64_t block_bytes = 16 * 65536;
  const int64_t scales = 32 * 2 * 8 * 4;
  o.kv_cache_memory = std::to_string(10 * block_bytes + scales);
  EXPECT_EQ(Plan(m, o).num_blocks, 10);
  o.kv_cache_memory = std::to_string(10 * block_bytes + scales - 1);
  EXPECT_EQ(Plan(m, o).num_blocks, 9);
  o.kv_cache_dtype = "int8";  // no fixed scales: the per-token ones are in bytes/token
  o.kv_cache_memory = std::to_string(10 * 16 * (65536 + 32 * 16 * 4));
  EXPECT_EQ(Plan(m, o).num_blocks, 10);
}

TEST(PlanTest, MemoryIsWeightsPlusKv) {
  const PlanModel m = Preset("llama-3.1-8b");
  PlanOptions o = Options(8192);
  o.memory = "80GiB";
  o.avg_context_tokens = 2000;
  const PlanResult p = Plan(m, o);
  EXPECT_EQ(p.memory_bytes, int64_t{80} << 30);
  EXPECT_EQ(p.weight_bytes, 2 * m.num_parameters);
  EXPECT_EQ(p.kv_budget_bytes, (int64_t{80} << 30) - 2 * m.num_parameters);
  EXPECT_EQ(p.num_blocks, p.kv_budget_bytes / (16 * 131072));
  EXPECT_EQ(p.requests_paged, p.num_blocks / 512);
  EXPECT_EQ(p.requests_contiguous, p.kv_budget_bytes / (int64_t{131072} * 131072));
  EXPECT_EQ(p.requests_avg_context, p.num_blocks / 125);
  const std::string text = FormatPlanText(p);
  EXPECT_NE(text.find("with paging (512 blocks each):"), std::string::npos) << text;
  EXPECT_NE(text.find("with contiguous max-length reservation (131072 tokens each):"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("paged@avg"), std::string::npos) << text;
}

TEST(PlanTest, WeightsDtypeResizesTheWeights) {
  const PlanModel m = Preset("llama-3.3-70b");
  PlanOptions o = Options(64000, "bf16");
  o.memory = "80GiB";
  StatusOr<PlanResult> bf16 = ComputePlan(m, o);
  ASSERT_FALSE(bf16.ok()) << "141 GB of bf16 weights do not fit in 80 GiB";
  const std::string msg = bf16.status().message();
  EXPECT_NE(msg.find("weights"), std::string::npos) << msg;
  EXPECT_NE(msg.find("141.11 GB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("85.90 GB (80.00 GiB)"), std::string::npos) << msg;
  o.weights_dtype = "fp8";
  const PlanResult fp8 = Plan(m, o);
  EXPECT_EQ(fp8.weight_bytes, m.num_parameters);
  EXPECT_EQ(fp8.kv_budget_bytes, (int64_t{80} << 30) - m.num_parameters);
  EXPECT_EQ(fp8.requests_paged, fp8.kv_budget_bytes / 20971520000);
  o.weights_dtype = "q8_0";
  EXPECT_EQ(Plan(m, o).weight_bytes, m.num_parameters / 32 * 34);
}

TEST(PlanTest, ContextDefaultsToTheMaxModelLength) {
  const PlanModel m = Preset("mistral-7b");
  PlanResult p = Plan(m, PlanOptions{});
  EXPECT_EQ(p.context_tokens, 32768);
  EXPECT_EQ(p.max_model_len, 32768);
  PlanOptions o;
  o.max_model_len = 4096;
  p = Plan(m, o);
  EXPECT_EQ(p.context_tokens, 4096);
  EXPECT_EQ(p.contiguous_bytes_per_request, 4096 * p.bytes_per_token);
  o.max_model_len = 65536;  // beyond the model's context: a what-if, allowed
  o.context_tokens = 65536;
  EXPECT_EQ(Plan(m, o).kv_bytes_per_request, 65536 * p.bytes_per_token);
}

TEST(PlanTest, BadInputsAreErrors) {
  const PlanModel m = Preset("llama-3.1-8b");
  auto error = [&](PlanOptions o) {
    StatusOr<PlanResult> p = ComputePlan(m, o);
    return p.ok() ? std::string("(no error)") : p.status().message();
  };
  PlanOptions o = Options(200000);
  EXPECT_NE(error(o).find("exceeds the maximum model length 131072"), std::string::npos);
  o = Options(-1);
  EXPECT_NE(error(o).find("--context"), std::string::npos);
  o = Options(100, "int4");
  EXPECT_NE(error(o).find("--kv-cache-dtype"), std::string::npos);
  o = Options(100);
  o.block_size = 0;
  EXPECT_NE(error(o).find("--block-size"), std::string::npos);
  o = Options(100);
  o.memory = "lots";
  EXPECT_NE(error(o).find("bad byte size 'lots'"), std::string::npos);
  o = Options(100);
  o.memory = "80GiB";
  o.kv_cache_memory = "10GiB";
  EXPECT_NE(error(o).find("not both"), std::string::npos);
  o = Options(100);
  o.weights_dtype = "fp8";
  EXPECT_NE(error(o).find("--weights-dtype needs --memory"), std::string::npos);
  o = Options(100);
  o.memory = "80GiB";
  o.weights_dtype = "int4";
  EXPECT_NE(error(o).find("unknown --weights-dtype"), std::string::npos);
  o = Options(100);
  o.kv_cache_memory = "0";
  EXPECT_NE(error(o).find("--kv-cache-memory must be positive"), std::string::npos);
  o = Options(100);
  o.avg_context_tokens = 200000;
  EXPECT_NE(error(o).find("--avg-context"), std::string::npos);
}

TEST(PlanTest, TooSmallABudgetSaysSoWithoutFailing) {
  PlanOptions o = Options(131072);
  o.kv_cache_memory = "1GiB";
  const PlanResult p = Plan(Preset("llama-3.1-8b"), o);
  EXPECT_EQ(p.requests_paged, 0);
  EXPECT_EQ(p.requests_contiguous, 0);
  EXPECT_NE(FormatPlanText(p).find("not even one request"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Models from files.

constexpr char kLlama31Config[] = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
  "max_position_embeddings": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}
})";

constexpr char kDeepSeekV2LiteConfig[] = R"({
  "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
  "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
  "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
  "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
  "first_k_dense_replace": 1, "moe_layer_freq": 1, "q_lora_rank": null, "kv_lora_rank": 512,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400,
  "max_position_embeddings": 163840, "tie_word_embeddings": false, "torch_dtype": "bfloat16"
})";

TEST(PlanModelTest, HfConfigMatchesThePreset) {
  StatusOr<PlanModel> m = PlanModelFromHfConfig(kLlama31Config, "config.json");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const PlanModel preset = Preset("llama-3.1-8b");
  EXPECT_EQ(m->architecture, "llama");
  EXPECT_EQ(m->name, "LlamaForCausalLM");
  EXPECT_EQ(m->num_layers, preset.num_layers);
  EXPECT_EQ(m->num_kv_heads, preset.num_kv_heads);
  EXPECT_EQ(m->head_dim, preset.head_dim);
  EXPECT_EQ(m->max_context_tokens, preset.max_context_tokens);
  EXPECT_EQ(m->num_parameters, preset.num_parameters);
  EXPECT_EQ(m->dtype, DType::kBF16);
  EXPECT_TRUE(m->parameters_estimated);
  EXPECT_TRUE(m->weights_estimated);
  EXPECT_EQ(Plan(*m, Options(64000)).kv_bytes_per_request,
            Plan(preset, Options(64000)).kv_bytes_per_request);
}

TEST(PlanModelTest, DeepSeekConfigIsMla) {
  StatusOr<PlanModel> m = PlanModelFromHfConfig(kDeepSeekV2LiteConfig, "config.json", "V2-Lite");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const PlanModel preset = Preset("deepseek-v2-lite");
  EXPECT_EQ(m->name, "V2-Lite");
  EXPECT_EQ(m->kv_layout, KvLayout::kMlaLatent);
  EXPECT_EQ(m->kv_lora_rank, 512);
  EXPECT_EQ(m->qk_rope_head_dim, 64);
  EXPECT_EQ(m->max_context_tokens, 163840);
  EXPECT_EQ(m->num_parameters, preset.num_parameters);
  EXPECT_EQ(Plan(*m, Options(1000, "bf16")).bytes_per_token, 31104);
}

TEST(PlanModelTest, RopeScalingTheLoaderCannotRunStillPlans) {
  // DeepSeek's published configs use YaRN; the loader refuses it, the planner does not need it.
  std::string config = kDeepSeekV2LiteConfig;
  config.insert(config.rfind('}'), R"(, "rope_scaling": {"type": "yarn", "factor": 40})");
  StatusOr<PlanModel> m = PlanModelFromHfConfig(config, "config.json");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(Plan(*m, Options(1000, "bf16")).bytes_per_token, 31104);
}

TEST(PlanModelTest, HfConfigVariants) {
  // head_dim given explicitly, fp16 checkpoint, GQA default (no num_key_value_heads = MHA).
  StatusOr<PlanModel> m = PlanModelFromHfConfig(
      R"({"model_type": "x", "hidden_size": 1024, "num_hidden_layers": 2,
          "num_attention_heads": 8, "head_dim": 256, "max_position_embeddings": 4096,
          "torch_dtype": "float16"})",
      "c");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->num_kv_heads, 8);
  EXPECT_EQ(m->head_dim, 256);
  EXPECT_EQ(m->dtype, DType::kF16);
  // Multimodal configs nest the decoder in text_config.
  m = PlanModelFromHfConfig(
      R"({"model_type": "vlm", "torch_dtype": "bfloat16", "text_config": {
          "hidden_size": 512, "num_hidden_layers": 3, "num_attention_heads": 4,
          "num_key_value_heads": 2, "max_position_embeddings": 1024}})",
      "c");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->num_layers, 3);
  EXPECT_EQ(m->num_kv_heads, 2);
  EXPECT_EQ(m->head_dim, 128);
  // Mixtral-style MoE: every expert counts toward the weights.
  m = PlanModelFromHfConfig(
      R"({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
          "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
          "num_local_experts": 8, "vocab_size": 32000, "max_position_embeddings": 32768})",
      "c");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_GT(m->num_parameters, 46'600'000'000);  // Mixtral-8x7B: 46.7B
  EXPECT_LT(m->num_parameters, 46'800'000'000);
}

TEST(PlanModelTest, BadHfConfigsAreErrors) {
  for (const char* bad :
       {"", "[1]", "{", R"({"num_attention_heads": 8})", R"({"num_hidden_layers": 2})",
        R"({"num_hidden_layers": "2", "num_attention_heads": 8})",
        R"({"num_hidden_layers": 2, "num_attention_heads": 8,
                              "num_key_value_heads": -1})",
        R"({"num_hidden_layers": 99999999, "num_attention_heads": 8})"}) {
    StatusOr<PlanModel> m = PlanModelFromHfConfig(bad, "cfg.json");
    if (m.ok()) {
      // Parsed: then the plan must refuse it.
      EXPECT_FALSE(ComputePlan(*m, PlanOptions{}).ok()) << bad;
    } else {
      EXPECT_NE(m.status().message().find("cfg.json"), std::string::npos) << bad;
    }
  }
  // No max_position_embeddings: the plan asks for --max-model-len.
  StatusOr<PlanModel> m = PlanModelFromHfConfig(
      R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2})", "c");
  ASSERT_TRUE(m.ok());
  StatusOr<PlanResult> p = ComputePlan(*m, PlanOptions{});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--max-model-len"), std::string::npos);
}

TEST(PlanModelTest, HfFolderUsesTheStoredWeightSize) {
  ScratchDir dir;
  WriteFile(dir.file("config.json"), kLlama31Config);
  StatusOr<PlanModel> m = LoadPlanModel(dir.path());
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->name, fs::path(dir.path()).filename().string());
  EXPECT_EQ(m->weight_bytes, 2 * m->num_parameters) << "no safetensors: estimated";
  WriteFile(dir.file("model.safetensors.index.json"),
            R"({"metadata": {"total_size": 16060522496}, "weight_map": {}})");
  m = LoadPlanModel(dir.file("config.json"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->weight_bytes, 16060522496);
  EXPECT_EQ(m->weights_note, "safetensors files");
  EXPECT_FALSE(m->weights_estimated);
  EXPECT_TRUE(m->parameters_estimated);
}

TEST(PlanModelTest, GgufMetadataGivesTheGeometry) {
  ScratchDir dir;
  SyntheticModelOptions so;
  so.preset = "tiny";
  StatusOr<LoadedModel> tiny = MakeSyntheticModel(so);
  ASSERT_TRUE(tiny.ok()) << tiny.status().message();
  ASSERT_TRUE(SaveGgufModel(*tiny, dir.file("tiny.gguf")).ok());
  StatusOr<PlanModel> m = LoadPlanModel(dir.file("tiny.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  const ModelConfig& c = tiny->config;
  EXPECT_EQ(m->architecture, "llama");
  EXPECT_EQ(m->num_layers, c.num_layers);
  EXPECT_EQ(m->num_heads, c.num_heads);
  EXPECT_EQ(m->num_kv_heads, c.num_kv_heads);
  EXPECT_EQ(m->head_dim, c.head_dim);
  EXPECT_EQ(m->max_context_tokens, c.max_seq_len);
  EXPECT_EQ(m->num_parameters, c.NumParameters());
  EXPECT_EQ(m->weight_bytes, tiny->WeightBytes());
  EXPECT_EQ(m->dtype, DType::kF16) << "auto = llama.cpp's f16 cache";
  EXPECT_EQ(m->weights_note, "GGUF tensors, mostly f32");
}

// A q4_k_m file (tiny: q5_0 and q8_0 fallbacks, f32 norms) reports its real bytes by type.
TEST(PlanModelTest, GgufMixedTypesReportBytesByType) {
  ScratchDir dir;
  SyntheticModelOptions so;
  so.preset = "tiny";
  so.file_type = QuantFileType::kQ4_K_M;
  StatusOr<LoadedModel> tiny = MakeSyntheticModel(so);
  ASSERT_TRUE(tiny.ok()) << tiny.status().message();
  SaveGgufOptions save;
  save.file_type = QuantFileType::kQ4_K_M;
  ASSERT_TRUE(SaveGgufModel(*tiny, dir.file("tiny.gguf"), save).ok());
  StatusOr<PlanModel> m = LoadPlanModel(dir.file("tiny.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->weight_bytes, tiny->WeightBytes());
  ASSERT_EQ(m->weight_bytes_by_type.size(), 3u);
  EXPECT_EQ(m->weight_bytes_by_type[0].first, DType::kQ5_0);
  EXPECT_EQ(m->weight_bytes_by_type[1].first, DType::kQ8_0);
  EXPECT_EQ(m->weight_bytes_by_type[2].first, DType::kF32);
  EXPECT_EQ(m->weight_bytes_by_type[0].second + m->weight_bytes_by_type[1].second +
                m->weight_bytes_by_type[2].second,
            m->weight_bytes);
  EXPECT_EQ(m->weights_note.rfind("GGUF tensors, mostly q5_0 (q5_0 ", 0), 0u) << m->weights_note;
  const nlohmann::json j = nlohmann::json::parse(FormatPlanJson(Plan(*m, Options(1000, "f16"))));
  EXPECT_EQ(j["model"]["weight_bytes_by_type"]["q5_0"], m->weight_bytes_by_type[0].second);
  EXPECT_EQ(j["model"]["weight_bytes_by_type"]["f32"], m->weight_bytes_by_type[2].second);
}

TEST(PlanModelTest, GgufDeepSeek2IsMla) {
  ScratchDir dir;
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("deepseek2"));
  w.Set("general.name", GgufValue::String("DeepSeek-V2-Lite"));
  w.Set("deepseek2.block_count", GgufValue::U32(27));
  w.Set("deepseek2.context_length", GgufValue::U32(163840));
  w.Set("deepseek2.embedding_length", GgufValue::U32(2048));
  w.Set("deepseek2.attention.head_count", GgufValue::U32(16));
  w.Set("deepseek2.attention.head_count_kv", GgufValue::U32(16));
  w.Set("deepseek2.attention.key_length", GgufValue::U32(192));
  w.Set("deepseek2.attention.kv_lora_rank", GgufValue::U32(512));
  w.Set("deepseek2.rope.dimension_count", GgufValue::U32(64));
  ASSERT_TRUE(w.Write(dir.file("ds.gguf")).ok());
  StatusOr<PlanModel> m = LoadPlanModel(dir.file("ds.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->name, "DeepSeek-V2-Lite");
  EXPECT_EQ(m->kv_layout, KvLayout::kMlaLatent);
  EXPECT_EQ(Plan(*m, Options(1000, "bf16")).bytes_per_token, 31104);
}

// What `kvserve plan -m FILE` says a token costs is what the server's cache allocates for the
// same file (the start-up banner prints LlamaModel::kv_spec), for an MLA file of either
// layout in every KV dtype.
TEST(PlanModelTest, MlaFileBytesPerTokenEqualTheModelsCache) {
  ScratchDir dir;
  for (const char* preset : {"deepseek-v2-tiny", "deepseek-v3-tiny"}) {
    SyntheticModelOptions o;
    o.preset = preset;
    StatusOr<LoadedModel> m = MakeSyntheticModel(o);
    ASSERT_TRUE(m.ok());
    const std::string path = dir.file(std::string(preset) + ".gguf");
    ASSERT_TRUE(SaveGgufModel(*m, path).ok());
    StatusOr<PlanModel> plan = LoadPlanModel(path);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    StatusOr<LoadedModel> loaded = LoadGgufModel(path, {});
    ASSERT_TRUE(loaded.ok());
    auto model = LlamaModel::Create(std::move(loaded).value());
    ASSERT_TRUE(model.ok());
    for (const char* dtype : {"f32", "f16", "bf16", "fp8_e4m3", "int8"}) {
      const int64_t planned = Plan(*plan, Options(1000, dtype)).bytes_per_token;
      const DType d = ParseKvCacheDtype(dtype, DType::kF32).value();
      EXPECT_EQ(planned, (*model)->kv_spec(d, 16).bytes_per_token()) << preset << " " << dtype;
    }
    EXPECT_EQ(plan->num_parameters, m->config.NumParameters());
  }
}

TEST(PlanModelTest, MissingFilesAreErrors) {
  EXPECT_FALSE(LoadPlanModel("/nonexistent/model.gguf").ok());
  EXPECT_FALSE(LoadPlanModel("/nonexistent/config.json").ok());
  ScratchDir dir;
  EXPECT_FALSE(LoadPlanModel(dir.path()).ok()) << "a folder without config.json";
}

// ---------------------------------------------------------------------------------------------
// JSON.

TEST(PlanJsonTest, OneObjectWithTheFigures) {
  PlanOptions o = Options(64000, "bf16");
  o.memory = "200GB";
  const PlanResult p = Plan(Preset("llama-3.3-70b"), o);
  const json j = json::parse(FormatPlanJson(p));
  EXPECT_EQ(j["bytes_per_token"], 327680);
  EXPECT_EQ(j["kv_bytes_per_request"], 20971520000);
  EXPECT_EQ(j["kv_per_request"], "20.97 GB (19.53 GiB)");
  EXPECT_EQ(j["kv_cache_dtype"], "bf16");
  EXPECT_EQ(j["block_size"], 16);
  EXPECT_EQ(j["context_tokens"], 64000);
  EXPECT_EQ(j["max_model_len"], 131072);
  EXPECT_EQ(j["memory_bytes"], 200000000000);
  EXPECT_EQ(j["weight_bytes"], 2 * 70553706496);
  EXPECT_EQ(j["kv_budget_bytes"], 200000000000 - 2 * 70553706496);
  EXPECT_EQ(j["requests_paged"], p.requests_paged);
  EXPECT_EQ(j["requests_contiguous"], p.requests_contiguous);
  EXPECT_EQ(j["model"]["num_layers"], 80);
  EXPECT_EQ(j["model"]["kv_layout"], "separate_kv");
  ASSERT_EQ(j["dtypes"].size(), 6u);
  EXPECT_EQ(j["dtypes"][0]["dtype"], "f32");
  EXPECT_EQ(j["dtypes"][3]["dtype"], "fp8_e4m3");
  EXPECT_EQ(j["dtypes"][3]["bytes_per_token"], 163840);
  EXPECT_EQ(j["dtypes"][5]["dtype"], "int8");
  EXPECT_EQ(j["dtypes"][5]["bytes_per_token"], 163840 + 80 * 16 * 4);
  // Without a budget the counts are null, not made up.
  const json k = json::parse(FormatPlanJson(Plan(Preset("llama-3.3-70b"), Options(64000))));
  EXPECT_TRUE(k["requests_paged"].is_null());
  EXPECT_TRUE(k["kv_budget_bytes"].is_null());
  EXPECT_TRUE(k["dtypes"][0]["requests_paged"].is_null());
}

}  // namespace
}  // namespace kvserve::plan
