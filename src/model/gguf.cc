#include "model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

namespace kvserve {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF reader assumes little endian");

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxAlignment = uint64_t{1} << 20;
constexpr uint64_t kMaxKeyBytes = 65535;        // the spec's limit on key length
constexpr uint64_t kMaxTensorNameBytes = 64;    // the spec's limit on tensor names
constexpr uint32_t kMaxDims = 4;
// The fewest bytes one metadata entry can occupy: key length + 1 key byte + value type +
// a one-byte value. Used to refuse counts that cannot fit before allocating for them.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
// name length + 1 name byte + n_dims + one dimension + type + offset.
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

template <typename... Args>
std::string Cat(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
}

// Quotes a name from the file for an error message: non-printable bytes as \xNN, long
// names cut, so hostile bytes never reach a terminal raw.
std::string Quote(std::string_view s) {
  constexpr size_t kMaxShown = 80;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > kMaxShown) out += "...";
  out += "'";
  return out;
}

// GGML type ids as named in ggml.h (enum ggml_type); ids that were removed are null.
const char* GgmlTypeName(uint32_t id) {
  static constexpr const char* kNames[] = {
      "F32",     "F16",     "Q4_0",    "Q4_1",   "Q4_2",    "Q4_3",   "Q5_0",
      "Q5_1",    "Q8_0",    "Q8_1",    "Q2_K",   "Q3_K",    "Q4_K",   "Q5_K",
      "Q6_K",    "Q8_K",    "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",  "IQ4_NL",
      "IQ3_S",   "IQ2_S",   "IQ4_XS",  "I8",     "I16",     "I32",    "I64",
      "F64",     "IQ1_M",   "BF16",    "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
      "TQ2_0",   "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",
  };
  if (id >= std::size(kNames)) return nullptr;
  return kNames[id];
}

// The GGML type ids kvserve loads and writes (enum ggml_type in ggml.h).
constexpr uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ5_0 = 6,
                   kGgmlQ5_1 = 7, kGgmlQ8_0 = 8, kGgmlQ2_K = 10, kGgmlQ3_K = 11, kGgmlQ4_K = 12,
                   kGgmlQ5_K = 13, kGgmlQ6_K = 14, kGgmlBF16 = 30;
constexpr std::pair<uint32_t, DType> kGgmlTypes[] = {
    {kGgmlF32, DType::kF32},   {kGgmlF16, DType::kF16},   {kGgmlBF16, DType::kBF16},
    {kGgmlQ8_0, DType::kQ8_0}, {kGgmlQ4_0, DType::kQ4_0}, {kGgmlQ4_1, DType::kQ4_1},
    {kGgmlQ5_0, DType::kQ5_0}, {kGgmlQ5_1, DType::kQ5_1}, {kGgmlQ2_K, DType::kQ2_K},
    {kGgmlQ3_K, DType::kQ3_K}, {kGgmlQ4_K, DType::kQ4_K}, {kGgmlQ5_K, DType::kQ5_K},
    {kGgmlQ6_K, DType::kQ6_K},
};
// For error messages: the names of kGgmlTypes, in its order.
constexpr char kLoadableTypes[] =
    "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K";

std::optional<DType> DTypeFromGgml(uint32_t id) {
  for (const auto& [ggml, dtype] : kGgmlTypes) {
    if (ggml == id) return dtype;
  }
  return std::nullopt;
}

std::optional<uint32_t> GgmlFromDType(DType dtype) {
  for (const auto& [ggml, d] : kGgmlTypes) {
    if (d == dtype) return ggml;
  }
  return std::nullopt;
}

// Alignment in memory of one element of `dtype`: 4 for f32; 2 for f16, bf16 and the block
// types (every GGML block starts with or holds fp16 fields).
uint64_t ElementAlignment(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

bool IsKnownType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

// Bytes of a scalar of type `t` in the file; 0 for strings and arrays.
uint64_t ScalarBytes(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    case GgufType::kString: case GgufType::kArray: return 0;
  }
  return 0;
}

// The fewest bytes one value of type `t` occupies in the file.
uint64_t MinValueBytes(GgufType t) {
  if (t == GgufType::kString) return 8;       // length
  if (t == GgufType::kArray) return 4 + 8;    // element type + count
  return ScalarBytes(t);
}

bool IsIntegerType(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kUint16: case GgufType::kInt16:
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kUint64: case GgufType::kInt64:
    case GgufType::kBool:
      return true;
    default:
      return false;
  }
}

bool IsFloatType(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }

// Bounds-checked little-endian reader over the file image.
class Reader {
 public:
  Reader(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  Status Need(uint64_t num_bytes, std::string_view what) const {
    if (num_bytes > remaining()) {
      return DataLossError(Cat("truncated file: ", what, " needs ", num_bytes,
                               " bytes at byte offset ", pos_, " but only ", remaining(),
                               " remain"));
    }
    return OkStatus();
  }

  template <typename T>
  Status Read(T* out, std::string_view what) {
    KV_RETURN_IF_ERROR(Need(sizeof(T), what));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return OkStatus();
  }

  Status ReadString(std::string* out, uint64_t max_bytes, std::string_view what) {
    uint64_t start = pos_;
    uint64_t len = 0;
    KV_RETURN_IF_ERROR(Read(&len, what));
    if (len > remaining()) {
      return DataLossError(Cat(what, ": string length ", len, " at byte offset ", start,
                               " exceeds the ", remaining(), " bytes left in the file"));
    }
    if (len > max_bytes) {
      return InvalidArgumentError(Cat(what, ": string length ", len, " at byte offset ", start,
                                      " exceeds the limit of ", max_bytes, " bytes"));
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return OkStatus();
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

void SetInteger(GgufValue* v, int64_t i, uint64_t u) {
  v->i = i;
  v->u = u;
}

// Reads one integer of type `t` into (i, u): signed values keep u = i when non-negative,
// unsigned ones keep i = u when it fits in int64 (else i = 0; u holds the value).
Status ReadInteger(Reader& r, GgufType t, std::string_view what, int64_t* i, uint64_t* u) {
  switch (t) {
#define KV_GGUF_INT(kind, type, is_signed)                              \
  case GgufType::kind: {                                                \
    type x{};                                                           \
    KV_RETURN_IF_ERROR(r.Read(&x, what));                               \
    if (is_signed) {                                                    \
      *i = static_cast<int64_t>(x);                                     \
      *u = *i >= 0 ? static_cast<uint64_t>(*i) : 0;                     \
    } else {                                                            \
      *u = static_cast<uint64_t>(x);                                    \
      *i = *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) \
               ? static_cast<int64_t>(*u) : 0;                          \
    }                                                                   \
    return OkStatus();                                                  \
  }
    KV_GGUF_INT(kUint8, uint8_t, false)
    KV_GGUF_INT(kInt8, int8_t, true)
    KV_GGUF_INT(kUint16, uint16_t, false)
    KV_GGUF_INT(kInt16, int16_t, true)
    KV_GGUF_INT(kUint32, uint32_t, false)
    KV_GGUF_INT(kInt32, int32_t, true)
    KV_GGUF_INT(kUint64, uint64_t, false)
    KV_GGUF_INT(kInt64, int64_t, true)
#undef KV_GGUF_INT
    case GgufType::kBool: {
      uint64_t pos = r.pos();
      uint8_t x = 0;
      KV_RETURN_IF_ERROR(r.Read(&x, what));
      if (x > 1) {
        return InvalidArgumentError(Cat(what, ": bool value ", int{x}, " at byte offset ", pos,
                                        " is neither 0 nor 1"));
      }
      *i = x;
      *u = x;
      return OkStatus();
    }
    default:
      return InternalError("ReadInteger on a non-integer type");
  }
}

Status ReadFloat(Reader& r, GgufType t, std::string_view what, double* f) {
  if (t == GgufType::kFloat32) {
    float x = 0;
    KV_RETURN_IF_ERROR(r.Read(&x, what));
    *f = x;
  } else {
    double x = 0;
    KV_RETURN_IF_ERROR(r.Read(&x, what));
    *f = x;
  }
  return OkStatus();
}

// What the metadata of one file may still allocate: the array elements of all arrays
// together (limits.max_array_elems), and of those at most 1/64 as nested arrays (each costs a
// whole GgufValue in memory for 12 bytes of file). With the per-array checks against the
// bytes left, parsing allocates at most a small multiple of the file size.
struct ParseBudget {
  uint64_t array_elems_left = 0;
  uint64_t nested_arrays_left = 0;
};

// Reads a value of type `type`; `depth` counts the arrays that enclose it.
Status ReadValue(Reader& r, GgufType type, int depth, const GgufLimits& limits,
                 ParseBudget* budget, std::string_view what, GgufValue* out) {
  out->type = type;
  if (IsIntegerType(type)) {
    KV_RETURN_IF_ERROR(ReadInteger(r, type, what, &out->i, &out->u));
    if (type == GgufType::kBool) out->b = out->i != 0;
    return OkStatus();
  }
  if (IsFloatType(type)) return ReadFloat(r, type, what, &out->f);
  if (type == GgufType::kString) return r.ReadString(&out->s, limits.max_string_bytes, what);

  // Array.
  uint64_t start = r.pos();
  if (depth + 1 > limits.max_array_depth) {
    return InvalidArgumentError(Cat(what, ": array at byte offset ", start,
                                    " is nested deeper than the limit of ",
                                    limits.max_array_depth, " levels"));
  }
  uint32_t elem_type_id = 0;
  KV_RETURN_IF_ERROR(r.Read(&elem_type_id, what));
  if (!IsKnownType(elem_type_id)) {
    return InvalidArgumentError(Cat(what, ": unknown value type ", elem_type_id,
                                    " for array elements at byte offset ", start));
  }
  auto elem_type = static_cast<GgufType>(elem_type_id);
  out->array_type = elem_type;
  uint64_t count = 0;
  KV_RETURN_IF_ERROR(r.Read(&count, what));
  if (count > limits.max_array_elems) {
    return InvalidArgumentError(Cat(what, ": array length ", count, " at byte offset ", start,
                                    " exceeds the limit of ", limits.max_array_elems));
  }
  uint64_t min_bytes = MinValueBytes(elem_type);
  if (count > r.remaining() / min_bytes) {
    return DataLossError(Cat(what, ": array length ", count, " of ", GgufTypeName(elem_type),
                             " at byte offset ", start, " cannot fit in the ", r.remaining(),
                             " bytes left in the file"));
  }
  if (count > budget->array_elems_left) {
    return InvalidArgumentError(Cat(what, ": array at byte offset ", start,
                                    " brings the elements of all arrays over the limit of ",
                                    limits.max_array_elems));
  }
  budget->array_elems_left -= count;
  if (elem_type == GgufType::kArray) {
    if (count > budget->nested_arrays_left) {
      return InvalidArgumentError(Cat(what, ": array at byte offset ", start,
                                      " brings the nested arrays over the limit of ",
                                      limits.max_array_elems / 64));
    }
    budget->nested_arrays_left -= count;
  }
  if (IsIntegerType(elem_type)) {
    out->ints.resize(count);
    for (uint64_t k = 0; k < count; ++k) {
      uint64_t u;
      KV_RETURN_IF_ERROR(ReadInteger(r, elem_type, what, &out->ints[k], &u));
      if (elem_type == GgufType::kUint64) out->ints[k] = static_cast<int64_t>(u);
    }
  } else if (IsFloatType(elem_type)) {
    out->floats.resize(count);
    for (uint64_t k = 0; k < count; ++k) {
      KV_RETURN_IF_ERROR(ReadFloat(r, elem_type, what, &out->floats[k]));
    }
  } else if (elem_type == GgufType::kString) {
    out->strings.resize(count);
    for (uint64_t k = 0; k < count; ++k) {
      KV_RETURN_IF_ERROR(r.ReadString(&out->strings[k], limits.max_string_bytes, what));
    }
  } else {
    out->arrays.resize(count);
    for (uint64_t k = 0; k < count; ++k) {
      KV_RETURN_IF_ERROR(ReadValue(r, GgufType::kArray, depth + 1, limits, budget, what,
                                   &out->arrays[k]));
    }
  }
  return OkStatus();
}

uint64_t AlignUp(uint64_t x, uint64_t alignment) {
  return (x + alignment - 1) / alignment * alignment;
}

Status CheckAlignmentValue(const GgufValue& v) {
  if (!IsIntegerType(v.type) || v.type == GgufType::kBool) {
    return InvalidArgumentError(Cat("general.alignment must be an unsigned integer, got ",
                                    GgufTypeName(v.type)));
  }
  if (v.i <= 0 || static_cast<uint64_t>(v.i) > kMaxAlignment || !std::has_single_bit(v.u)) {
    return InvalidArgumentError(Cat("general.alignment ",
                                    v.type == GgufType::kUint64 ? v.u : static_cast<uint64_t>(v.i),
                                    " is not a power of two between 1 and ", kMaxAlignment));
  }
  return OkStatus();
}

}  // namespace

const char* GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------------
// GgufValue

bool GgufValue::is_integer() const { return IsIntegerType(type); }
bool GgufValue::is_float() const { return IsFloatType(type); }

size_t GgufValue::array_size() const {
  if (type != GgufType::kArray) return 0;
  if (IsIntegerType(array_type)) return ints.size();
  if (IsFloatType(array_type)) return floats.size();
  if (array_type == GgufType::kString) return strings.size();
  return arrays.size();
}

GgufValue GgufValue::String(std::string v) {
  GgufValue r;
  r.type = GgufType::kString;
  r.s = std::move(v);
  return r;
}
GgufValue GgufValue::U32(uint32_t v) {
  GgufValue r;
  r.type = GgufType::kUint32;
  SetInteger(&r, v, v);
  return r;
}
GgufValue GgufValue::I32(int32_t v) {
  GgufValue r;
  r.type = GgufType::kInt32;
  SetInteger(&r, v, v >= 0 ? static_cast<uint64_t>(v) : 0);
  return r;
}
GgufValue GgufValue::U64(uint64_t v) {
  GgufValue r;
  r.type = GgufType::kUint64;
  SetInteger(&r, v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                     ? static_cast<int64_t>(v) : 0, v);
  return r;
}
GgufValue GgufValue::F32(float v) {
  GgufValue r;
  r.type = GgufType::kFloat32;
  r.f = v;
  return r;
}
GgufValue GgufValue::Bool(bool v) {
  GgufValue r;
  r.type = GgufType::kBool;
  r.b = v;
  SetInteger(&r, v, v);
  return r;
}
GgufValue GgufValue::StringArray(std::vector<std::string> v) {
  GgufValue r;
  r.type = GgufType::kArray;
  r.array_type = GgufType::kString;
  r.strings = std::move(v);
  return r;
}
GgufValue GgufValue::F32Array(std::vector<float> v) {
  GgufValue r;
  r.type = GgufType::kArray;
  r.array_type = GgufType::kFloat32;
  r.floats.assign(v.begin(), v.end());
  return r;
}
GgufValue GgufValue::I32Array(std::vector<int32_t> v) {
  GgufValue r;
  r.type = GgufType::kArray;
  r.array_type = GgufType::kInt32;
  r.ints.assign(v.begin(), v.end());
  return r;
}

// ---------------------------------------------------------------------------------------------
// GgufFile

bool IsGgufFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {0, 0, 0, 0};
  if (!in.read(magic, 4)) return false;
  return std::memcmp(magic, "GGUF", 4) == 0;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path,
                                                   const GgufLimits& limits) {
  auto context = [&](const Status& s) { return s.WithContext(Cat("gguf file ", path)); };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    Status s(err == ENOENT ? StatusCode::kNotFound : StatusCode::kUnavailable,
             Cat("cannot open: ", std::strerror(err)));
    return context(s);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return context(UnavailableError(Cat("cannot stat: ", std::strerror(err))));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return context(InvalidArgumentError("not a regular file"));
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ == 0) {
    ::close(fd);
    static const uint8_t kEmpty[1] = {0};
    file->base_ = kEmpty;
  } else {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);  // the mapping stays valid without the descriptor
    if (p == MAP_FAILED) return context(UnavailableError(Cat("mmap failed: ", std::strerror(err))));
    uint64_t size = file->size_;
    file->mapping_ = std::shared_ptr<const void>(
        p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
    file->base_ = static_cast<const uint8_t*>(p);
  }
  auto parsed = Parse(std::move(file), limits);
  if (!parsed.ok()) return context(parsed.status());
  return parsed;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::string_view bytes,
                                                        const GgufLimits& limits) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = "<memory>";
  file->size_ = bytes.size();
  // 64-byte aligned so tensor data lands as aligned as it would in a page-aligned mapping.
  size_t alloc = (bytes.size() + 63) / 64 * 64;
  if (alloc == 0) alloc = 64;
  void* p = std::aligned_alloc(64, alloc);
  if (p == nullptr) {
    return ResourceExhaustedError(Cat("cannot allocate ", alloc, " bytes for a GGUF image"));
  }
  if (!bytes.empty()) std::memcpy(p, bytes.data(), bytes.size());
  file->mapping_ = std::shared_ptr<const void>(p, [](const void* q) {
    std::free(const_cast<void*>(q));
  });
  file->base_ = static_cast<const uint8_t*>(p);
  return Parse(std::move(file), limits);
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(std::unique_ptr<GgufFile> file,
                                                    const GgufLimits& limits) {
  Reader r(file->base_, file->size_);

  // Header.
  if (file->size_ < 4) {
    return DataLossError(Cat("truncated file: ", file->size_,
                             " bytes is too small for the GGUF magic"));
  }
  if (std::memcmp(file->base_, kMagic, 4) != 0) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%02x %02x %02x %02x", file->base_[0], file->base_[1],
                  file->base_[2], file->base_[3]);
    return InvalidArgumentError(Cat("bad magic: expected \"GGUF\" (47 47 55 46), got ", buf,
                                    "; not a GGUF file"));
  }
  uint32_t magic;
  KV_RETURN_IF_ERROR(r.Read(&magic, "magic"));
  KV_RETURN_IF_ERROR(r.Read(&file->version_, "version"));
  if (file->version_ == 1) {
    return UnimplementedError(
        "GGUF version 1 is not supported (it used 32-bit counts); only versions 2 and 3 are "
        "read: convert the model again with a current llama.cpp");
  }
  if (file->version_ != 2 && file->version_ != 3) {
    std::string hint;
    if (__builtin_bswap32(file->version_) == 2 || __builtin_bswap32(file->version_) == 3) {
      hint = " (a big-endian GGUF file? only little-endian files are supported)";
    }
    return UnimplementedError(Cat("unsupported GGUF version ", file->version_,
                                  " (expected 2 or 3)", hint));
  }
  uint64_t num_tensors = 0, num_metadata = 0;
  KV_RETURN_IF_ERROR(r.Read(&num_tensors, "tensor count"));
  KV_RETURN_IF_ERROR(r.Read(&num_metadata, "metadata count"));
  if (num_tensors > limits.max_tensors) {
    return InvalidArgumentError(Cat("tensor count ", num_tensors, " exceeds the limit of ",
                                    limits.max_tensors));
  }
  if (num_metadata > limits.max_metadata) {
    return InvalidArgumentError(Cat("metadata count ", num_metadata, " exceeds the limit of ",
                                    limits.max_metadata));
  }
  // Both counts are now at most 2^32-ish, so these products cannot overflow.
  if (num_metadata * kMinKvBytes > r.remaining()) {
    return DataLossError(Cat("metadata count ", num_metadata, " cannot fit in the ",
                             r.remaining(), " bytes after the header"));
  }
  if (num_tensors * kMinTensorInfoBytes + num_metadata * kMinKvBytes > r.remaining()) {
    return DataLossError(Cat("tensor count ", num_tensors, " cannot fit in the ", r.remaining(),
                             " bytes after the header"));
  }

  // Metadata.
  ParseBudget budget{limits.max_array_elems, limits.max_array_elems / 64};
  file->metadata_.reserve(num_metadata);
  for (uint64_t k = 0; k < num_metadata; ++k) {
    uint64_t key_pos = r.pos();
    std::string key;
    KV_RETURN_IF_ERROR(r.ReadString(&key, kMaxKeyBytes, Cat("metadata key #", k)));
    if (key.empty()) {
      return InvalidArgumentError(Cat("metadata key #", k, " at byte offset ", key_pos,
                                      " is empty"));
    }
    std::string what = Cat("metadata key ", Quote(key), " (#", k, " at byte offset ", key_pos,
                           ")");
    if (file->metadata_index_.count(key) != 0) {
      return InvalidArgumentError(Cat("duplicate metadata key ", Quote(key), " at byte offset ",
                                      key_pos));
    }
    uint64_t type_pos = r.pos();
    uint32_t type_id = 0;
    KV_RETURN_IF_ERROR(r.Read(&type_id, what));
    if (!IsKnownType(type_id)) {
      return InvalidArgumentError(Cat(what, ": unknown value type ", type_id, " at byte offset ",
                                      type_pos));
    }
    GgufValue value;
    KV_RETURN_IF_ERROR(
        ReadValue(r, static_cast<GgufType>(type_id), 0, limits, &budget, what, &value));
    file->metadata_index_.emplace(key, file->metadata_.size());
    file->metadata_.emplace_back(std::move(key), std::move(value));
  }

  if (const GgufValue* a = file->Find("general.alignment")) {
    KV_RETURN_IF_ERROR(CheckAlignmentValue(*a));
    file->alignment_ = a->u;
  } else {
    file->alignment_ = kDefaultAlignment;
  }

  // Tensor infos.
  file->tensors_.reserve(num_tensors);
  for (uint64_t k = 0; k < num_tensors; ++k) {
    uint64_t info_pos = r.pos();
    GgufTensorInfo info;
    KV_RETURN_IF_ERROR(r.ReadString(&info.name, std::numeric_limits<uint64_t>::max(),
                                    Cat("tensor #", k, " name")));
    if (info.name.empty()) {
      return InvalidArgumentError(Cat("tensor #", k, " at byte offset ", info_pos,
                                      " has an empty name"));
    }
    if (info.name.size() > kMaxTensorNameBytes) {
      return InvalidArgumentError(Cat("tensor #", k, " at byte offset ", info_pos, " name ",
                                      Quote(info.name), " is ", info.name.size(),
                                      " bytes, over the limit of ", kMaxTensorNameBytes));
    }
    std::string what = Cat("tensor ", Quote(info.name), " (#", k, " at byte offset ", info_pos,
                           ")");
    if (file->tensor_index_.count(info.name) != 0) {
      return InvalidArgumentError(Cat("duplicate tensor name ", Quote(info.name),
                                      " at byte offset ", info_pos));
    }
    uint32_t num_dims = 0;
    KV_RETURN_IF_ERROR(r.Read(&num_dims, what));
    if (num_dims == 0 || num_dims > kMaxDims) {
      return InvalidArgumentError(Cat(what, ": n_dims is ", num_dims, " (must be 1..", kMaxDims,
                                      ")"));
    }
    uint64_t ne[kMaxDims] = {};
    int64_t num_elements = 1;
    for (uint32_t d = 0; d < num_dims; ++d) {
      KV_RETURN_IF_ERROR(r.Read(&ne[d], what));
      if (ne[d] == 0) {
        return InvalidArgumentError(Cat(what, ": dimension ", d, " is 0"));
      }
      if (ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return InvalidArgumentError(Cat(what, ": dimension ", d, " is negative (",
                                        static_cast<int64_t>(ne[d]), ")"));
      }
      if (__builtin_mul_overflow(num_elements, static_cast<int64_t>(ne[d]), &num_elements)) {
        return InvalidArgumentError(Cat(what, ": element count overflows 64 bits"));
      }
    }
    uint32_t ggml_type = 0;
    KV_RETURN_IF_ERROR(r.Read(&ggml_type, what));
    std::optional<DType> dtype = DTypeFromGgml(ggml_type);
    if (!dtype) {
      const char* name = GgmlTypeName(ggml_type);
      if (name == nullptr) {
        return InvalidArgumentError(Cat(what, ": unknown ggml type ", ggml_type,
                                        "; kvserve loads ", kLoadableTypes));
      }
      return UnimplementedError(Cat(what, ": tensor type ", name, " (ggml type ", ggml_type,
                                    ") is not supported; kvserve loads ", kLoadableTypes));
    }
    info.dtype = *dtype;
    KV_RETURN_IF_ERROR(r.Read(&info.offset, what));
    if (info.offset % file->alignment_ != 0) {
      return InvalidArgumentError(Cat(what, ": data offset ", info.offset,
                                      " is not a multiple of the alignment ", file->alignment_));
    }
    int64_t block_elems = DTypeBlockElems(info.dtype);
    if (static_cast<int64_t>(ne[0]) % block_elems != 0) {
      return InvalidArgumentError(Cat(what, ": row length (inner dimension) ", ne[0],
                                      " is not a multiple of ", block_elems, ", the ",
                                      GgmlTypeName(ggml_type), " block size: ",
                                      GgmlTypeName(ggml_type),
                                      " rows must be whole blocks"));
    }
    // rows * DTypeRowBytes(dtype, ne[0]), computed so that an overflow is caught.
    int64_t num_bytes = 0;
    if (__builtin_mul_overflow(num_elements / block_elems, DTypeBlockBytes(info.dtype),
                               &num_bytes)) {
      return InvalidArgumentError(Cat(what, ": byte size overflows 64 bits"));
    }
    info.num_bytes = static_cast<uint64_t>(num_bytes);
    for (uint32_t d = num_dims; d-- > 0;) info.shape.push_back(static_cast<int64_t>(ne[d]));
    file->tensor_index_.emplace(info.name, file->tensors_.size());
    file->tensors_.push_back(std::move(info));
  }

  // Data section: starts at the next multiple of the alignment. A file without tensors may
  // end right after its infos.
  file->data_offset_ = AlignUp(r.pos(), file->alignment_);
  if (!file->tensors_.empty()) {
    if (file->data_offset_ > file->size_) {
      return DataLossError(Cat("truncated file: the data section starts at byte offset ",
                               file->data_offset_, ", past the end of the file (",
                               file->size_, " bytes)"));
    }
    uint64_t data_bytes = file->size_ - file->data_offset_;
    for (const GgufTensorInfo& t : file->tensors_) {
      if (t.offset > data_bytes) {
        return DataLossError(Cat("tensor ", Quote(t.name), ": data offset ", t.offset,
                                 " is past the end of the data section (", data_bytes,
                                 " bytes from byte offset ", file->data_offset_, ")"));
      }
      if (t.num_bytes > data_bytes - t.offset) {
        return DataLossError(Cat("tensor ", Quote(t.name), ": data (", t.num_bytes,
                                 " bytes at data offset ", t.offset,
                                 ") runs past the end of the file (data section has ",
                                 data_bytes, " bytes)"));
      }
      uint64_t absolute = file->data_offset_ + t.offset;
      if (absolute % ElementAlignment(t.dtype) != 0) {
        return InvalidArgumentError(Cat("tensor ", Quote(t.name), ": data at byte offset ",
                                        absolute, " is not aligned to its ",
                                        ElementAlignment(t.dtype), "-byte elements"));
      }
    }
    // No two tensors may share bytes (checked in offset order; sizes are in bounds now).
    std::vector<const GgufTensorInfo*> by_offset;
    for (const GgufTensorInfo& t : file->tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const auto* a, const auto* b) { return a->offset < b->offset; });
    for (size_t k = 1; k < by_offset.size(); ++k) {
      const GgufTensorInfo& prev = *by_offset[k - 1];
      const GgufTensorInfo& next = *by_offset[k];
      if (prev.offset + prev.num_bytes > next.offset) {
        return InvalidArgumentError(Cat("tensor ", Quote(next.name), " at data offset ",
                                        next.offset, " overlaps tensor ", Quote(prev.name),
                                        " (", prev.num_bytes, " bytes at data offset ",
                                        prev.offset, ")"));
      }
    }
  }
  return file;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundError(Cat("metadata key ", Quote(key), " not found"));
  if (v->type != GgufType::kString) {
    return InvalidArgumentError(Cat("metadata key ", Quote(key), " is ", GgufTypeName(v->type),
                                    ", not a string"));
  }
  return v->s;
}

StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundError(Cat("metadata key ", Quote(key), " not found"));
  if (!v->is_integer()) {
    return InvalidArgumentError(Cat("metadata key ", Quote(key), " is ", GgufTypeName(v->type),
                                    ", not an integer"));
  }
  if (v->type == GgufType::kUint64 &&
      v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return OutOfRangeError(Cat("metadata key ", Quote(key), " value ", v->u,
                               " does not fit in int64"));
  }
  return v->i;
}

StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundError(Cat("metadata key ", Quote(key), " not found"));
  if (v->is_float()) return v->f;
  if (v->is_integer() && v->type != GgufType::kBool) {
    return v->type == GgufType::kUint64 ? static_cast<double>(v->u) : static_cast<double>(v->i);
  }
  return InvalidArgumentError(Cat("metadata key ", Quote(key), " is ", GgufTypeName(v->type),
                                  ", not a number"));
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundError(Cat("metadata key ", Quote(key), " not found"));
  if (v->type != GgufType::kBool) {
    return InvalidArgumentError(Cat("metadata key ", Quote(key), " is ", GgufTypeName(v->type),
                                    ", not a bool"));
  }
  return v->b;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

StatusOr<Tensor> GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo* info = FindTensor(name);
  if (info == nullptr) return NotFoundError(Cat("tensor ", Quote(name), " not found in ", path_));
  Tensor t;
  t.dtype = info->dtype;
  t.shape = info->shape;
  t.data = base_ + data_offset_ + info->offset;
  t.owner = mapping_;
  return t;
}

