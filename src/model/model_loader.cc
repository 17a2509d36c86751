#include "model/model_loader.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>

namespace kvserve {

StatusOr<Tensor> LoadedModel::Get(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) {
    return NotFoundError("tensor '" + name + "' not found in model" +
                         (path.empty() ? std::string() : " " + path));
  }
  return it->second;
}

std::string LoadedModel::WeightTypeSummary() const {
  std::map<DType, int64_t> elems_by_dtype;
  for (const auto& [name, tensor] : tensors) elems_by_dtype[tensor.dtype] += tensor.num_elements();
  if (elems_by_dtype.empty()) return "none";
  auto best = elems_by_dtype.begin();
  for (auto it = elems_by_dtype.begin(); it != elems_by_dtype.end(); ++it) {
    if (it->second > best->second) best = it;
  }
  return DTypeName(best->first);
}

int64_t LoadedModel::WeightBytes() const {
  int64_t total = 0;
  for (const auto& [name, tensor] : tensors) total += tensor.num_bytes();
  return total;
}

StatusOr<LoadedModel> LoadModel(const std::string& path, const LoadOptions& options) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return NotFoundError("model path '" + path + "' does not exist: " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) {
    struct stat cfg;
    if (::stat((path + "/config.json").c_str(), &cfg) != 0) {
      return InvalidArgumentError("model directory '" + path +
                                  "' has no config.json (expected a Hugging Face model)");
    }
    return LoadHfModel(path, options);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open model file '" + path + "'");
  char magic[4] = {0, 0, 0, 0};
  in.read(magic, 4);
  if (in.gcount() < 4) {
    return InvalidArgumentError("model file '" + path + "' is too small to be a model");
  }
  if (std::memcmp(magic, "GGUF", 4) == 0) return LoadGgufModel(path, options);
  // llama2.c: the "ak42" exports (version 1 float32, version 2 Q8_0) and the legacy header-less
  // float32 checkpoint are told apart inside LoadLlama2cModel.
  return LoadLlama2cModel(path, options);
}

}  // namespace kvserve
