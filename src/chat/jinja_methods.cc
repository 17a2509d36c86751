// Methods of str and dict values (s.strip(), d.items(), ...), attribute and item access, and
// the string helpers the filters share, following Python 3 semantics (see jinja.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "chat/jinja.h"
#include "chat/jinja_internal.h"

namespace kvserve::jinja::internal {
namespace {

// Simple case mapping: ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (what Python's
// str.upper/lower do for these blocks, minus the few special cases such as U+00DF).
char32_t ToUpperCp(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 0x20;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x178 &&
      c != 0x17F) {
    const bool odd_is_lower = (c < 0x138) || (c > 0x148 && c < 0x178);
    if (odd_is_lower ? (c & 1) : !(c & 1)) return c - 1;
    return c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 0x20;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x430 && c <= 0x44F) return c - 0x20;
  if (c >= 0x450 && c <= 0x45F) return c - 0x50;
  return c;
}
char32_t ToLowerCp(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    const bool odd_is_lower = (c < 0x138) || (c > 0x148 && c < 0x178);
    if (odd_is_lower ? !(c & 1) : (c & 1)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
  if (c >= 0x410 && c <= 0x42F) return c + 0x20;
  if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  return c;
}
bool IsCased(char32_t c) { return ToUpperCp(c) != c || ToLowerCp(c) != c; }

template <typename F>
std::string MapCps(const std::string& s, F f) {
  if (IsAscii(s)) {
    std::string out = s;
    for (char& c : out) c = static_cast<char>(f(static_cast<char32_t>(static_cast<unsigned char>(c))));
    return out;
  }
  std::u32string cps = Decode(s);
  for (char32_t& c : cps) c = f(c);
  return Encode(cps);
}

std::vector<std::string> SplitSep(const std::string& s, const std::string& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    const size_t f = s.find(sep, pos);
    if (f == std::string::npos) break;
    out.push_back(s.substr(pos, f - pos));
    pos = f + sep.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

std::vector<std::string> RSplitSep(const std::string& s, const std::string& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep.size()) break;
    const size_t f = s.rfind(sep, end - sep.size());
    if (f == std::string::npos) break;
    out.push_back(s.substr(f + sep.size(), end - f - sep.size()));
    end = f;
  }
  out.push_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

Value StringList(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  for (const auto& p : parts) items.push_back(Value::String(p));
  return Value::List(std::move(items));
}

// str.format with {}, {0}, {name} (no format specs).
StatusOr<std::string> BraceFormat(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out.push_back('}');
      ++i;
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) return TypeError("Single '{' encountered in format string");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!") != std::string::npos) return TypeError("format specs are not supported");
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_idx >= a.args.size()) return TypeError("Replacement index out of range");
      v = &a.args[auto_idx++];
    } else if (std::all_of(field.begin(), field.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); })) {
      const size_t k = std::stoul(field);
      if (k >= a.args.size()) return TypeError("Replacement index out of range");
      v = &a.args[k];
    } else {
      for (const auto& [name, val] : a.kwargs) {
        if (name == field) v = &val;
      }
      if (v == nullptr) return TypeError("KeyError: '" + field + "'");
    }
    out += ToPyStr(*v);
    i = close;
  }
  return out;
}

Value MakeMethod(const Value& self, const std::string& name);

const std::set<std::string>& StrMethods() {
  static const std::set<std::string> m = {
      "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower",
      "title", "capitalize", "replace", "find", "rfind", "count", "join", "format", "isdigit",
      "isalpha", "isalnum", "isspace", "islower", "isupper", "splitlines", "index", "center",
      "ljust", "rjust", "zfill", "partition", "rpartition", "istitle"};
  return m;
}
const std::set<std::string>& DictMethods() {
  static const std::set<std::string> m = {"items", "keys", "values", "get", "copy"};
  return m;
}

