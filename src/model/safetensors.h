// Safetensors reader (memory-mapped) and a small writer.
// Format: 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {str: str}, "name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}}
// then the data section; offsets are relative to its start.
//
// SafetensorsFile owns the mapping; Tensors returned by tensor() keep it alive through
// Tensor::owner. Immutable after Open: safe to read from several threads.
// Invariants after Open: every tensor's [begin, end) lies inside the data section, ranges do
// not overlap, the dtype is F32/F16/BF16 and shape product * element size == end - begin.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace kvserve {

// The end of the errors for Hugging Face folders whose weights are already quantised.
inline constexpr char kPreQuantizedHfMessage[] =
    "pre-quantised Hugging Face weights (GPTQ, AWQ, bitsandbytes, FP8 ...) are out of scope: "
    "use a GGUF file, or convert an unquantised (f32, f16 or bf16) folder with "
    "`kvserve convert --dtype q4_k_m`";

struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // outermost first, as stored
  uint64_t begin = 0;          // offsets into the data section
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses an in-memory image (tests, fuzzing). The bytes are copied.
  static StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(std::string_view bytes);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::map<std::string, SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const SafetensorsTensorInfo* FindTensor(const std::string& name) const;
  // A view of the tensor's bytes that keeps the mapping alive; NotFound naming it.
  StatusOr<Tensor> tensor(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  static StatusOr<std::unique_ptr<SafetensorsFile>> Parse(std::unique_ptr<SafetensorsFile> f);

  std::string path_;
  std::shared_ptr<const void> mapping_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t data_offset_ = 0;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, SafetensorsTensorInfo> tensors_;
};

// Writes tensors (F32, F16 or BF16) in the given order with optional __metadata__; the header
// is padded with spaces to a multiple of 8 bytes as the reference implementation does.
Status WriteSafetensors(const std::string& path,
                        const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace kvserve