// ---------------------------------------------------------------------------------------------
// GgufWriter

namespace {

template <typename T>
void Append(std::string* out, T x) {
  char buf[sizeof(T)];
  std::memcpy(buf, &x, sizeof(T));
  out->append(buf, sizeof(T));
}

void AppendString(std::string* out, std::string_view s) {
  Append<uint64_t>(out, s.size());
  out->append(s);
}

// Appends integer `i` (or `u` for uint64) as type `t`, refusing values out of its range.
Status AppendInteger(std::string* out, GgufType t, int64_t i, uint64_t u, std::string_view what) {
  auto range = [&](int64_t lo, int64_t hi) -> Status {
    if (i < lo || i > hi) {
      return InvalidArgumentError(Cat(what, ": value ", i, " does not fit in ", GgufTypeName(t)));
    }
    return OkStatus();
  };
  switch (t) {
    case GgufType::kUint8: KV_RETURN_IF_ERROR(range(0, UINT8_MAX)); Append<uint8_t>(out, i); break;
    case GgufType::kInt8: KV_RETURN_IF_ERROR(range(INT8_MIN, INT8_MAX)); Append<int8_t>(out, i); break;
    case GgufType::kUint16: KV_RETURN_IF_ERROR(range(0, UINT16_MAX)); Append<uint16_t>(out, i); break;
    case GgufType::kInt16: KV_RETURN_IF_ERROR(range(INT16_MIN, INT16_MAX)); Append<int16_t>(out, i); break;
    case GgufType::kUint32: KV_RETURN_IF_ERROR(range(0, UINT32_MAX)); Append<uint32_t>(out, i); break;
    case GgufType::kInt32: KV_RETURN_IF_ERROR(range(INT32_MIN, INT32_MAX)); Append<int32_t>(out, i); break;
    case GgufType::kInt64: Append<int64_t>(out, i); break;
    case GgufType::kUint64:
      // Values above INT64_MAX live only in u; otherwise i is authoritative.
      Append<uint64_t>(out, i != 0 ? static_cast<uint64_t>(i) : u);
      break;
    case GgufType::kBool: KV_RETURN_IF_ERROR(range(0, 1)); Append<uint8_t>(out, i); break;
    default: return InternalError("AppendInteger on a non-integer type");
  }
  return OkStatus();
}

Status AppendValue(std::string* out, const GgufValue& v, int depth, std::string_view what) {
  if (v.type == GgufType::kBool) {
    Append<uint8_t>(out, v.b ? 1 : 0);
    return OkStatus();
  }
  if (IsIntegerType(v.type)) return AppendInteger(out, v.type, v.i, v.u, what);
  if (v.type == GgufType::kFloat32) {
    Append<float>(out, static_cast<float>(v.f));
    return OkStatus();
  }
  if (v.type == GgufType::kFloat64) {
    Append<double>(out, v.f);
    return OkStatus();
  }
  if (v.type == GgufType::kString) {
    AppendString(out, v.s);
    return OkStatus();
  }
  if (v.type != GgufType::kArray) {
    return InvalidArgumentError(Cat(what, ": unknown value type ", static_cast<uint32_t>(v.type)));
  }
  if (depth >= GgufLimits{}.max_array_depth) {
    return InvalidArgumentError(Cat(what, ": arrays nested too deep"));
  }
  if (!IsKnownType(static_cast<uint32_t>(v.array_type))) {
    return InvalidArgumentError(Cat(what, ": unknown array element type ",
                                    static_cast<uint32_t>(v.array_type)));
  }
  Append<uint32_t>(out, static_cast<uint32_t>(v.array_type));
  Append<uint64_t>(out, v.array_size());
  if (IsIntegerType(v.array_type)) {
    for (int64_t x : v.ints) {
      KV_RETURN_IF_ERROR(AppendInteger(out, v.array_type, x, static_cast<uint64_t>(x), what));
    }
  } else if (v.array_type == GgufType::kFloat32) {
    for (double x : v.floats) Append<float>(out, static_cast<float>(x));
  } else if (v.array_type == GgufType::kFloat64) {
    for (double x : v.floats) Append<double>(out, x);
  } else if (v.array_type == GgufType::kString) {
    for (const std::string& s : v.strings) AppendString(out, s);
  } else {
    for (const GgufValue& a : v.arrays) {
      if (a.type != GgufType::kArray) {
        return InvalidArgumentError(Cat(what, ": element of an array of arrays is ",
                                        GgufTypeName(a.type)));
      }
      KV_RETURN_IF_ERROR(AppendValue(out, a, depth + 1, what));
    }
  }
  return OkStatus();
}

Status WriteAll(int fd, const void* data, size_t num_bytes) {
  const char* p = static_cast<const char*>(data);
  while (num_bytes > 0) {
    ssize_t n = ::write(fd, p, num_bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return UnavailableError(Cat("write failed: ", std::strerror(errno)));
    }
    p += n;
    num_bytes -= static_cast<size_t>(n);
  }
  return OkStatus();
}

}  // namespace

