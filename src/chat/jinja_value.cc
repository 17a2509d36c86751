// jinja::Value, Python-style printing (str/repr) and json.dumps. See jinja.h.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/check.h"
#include "base/utf8.h"
#include "chat/jinja.h"
#include "chat/jinja_internal.h"

namespace kvserve::jinja {

Value Value::Undefined(std::string hint) {
  Value v;
  v.s_ = std::move(hint);
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  v.i_ = b ? 1 : 0;
  v.f_ = v.i_;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  v.f_ = static_cast<double>(i);
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::move(s);
  return v;
}
Value Value::Markup(std::string s) {
  Value v = String(std::move(s));
  v.markup_ = true;
  return v;
}
Value Value::List(std::vector<Value> items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ValueList>();
  v.list_->items = std::move(items);
  v.list_->is_tuple = is_tuple;
  return v;
}
Value Value::Dict() {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<ValueDict>();
  return v;
}
Value Value::Namespace() {
  Value v = Dict();
  v.dict_->is_namespace = true;
  return v;
}
Value Value::Func(std::shared_ptr<Function> f) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.fn_ = std::move(f);
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return None();
    case nlohmann::ordered_json::value_t::boolean: return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Float(static_cast<double>(u));
      return Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Dict();
      for (auto it = j.begin(); it != j.end(); ++it) {
        d.dict_->entries.emplace_back(String(it.key()), FromJson(it.value()));
      }
      return d;
    }
    default: return None();
  }
}

bool Value::is_tuple() const { return kind_ == Kind::kList && list_->is_tuple; }
bool Value::is_namespace() const { return kind_ == Kind::kDict && dict_->is_namespace; }

const std::vector<Value>& Value::items() const {
  KV_CHECK(kind_ == Kind::kList);
  return list_->items;
}
std::vector<Value>& Value::mutable_items() {
  KV_CHECK(kind_ == Kind::kList);
  return list_->items;
}
const ValueDict& Value::dict() const {
  KV_CHECK(kind_ == Kind::kDict);
  return *dict_;
}
ValueDict& Value::mutable_dict() {
  KV_CHECK(kind_ == Kind::kDict);
  return *dict_;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0.0;
    case Kind::kString: return !s_.empty();
    case Kind::kList: return !list_->items.empty();
    case Kind::kDict: return dict_->is_namespace || !dict_->entries.empty();
    case Kind::kFunction: return true;
  }
  return false;
}

