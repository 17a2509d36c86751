// Quantisation error of kvserve's quantisers beside llama.cpp's (ggml_quantize_chunk, no
// importance matrix, from the prebuilt libggml-base that tests/llamacpp/node_modules holds),
// on the same rows, both decoded with kvserve's DequantizeRow: relative RMS error
// sqrt(sum (x - q)^2 / sum x^2) per type and distribution, and quantisation speed (one thread).
//
// Usage: build/bench/quant_error [--model PATH] [LIBGGML_BASE_SO]
//   (default library: the node-llama-cpp copy). Rows: Gaussian, Gaussian with 1% outliers x10
//   and Student-t(3) values, 128 x 2048 each; with --model, also the model's own 2-D weights
//   (every matrix, flattened and cut into rows of 2048: real trained weights, whatever the
//   model's row lengths, so the k-quants can be measured on a model with short rows).
// Prints a markdown table. Without the library it prints kvserve's column alone.
#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "model/model_loader.h"
#include "tensor/dtype.h"

using namespace kvserve;

namespace {

// ggml_quantize_chunk(type, src, dst, start_row, num_rows, row_len, importance)
using QuantizeChunkFn = size_t (*)(int, const float*, void*, int64_t, int64_t, int64_t,
                                   const float*);
using QuantizeInitFn = void (*)(int);

struct TypeId {
  DType dtype;
  int ggml_id;
};
constexpr TypeId kTypes[] = {{DType::kQ4_0, 2}, {DType::kQ4_1, 3}, {DType::kQ5_0, 6},
                             {DType::kQ5_1, 7}, {DType::kQ2_K, 10}, {DType::kQ3_K, 11},
                             {DType::kQ4_K, 12}, {DType::kQ5_K, 13}, {DType::kQ6_K, 14},
                             {DType::kQ8_0, 8}};

double RelativeRms(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    err += d * d;
    ref += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

// Every 2-D weight of the model at `path` as float, cut to a multiple of `cols`.
std::vector<float> ModelRows(const std::string& path, int64_t cols) {
  StatusOr<LoadedModel> model = LoadModel(path);
  if (!model.ok()) {
    std::fprintf(stderr, "quant_error: %s\n", model.status().ToString().c_str());
    std::exit(1);
  }
  std::vector<float> x;
  for (const auto& [name, t] : model->tensors) {
    if (t.shape.size() != 2) continue;
    std::vector<float> row(t.cols());
    for (int64_t r = 0; r < t.rows(); ++r) {
      DequantizeRow(t.dtype, t.row(r), row.data(), t.cols());
      x.insert(x.end(), row.begin(), row.end());
    }
  }
  x.resize(x.size() / cols * cols);
  return x;
}

std::vector<float> MakeRows(int kind, size_t n) {
  std::mt19937 rng(42 + kind);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::student_t_distribution<float> student(3.0f);
  std::vector<float> x(n);
  for (float& v : x) {
    v = kind == 2 ? 0.01f * student(rng) : normal(rng);
    if (kind == 1 && rng() % 100 == 0) v *= 10.0f;  // 1% outliers, 10x
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  std::string lib_path =
      "tests/llamacpp/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so";
  std::string model_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) {
      model_path = argv[++i];
    } else {
      lib_path = a;
    }
  }
  QuantizeChunkFn quantize_chunk = nullptr;
  QuantizeInitFn quantize_init = nullptr;
  if (void* lib = dlopen(lib_path.c_str(), RTLD_NOW)) {
    quantize_chunk = reinterpret_cast<QuantizeChunkFn>(dlsym(lib, "ggml_quantize_chunk"));
    quantize_init = reinterpret_cast<QuantizeInitFn>(dlsym(lib, "ggml_quantize_init"));
  }
  if (quantize_chunk == nullptr || quantize_init == nullptr) {
    std::fprintf(stderr, "quant_error: llama.cpp's ggml_quantize_chunk not found in %s; "
                         "kvserve alone\n", lib_path.c_str());
  }
  const int64_t cols = 2048;
  const char* kKinds[] = {"gaussian", "gaussian + 1% outliers x10", "student-t(3)", nullptr};
  std::vector<float> model_rows;
  if (!model_path.empty()) {
    model_rows = ModelRows(model_path, cols);
    kKinds[3] = "the model's weights";
  }
  std::printf("| rows | type | kvserve rel. RMS | llama.cpp rel. RMS | ratio | kvserve M weights/s "
              "| llama.cpp M weights/s |\n|---|---|---:|---:|---:|---:|---:|\n");
  for (int kind = 0; kind < 4 && kKinds[kind] != nullptr; ++kind) {
    const std::vector<float> x = kind == 3 ? model_rows : MakeRows(kind, 128 * cols);
    const size_t n = x.size();
    const int64_t rows = static_cast<int64_t>(n) / cols;
    for (const TypeId& t : kTypes) {
      const int64_t row_bytes = DTypeRowBytes(t.dtype, cols);
      std::vector<uint8_t> ours(row_bytes * rows), theirs(ours.size());
      std::vector<float> y_ours(n), y_theirs(n);
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t r = 0; r < rows; ++r) {
        QuantizeRow(t.dtype, x.data() + r * cols, ours.data() + r * row_bytes, cols);
      }
      const auto t1 = std::chrono::steady_clock::now();
      DequantizeRow(t.dtype, ours.data(), y_ours.data(), static_cast<int64_t>(n));
      const double ours_s = std::chrono::duration<double>(t1 - t0).count();
      const double err_ours = RelativeRms(x, y_ours);
      if (quantize_chunk != nullptr) {
        quantize_init(t.ggml_id);
        const auto t2 = std::chrono::steady_clock::now();
        quantize_chunk(t.ggml_id, x.data(), theirs.data(), 0, rows, cols, nullptr);
        const double theirs_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
        DequantizeRow(t.dtype, theirs.data(), y_theirs.data(), static_cast<int64_t>(n));
        const double err_theirs = RelativeRms(x, y_theirs);
        std::printf("| %s | %s | %.4f | %.4f | %.3f | %.1f | %.1f |\n", kKinds[kind],
                    DTypeName(t.dtype), err_ours, err_theirs, err_ours / err_theirs,
                    n / ours_s / 1e6, n / theirs_s / 1e6);
      } else {
        std::printf("| %s | %s | %.4f | | | %.1f | |\n", kKinds[kind], DTypeName(t.dtype),
                    err_ours, n / ours_s / 1e6);
      }
    }
  }
  return 0;
}
