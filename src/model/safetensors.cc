#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

namespace kvserve {
namespace {

using nlohmann::json;

StatusOr<DType> ParseSafetensorsDType(const std::string& name, const std::string& tensor) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  std::string message = "tensor '" + tensor + "' has unsupported safetensors dtype '" + name +
                        "' (supported: F32, F16, BF16)";
  // Integer and 8-bit float tensors are what GPTQ, AWQ, bitsandbytes and FP8 checkpoints
  // store their packed weights, scales and zero points in.
  if (name.starts_with("I") || name.starts_with("U") || name.starts_with("F8")) {
    message += "; " + std::string(kPreQuantizedHfMessage);
  }
  return InvalidArgumentError(message);
}

const char* SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    default: return nullptr;
  }
}

// Reads a non-negative integer that fits in 63 bits from a JSON value.
bool GetU63(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    if (i < 0) return false;
    *out = static_cast<uint64_t>(i);
  } else {
    return false;
  }
  return *out <= (1ull << 62);
}

}  // namespace

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  file->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return NotFoundError("cannot open safetensors file '" + path + "': " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError("'" + path + "' is not a regular file");
  }
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ < 8) {
    ::close(fd);
    return InvalidArgumentError("safetensors file '" + path + "' is too small (" +
                                std::to_string(file->size_) + " bytes)");
  }
  void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    return UnavailableError("mmap of '" + path + "' failed: " + std::strerror(err));
  }
  uint64_t size = file->size_;
  file->mapping_ = std::shared_ptr<const void>(
      p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
  file->base_ = static_cast<const uint8_t*>(p);
  return Parse(std::move(file));
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(std::string_view bytes) {
  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  file->path_ = "<memory>";
  auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[bytes.size() + 1]);
  std::memcpy(buf.get(), bytes.data(), bytes.size());
  file->base_ = buf.get();
  file->size_ = bytes.size();
  file->mapping_ = std::shared_ptr<const void>(buf, buf.get());
  if (file->size_ < 8) return InvalidArgumentError("safetensors image is too small");
  return Parse(std::move(file));
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(
    std::unique_ptr<SafetensorsFile> f) {
  const std::string where = "safetensors '" + f->path_ + "': ";
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | f->base_[i];
  if (header_bytes > kMaxHeaderBytes || header_bytes > f->size_ - 8) {
    return InvalidArgumentError(where + "header length " + std::to_string(header_bytes) +
                                " exceeds the file size " + std::to_string(f->size_) +
                                " (or the " + std::to_string(kMaxHeaderBytes) + "-byte limit)");
  }
  f->data_offset_ = 8 + header_bytes;
  const uint64_t data_bytes = f->size_ - f->data_offset_;
  json header = json::parse(f->base_ + 8, f->base_ + 8 + header_bytes, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return InvalidArgumentError(where + "header is not a JSON object");
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return InvalidArgumentError(where + "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return InvalidArgumentError(where + "__metadata__ value '" + m.key() +
                                      "' is not a string");
        }
        f->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets") || !v["dtype"].is_string() || !v["shape"].is_array() ||
        !v["data_offsets"].is_array() || v["data_offsets"].size() != 2) {
      return InvalidArgumentError(where + "tensor '" + name +
                                  "' needs dtype (string), shape (array) and data_offsets [b, e]");
    }
    SafetensorsTensorInfo info;
    info.name = name;
    KV_ASSIGN_OR_RETURN(info.dtype, ParseSafetensorsDType(v["dtype"].get<std::string>(), name));
    if (v["shape"].size() > 8) {
      return InvalidArgumentError(where + "tensor '" + name + "' has too many dimensions");
    }
    // Byte size with overflow checks (each dim <= 2^62, running product kept <= 2^62).
    uint64_t elems = 1;
    for (const json& d : v["shape"]) {
      uint64_t dim;
      if (!GetU63(d, &dim)) {
        return InvalidArgumentError(where + "tensor '" + name + "' has an invalid dimension");
      }
      if (dim != 0 && elems > (1ull << 62) / dim) {
        return InvalidArgumentError(where + "tensor '" + name + "' shape overflows");
      }
      elems *= dim;
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    if (!GetU63(v["data_offsets"][0], &info.begin) || !GetU63(v["data_offsets"][1], &info.end) ||
        info.begin > info.end || info.end > data_bytes) {
      return InvalidArgumentError(where + "tensor '" + name +
                                  "' has data_offsets outside the data section (" +
                                  std::to_string(data_bytes) + " bytes)");
    }
    uint64_t elem_bytes = static_cast<uint64_t>(DTypeBlockBytes(info.dtype));
    if (elems > (1ull << 62) / elem_bytes || elems * elem_bytes != info.end - info.begin) {
      return InvalidArgumentError(where + "tensor '" + name + "' has " + std::to_string(elems) +
                                  " elements of " + v["dtype"].get<std::string>() + " but " +
                                  std::to_string(info.end - info.begin) + " bytes");
    }
    ranges.emplace_back(info.begin, info.end);
    f->tensors_.emplace(name, std::move(info));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return InvalidArgumentError(where + "tensor data ranges overlap at offset " +
                                  std::to_string(ranges[i].first));
    }
  }
  return f;
}

const SafetensorsTensorInfo* SafetensorsFile::FindTensor(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

StatusOr<Tensor> SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsTensorInfo* info = FindTensor(name);
  if (info == nullptr) {
    return NotFoundError("tensor '" + name + "' not found in safetensors '" + path_ + "'");
  }
  const uint8_t* data = base_ + data_offset_ + info->begin;
  if (reinterpret_cast<uintptr_t>(data) % DTypeBlockBytes(info->dtype) != 0) {
    // The format does not align tensor data (it starts right after the JSON header): a
    // misaligned tensor is copied once into aligned memory rather than read in place.
    Tensor copy = Tensor::Allocate(info->dtype, info->shape);
    std::memcpy(copy.mutable_data(), data, static_cast<size_t>(copy.num_bytes()));
    return copy;
  }
  Tensor t;
  t.dtype = info->dtype;
  t.shape = info->shape;
  t.data = data;
  t.owner = mapping_;
  return t;
}

Status WriteSafetensors(const std::string& path,
                        const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const char* dtype = SafetensorsDTypeName(t.dtype);
    if (dtype == nullptr) {
      return InvalidArgumentError("cannot write tensor '" + name + "' of dtype " +
                                  DTypeName(t.dtype) + " as safetensors");
    }
    uint64_t bytes = static_cast<uint64_t>(t.num_bytes());
    header[name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return UnavailableError("cannot create '" + path + "'");
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{text.size()} >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, t] : tensors) {
    out.write(static_cast<const char*>(t.data), t.num_bytes());
  }
  out.close();
  if (!out) return UnavailableError("failed writing '" + path + "'");
  return OkStatus();
}

}  // namespace kvserve
