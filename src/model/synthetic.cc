#include "model/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <map>
#include <set>
#include <unordered_set>

#include "base/hash.h"
#include "base/check.h"
#include "base/system_memory.h"
#include "base/thread_pool.h"
#include "kv/kv_spec.h"
#include "model/model_tensors.h"
#include "tokenizer/bpe.h"

namespace kvserve {
namespace {

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Small fast generator (splitmix64 sequence); deterministic and cheap to seed per row.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += 0x9e3779b97f4a7c15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // n uniform values in [-amp, amp).
  void FillUniform(float* out, int64_t n, float amp) {
    const float scale = 2.0f * amp * 0x1.0p-24f;
    int64_t i = 0;
    for (; i + 1 < n; i += 2) {
      uint64_t r = Next();
      out[i] = static_cast<float>(r & 0xffffff) * scale - amp;
      out[i + 1] = static_cast<float>((r >> 32) & 0xffffff) * scale - amp;
    }
    if (i < n) out[i] = static_cast<float>(Next() & 0xffffff) * scale - amp;
  }

 private:
  uint64_t state_;
};

ModelConfig BaseConfig(const std::string& name, const std::string& arch) {
  ModelConfig c;
  c.name = name;
  c.architecture = arch;
  c.rope.layout = arch == "qwen2" ? RopeLayout::kNeox : RopeLayout::kInterleaved;
  c.qkv_bias = arch == "qwen2";
  return c;
}

void FinishConfig(ModelConfig* c) {
  if (c->is_mla()) {  // DeepSeek: per-head key nope + rope, RoPE on the rope part only
    c->head_dim = c->mla.qk_nope_head_dim + c->mla.qk_rope_head_dim;
    c->num_kv_heads = c->num_heads;
    c->rope.head_dim = c->head_dim;
    c->rope.rotary_dim = c->mla.qk_rope_head_dim;
    return;
  }
  if (c->head_dim == 0) c->head_dim = c->hidden_dim / c->num_heads;
  c->rope.head_dim = c->head_dim;
  c->rope.rotary_dim = c->head_dim;
}

// DeepSeek V2/V3 structure: MLA attention (W_UK / W_UV stored split, as llama.cpp's MLA files),
// MoE layers after `first_dense` dense ones.
ModelConfig DeepseekConfig(const std::string& name, int64_t vocab, int64_t hidden, int64_t ffn,
                           int64_t layers, int64_t heads, MlaConfig mla, MoeConfig moe) {
  ModelConfig c = BaseConfig(name, "deepseek2");
  c.vocab_size = vocab;
  c.hidden_dim = hidden;
  c.ffn_dim = ffn;
  c.num_layers = layers;
  c.num_heads = heads;
  c.mla = mla;
  c.mla.split_kv_b = true;
  c.moe = moe;
  c.rope.theta = 10000.0f;
  c.norm_eps = 1e-6f;
  c.tied_embeddings = false;
  return c;
}

// Our own sample of plain English for the first merges of the synthetic vocabulary.
constexpr char kSyntheticCorpus[] =
    "once upon a time there was a little girl who lived in a small house near the forest "
    "every morning she went outside to play with her dog and they ran through the green "
    "grass until the sun was high in the sky one day she found a shiny stone under an old "
    "tree and she wanted to show it to her mother so she ran back home as fast as she could "
    "her mother smiled and said that is a very pretty stone you should keep it in a safe "
    "place the girl was happy and she put the stone in a box next to her bed that night she "
    "dreamed about the forest and the tree and all the things she would find the next day "
    "the server reads the model and the tokens then it writes the answer for each request "
    "people like to learn new things because they want to understand the world around them "
    "when it is cold outside we stay inside and read books or talk with our friends";

// Like Tensor::Allocate but without zero-filling (every byte is written right after): one
// pass over the memory instead of two for multi-gigabyte models.
Tensor AllocateUninitialized(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  size_t bytes = static_cast<size_t>((t.num_bytes() + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
  KV_CHECK(p != nullptr) << "out of memory allocating " << bytes << " bytes";
  t.owner = std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  t.data = p;
  return t;
}

// Which byte strings may become merged tokens: an optional leading space and lowercase letters.
bool IsWordish(const std::string& bytes) {
  size_t i = 0;
  if (!bytes.empty() && bytes[0] == ' ') i = 1;
  if (i == bytes.size()) return i == 1;  // " " alone
  for (; i < bytes.size(); ++i) {
    if (bytes[i] < 'a' || bytes[i] > 'z') return false;
  }
  return true;
}

}  // namespace

std::vector<std::string> SyntheticPresetNames() {
  return {"tiny",           "tiny-k",           "smollm2-135m",    "qwen2.5-0.5b",    "llama-3.2-1b",
          "deepseek-v2-tiny", "deepseek-v3-tiny", "deepseek-v2-lite", "bert-tiny",
          "all-minilm-l6-v2", "bge-small-en-v1.5"};
}

namespace {

// BERT encoders as llama.cpp stores them (architecture bert): LayerNorm eps 1e-12,
// bidirectional, two token types, no RoPE.
ModelConfig BertConfig(const std::string& name, int64_t vocab, int64_t hidden, int64_t ffn,
                       int64_t layers, int64_t heads, int64_t context, PoolingType pooling) {
  ModelConfig c = BaseConfig(name, "bert");
  c.vocab_size = vocab;
  c.hidden_dim = hidden;
  c.ffn_dim = ffn;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = heads;
  c.max_seq_len = context;
  c.norm_eps = 1e-12f;
  c.rope.theta = 10000.0f;  // unused
  c.causal = false;
  c.token_type_count = 2;
  c.pooling = pooling;
  return c;
}

}  // namespace

StatusOr<ModelConfig> SyntheticPresetConfig(const std::string& preset) {
  ModelConfig c;
  if (preset == "tiny" || preset == "tiny-k") {
    c = BaseConfig(preset, "llama");
    c.vocab_size = 512;
    c.hidden_dim = 128;
    c.ffn_dim = 352;
    c.num_layers = 4;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.max_seq_len = 2048;
    c.rope.theta = 10000.0f;
    c.norm_eps = 1e-5f;
    c.tied_embeddings = false;
    if (preset == "tiny-k") {
      // Every matrix row a multiple of 256, so each k-quant type is used as named (tiny's rows
      // of 128 and 352 make the k-quant mixes fall back to 32-value types).
      c.hidden_dim = 256;
      c.ffn_dim = 768;
    }
  } else if (preset == "smollm2-135m") {  // HuggingFaceTB/SmolLM2-135M config.json
    c = BaseConfig("SmolLM2-135M", "llama");
    c.vocab_size = 49152;
    c.hidden_dim = 576;
    c.ffn_dim = 1536;
    c.num_layers = 30;
    c.num_heads = 9;
    c.num_kv_heads = 3;
    c.head_dim = 64;
    c.max_seq_len = 8192;
    c.rope.theta = 100000.0f;
    c.norm_eps = 1e-5f;
    c.tied_embeddings = true;
  } else if (preset == "qwen2.5-0.5b") {  // Qwen/Qwen2.5-0.5B config.json
    c = BaseConfig("Qwen2.5-0.5B", "qwen2");
    c.vocab_size = 151936;
    c.hidden_dim = 896;
    c.ffn_dim = 4864;
    c.num_layers = 24;
    c.num_heads = 14;
    c.num_kv_heads = 2;
    c.max_seq_len = 32768;
    c.rope.theta = 1000000.0f;
    c.norm_eps = 1e-6f;
    c.tied_embeddings = true;
  } else if (preset == "llama-3.2-1b") {  // meta-llama/Llama-3.2-1B config.json
    c = BaseConfig("Llama-3.2-1B", "llama");
    c.vocab_size = 128256;
    c.hidden_dim = 2048;
    c.ffn_dim = 8192;
    c.num_layers = 16;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 64;
    c.max_seq_len = 131072;
    c.rope.theta = 500000.0f;
    c.rope.scaling = RopeScalingType::kLlama3;
    c.rope.scaling_factor = 32.0f;
    c.rope.llama3_low_freq_factor = 1.0f;
    c.rope.llama3_high_freq_factor = 4.0f;
    c.rope.llama3_original_max_positions = 8192;
    c.norm_eps = 1e-5f;
    c.tied_embeddings = true;
  } else if (preset == "bert-tiny") {  // for tests: BERT's structure, small
    c = BertConfig("bert-tiny", 300, 32, 64, 2, 4, 32, PoolingType::kMean);
  } else if (preset == "all-minilm-l6-v2") {  // sentence-transformers/all-MiniLM-L6-v2
    c = BertConfig("all-MiniLM-L6-v2", 30522, 384, 1536, 6, 12, 512, PoolingType::kMean);
  } else if (preset == "bge-small-en-v1.5") {  // BAAI/bge-small-en-v1.5
    c = BertConfig("bge-small-en-v1.5", 30522, 384, 1536, 12, 12, 512, PoolingType::kCls);
  } else if (preset == "deepseek-v2-tiny") {  // V2's structure, small: softmax routing
    MlaConfig mla{.q_lora_rank = 0, .kv_lora_rank = 64, .qk_nope_head_dim = 32,
                  .qk_rope_head_dim = 16, .v_head_dim = 32};
    MoeConfig moe;
    moe.num_experts = 8;
    moe.num_experts_used = 2;
    moe.num_shared_experts = 2;
    moe.expert_ffn_dim = 64;
    moe.first_dense_layers = 1;
    moe.gating = ExpertGating::kSoftmax;
    c = DeepseekConfig("deepseek-v2-tiny", 512, 128, 256, 4, 4, mla, moe);
    c.max_seq_len = 2048;
  } else if (preset == "deepseek-v3-tiny") {  // V3's: q LoRA, sigmoid + bias, expert groups
    MlaConfig mla{.q_lora_rank = 96, .kv_lora_rank = 64, .qk_nope_head_dim = 32,
                  .qk_rope_head_dim = 16, .v_head_dim = 32};
    MoeConfig moe;
    moe.num_experts = 16;
    moe.num_experts_used = 4;
    moe.num_shared_experts = 1;
    moe.expert_ffn_dim = 64;
    moe.first_dense_layers = 1;
    moe.gating = ExpertGating::kSigmoid;
    moe.selection_bias = true;
    moe.normalize_weights = true;
    moe.weights_scale = 2.5f;
    moe.num_groups = 4;
    moe.num_groups_used = 2;
    c = DeepseekConfig("deepseek-v3-tiny", 512, 128, 256, 4, 4, mla, moe);
    c.max_seq_len = 2048;
    // YaRN as V3 has it (factor 40 over 4096 tokens there), scaled down.
    c.rope.scaling = RopeScalingType::kYarn;
    c.rope.scaling_factor = 4.0f;
    c.rope.yarn_original_max_positions = 512;
    c.mla.yarn_log_multiplier = 1.0f;
  } else if (preset == "deepseek-v3") {  // deepseek-ai/DeepSeek-V3 config.json (R1: the same)
    // Without its multi-token-prediction layer. For the planner: 671B parameters are more
    // than a machine here can make (MakeSyntheticModel refuses what does not fit).
    MlaConfig mla{.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_nope_head_dim = 128,
                  .qk_rope_head_dim = 64, .v_head_dim = 128};
    MoeConfig moe;
    moe.num_experts = 256;
    moe.num_experts_used = 8;
    moe.num_shared_experts = 1;
    moe.expert_ffn_dim = 2048;
    moe.first_dense_layers = 3;
    moe.gating = ExpertGating::kSigmoid;
    moe.selection_bias = true;
    moe.normalize_weights = true;
    moe.weights_scale = 2.5f;
    moe.num_groups = 8;
    moe.num_groups_used = 4;
    c = DeepseekConfig("DeepSeek-V3", 129280, 7168, 18432, 61, 128, mla, moe);
    c.max_seq_len = 163840;
    c.rope.scaling = RopeScalingType::kYarn;
    c.rope.scaling_factor = 40.0f;
    c.rope.yarn_original_max_positions = 4096;
    c.mla.yarn_log_multiplier = 1.0f;
  } else if (preset == "deepseek-v2-lite") {  // deepseek-ai/DeepSeek-V2-Lite config.json
    MlaConfig mla{.q_lora_rank = 0, .kv_lora_rank = 512, .qk_nope_head_dim = 128,
                  .qk_rope_head_dim = 64, .v_head_dim = 128};
    MoeConfig moe;
    moe.num_experts = 64;
    moe.num_experts_used = 6;
    moe.num_shared_experts = 2;
    moe.expert_ffn_dim = 1408;
    moe.first_dense_layers = 1;
    moe.gating = ExpertGating::kSoftmax;
    c = DeepseekConfig("DeepSeek-V2-Lite", 102400, 2048, 10944, 27, 16, mla, moe);
    // YaRN extends the 4096-token RoPE 40 times (rope_scaling: beta_fast 32, beta_slow 1,
    // mscale = mscale_all_dim = 0.707).
    c.max_seq_len = 163840;
    c.rope.scaling = RopeScalingType::kYarn;
    c.rope.scaling_factor = 40.0f;
    c.rope.yarn_original_max_positions = 4096;
    c.mla.yarn_log_multiplier = 0.707f;
  } else {
    std::string names;
    for (const auto& n : SyntheticPresetNames()) names += (names.empty() ? "" : ", ") + n;
    return InvalidArgumentError("unknown synthetic preset '" + preset + "' (known: " + names +
                                ")");
  }
  FinishConfig(&c);
  return c;
}

StatusOr<VocabSpec> MakeSyntheticWordPieceVocab(int64_t vocab_size) {
  if (vocab_size < 300 || vocab_size > (1 << 22)) {
    return InvalidArgumentError("synthetic WordPiece vocabulary size must be in [300, 2^22], got " +
                                std::to_string(vocab_size));
  }
  const std::string u = "\xE2\x96\x81";  // U+2581: a word-initial piece in llama.cpp's form
  VocabSpec spec;
  spec.model = VocabSpec::Model::kWpm;
  std::unordered_set<std::string> seen;
  auto add = [&](const std::string& text, TokenType type) {
    if (static_cast<int64_t>(spec.tokens.size()) >= vocab_size || !seen.insert(text).second) return;
    spec.tokens.push_back(text);
    spec.token_types.push_back(type);
  };
  add("[PAD]", TokenType::kControl);
  for (int i = 1; i < 100; ++i) add("[unused" + std::to_string(i - 1) + "]", TokenType::kNormal);
  add("[UNK]", TokenType::kControl);
  add("[CLS]", TokenType::kControl);
  add("[SEP]", TokenType::kControl);
  add("[MASK]", TokenType::kControl);
  const std::string singles = "abcdefghijklmnopqrstuvwxyz0123456789!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
  for (char ch : singles) add(u + std::string(1, ch), TokenType::kNormal);
  for (char ch : singles) add(std::string(1, ch), TokenType::kNormal);
  static const char* const kWords[] = {
      "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be",
      "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have",
      "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has",
      "there", "been", "if", "more", "when", "will", "would", "who", "so", "no", "what", "up",
      "out", "about", "time", "into", "some", "than", "them", "other", "only", "like", "new",
      "how", "where", "refund", "window", "order", "orders", "weather", "city", "paris", "user",
      "question", "answer", "cache", "model", "token", "story", "once", "upon", "day", "said"};
  for (const char* w : kWords) add(u + w, TokenType::kNormal);
  for (const char* s : {"ing", "ed", "er", "es", "ly", "tion", "ment", "ness", "able", "ful"}) {
    add(s, TokenType::kNormal);
  }
  // Filler: two- and three-letter pieces, word-initial and continuing, in a fixed order.
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  for (size_t len = 2; static_cast<int64_t>(spec.tokens.size()) < vocab_size && len <= 4; ++len) {
    std::vector<size_t> idx(len, 0);
    while (static_cast<int64_t>(spec.tokens.size()) < vocab_size) {
      std::string piece;
      for (size_t i : idx) piece += letters[i];
      add(u + piece, TokenType::kNormal);
      add(piece, TokenType::kNormal);
      size_t k = len;
      while (k > 0 && ++idx[k - 1] == letters.size()) idx[--k] = 0;
      if (k == 0) break;
    }
  }
  if (static_cast<int64_t>(spec.tokens.size()) != vocab_size) {
    return InvalidArgumentError("synthetic WordPiece vocabulary: could not make " +
                                std::to_string(vocab_size) + " distinct pieces");
  }
  spec.unk_id = 100;
  spec.bos_id = 101;
  spec.cls_id = 101;
  spec.sep_id = 102;
  spec.pad_id = 0;
  spec.mask_id = 103;
  spec.add_bos = true;
  spec.add_eos = false;
  return spec;
}

StatusOr<VocabSpec> MakeSyntheticVocab(int64_t vocab_size, uint64_t seed) {
  if (vocab_size < 258 || vocab_size > (1 << 24)) {
    return InvalidArgumentError("synthetic vocabulary size must be in [258, 2^24], got " +
                                std::to_string(vocab_size));
  }
  VocabSpec spec;
  spec.model = VocabSpec::Model::kBpe;
  spec.pre = "gpt-2";
  spec.add_bos = false;
  spec.add_eos = false;
  spec.add_space_prefix = false;
  spec.byte_fallback = false;
  std::vector<std::string> bytes_of;  // raw bytes of each token
  std::unordered_set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    std::string raw(1, static_cast<char>(b));
    bytes_of.push_back(raw);
    seen.insert(raw);
    spec.tokens.push_back(ByteLevelEncode(raw));
  }
  // Pools of tokens that may be merged: words (no leading space) as right parts, anything
  // word-like as left parts. Letters come in English frequency order and tokens are picked
  // with a bias toward the front of each pool.
  std::vector<int32_t> left_pool;
  std::vector<int32_t> right_pool;
  left_pool.push_back(' ');
  for (char ch : std::string("etaoinshrdlcumwfgypbvkjxqz")) {
    left_pool.push_back(static_cast<unsigned char>(ch));
    right_pool.push_back(static_cast<unsigned char>(ch));
  }
  auto add_token = [&](int32_t l, int32_t r) {
    const std::string raw = bytes_of[l] + bytes_of[r];
    const int32_t id = static_cast<int32_t>(bytes_of.size());
    bytes_of.push_back(raw);
    spec.merges.push_back(spec.tokens[l] + " " + spec.tokens[r]);
    spec.tokens.push_back(ByteLevelEncode(raw));
    if (IsWordish(raw)) {
      left_pool.push_back(id);
      if (raw[0] != ' ') right_pool.push_back(id);
    }
  };
  const int64_t num_merges = vocab_size - 257;
  // First merges: byte-pair training on a small built-in English sample, so that ordinary
  // text compresses like it would with a real vocabulary.
  {
    std::vector<std::vector<int32_t>> words;
    std::string word;
    for (char ch : std::string(kSyntheticCorpus) + " ") {
      if (ch >= 'a' && ch <= 'z') {
        word.push_back(ch);
      } else if (!word.empty()) {
        std::vector<int32_t> w = {' '};
        for (char x : word) w.push_back(static_cast<unsigned char>(x));
        words.push_back(std::move(w));
        word.clear();
      }
    }
    std::set<std::pair<int32_t, int32_t>> banned;  // pairs whose text already is a token
    while (static_cast<int64_t>(spec.merges.size()) < num_merges) {
      std::map<std::pair<int32_t, int32_t>, int> counts;
      for (const auto& w : words) {
        for (size_t i = 0; i + 1 < w.size(); ++i) ++counts[{w[i], w[i + 1]}];
      }
      std::pair<int32_t, int32_t> best{-1, -1};
      int best_count = 1;
      for (const auto& [pair, count] : counts) {
        if (count > best_count && !banned.count(pair)) {
          best = pair;
          best_count = count;
        }
      }
      if (best.first < 0) break;
      const int32_t id = static_cast<int32_t>(bytes_of.size());
      if (!seen.insert(bytes_of[best.first] + bytes_of[best.second]).second) {
        banned.insert(best);
        continue;
      }
      add_token(best.first, best.second);
      for (auto& w : words) {
        std::vector<int32_t> merged;
        for (size_t i = 0; i < w.size(); ++i) {
          if (i + 1 < w.size() && w[i] == best.first && w[i + 1] == best.second) {
            merged.push_back(id);
            ++i;
          } else {
            merged.push_back(w[i]);
          }
        }
        w = std::move(merged);
      }
    }
  }
  Rng rng(SplitMix64(seed ^ 0x766f636162ull));
  int64_t failures = 0;
  while (static_cast<int64_t>(spec.merges.size()) < num_merges) {
    double u = rng.Uniform();
    double v = rng.Uniform();
    // Mostly biased toward early (frequent, short) tokens; sometimes uniform so that late
    // merges do not keep hitting pairs that already exist.
    if (failures % 2 == 1) {
      u = std::sqrt(u);
      v = std::sqrt(v);
    }
    int32_t l = left_pool[static_cast<size_t>(u * u * static_cast<double>(left_pool.size()))];
    int32_t r = right_pool[static_cast<size_t>(v * v * static_cast<double>(right_pool.size()))];
    std::string raw = bytes_of[l] + bytes_of[r];
    if (raw.size() > 16 || !seen.insert(raw).second) {
      KV_CHECK(++failures < (int64_t{1} << 28)) << "synthetic vocabulary generation stuck";
      continue;
    }
    add_token(l, r);
  }
  spec.token_types.assign(spec.tokens.size(), TokenType::kNormal);
  spec.tokens.push_back("<|endoftext|>");
  spec.token_types.push_back(TokenType::kControl);
  spec.bos_id = spec.eos_id = static_cast<TokenId>(spec.tokens.size() - 1);
  return spec;
}

bool IsSyntheticWeightDType(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 ||
         IsGgmlBlockType(dtype);
}

StatusOr<DType> ParseSyntheticWeightDType(const std::string& name) {
  const std::optional<DType> dtype = ParseDType(name);
  if (!dtype.has_value() || !IsSyntheticWeightDType(*dtype)) {
    return InvalidArgumentError(
        "--dtype must be f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, "
        "q5_k or q6_k, got '" + name + "'");
  }
  return *dtype;
}

StatusOr<LoadedModel> MakeSyntheticModel(const SyntheticModelOptions& options,
                                         const std::function<void(int64_t, int64_t)>& progress) {
  KV_ASSIGN_OR_RETURN(ModelConfig config, SyntheticPresetConfig(options.preset));
  const DType wtype = options.dtype;
  if (!options.file_type && !IsSyntheticWeightDType(wtype)) {
    return InvalidArgumentError(std::string("synthetic models support f32, f16, bf16, q8_0 and "
                                            "q4_0 ... q6_k weights, not ") + DTypeName(wtype));
  }
  const std::string type_name =
      options.file_type ? QuantFileTypeName(*options.file_type) : DTypeName(wtype);
  LoadedModel model;
  if (options.vocab.has_value()) {
    if (options.vocab->tokens.empty()) {
      return InvalidArgumentError("the vocabulary given for the synthetic model is empty");
    }
    model.vocab = *options.vocab;
    config.vocab_size = static_cast<int64_t>(options.vocab->tokens.size());
  } else {
    if (config.is_encoder()) {
      KV_ASSIGN_OR_RETURN(model.vocab, MakeSyntheticWordPieceVocab(config.vocab_size));
    } else {
      KV_ASSIGN_OR_RETURN(model.vocab, MakeSyntheticVocab(config.vocab_size, options.seed));
    }
  }
  model.format = "synthetic";
  model.path = "synthetic:" + options.preset;
  config.name += " (synthetic)";

  // Tensors in llama.cpp order; kind 0 = matrix (options.dtype), 1 = norm, 2 = bias (f32),
  // 3 = a table kept in f32 (BERT's token types and positions).
  struct Spec {
    std::string name;
    std::vector<int64_t> shape;
    int kind;
  };
  std::vector<Spec> specs;
  for (const ExpectedTensor& e : ExpectedModelTensors(config)) {
    int kind = e.keep_f32 ? 3 : !e.vector ? 0 : (e.name.find(".bias") != std::string::npos ? 2 : 1);
    specs.push_back({e.name, e.shape, kind});
  }
  const QuantMixModel mix_model = QuantMixModelFor(config);
  auto dtype_of = [&](const Spec& s) {
    if (s.kind != 0) return DType::kF32;
    return options.file_type ? QuantMixDType(*options.file_type, mix_model, s.name, s.shape)
                             : wtype;
  };
  int64_t total_bytes = 0;
  for (const Spec& s : specs) {
    DType dt = dtype_of(s);
    if (s.shape.back() % DTypeBlockElems(dt) != 0) {
      return InvalidArgumentError("tensor " + s.name + " has rows of " +
                                  std::to_string(s.shape.back()) + " values, not a multiple of " +
                                  std::to_string(DTypeBlockElems(dt)) + " as " + DTypeName(dt) +
                                  " needs");
    }
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < s.shape.size(); ++i) rows *= s.shape[i];
    total_bytes += DTypeRowBytes(dt, s.shape.back()) * rows;
  }
  if (const int64_t available = AvailableMemoryBytes(); available > 0 && total_bytes > available) {
    return ResourceExhaustedError("the " + options.preset + " preset in " + type_name +
                                  " needs " + FormatBytesDecimalAndBinary(
                                                  static_cast<double>(total_bytes)) +
                                  " of memory; this machine has " +
                                  FormatBytesDecimalAndBinary(static_cast<double>(available)) +
                                  " available");
  }