StatusOr<Value> CallDictMethod(const Value& d, const std::string& name, const CallArgs& a) {
  if (name == "items" || name == "keys" || name == "values") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.dict().entries) {
      if (name == "items") out.push_back(Value::List({k, v}, true));
      else out.push_back(name == "keys" ? k : v);
    }
    return Value::List(std::move(out));
  }
  if (name == "get") {
    const Value* key = Arg(a, 0, "key");
    if (key == nullptr) return TypeError("get expected at least 1 argument, got 0");
    const Value* v = d.dict().Find(*key);
    if (v != nullptr) return *v;
    return ArgOr(a, 1, "default", Value::None());
  }
  if (name == "copy") {  // a shallow copy: a new dict with the same entries
    Value c = Value::Dict();
    c.mutable_dict().entries = d.dict().entries;
    return c;
  }
  return TypeError("'dict' object has no attribute '" + name + "'");
}

Value MakeMethod(const Value& self, const std::string& name) {
  auto f = std::make_shared<Function>();
  f->name = name;
  if (self.is_string()) {
    const std::string s = self.str();
    f->builtin = [s, name](const CallArgs& a) { return CallStrMethod(s, name, a); };
  } else {
    f->builtin = [self, name](const CallArgs& a) { return CallDictMethod(self, name, a); };
  }
  return Value::Func(std::move(f));
}

}  // namespace

Status TypeError(std::string m) { return InvalidArgumentError(std::move(m)); }

