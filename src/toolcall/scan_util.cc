#include "toolcall/scan_util.h"

#include <algorithm>
#include <cstdint>

#include "base/utf8.h"

namespace kvserve::toolcall {

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

size_t SkipSpace(std::string_view text, size_t pos) {
  while (pos < text.size() && IsSpace(text[pos])) ++pos;
  return pos;
}

bool StartsWithAt(std::string_view text, size_t pos, std::string_view prefix) {
  return pos <= text.size() && text.substr(pos).starts_with(prefix);
}

bool IsProperPrefixAt(std::string_view text, size_t pos, std::string_view marker) {
  if (pos > text.size()) return false;
  std::string_view rest = text.substr(pos);
  return rest.size() < marker.size() && marker.starts_with(rest);
}

MarkerMatch FindFirstMarker(std::string_view text, size_t from, const std::vector<std::string_view>& markers) {
  MarkerMatch best;
  for (size_t i = 0; i < markers.size(); ++i) {
    size_t p = text.find(markers[i], from);
    if (p == std::string_view::npos) continue;
    if (best.pos == std::string_view::npos || p < best.pos ||
        (p == best.pos && markers[i].size() > markers[best.index].size())) {
      best.pos = p;
      best.index = i;
    }
  }
  return best;
}

size_t PartialMarkerStart(std::string_view text, size_t from, const std::vector<std::string_view>& markers) {
  size_t longest = 0;
  for (std::string_view m : markers) longest = std::max(longest, m.size());
  size_t begin = text.size() > longest ? std::max(from, text.size() - longest) : from;
  for (size_t p = begin; p < text.size(); ++p) {
    for (std::string_view m : markers) {
      if (IsProperPrefixAt(text, p, m)) return p;
    }
  }
  return text.size();
}

JsonScan ScanJsonValue(std::string_view text, size_t pos, bool python_quotes) {
  JsonScan result;
  if (pos >= text.size() || (text[pos] != '{' && text[pos] != '[')) return result;
  std::string closers;  // expected closing brackets, innermost last
  char quote = 0;       // the open string's quote, 0 outside strings
  for (size_t i = pos; i < text.size(); ++i) {
    char c = text[i];
    if (quote != 0) {
      if (c == '\\') {
        ++i;  // the escaped character (an escape cut off at the end is incomplete)
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    switch (c) {
      case '\'':
        if (python_quotes) quote = c;
        break;
      case '"':
        quote = c;
        break;
      case '{':
      case '[':
        closers.push_back(c == '{' ? '}' : ']');
        if (static_cast<int>(closers.size()) > kMaxJsonDepth) return result;
        break;
      case '}':
      case ']':
        if (closers.empty() || closers.back() != c) return result;
        closers.pop_back();
        if (closers.empty()) {
          result.status = JsonScanStatus::kComplete;
          result.end = i + 1;
          return result;
        }
        break;
      default:
        break;
    }
  }
  result.status = JsonScanStatus::kIncomplete;
  return result;
}

std::optional<Json> ParseJson(std::string_view text) {
  Json value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return std::nullopt;
  return value;
}

std::string CompactJson(const Json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

std::optional<std::string> ArgumentsString(const Json* arguments) {
  if (arguments == nullptr || arguments->is_null()) return std::string("{}");
  if (arguments->is_object()) return CompactJson(*arguments);
  if (arguments->is_string()) {
    const std::string& s = arguments->get_ref<const std::string&>();
    size_t p = SkipSpace(s, 0);
    if (p == s.size()) return std::string("{}");
    JsonScan scan = ScanJsonValue(s, p);
    if (scan.status != JsonScanStatus::kComplete || SkipSpace(s, scan.end) != s.size()) return std::nullopt;
    std::optional<Json> parsed = ParseJson(s);
    if (!parsed || !parsed->is_object()) return std::nullopt;
    return CompactJson(*parsed);
  }
  return std::nullopt;
}

std::optional<ParsedCall> CallFromObject(const Json& object, std::string_view name_key,
                                         const std::vector<std::string_view>& args_keys,
                                         bool require_arguments) {
  if (!object.is_object()) return std::nullopt;
  auto name_it = object.find(std::string(name_key));
  if (name_it == object.end() || !name_it->is_string()) return std::nullopt;
  std::string name = name_it->get<std::string>();
  if (name.empty()) return std::nullopt;
  const Json* args = nullptr;
  for (std::string_view key : args_keys) {
    auto it = object.find(std::string(key));
    if (it != object.end()) {
      args = &*it;
      break;
    }
  }
  if (args == nullptr && require_arguments) return std::nullopt;
  std::optional<std::string> arguments = ArgumentsString(args);
  if (!arguments) return std::nullopt;
  return ParsedCall{std::move(name), std::move(*arguments)};
}

bool IsWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool IsNameChar(char c) { return IsWordChar(c) || c == '.' || c == '-' || c == ':'; }

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A Python string literal at text[pos] (' or "); *end one past the closing quote.
PyCallStatus ParsePyString(std::string_view text, size_t pos, std::string* out, size_t* end) {
  char quote = text[pos];
  for (size_t i = pos + 1; i < text.size(); ++i) {
    char c = text[i];
    if (c == quote) {
      *end = i + 1;
      return PyCallStatus::kOk;
    }
    if (c != '\\') {
      out->push_back(c);
      continue;
    }
    if (++i >= text.size()) return PyCallStatus::kIncomplete;
    char e = text[i];
    switch (e) {
      case 'n': out->push_back('\n'); break;
      case 't': out->push_back('\t'); break;
      case 'r': out->push_back('\r'); break;
      case '0': out->push_back('\0'); break;
      case '\\': case '\'': case '"': out->push_back(e); break;
      case 'u': {
        if (i + 4 >= text.size()) return PyCallStatus::kIncomplete;
        uint32_t cp = 0;
        for (int k = 1; k <= 4; ++k) {
          int h = HexValue(text[i + k]);
          if (h < 0) return PyCallStatus::kInvalid;
          cp = cp * 16 + h;
        }
        i += 4;
        AppendUtf8(cp, out);
        break;
      }
      default:
        out->push_back('\\');
        out->push_back(e);
    }
  }
  return PyCallStatus::kIncomplete;
}

// Recursive descent over one Python literal at text[*pos]; advances *pos.
std::optional<Json> ParsePyValue(std::string_view text, size_t* pos, int depth) {
  if (depth > kMaxJsonDepth) return std::nullopt;
  size_t p = SkipSpace(text, *pos);
  if (p >= text.size()) return std::nullopt;
  char c = text[p];
  if (c == '"' || c == '\'') {
    std::string s;
    size_t end = 0;
    if (ParsePyString(text, p, &s, &end) != PyCallStatus::kOk) return std::nullopt;
    *pos = end;
    return Json(std::move(s));
  }
  if (c == '{' || c == '[') {
    bool is_dict = c == '{';
    char close = is_dict ? '}' : ']';
    Json out = is_dict ? Json::object() : Json::array();
    p = SkipSpace(text, p + 1);
    while (true) {
      if (p >= text.size()) return std::nullopt;
      if (text[p] == close) {
        *pos = p + 1;
        return out;
      }
      if (is_dict) {
        size_t q = p;
        std::optional<Json> key = ParsePyValue(text, &q, depth + 1);
        if (!key || !key->is_string()) return std::nullopt;
        q = SkipSpace(text, q);
        if (q >= text.size() || text[q] != ':') return std::nullopt;
        ++q;
        std::optional<Json> value = ParsePyValue(text, &q, depth + 1);
        if (!value) return std::nullopt;
        out[key->get<std::string>()] = std::move(*value);
        p = q;
      } else {
        std::optional<Json> value = ParsePyValue(text, &p, depth + 1);
        if (!value) return std::nullopt;
        out.push_back(std::move(*value));
      }
      p = SkipSpace(text, p);
      if (p < text.size() && text[p] == ',') p = SkipSpace(text, p + 1);
      else if (p < text.size() && text[p] != close) return std::nullopt;
    }
  }
  size_t begin = p;
  while (p < text.size() && (IsWordChar(text[p]) || text[p] == '.' || text[p] == '-' || text[p] == '+')) ++p;
  std::string_view token = text.substr(begin, p - begin);
  *pos = p;
  if (token == "True" || token == "true") return Json(true);
  if (token == "False" || token == "false") return Json(false);
  if (token == "None" || token == "null") return Json(nullptr);
  std::optional<Json> number = token.empty() ? std::nullopt : ParseJson(token);
  if (!number || !number->is_number()) return std::nullopt;
  return number;
}

}  // namespace

std::optional<Json> ParsePythonLiteral(std::string_view text) {
  size_t pos = 0;
  std::optional<Json> value = ParsePyValue(text, &pos, 0);
  if (!value || SkipSpace(text, pos) != text.size()) return std::nullopt;
  return value;
}

PyCallArgs ParsePythonKwargs(std::string_view text, size_t pos) {
  PyCallArgs result;
  result.arguments = Json::object();
  size_t p = SkipSpace(text, pos);
  auto incomplete = [&] {
    result.status = PyCallStatus::kIncomplete;
    return result;
  };
  auto invalid = [&] {
    result.status = PyCallStatus::kInvalid;
    return result;
  };
  while (true) {
    if (p >= text.size()) return incomplete();
    if (text[p] == ')') {
      result.status = PyCallStatus::kOk;
      result.end = p + 1;
      return result;
    }
    size_t key_begin = p;
    while (p < text.size() && IsWordChar(text[p])) ++p;
    if (p >= text.size()) return incomplete();
    if (p == key_begin) return invalid();
    std::string key(text.substr(key_begin, p - key_begin));
    p = SkipSpace(text, p);
    if (p >= text.size()) return incomplete();
    if (text[p] != '=') return invalid();
    p = SkipSpace(text, p + 1);
    if (p >= text.size()) return incomplete();
    char c = text[p];
    if (c == '"' || c == '\'') {
      std::string value;
      size_t end = 0;
      PyCallStatus s = ParsePyString(text, p, &value, &end);
      if (s != PyCallStatus::kOk) return s == PyCallStatus::kIncomplete ? incomplete() : invalid();
      result.arguments[key] = value;
      p = end;
    } else if (c == '{' || c == '[') {
      JsonScan scan = ScanJsonValue(text, p);
      if (scan.status == JsonScanStatus::kIncomplete) return incomplete();
      if (scan.status == JsonScanStatus::kInvalid) return invalid();
      std::optional<Json> v = ParseJson(text.substr(p, scan.end - p));
      if (!v) return invalid();
      result.arguments[key] = std::move(*v);
      p = scan.end;
    } else {
      size_t begin = p;
      while (p < text.size() && (IsWordChar(text[p]) || text[p] == '.' || text[p] == '-' || text[p] == '+')) ++p;
      if (p >= text.size()) return incomplete();
      std::string_view token = text.substr(begin, p - begin);
      if (token == "True") {
        result.arguments[key] = true;
      } else if (token == "False") {
        result.arguments[key] = false;
      } else if (token == "None") {
        result.arguments[key] = nullptr;
      } else {
        std::optional<Json> v = ParseJson(token);
        if (!v || !v->is_number()) return invalid();
        result.arguments[key] = std::move(*v);
      }
    }
    p = SkipSpace(text, p);
    if (p >= text.size()) return incomplete();
    if (text[p] == ',') {
      p = SkipSpace(text, p + 1);
    } else if (text[p] != ')') {
      return invalid();
    }
  }
}

size_t CompleteUtf8Prefix(std::string_view text) {
  size_t n = text.size();
  // Walk back over at most 3 continuation bytes to the lead byte of the last sequence.
  size_t i = n;
  int continuation = 0;
  while (i > 0 && continuation < 4) {
    unsigned char c = static_cast<unsigned char>(text[i - 1]);
    if ((c & 0xC0) != 0x80) break;
    --i;
    ++continuation;
  }
  if (i == 0) return n;
  unsigned char lead = static_cast<unsigned char>(text[i - 1]);
  size_t need = 1;
  if ((lead & 0xE0) == 0xC0) {
    need = 2;
  } else if ((lead & 0xF0) == 0xE0) {
    need = 3;
  } else if ((lead & 0xF8) == 0xF0) {
    need = 4;
  } else {
    return n;  // ASCII or a stray byte: nothing to wait for
  }
  size_t have = static_cast<size_t>(continuation) + 1;
  return have < need ? i - 1 : n;
}

}  // namespace kvserve::toolcall
