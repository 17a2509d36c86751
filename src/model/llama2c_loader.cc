// llama2.c checkpoints (karpathy/llama2.c export.py):
//   legacy (version 0): 7 int32 {dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
//     seq_len} (vocab_size < 0: an untied classifier follows), then float32 tensors:
//     token_embedding, rms_att[L], wq[L], wk[L], wv[L], wo[L], rms_ffn[L], w1[L], w2[L], w3[L],
//     rms_final, freq_cis_real/imag [seq_len, head_size/2] (ignored), wcls when untied.
//   version 1 ("ak42" magic, 256-byte header {magic, version, 7 params, uint8 shared}): float32
//     rms_att[L], rms_ffn[L], rms_final, token_embedding, wq[L], wk[L], wv[L], wo[L], w1[L],
//     w2[L], w3[L], wcls when not shared.
//   version 2 (header as v1 plus int32 group_size after the flag): float32 norms as v1, then
//     each of token_embedding, wq[L], wk[L], wv[L], wo[L], w1[L], w2[L], w3[L], (wcls) as int8
//     values followed by one float32 scale per group of group_size values (in flat order).
//
// Q8_0 conversion: where every 32-value block of a row lies inside one export group (row
// length a multiple of 32 and group_size a multiple of 32) the int8 values are kept and the
// float32 group scale is rounded to fp16 (GGML Q8_0 blocks): each weight then differs from the
// exported int8 * fp32 scale by at most 2^-11 relative (fp16 round to nearest; less precise
// only for scales below 2^-14, i.e. groups whose largest |w| is under ~0.008). Other tensors
// (e.g. stories260K's w2, rows of 172) and tensors with a scale that fp16 cannot hold are
// dequantized exactly to float32 instead.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/logging.h"
#include "model/model_loader.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

constexpr uint32_t kLlama2cMagic = 0x616b3432;  // "ak42"
constexpr int64_t kHeaderBytesV12 = 256;
constexpr int64_t kLegacyHeaderBytes = 7 * 4;

struct MappedFile {
  const uint8_t* data = nullptr;
  int64_t size = 0;
  std::shared_ptr<const void> owner;
};

