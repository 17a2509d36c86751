// GGUF v2/v3 reader (memory-mapped, validating every count, offset and size against the file
// before use) and writer. Spec: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
//
// GgufFile owns the mapping; Tensors returned by tensor() keep it alive through
// Tensor::owner, so they stay valid after the GgufFile is destroyed. Immutable after Open:
// safe to read from several threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace kvserve {

enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* GgufTypeName(GgufType type);

// One metadata value. Scalars use the field of their kind; arrays keep their element type and
// contents (integers of any width in `ints`, floats of either width in `floats`, strings in
// `strings`, nested arrays in `arrays`).
struct GgufValue {
  GgufType type = GgufType::kUint32;
  GgufType array_type = GgufType::kUint32;  // when type == kArray
  int64_t i = 0;       // signed and unsigned integers (uint64 above INT64_MAX is kept in u)
  uint64_t u = 0;
  double f = 0.0;
  bool b = false;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::vector<GgufValue> arrays;

  bool is_integer() const;  // any integer type (or bool)
  bool is_float() const;
  size_t array_size() const;

  static GgufValue String(std::string v);
  static GgufValue U32(uint32_t v);
  static GgufValue I32(int32_t v);
  static GgufValue U64(uint64_t v);
  static GgufValue F32(float v);
  static GgufValue Bool(bool v);
  static GgufValue StringArray(std::vector<std::string> v);
  static GgufValue F32Array(std::vector<float> v);
  static GgufValue I32Array(std::vector<int32_t> v);
};

struct GgufTensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // outermost first (GGUF ne[] reversed)
  uint64_t offset = 0;         // from the start of the data section
  uint64_t num_bytes = 0;
};

struct GgufLimits {
  uint64_t max_tensors = 1u << 20;
  uint64_t max_metadata = 1u << 20;
  uint64_t max_string_bytes = 1u << 26;
  uint64_t max_array_elems = 1u << 26;
  int max_array_depth = 4;
};

class GgufFile {
 public:
  // Maps `path` read-only and parses header, metadata and tensor infos. Tensor types other
  // than F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and Q2_K ... Q6_K (IQ*, TQ*, Q8_1,
  // Q8_K, repacked and removed types) are refused with an error naming the type and tensor
  // and listing the types that load; so are rows that are not whole blocks of their type.
  static StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path,
                                                  const GgufLimits& limits = {});
  // Parses an in-memory image (the fuzzer's entry point). The bytes are copied.
  static StatusOr<std::unique_ptr<GgufFile>> FromBytes(std::string_view bytes,
                                                       const GgufLimits& limits = {});

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }
  uint64_t file_bytes() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* Find(std::string_view key) const;
  // Typed getters: NotFound when absent, InvalidArgument when of another kind.
  StatusOr<std::string> GetString(std::string_view key) const;
  StatusOr<int64_t> GetInt(std::string_view key) const;   // any integer type
  StatusOr<double> GetFloat(std::string_view key) const;  // float or integer
  StatusOr<bool> GetBool(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // A view of the tensor's data that keeps the mapping alive.
  StatusOr<Tensor> tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  static StatusOr<std::unique_ptr<GgufFile>> Parse(std::unique_ptr<GgufFile> file,
                                                   const GgufLimits& limits);

  std::string path_;
  std::shared_ptr<const void> mapping_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// True when the file at `path` starts with the GGUF magic.
bool IsGgufFile(const std::string& path);

// Builds a GGUF v3 file: metadata in insertion order, then tensor infos and data aligned to
// `general.alignment` (32 unless set). Tensors are written from their memory when Write() runs.
class GgufWriter {
 public:
  void Set(std::string key, GgufValue value);  // replaces an existing key
  // The tensor must be of a type Open() loads, its rows whole blocks; its data must stay
  // alive until Write().
  Status AddTensor(std::string name, const Tensor& tensor);
  Status Write(const std::string& path) const;

 private:
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

}  // namespace kvserve