// Positional argument `i` or keyword `name`, else nullptr.
const Value* Arg(const CallArgs& a, size_t i, const char* name) {
  if (i < a.args.size()) return &a.args[i];
  for (const auto& [k, v] : a.kwargs) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value ArgOr(const CallArgs& a, size_t i, const char* name, Value def) {
  const Value* v = Arg(a, i, name);
  return v != nullptr ? *v : def;
}

std::string Lower(const std::string& s) { return MapCps(s, ToLowerCp); }
std::string Upper(const std::string& s) { return MapCps(s, ToUpperCp); }
std::string Title(const std::string& s) {
  std::u32string cps = Decode(s);
  bool prev_cased = false;
  for (char32_t& c : cps) {
    if (IsCased(c)) {
      c = prev_cased ? ToLowerCp(c) : ToUpperCp(c);
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return Encode(cps);
}
std::string Capitalize(const std::string& s) {
  std::u32string cps = Decode(Lower(s));
  if (!cps.empty()) cps[0] = ToUpperCp(cps[0]);
  return Encode(cps);
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every code point
    const std::u32string cps = Decode(s);
    int64_t n = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (n < count) {
        out += to;
        ++n;
      }
      if (i < cps.size()) AppendUtf8(out, cps[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (n < count) {
    const size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += to;
    pos = f + from.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::vector<std::string> SplitWs(const std::string& s, int64_t maxsplit) {
  std::vector<std::string> out;
  const std::u32string cps = Decode(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && IsPySpace(cps[i])) ++i;
    if (i >= cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t end = cps.size();
      while (end > i && IsPySpace(cps[end - 1])) --end;
      out.push_back(Encode(cps.substr(i, end - i)));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !IsPySpace(cps[j])) ++j;
    out.push_back(Encode(cps.substr(i, j - i)));
    i = j;
  }
  return out;
}

StatusOr<int64_t> IntArg(const Value* v, int64_t def, const char* what) {
  if (v == nullptr || v->is_none()) return def;
  if (!v->is_int() && !v->is_bool()) return TypeError(std::string(what) + " must be an integer");
  return v->int_value();
}

// printf-style formatting ("%s" % x, "%s"|format(x)): %s %r %d %i %f %x %% with optional
// width/precision.
StatusOr<std::string> PercentFormat(const std::string& fmt, const std::vector<Value>& args) {
  std::string out;
  size_t ai = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) return TypeError("incomplete format");
    if (fmt[i] == '%') {
      out.push_back('%');
      continue;
    }
    std::string spec = "%";
    const Value* mapped = nullptr;  // %(key)s: args is one mapping
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos) return TypeError("incomplete format key");
      if (args.size() != 1 || !args[0].is_dict()) return TypeError("format requires a mapping");
      mapped = args[0].dict().Find(fmt.substr(i + 1, close - i - 1));
      if (mapped == nullptr) return TypeError("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
      ai = args.size();
      i = close + 1;
    }
    while (i < fmt.size() && std::strchr("-+ #0123456789.", fmt[i]) != nullptr) spec.push_back(fmt[i++]);
    if (i >= fmt.size()) return TypeError("incomplete format");
    const char conv = fmt[i];
    if (mapped == nullptr && ai >= args.size()) return TypeError("not enough arguments for format string");
    const Value& v = mapped != nullptr ? *mapped : args[ai++];
    char buf[512];
    switch (conv) {
      case 's':
      case 'r': {
        const std::string s = conv == 's' ? ToPyStr(v) : ToPyRepr(v);
        spec += "s";
        std::snprintf(buf, sizeof(buf), spec.c_str(), s.c_str());
        out += spec == "%s" ? s : std::string(buf);
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X': {
        if (!v.is_number()) return TypeError("%d format: a number is required, not " + TypeName(v));
        spec += "ll";
        spec.push_back(conv == 'i' ? 'd' : conv);
        std::snprintf(buf, sizeof(buf), spec.c_str(),
                      static_cast<long long>(v.is_float() ? std::trunc(v.float_value()) : v.int_value()));
        out += buf;
        break;
      }
      case 'f':
      case 'e':
      case 'g': {
        if (!v.is_number()) return TypeError("must be real number, not " + TypeName(v));
        spec.push_back(conv);
        std::snprintf(buf, sizeof(buf), spec.c_str(), v.as_double());
        out += buf;
        break;
      }
      default: return TypeError(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (ai < args.size()) return TypeError("not all arguments converted during string formatting");
  return out;
}

StatusOr<Value> CallStrMethod(const std::string& s, const std::string& name, const CallArgs& a) {
  auto str_arg = [&](size_t i, const char* kw) -> const Value* {
    const Value* v = Arg(a, i, kw);
    return (v != nullptr && !v->is_none()) ? v : nullptr;
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* chars = str_arg(0, "chars");
    if (chars != nullptr && !chars->is_string()) return TypeError(name + " arg must be None or str");
    return Value::String(PyStrip(s, chars ? &chars->str() : nullptr, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const Value* sep = str_arg(0, "sep");
    KV_ASSIGN_OR_RETURN(int64_t maxsplit, IntArg(Arg(a, 1, "maxsplit"), -1, "maxsplit"));
    if (sep == nullptr) {
      if (name == "rsplit" && maxsplit >= 0) return TypeError("rsplit() without a separator is not supported with maxsplit");
      return StringList(SplitWs(s, maxsplit));
    }
    if (!sep->is_string()) return TypeError("must be str or None, not " + TypeName(*sep));
    if (sep->str().empty()) return TypeError("empty separator");
    return StringList(name == "split" ? SplitSep(s, sep->str(), maxsplit) : RSplitSep(s, sep->str(), maxsplit));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* p = Arg(a, 0, "prefix");
    if (p == nullptr) return TypeError(name + "() takes at least 1 argument");
    std::vector<Value> cands = p->is_list() ? p->items() : std::vector<Value>{*p};
    for (const Value& c : cands) {
      if (!c.is_string()) return TypeError(name + " first arg must be str or a tuple of str");
      const std::string& x = c.str();
      if (x.size() <= s.size() &&
          (name == "startswith" ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0)) {
        return Value::Bool(true);
      }
    }
    return Value::Bool(false);
  }
  if (name == "upper") return Value::String(Upper(s));
  if (name == "lower") return Value::String(Lower(s));
  if (name == "title") return Value::String(Title(s));
  if (name == "capitalize") return Value::String(Capitalize(s));
  if (name == "replace") {
    const Value* from = Arg(a, 0, "old");
    const Value* to = Arg(a, 1, "new");
    if (from == nullptr || to == nullptr || !from->is_string() || !to->is_string()) {
      return TypeError("replace() takes two str arguments");
    }
    KV_ASSIGN_OR_RETURN(int64_t count, IntArg(Arg(a, 2, "count"), -1, "count"));
    return Value::String(Replace(s, from->str(), to->str(), count));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "count") {
    const Value* sub = Arg(a, 0, "sub");
    if (sub == nullptr || !sub->is_string()) return TypeError(name + "() argument must be str");
    if (name == "count") {
      if (sub->str().empty()) return Value::Int(CodePointLength(s) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub->str()); p != std::string::npos; p = s.find(sub->str(), p + sub->str().size())) ++n;
      return Value::Int(n);
    }
    const size_t p = name == "rfind" ? s.rfind(sub->str()) : s.find(sub->str());
    if (p == std::string::npos) {
      if (name == "index") return TypeError("substring not found");
      return Value::Int(-1);
    }
    return Value::Int(CodePointLength(s.substr(0, p)));
  }
  if (name == "join") {
    const Value* it = Arg(a, 0, "iterable");
    if (it == nullptr) return TypeError("join() takes exactly one argument");
    KV_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(*it));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) return TypeError("sequence item " + std::to_string(i) + ": expected str instance, " + TypeName(items[i]) + " found");
      if (i) out += s;
      out += items[i].str();
    }
    return Value::String(std::move(out));
  }
  if (name == "format") {
    KV_ASSIGN_OR_RETURN(std::string out, BraceFormat(s, a));
    return Value::String(std::move(out));
  }
  if (name == "splitlines") {
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        lines.push_back(s.substr(start, i - start));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) lines.push_back(s.substr(start));
    return StringList(lines);
  }
  const std::u32string cps = Decode(s);
  auto all = [&](auto pred) {
    if (cps.empty()) return false;
    for (char32_t c : cps) {
      if (!pred(c)) return false;
    }
    return true;
  };
  if (name == "isdigit") return Value::Bool(all([](char32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha") return Value::Bool(all([](char32_t c) { return c < 128 && std::isalpha(static_cast<int>(c)); }));
  if (name == "isalnum") return Value::Bool(all([](char32_t c) { return c < 128 && std::isalnum(static_cast<int>(c)); }));
  if (name == "isspace") return Value::Bool(all([](char32_t c) { return IsPySpace(c); }));
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
    KV_ASSIGN_OR_RETURN(int64_t width, IntArg(Arg(a, 0, "width"), -1, "width"));
    if (width < 0 && Arg(a, 0, "width") == nullptr) return TypeError(name + "() takes at least 1 argument");
    const Value* fill = name == "zfill" ? nullptr : Arg(a, 1, "fillchar");
    if (fill != nullptr && (!fill->is_string() || CodePointLength(fill->str()) != 1)) {
      return TypeError("The fill character must be exactly one character long");
    }
    const std::string f = fill != nullptr ? fill->str() : std::string(name == "zfill" ? "0" : " ");
    const int64_t len = static_cast<int64_t>(cps.size());
    const int64_t pad = std::min<int64_t>(width, 100000) - len;
    if (pad <= 0) return Value::String(s);
    int64_t left = 0;
    if (name == "rjust") left = pad;
    if (name == "center") left = pad / 2 + (pad & width & 1);
    std::string out;
    size_t body = 0;
    if (name == "zfill") {
      left = pad;
      if (!cps.empty() && (cps[0] == '+' || cps[0] == '-')) {
        out.push_back(static_cast<char>(cps[0]));
        body = 1;
      }
    }
    for (int64_t k = 0; k < left; ++k) out += f;
    out += s.substr(body);
    for (int64_t k = left; k < pad; ++k) out += f;
    return Value::String(std::move(out));
  }
  if (name == "partition" || name == "rpartition") {
    const Value* sep = Arg(a, 0, "sep");
    if (sep == nullptr || !sep->is_string()) return TypeError("must be str");
    if (sep->str().empty()) return TypeError("empty separator");
    const size_t p = name == "partition" ? s.find(sep->str()) : s.rfind(sep->str());
    if (p == std::string::npos) {
      return name == "partition"
                 ? Value::List({Value::String(s), Value::String(""), Value::String("")}, true)
                 : Value::List({Value::String(""), Value::String(""), Value::String(s)}, true);
    }
    return Value::List({Value::String(s.substr(0, p)), *sep, Value::String(s.substr(p + sep->str().size()))}, true);
  }
  if (name == "istitle") {  // cased runs start upper, continue lower
    bool cased = false, prev_cased = false;
    for (char32_t c : cps) {
      if (!IsCased(c)) {
        prev_cased = false;
        continue;
      }
      const bool is_upper = ToLowerCp(c) != c;
      if (is_upper == prev_cased) return Value::Bool(false);
      prev_cased = true;
      cased = true;
    }
    return Value::Bool(cased);
  }
  if (name == "islower" || name == "isupper") {
    bool cased = false;
    for (char32_t c : cps) {
      if (!IsCased(c)) continue;
      cased = true;
      const bool is_upper = ToLowerCp(c) != c;
      if (name == "islower" ? is_upper : !is_upper) return Value::Bool(false);
    }
    return Value::Bool(cased);
  }
  return TypeError("'str' object has no attribute '" + name + "'");
}

std::string PyStrip(const std::string& s, const std::string* chars, bool left, bool right) {
  const std::u32string cps = Decode(s);
  std::u32string set;
  if (chars != nullptr) set = Decode(*chars);
  auto strip_it = [&](char32_t c) {
    if (chars == nullptr) return IsPySpace(c);
    return set.find(c) != std::u32string::npos;
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  if (b == 0 && e == cps.size()) return s;
  return Encode(cps.substr(b, e - b));
}

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return v.is_tuple() ? "tuple" : "list";
    case Value::Kind::kDict: return v.is_namespace() ? "Namespace" : "dict";
    case Value::Kind::kFunction: return "function";
  }
  return "object";
}

StatusOr<bool> PyLess(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.int_value() < b.int_value();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (PyEqual(x[i], y[i])) continue;
      return PyLess(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return TypeError("'<' not supported between instances of '" + TypeName(a) + "' and '" + TypeName(b) + "'");
}

StatusOr<std::vector<Value>> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return std::vector<Value>{};
    case Value::Kind::kList: return v.items();
    case Value::Kind::kDict: {
      if (v.is_namespace()) return TypeError("'Namespace' object is not iterable");
      std::vector<Value> keys;
      for (const auto& [k, val] : v.dict().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : Decode(v.str())) {
        std::string s;
        AppendUtf8(s, c);
        chars.push_back(Value::String(std::move(s)));
      }
      return chars;
    }
    default: return TypeError("'" + TypeName(v) + "' object is not iterable");
  }
}

StatusOr<Value> GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) {
    return TypeError(obj.undefined_hint().empty() ? "undefined value has no attribute '" + name + "'"
                                                   : obj.undefined_hint());
  }
  if (obj.is_namespace()) {
    const Value* v = obj.dict().Find(name);
    if (v != nullptr) return *v;
  } else if (obj.is_dict()) {
    if (DictMethods().count(name)) return MakeMethod(obj, name);
    const Value* v = obj.dict().Find(name);
    if (v != nullptr) return *v;
  } else if (obj.is_string()) {
    if (StrMethods().count(name)) return MakeMethod(obj, name);
  } else if (obj.is_list() && (name == "append" || name == "extend" || name == "pop" || name == "insert" ||
                               name == "remove" || name == "clear" || name == "sort" || name == "reverse")) {
    return TypeError("access to attribute '" + name + "' of 'list' object is unsafe");
  }
  return Value::Undefined("'" + TypeName(obj) + " object' has no attribute '" + name + "'");
}

StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) {
    return TypeError(obj.undefined_hint().empty() ? "undefined value is not subscriptable" : obj.undefined_hint());
  }
  if (obj.is_dict()) {
    const Value* v = obj.dict().Find(key);
    if (v != nullptr) return *v;
    if (key.is_string() && !obj.is_namespace()) return GetAttr(obj, key.str());
    return Value::Undefined("'" + TypeName(obj) + " object' has no attribute '" + ToPyStr(key) + "'");
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.int_value();
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined(TypeName(obj) + " object has no element " + std::to_string(key.int_value()));
      return obj.items()[i];
    }
    if (IsAscii(obj.str())) {
      const int64_t n = static_cast<int64_t>(obj.str().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined("str object has no element " + std::to_string(key.int_value()));
      return Value::String(std::string(1, obj.str()[i]));
    }
    const std::u32string cps = Decode(obj.str());
    const int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::Undefined("str object has no element " + std::to_string(key.int_value()));
    std::string s;
    AppendUtf8(s, cps[i]);
    return Value::String(std::move(s));
  }
  if (key.is_string()) return GetAttr(obj, key.str());
  return Value::Undefined("'" + TypeName(obj) + " object' has no element " + ToPyStr(key));
}

}  // namespace kvserve::jinja::internal