StatusOr<MappedFile> MapFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFoundError("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError("'" + path + "' is not a regular file");
  }
  MappedFile file;
  file.size = st.st_size;
  if (file.size < kLegacyHeaderBytes) {
    ::close(fd);
    return InvalidArgumentError("llama2.c checkpoint '" + path + "' is too small (" +
                                std::to_string(file.size) + " bytes)");
  }
  void* p = ::mmap(nullptr, static_cast<size_t>(file.size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return InternalError("mmap '" + path + "': " + std::strerror(errno));
  size_t len = static_cast<size_t>(file.size);
  file.owner = std::shared_ptr<const void>(p, [len](const void* q) {
    ::munmap(const_cast<void*>(q), len);
  });
  file.data = static_cast<const uint8_t*>(p);
  return file;
}

int32_t ReadI32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

struct Header {
  int version = 0;  // 0 legacy, 1 float32 "ak42", 2 Q8_0 "ak42"
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
  bool shared_classifier = true;
  int32_t group_size = 0;
  int64_t data_offset = 0;
};

StatusOr<Header> ParseHeader(const MappedFile& file) {
  Header h;
  const uint8_t* params = file.data;
  if (static_cast<uint32_t>(ReadI32(file.data)) == kLlama2cMagic) {
    if (file.size < kHeaderBytesV12) {
      return InvalidArgumentError("llama2.c export is shorter than its 256-byte header");
    }
    h.version = ReadI32(file.data + 4);
    if (h.version != 1 && h.version != 2) {
      return UnimplementedError("llama2.c export version " + std::to_string(h.version) +
                                " is not supported (only 1 = float32 and 2 = Q8_0)");
    }
    params = file.data + 8;
    h.shared_classifier = file.data[36] != 0;
    if (h.version == 2) h.group_size = ReadI32(file.data + 37);
    h.data_offset = kHeaderBytesV12;
  } else {
    h.data_offset = kLegacyHeaderBytes;
  }
  h.dim = ReadI32(params);
  h.hidden_dim = ReadI32(params + 4);
  h.n_layers = ReadI32(params + 8);
  h.n_heads = ReadI32(params + 12);
  h.n_kv_heads = ReadI32(params + 16);
  h.vocab_size = ReadI32(params + 20);
  h.seq_len = ReadI32(params + 24);
  if (h.version == 0) {
    if (h.vocab_size == INT32_MIN) return InvalidArgumentError("llama2.c header: bad vocab_size");
    h.shared_classifier = h.vocab_size > 0;
    h.vocab_size = h.vocab_size < 0 ? -h.vocab_size : h.vocab_size;
  }
  return h;
}

StatusOr<ModelConfig> ConfigFromHeader(const Header& h, const std::string& path) {
  if (h.dim <= 0 || h.n_heads <= 0 || h.dim % h.n_heads != 0) {
    return InvalidArgumentError("llama2.c header: dim " + std::to_string(h.dim) +
                                " is not a positive multiple of n_heads " +
                                std::to_string(h.n_heads));
  }
  ModelConfig c;
  c.architecture = "llama";
  size_t slash = path.find_last_of('/');
  c.name = slash == std::string::npos ? path : path.substr(slash + 1);
  c.vocab_size = h.vocab_size;
  c.hidden_dim = h.dim;
  c.ffn_dim = h.hidden_dim;
  c.num_layers = h.n_layers;
  c.num_heads = h.n_heads;
  c.num_kv_heads = h.n_kv_heads;
  c.head_dim = h.dim / h.n_heads;
  c.max_seq_len = h.seq_len;
  c.norm_eps = 1e-5f;
  c.rope.head_dim = c.head_dim;
  c.rope.theta = 10000.0f;
  c.rope.layout = RopeLayout::kInterleaved;
  c.tied_embeddings = h.shared_classifier;
  c.qkv_bias = false;
  KV_RETURN_IF_ERROR(c.Validate().WithContext("llama2.c header"));
  return c;
}

// One weight matrix per layer (or the whole-model ones with layer -1), in file order.
struct MatrixSpec {
  std::string name;
  int64_t rows, cols;
};

std::string LayerName(int64_t layer, const char* suffix) {
  return "blk." + std::to_string(layer) + "." + suffix;
}

// The matrices in the order export.py writes them (all layers of wq, then of wk, ...).
std::vector<MatrixSpec> MatricesInFileOrder(const ModelConfig& c, bool include_embedding) {
  const int64_t kv_dim = c.num_kv_heads * c.head_dim;
  const int64_t q_dim = c.num_heads * c.head_dim;
  std::vector<MatrixSpec> out;
  if (include_embedding) out.push_back({"token_embd.weight", c.vocab_size, c.hidden_dim});
  struct PerLayer { const char* suffix; int64_t rows, cols; };
  const PerLayer per_layer[] = {
      {"attn_q.weight", q_dim, c.hidden_dim},     {"attn_k.weight", kv_dim, c.hidden_dim},
      {"attn_v.weight", kv_dim, c.hidden_dim},    {"attn_output.weight", c.hidden_dim, q_dim},
      {"ffn_gate.weight", c.ffn_dim, c.hidden_dim},  // w1
      {"ffn_down.weight", c.hidden_dim, c.ffn_dim},  // w2
      {"ffn_up.weight", c.ffn_dim, c.hidden_dim},    // w3
  };
  for (const PerLayer& p : per_layer) {
    for (int64_t l = 0; l < c.num_layers; ++l) out.push_back({LayerName(l, p.suffix), p.rows, p.cols});
  }
  return out;
}

// Reads consecutive regions of the mapped file; every Take is bounds-checked.
class Cursor {
 public:
  Cursor(const MappedFile& file, int64_t offset) : file_(file), offset_(offset) {}
  StatusOr<const uint8_t*> Take(int64_t num_bytes, const std::string& what) {
    if (num_bytes < 0 || offset_ > file_.size || num_bytes > file_.size - offset_) {
      return DataLossError("llama2.c checkpoint is truncated: " + what + " needs " +
                           std::to_string(num_bytes) + " bytes at offset " +
                           std::to_string(offset_) + " of " + std::to_string(file_.size));
    }
    const uint8_t* p = file_.data + offset_;
    offset_ += num_bytes;
    return p;
  }
  int64_t offset() const { return offset_; }

 private:
  const MappedFile& file_;
  int64_t offset_;
};

Tensor F32View(const MappedFile& file, const uint8_t* p, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.data = p;
  t.owner = file.owner;
  return t;
}

// Converts one exported Q8_0 tensor (int8 values then float32 scales per group of
// `group_size`, flat order) to GGML Q8_0 blocks where exact up to the fp16 scale, else f32.
Tensor ConvertQ80(const int8_t* values, const uint8_t* scale_bytes, int64_t rows, int64_t cols,
                  int64_t group_size) {
  const int64_t num_groups = rows * cols / group_size;
  std::vector<float> scales(static_cast<size_t>(num_groups));
  std::memcpy(scales.data(), scale_bytes, static_cast<size_t>(num_groups) * 4);
  bool blocks_ok = cols % kQ8_0BlockElems == 0 && group_size % kQ8_0BlockElems == 0;
  for (float s : scales) {
    if (!std::isfinite(s) || std::fabs(s) > 65504.0f) blocks_ok = false;
  }
  if (blocks_ok) {
    Tensor t = Tensor::Allocate(DType::kQ8_0, {rows, cols});
    auto* blocks = static_cast<BlockQ8_0*>(t.mutable_data());
    const int64_t num_blocks = rows * cols / kQ8_0BlockElems;
    for (int64_t b = 0; b < num_blocks; ++b) {
      const int64_t first = b * kQ8_0BlockElems;
      blocks[b].d = Fp32ToFp16(scales[static_cast<size_t>(first / group_size)]);
      std::memcpy(blocks[b].qs, values + first, kQ8_0BlockElems);
    }
    return t;
  }
  Tensor t = Tensor::Allocate(DType::kF32, {rows, cols});
  auto* out = static_cast<float*>(t.mutable_data());
  for (int64_t i = 0; i < rows * cols; ++i) {
    out[i] = static_cast<float>(values[i]) * scales[static_cast<size_t>(i / group_size)];
  }
  return t;
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// LoadOptions::tokenizer_path, else tok<vocab>.bin or tokenizer.bin beside the checkpoint.
Status AttachTokenizer(const std::string& model_path, const LoadOptions& options,
                       LoadedModel* model) {
  if (!options.tokenizer_path.empty()) {
    KV_ASSIGN_OR_RETURN(VocabSpec spec,
                        LoadLlama2cTokenizer(options.tokenizer_path, model->config.vocab_size));
    model->vocab = std::move(spec);
    return OkStatus();
  }
  size_t slash = model_path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : model_path.substr(0, slash);
  for (const std::string& name :
       {"tok" + std::to_string(model->config.vocab_size) + ".bin", std::string("tokenizer.bin")}) {
    std::string candidate = dir + "/" + name;
    if (!FileExists(candidate)) continue;
    auto spec = LoadLlama2cTokenizer(candidate, model->config.vocab_size);
    if (spec.ok()) {
      model->vocab = std::move(spec).value();
      return OkStatus();
    }
    KV_LOG(WARNING) << "ignoring tokenizer " << candidate << ": " << spec.status().ToString();
  }
  return OkStatus();
}

}  // namespace

StatusOr<LoadedModel> LoadLlama2cModel(const std::string& path, const LoadOptions& options) {
  KV_ASSIGN_OR_RETURN(MappedFile file, MapFile(path));
  KV_ASSIGN_OR_RETURN(Header h, ParseHeader(file));
  KV_ASSIGN_OR_RETURN(ModelConfig config, ConfigFromHeader(h, path));
  const ModelConfig& c = config;
  const int64_t L = c.num_layers, D = c.hidden_dim, V = c.vocab_size;

  // Expected file size, checked before any tensor is touched. Validate() bounds every
  // dimension so that these products fit in int64.
  const std::vector<MatrixSpec> matrices = MatricesInFileOrder(c, /*include_embedding=*/true);
  int64_t matrix_elems = 0;
  for (const MatrixSpec& m : matrices) matrix_elems += m.rows * m.cols;
  if (!c.tied_embeddings) matrix_elems += V * D;
  const int64_t norm_elems = 2 * L * D + D;
  int64_t expected = h.data_offset;
  if (h.version == 2) {
    if (h.group_size <= 0 || h.group_size > (1 << 20)) {
      return InvalidArgumentError("llama2.c Q8_0 export: bad group_size " +
                                  std::to_string(h.group_size));
    }
    for (const MatrixSpec& m : matrices) {
      if ((m.rows * m.cols) % h.group_size != 0) {
        return InvalidArgumentError("llama2.c Q8_0 export: " + m.name + " has " +
                                    std::to_string(m.rows * m.cols) +
                                    " values, not a multiple of group_size " +
                                    std::to_string(h.group_size));
      }
    }
    expected += norm_elems * 4 + matrix_elems + matrix_elems / h.group_size * 4;
  } else {
    expected += (norm_elems + matrix_elems) * 4;
    if (h.version == 0) expected += int64_t{c.max_seq_len} * c.head_dim * 4;  // freq_cis
  }
  if (file.size != expected) {
    return DataLossError("llama2.c checkpoint '" + path + "' has " + std::to_string(file.size) +
                         " bytes but its header (dim " + std::to_string(D) + ", layers " +
                         std::to_string(L) + ", vocab " + std::to_string(V) + ", version " +
                         std::to_string(h.version) + ") implies " + std::to_string(expected));
  }

  LoadedModel model;
  model.config = config;
  model.path = path;
  model.format = h.version == 2 ? "llama2c-q80" : "llama2c";
  int64_t done = 0;
  auto progress = [&](int64_t bytes) {
    done += bytes;
    if (options.progress) options.progress(done, file.size);
  };

  Cursor cur(file, h.data_offset);
  auto take_f32 = [&](const std::string& name, std::vector<int64_t> shape) -> Status {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    KV_ASSIGN_OR_RETURN(const uint8_t* p, cur.Take(n * 4, name));
    model.tensors[name] = F32View(file, p, std::move(shape));
    progress(n * 4);
    return OkStatus();
  };
  auto take_norms = [&]() -> Status {
    for (int64_t l = 0; l < L; ++l) KV_RETURN_IF_ERROR(take_f32(LayerName(l, "attn_norm.weight"), {D}));
    for (int64_t l = 0; l < L; ++l) KV_RETURN_IF_ERROR(take_f32(LayerName(l, "ffn_norm.weight"), {D}));
    return take_f32("output_norm.weight", {D});
  };

  if (h.version == 0) {
    const MatrixSpec& emb = matrices[0];
    KV_RETURN_IF_ERROR(take_f32(emb.name, {emb.rows, emb.cols}));
    auto take_layers = [&](size_t first, size_t count) -> Status {
      for (size_t i = first; i < first + count; ++i) {
        KV_RETURN_IF_ERROR(take_f32(matrices[i].name, {matrices[i].rows, matrices[i].cols}));
      }
      return OkStatus();
    };
    const size_t nl = static_cast<size_t>(L);
    for (int64_t l = 0; l < L; ++l) KV_RETURN_IF_ERROR(take_f32(LayerName(l, "attn_norm.weight"), {D}));
    KV_RETURN_IF_ERROR(take_layers(1, 4 * nl));  // wq, wk, wv, wo
    for (int64_t l = 0; l < L; ++l) KV_RETURN_IF_ERROR(take_f32(LayerName(l, "ffn_norm.weight"), {D}));
    KV_RETURN_IF_ERROR(take_layers(1 + 4 * nl, 3 * nl));  // w1, w2, w3
    KV_RETURN_IF_ERROR(take_f32("output_norm.weight", {D}));
    KV_RETURN_IF_ERROR(cur.Take(int64_t{c.max_seq_len} * c.head_dim * 4, "freq_cis").status());
    if (!c.tied_embeddings) KV_RETURN_IF_ERROR(take_f32("output.weight", {V, D}));
  } else if (h.version == 1) {
    KV_RETURN_IF_ERROR(take_norms());
    for (const MatrixSpec& m : matrices) KV_RETURN_IF_ERROR(take_f32(m.name, {m.rows, m.cols}));
    if (!c.tied_embeddings) KV_RETURN_IF_ERROR(take_f32("output.weight", {V, D}));
  } else {
    KV_RETURN_IF_ERROR(take_norms());
    std::vector<MatrixSpec> quantized = matrices;
    if (!c.tied_embeddings) quantized.push_back({"output.weight", V, D});
    for (const MatrixSpec& m : quantized) {
      const int64_t n = m.rows * m.cols;
      KV_ASSIGN_OR_RETURN(const uint8_t* q, cur.Take(n, m.name + " int8 values"));
      KV_ASSIGN_OR_RETURN(const uint8_t* s, cur.Take(n / h.group_size * 4, m.name + " scales"));
      model.tensors[m.name] =
          ConvertQ80(reinterpret_cast<const int8_t*>(q), s, m.rows, m.cols, h.group_size);
      progress(n + n / h.group_size * 4);
    }
  }
  KV_RETURN_IF_ERROR(AttachTokenizer(path, options, &model));
  return model;
}

}  // namespace kvserve