  // Uniform in [-a, a) has std a / sqrt(3): a = 0.02 * sqrt(3) gives std 0.02.
  const float amp = 0.02f * std::sqrt(3.0f);
  ThreadPool pool(options.num_threads > 0 ? options.num_threads
                                          : std::clamp(ThreadPool::HardwareThreads(), 1, 16));
  const uint64_t seed = SplitMix64(options.seed);
  int64_t done_bytes = 0;
  for (const Spec& s : specs) {
    DType dt = dtype_of(s);
    Tensor t = AllocateUninitialized(dt, s.shape);
    if (s.kind == 1) {
      float* w = static_cast<float*>(t.mutable_data());
      std::fill(w, w + t.num_elements(), 1.0f);
    } else {
      const uint64_t tensor_seed = SplitMix64(seed ^ Fnv1a(s.name));
      const int64_t cols = t.cols();
      pool.ParallelFor(t.rows(), std::max<int64_t>(1, 16384 / cols), [&](int64_t b, int64_t e) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = b; r < e; ++r) {
          Rng rng(SplitMix64(tensor_seed + static_cast<uint64_t>(r) * 0x9e3779b97f4a7c15ull));
          if (dt == DType::kQ8_0) {
            // Quantized uniform values directly: int8 uniform in [-127, 127], scale amp / 127.
            BlockQ8_0* blocks = static_cast<BlockQ8_0*>(const_cast<void*>(t.row(r)));
            const uint16_t d = Fp32ToFp16(amp / 127.0f);
            for (int64_t i = 0; i < cols / kQ8_0BlockElems; ++i) {
              blocks[i].d = d;
              for (int j = 0; j < kQ8_0BlockElems; j += 8) {
                uint64_t bits = rng.Next();
                for (int k = 0; k < 8; ++k) {
                  blocks[i].qs[j + k] =
                      static_cast<int8_t>(static_cast<int>(((bits >> (8 * k)) & 0xff) * 255 >> 8) - 127);
                }
              }
            }
            continue;
          }
          rng.FillUniform(row.data(), cols, amp);
          QuantizeRow(dt, row.data(), const_cast<void*>(t.row(r)), cols);
        }
      });
    }
    done_bytes += t.num_bytes();
    model.tensors.emplace(s.name, std::move(t));
    if (progress) progress(done_bytes, total_bytes);
  }
  model.config = std::move(config);
  return model;
}

LoadedModel MakeBuiltinDefaultModel() {
  StatusOr<LoadedModel> model = MakeSyntheticModel(SyntheticModelOptions{});
  KV_CHECK(model.ok()) << model.status().ToString();
  model->format = "builtin";
  model->path = "builtin";
  model->config.name = "builtin-tiny (random weights)";
  return std::move(model).value();
}

std::vector<TokenId> SyntheticTokenIds(int64_t num_tokens, int64_t vocab_size) {
  std::vector<TokenId> ids;
  uint64_t x = 0x9E3779B97F4A7C15ull;
  const int64_t lo = vocab_size > 64 ? 16 : 0;
  for (int64_t i = 0; i < num_tokens; ++i) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    ids.push_back(static_cast<TokenId>(
        lo + static_cast<int64_t>(z % static_cast<uint64_t>(vocab_size - lo))));
  }
  return ids;
}

}  // namespace kvserve