void GgufWriter::Set(std::string key, GgufValue value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

Status GgufWriter::AddTensor(std::string name, const Tensor& tensor) {
  if (name.empty() || name.size() > kMaxTensorNameBytes) {
    return InvalidArgumentError(Cat("tensor name ", Quote(name), " must be 1..",
                                    kMaxTensorNameBytes, " bytes"));
  }
  for (const auto& [n, t] : tensors_) {
    if (n == name) return InvalidArgumentError(Cat("duplicate tensor name ", Quote(name)));
  }
  if (!GgmlFromDType(tensor.dtype)) {
    return InvalidArgumentError(Cat("tensor ", Quote(name), ": dtype ", DTypeName(tensor.dtype),
                                    " cannot be written to GGUF (", kLoadableTypes,
                                    " only)"));
  }
  if (tensor.shape.empty() || tensor.shape.size() > kMaxDims) {
    return InvalidArgumentError(Cat("tensor ", Quote(name), ": shape must have 1..", kMaxDims,
                                    " dimensions"));
  }
  int64_t num_elements = 1;
  for (int64_t d : tensor.shape) {
    if (d <= 0 || __builtin_mul_overflow(num_elements, d, &num_elements)) {
      return InvalidArgumentError(Cat("tensor ", Quote(name), ": bad shape ",
                                      tensor.ShapeString()));
    }
  }
  if (tensor.cols() % DTypeBlockElems(tensor.dtype) != 0) {
    return InvalidArgumentError(Cat("tensor ", Quote(name), ": inner dimension ", tensor.cols(),
                                    " is not a multiple of ", DTypeBlockElems(tensor.dtype)));
  }
  if (tensor.data == nullptr) {
    return InvalidArgumentError(Cat("tensor ", Quote(name), " has no data"));
  }
  tensors_.emplace_back(std::move(name), tensor);
  return OkStatus();
}

Status GgufWriter::Write(const std::string& path) const {
  uint64_t alignment = kDefaultAlignment;
  for (const auto& [k, v] : metadata_) {
    if (k == "general.alignment") {
      KV_RETURN_IF_ERROR(CheckAlignmentValue(v));
      alignment = v.u;
    }
  }
  std::string header;
  header.append(kMagic, 4);
  Append<uint32_t>(&header, 3);
  Append<uint64_t>(&header, tensors_.size());
  Append<uint64_t>(&header, metadata_.size());
  for (const auto& [k, v] : metadata_) {
    if (k.empty() || k.size() > kMaxKeyBytes) {
      return InvalidArgumentError(Cat("metadata key ", Quote(k), " must be 1..", kMaxKeyBytes,
                                      " bytes"));
    }
    AppendString(&header, k);
    Append<uint32_t>(&header, static_cast<uint32_t>(v.type));
    KV_RETURN_IF_ERROR(AppendValue(&header, v, 0, Cat("metadata key ", Quote(k))));
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const auto& [name, t] : tensors_) {
    AppendString(&header, name);
    Append<uint32_t>(&header, static_cast<uint32_t>(t.shape.size()));
    for (size_t d = t.shape.size(); d-- > 0;) Append<uint64_t>(&header, t.shape[d]);
    Append<uint32_t>(&header, *GgmlFromDType(t.dtype));
    offset = AlignUp(offset, alignment);
    offsets.push_back(offset);
    Append<uint64_t>(&header, offset);
    offset += static_cast<uint64_t>(t.num_bytes());
  }
  if (!tensors_.empty()) header.resize(AlignUp(header.size(), alignment), '\0');

  std::string tmp = path + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    return UnavailableError(Cat("cannot create a temporary file next to ", path, ": ",
                                std::strerror(errno)));
  }
  auto fail = [&](const Status& s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s.WithContext(Cat("writing ", path));
  };
  Status s = WriteAll(fd, header.data(), header.size());
  if (!s.ok()) return fail(s);
  uint64_t written = 0;
  const std::string zeros(alignment, '\0');
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const Tensor& t = tensors_[k].second;
    s = WriteAll(fd, zeros.data(), offsets[k] - written);
    if (!s.ok()) return fail(s);
    s = WriteAll(fd, t.data, static_cast<size_t>(t.num_bytes()));
    if (!s.ok()) return fail(s);
    written = offsets[k] + static_cast<uint64_t>(t.num_bytes());
  }
  if (::fchmod(fd, 0644) != 0 || ::fsync(fd) != 0) {
    return fail(UnavailableError(Cat("fsync failed: ", std::strerror(errno))));
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return UnavailableError(Cat("writing ", path, ": close failed: ", std::strerror(errno)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return UnavailableError(Cat("cannot rename ", tmp, " to ", path, ": ", std::strerror(err)));
  }
  return OkStatus();
}

}  // namespace kvserve