const Value* ValueDict::Find(const Value& key) const {
  for (const auto& [k, v] : entries) {
    if (internal::PyEqual(k, key)) return &v;
  }
  return nullptr;
}
const Value* ValueDict::Find(const std::string& key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}
void ValueDict::Set(const Value& key, Value value) {
  for (auto& [k, v] : entries) {
    if (internal::PyEqual(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

namespace internal {

bool PyEqual(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!PyEqual(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.is_namespace() || b.is_namespace()) return &a.dict() == &b.dict();
      const auto& x = a.dict().entries;
      const auto& y = b.dict().entries;
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* o = b.dict().Find(k);
        if (o == nullptr || !PyEqual(v, *o)) return false;
      }
      return true;
    }
    case Value::Kind::kFunction: return a.function() == b.function();
    default: return false;
  }
}

// ---- UTF-8 ----------------------------------------------------------------------------------

std::u32string Decode(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int len = 0;
    char32_t cp = 0;
    if (c < 0x80) {
      out.push_back(c);
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    }
    bool ok = len > 0 && i + len <= n;
    for (int k = 1; ok && k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
               cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) {
      ok = false;
    }
    if (!ok) {
      out.push_back(0xDC00 | c);  // surrogateescape: the raw byte round-trips
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

void AppendUtf8(std::string& out, char32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // a raw byte kept as a lone surrogate (surrogateescape)
    out.push_back(static_cast<char>(cp & 0xFF));
  } else {
    ::kvserve::AppendUtf8(static_cast<uint32_t>(cp), &out);
  }
}

std::string Encode(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(out, c);
  return out;
}

bool IsAscii(const std::string& s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

int64_t CodePointLength(const std::string& s) {
  if (IsAscii(s)) return static_cast<int64_t>(s.size());
  return static_cast<int64_t>(Decode(s).size());
}

bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace internal

using internal::AppendUtf8;
using internal::Decode;

// ---- printing -------------------------------------------------------------------------------

std::string PyFloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0.0) return std::signbit(f) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // like "-1.2345e+17"
  bool neg = false;
  size_t p = 0;
  if (sci[0] == '-') {
    neg = true;
    p = 1;
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t k = p; k < e; ++k) {
    if (sci[k] != '.') digits.push_back(sci[k]);
  }
  const int exp = std::stoi(sci.substr(e + 1));
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
      while (static_cast<int>(ip.size()) < exp + 1) ip.push_back('0');
      std::string fp = digits.size() > static_cast<size_t>(exp + 1) ? digits.substr(exp + 1) : "0";
      out += ip + "." + fp;
    } else {
      out += "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[32];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return out;
}

namespace {

bool IsPyPrintable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c >= 0x80 && c <= 0xA0) return false;
  if (c == 0xAD) return false;
  if (c >= 0x2028 && c <= 0x202E) return false;
  if (c >= 0x200B && c <= 0x200F) return false;
  if (c >= 0x2060 && c <= 0x2064) return false;
  if (c == 0xFEFF) return false;
  if (c >= 0xD800 && c <= 0xDFFF) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x205F || c == 0x3000) return false;
  return true;
}

std::string PyStrRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : Decode(s)) {
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c >= 0xDC80 && c <= 0xDCFF) {
      char b[16];
      std::snprintf(b, sizeof(b), "\\udc%02x", static_cast<unsigned>(c & 0xFF));
      out += b;
    } else if (!IsPyPrintable(c)) {
      char b[16];
      if (c < 0x100) {
        std::snprintf(b, sizeof(b), "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(b, sizeof(b), "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(b, sizeof(b), "\\U%08x", static_cast<unsigned>(c));
      }
      out += b;
    } else {
      AppendUtf8(out, c);
    }
  }
  out.push_back(q);
  return out;
}

void Repr(const Value& v, std::string& out, int depth);

void ReprContainer(const Value& v, std::string& out, int depth) {
  if (depth > 100) {
    out += "...";
    return;
  }
  if (v.is_list()) {
    const bool tuple = v.is_tuple();
    out += tuple ? "(" : "[";
    const auto& items = v.items();
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += ", ";
      Repr(items[i], out, depth + 1);
    }
    if (tuple && items.size() == 1) out += ",";
    out += tuple ? ")" : "]";
    return;
  }
  const bool ns = v.is_namespace();
  out += ns ? "<Namespace {" : "{";
  bool first = true;
  for (const auto& [k, val] : v.dict().entries) {
    if (!first) out += ", ";
    first = false;
    Repr(k, out, depth + 1);
    out += ": ";
    Repr(val, out, depth + 1);
  }
  out += ns ? "}>" : "}";
}

void Repr(const Value& v, std::string& out, int depth) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: out += "Undefined"; return;
    case Value::Kind::kString:
      if (v.is_markup()) out += "Markup(";
      out += PyStrRepr(v.str());
      if (v.is_markup()) out += ")";
      return;
    case Value::Kind::kList:
    case Value::Kind::kDict: ReprContainer(v, out, depth); return;
    default: out += ToPyStr(v); return;
  }
}

}  // namespace

std::string ToPyStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.bool_value() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.int_value());
    case Value::Kind::kFloat: return PyFloatRepr(v.float_value());
    case Value::Kind::kString: return v.str();
    case Value::Kind::kList:
    case Value::Kind::kDict: {
      std::string out;
      ReprContainer(v, out, 0);
      return out;
    }
    case Value::Kind::kFunction: return "<function " + v.function()->name + ">";
  }
  return "";
}

std::string ToPyRepr(const Value& v) {
  std::string out;
  Repr(v, out, 0);
  return out;
}

// ---- json.dumps -----------------------------------------------------------------------------

namespace {

void JsonString(const std::string& s, bool ensure_ascii, std::string& out) {
  out.push_back('"');
  auto u_escape = [&](unsigned x) {
    char b[16];
    std::snprintf(b, sizeof(b), "\\u%04x", x);
    out += b;
  };
  for (char32_t c : Decode(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20) {
      u_escape(c);
    } else if (ensure_ascii && c >= 0x7F) {
      if (c >= 0xDC80 && c <= 0xDCFF) {
        u_escape(c);
      } else if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        u_escape(0xD800 + (v >> 10));
        u_escape(0xDC00 + (v & 0x3FF));
      } else if (c == 0x7F) {
        out.push_back(0x7F);
      } else {
        u_escape(c);
      }
    } else {
      AppendUtf8(out, c);
    }
  }
  out.push_back('"');
}

std::string JsonFloat(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return PyFloatRepr(f);
}

Status Dump(const Value& v, const JsonDumpOptions& o, int level, std::string& out) {
  if (level > 200) return InvalidArgumentError("tojson: nesting too deep");
  auto newline = [&](int lvl) {
    out.push_back('\n');
    for (int k = 0; k < lvl; ++k) out += *o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return OkStatus();
    case Value::Kind::kBool: out += v.bool_value() ? "true" : "false"; return OkStatus();
    case Value::Kind::kInt: out += std::to_string(v.int_value()); return OkStatus();
    case Value::Kind::kFloat: out += JsonFloat(v.float_value()); return OkStatus();
    case Value::Kind::kString: JsonString(v.str(), o.ensure_ascii, out); return OkStatus();
    case Value::Kind::kList: {
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return OkStatus();
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        if (o.indent) newline(level + 1);
        KV_RETURN_IF_ERROR(Dump(items[i], o, level + 1, out));
      }
      if (o.indent) newline(level);
      out.push_back(']');
      return OkStatus();
    }
    case Value::Kind::kDict: {
      if (v.is_namespace()) return InvalidArgumentError("Object of type Namespace is not JSON serializable");
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& e : v.dict().entries) entries.push_back(&e);
      if (entries.empty()) {
        out += "{}";
        return OkStatus();
      }
      std::vector<std::string> keys;
      for (const auto* e : entries) {
        const Value& k = e->first;
        if (k.is_string()) {
          keys.push_back(k.str());
        } else if (k.is_bool()) {
          keys.push_back(k.bool_value() ? "true" : "false");
        } else if (k.is_int()) {
          keys.push_back(std::to_string(k.int_value()));
        } else if (k.is_float()) {
          keys.push_back(JsonFloat(k.float_value()));
        } else if (k.is_none()) {
          keys.push_back("null");
        } else {
          return InvalidArgumentError("keys must be str, int, float, bool or None");
        }
      }
      std::vector<size_t> order(entries.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      if (o.sort_keys) {
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t a, size_t b) { return keys[a] < keys[b]; });
      }
      out.push_back('{');
      bool first = true;
      for (size_t idx : order) {
        if (!first) out += o.item_separator;
        first = false;
        if (o.indent) newline(level + 1);
        JsonString(keys[idx], o.ensure_ascii, out);
        out += o.key_separator;
        KV_RETURN_IF_ERROR(Dump(entries[idx]->second, o, level + 1, out));
      }
      if (o.indent) newline(level);
      out.push_back('}');
      return OkStatus();
    }
    case Value::Kind::kUndefined:
      return InvalidArgumentError("Object of type Undefined is not JSON serializable");
    case Value::Kind::kFunction:
      return InvalidArgumentError("Object of type function is not JSON serializable");
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::string> ToJson(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  KV_RETURN_IF_ERROR(Dump(v, options, 0, out));
  return out;
}

}  // namespace kvserve::jinja
