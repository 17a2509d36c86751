// Filters, tests, methods of str/dict and the globals of the jinja subset (see jinja.h),
// following jinja2 3.x and Python 3 semantics.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <set>

#include "chat/jinja.h"
#include "chat/jinja_internal.h"

namespace kvserve::jinja::internal {

namespace {

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

StatusOr<int64_t> IntArg(const Value* v, int64_t def, const char* what) {
  if (v == nullptr || v->is_none()) return def;
  if (!v->is_int() && !v->is_bool()) return TypeError(std::string(what) + " must be an integer");
  return v->int_value();
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
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
    while (i < fmt.size() && std::strchr("-+ #0123456789.", fmt[i]) != nullptr) spec.push_back(fmt[i++]);
    if (i >= fmt.size()) return TypeError("incomplete format");
    const char conv = fmt[i];
    if (ai >= args.size()) return TypeError("not enough arguments for format string");
    const Value& v = args[ai++];
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
      "isalpha", "isalnum", "isspace", "islower", "isupper", "splitlines", "index"};
  return m;
}
const std::set<std::string>& DictMethods() {
  static const std::set<std::string> m = {"items", "keys", "values", "get"};
  return m;
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

// Sort key comparison (case-insensitive for strings unless case_sensitive).
StatusOr<bool> SortLess(const Value& a, const Value& b, bool case_sensitive) {
  if (!case_sensitive && a.is_string() && b.is_string()) return Lower(a.str()) < Lower(b.str());
  return PyLess(a, b);
}

StatusOr<Value> Attribute(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (numeric) {
      KV_ASSIGN_OR_RETURN(cur, GetItem(cur, Value::Int(std::stoll(part))));
    } else {
      KV_ASSIGN_OR_RETURN(cur, GetItem(cur, Value::String(part)));
    }
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

StatusOr<Value> SortedList(std::vector<Value> items, bool reverse, bool case_sensitive,
                           const Value* attribute) {
  std::vector<Value> keys;
  for (const Value& it : items) {
    if (attribute != nullptr && attribute->is_string()) {
      KV_ASSIGN_OR_RETURN(Value k, Attribute(it, attribute->str()));
      keys.push_back(k);
    } else {
      keys.push_back(it);
    }
  }
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Status err;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    if (!err.ok()) return false;
    StatusOr<bool> r = reverse ? SortLess(keys[y], keys[x], case_sensitive) : SortLess(keys[x], keys[y], case_sensitive);
    if (!r.ok()) {
      err = r.status();
      return false;
    }
    return *r;
  });
  if (!err.ok()) return err;
  std::vector<Value> out;
  for (size_t i : order) out.push_back(items[i]);
  return Value::List(std::move(out));
}

StatusOr<Value> ToJsonFilter(const Value& v, const CallArgs& a) {
  JsonDumpOptions o;
  const Value* ensure_ascii = Arg(a, 99, "ensure_ascii");
  const Value* indent = Arg(a, 0, "indent");
  const Value* separators = Arg(a, 99, "separators");
  const Value* sort_keys = Arg(a, 99, "sort_keys");
  if (ensure_ascii != nullptr) o.ensure_ascii = ensure_ascii->truthy();
  if (sort_keys != nullptr) o.sort_keys = sort_keys->truthy();
  if (indent != nullptr && !indent->is_none()) {
    if (indent->is_string()) {
      o.indent = indent->str();
    } else if (indent->is_int()) {
      o.indent = std::string(std::max<int64_t>(0, std::min<int64_t>(indent->int_value(), 1000)), ' ');
    } else {
      return TypeError("tojson: indent must be an integer or a string");
    }
    o.item_separator = ",";
  }
  if (separators != nullptr && !separators->is_none()) {
    if (!separators->is_list() || separators->items().size() != 2 || !separators->items()[0].is_string() ||
        !separators->items()[1].is_string()) {
      return TypeError("tojson: separators must be a pair of strings");
    }
    o.item_separator = separators->items()[0].str();
    o.key_separator = separators->items()[1].str();
  }
  KV_ASSIGN_OR_RETURN(std::string s, ToJson(v, o));
  return Value::String(std::move(s));
}

std::string Indent(const std::string& s, const std::string& ind, bool first, bool blank) {
  std::string text = s + "\n";
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n') {
      lines.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + ind;
      rv += lines[i];
    }
  } else {
    rv = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += ind;
      rv += lines[i];
    }
  }
  if (first) rv = ind + rv;
  return rv;
}

StatusOr<Value> PyRound(const Value& v, int64_t precision, const std::string& method) {
  if (!v.is_number()) return TypeError("round: a number is required, not " + TypeName(v));
  if (method == "common") {
    if (!v.is_float()) return Value::Int(v.int_value());
    if (precision == 0) return Value::Float(std::nearbyint(v.float_value()));
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)), v.float_value());
    return Value::Float(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  if (method == "ceil") return Value::Float(std::ceil(x) / scale);
  if (method == "floor") return Value::Float(std::floor(x) / scale);
  return TypeError("method must be common, ceil or floor");
}

const std::set<std::string>& FilterNames() {
  static const std::set<std::string> f = {
      "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first",
      "float", "forceescape", "format", "indent", "int", "items", "join", "last", "length",
      "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse", "round",
      "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson", "trim",
      "unique", "upper", "wordcount", "center", "truncate", "batch"};
  return f;
}
const std::set<std::string>& TestNames() {
  static const std::set<std::string> t = {
      "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even",
      "false", "filter", "float", "ge", ">=", "gt", ">", "greaterthan", "in", "integer",
      "iterable", "le", "<=", "lower", "lt", "<", "lessthan", "mapping", "ne", "!=", "none",
      "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper"};
  return t;
}

// select/reject/selectattr/rejectattr.
StatusOr<Value> SelectReject(Env& env, const Value& v, const CallArgs& a, bool select, bool by_attr) {
  KV_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (a.args.empty() || !a.args[0].is_string()) return TypeError("missing attribute name");
    attr = a.args[0].str();
    next = 1;
  }
  std::string test;
  CallArgs test_args;
  if (next < a.args.size()) {
    if (!a.args[next].is_string()) return TypeError("test name must be a string");
    test = a.args[next].str();
    test_args.args.assign(a.args.begin() + next + 1, a.args.end());
    test_args.kwargs = a.kwargs;
  }
  std::vector<Value> out;
  for (const Value& it : items) {
    Value x = it;
    if (by_attr) {
      KV_ASSIGN_OR_RETURN(x, Attribute(it, attr));
    }
    bool r;
    if (test.empty()) {
      r = x.truthy();
    } else {
      KV_ASSIGN_OR_RETURN(r, ApplyTest(env, test, x, test_args));
    }
    if (r == select) out.push_back(it);
  }
  return Value::List(std::move(out));
}

}  // namespace

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

bool HasFilter(const std::string& name) { return FilterNames().count(name) > 0; }
bool HasTest(const std::string& name) { return TestNames().count(name) > 0; }

StatusOr<bool> ApplyTest(Env& env, const std::string& name, const Value& v, const CallArgs& a) {
  const Value* arg = Arg(a, 0, "value");
  auto need_arg = [&]() -> Status {
    if (arg == nullptr) return TypeError("test '" + name + "' needs an argument");
    return OkStatus();
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.bool_value();
  if (name == "false") return v.is_bool() && !v.bool_value();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.is_namespace();
  if (name == "iterable") return v.is_undefined() || v.is_list() || v.is_string() || (v.is_dict() && !v.is_namespace());
  if (name == "sequence") return v.is_undefined() || v.is_list() || v.is_string() || (v.is_dict() && !v.is_namespace());
  if (name == "callable") return v.is_function();
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    KV_ASSIGN_OR_RETURN(Value r, CallStrMethod(v.str(), name == "lower" ? "islower" : "isupper", {}));
    return r.bool_value();
  }
  if (name == "filter") return v.is_string() && HasFilter(v.str());
  if (name == "test") return v.is_string() && HasTest(v.str());
  if (name == "odd" || name == "even") {
    if (!v.is_int() && !v.is_bool()) return TypeError("test '" + name + "' needs an integer");
    const int64_t r = ((v.int_value() % 2) + 2) % 2;
    return name == "odd" ? r == 1 : r == 0;
  }
  if (name == "divisibleby") {
    KV_RETURN_IF_ERROR(need_arg());
    if (!v.is_number() || !arg->is_number()) return TypeError("divisibleby needs numbers");
    if (arg->as_double() == 0) return TypeError("integer division or modulo by zero");
    if (v.is_float() || arg->is_float()) return std::fmod(v.as_double(), arg->as_double()) == 0.0;
    return v.int_value() % arg->int_value() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") {
    KV_RETURN_IF_ERROR(need_arg());
    return PyEqual(v, *arg);
  }
  if (name == "ne" || name == "!=") {
    KV_RETURN_IF_ERROR(need_arg());
    return !PyEqual(v, *arg);
  }
  if (name == "lt" || name == "<" || name == "lessthan") {
    KV_RETURN_IF_ERROR(need_arg());
    return PyLess(v, *arg);
  }
  if (name == "gt" || name == ">" || name == "greaterthan") {
    KV_RETURN_IF_ERROR(need_arg());
    return PyLess(*arg, v);
  }
  if (name == "le" || name == "<=") {
    KV_RETURN_IF_ERROR(need_arg());
    KV_ASSIGN_OR_RETURN(bool r, PyLess(*arg, v));
    return !r;
  }
  if (name == "ge" || name == ">=") {
    KV_RETURN_IF_ERROR(need_arg());
    KV_ASSIGN_OR_RETURN(bool r, PyLess(v, *arg));
    return !r;
  }
  if (name == "in") {
    KV_RETURN_IF_ERROR(need_arg());
    if (arg->is_string()) {
      if (!v.is_string()) return TypeError("'in <string>' requires string as left operand");
      return arg->str().find(v.str()) != std::string::npos;
    }
    if (arg->is_dict()) return arg->dict().Find(v) != nullptr;
    KV_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(*arg));
    for (const Value& x : items) {
      if (PyEqual(x, v)) return true;
    }
    return false;
  }
  if (name == "sameas") {
    KV_RETURN_IF_ERROR(need_arg());
    if (v.kind() != arg->kind()) return false;
    switch (v.kind()) {
      case Value::Kind::kNone:
      case Value::Kind::kUndefined: return true;
      case Value::Kind::kBool: return v.bool_value() == arg->bool_value();
      case Value::Kind::kInt: return v.int_value() == arg->int_value() && v.int_value() >= -5 && v.int_value() <= 256;
      case Value::Kind::kList: return &v.items() == &arg->items();
      case Value::Kind::kDict: return &v.dict() == &arg->dict();
      case Value::Kind::kFunction: return v.function() == arg->function();
      default: return false;
    }
  }
  (void)env;
  return TypeError("no test named '" + name + "'");
}

StatusOr<Value> ApplyFilter(Env& env, const std::string& name, const Value& v, const CallArgs& a) {
  auto text = [&]() { return ToPyStr(v); };
  if (name == "safe") return v;
  if (name == "string") return v.is_string() ? v : Value::String(text());
  if (name == "trim") {
    const Value* chars = Arg(a, 0, "chars");
    if (chars != nullptr && !chars->is_none() && !chars->is_string()) return TypeError("trim: chars must be a string");
    return Value::String(PyStrip(text(), (chars && chars->is_string()) ? &chars->str() : nullptr, true, true));
  }
  if (name == "upper") return Value::String(Upper(text()));
  if (name == "lower") return Value::String(Lower(text()));
  if (name == "title") return Value::String(Title(text()));
  if (name == "capitalize") return Value::String(Capitalize(text()));
  if (name == "e" || name == "escape" || name == "forceescape") return Value::String(HtmlEscape(text()));
  if (name == "replace") {
    const Value* from = Arg(a, 0, "old");
    const Value* to = Arg(a, 1, "new");
    if (from == nullptr || to == nullptr) return TypeError("replace needs two arguments");
    KV_ASSIGN_OR_RETURN(int64_t count, IntArg(Arg(a, 2, "count"), -1, "count"));
    return Value::String(Replace(text(), ToPyStr(*from), ToPyStr(*to), count));
  }
  if (name == "tojson") return ToJsonFilter(v, a);
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value::Int(CodePointLength(v.str()));
    if (v.is_list()) return Value::Int(static_cast<int64_t>(v.items().size()));
    if (v.is_dict() && !v.is_namespace()) return Value::Int(static_cast<int64_t>(v.dict().entries.size()));
    if (v.is_undefined()) return Value::Int(0);
    return TypeError("object of type '" + TypeName(v) + "' has no len()");
  }
  if (name == "wordcount") return Value::Int(static_cast<int64_t>(SplitWs(text(), -1).size()));
  if (name == "d" || name == "default") {
    const Value def = ArgOr(a, 0, "default_value", Value::String(""));
    const bool boolean = ArgOr(a, 1, "boolean", Value::Bool(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return def;
    return v;
  }
  if (name == "list") {
    KV_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    return Value::List(std::move(items));
  }
  if (name == "first" || name == "last") {
    KV_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    if (items.empty()) return Value::Undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::u32string cps = Decode(v.str());
      std::reverse(cps.begin(), cps.end());
      return Value::String(Encode(cps));
    }
    KV_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (name == "join") {
    KV_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    const Value sep = ArgOr(a, 0, "d", Value::String(""));
    const Value* attribute = Arg(a, 1, "attribute");
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += ToPyStr(sep);
      if (attribute != nullptr && !attribute->is_none()) {
        KV_ASSIGN_OR_RETURN(Value x, Attribute(items[i], ToPyStr(*attribute)));
        out += ToPyStr(x);
      } else {
        out += ToPyStr(items[i]);
      }
    }
    return Value::String(std::move(out));
  }
  if (name == "int") {
    const Value def = ArgOr(a, 0, "default", Value::Int(0));
    if (v.is_int() || v.is_bool()) return Value::Int(v.int_value());
    if (v.is_float()) {
      if (!std::isfinite(v.float_value()) || std::fabs(v.float_value()) >= 9.2e18) return def;
      return Value::Int(static_cast<int64_t>(std::trunc(v.float_value())));
    }
    if (v.is_string()) {
      const std::string s = PyStrip(v.str(), nullptr, true, true);
      std::string digits;
      for (char c : s) {
        if (c != '_') digits.push_back(c);
      }
      char* end = nullptr;
      errno = 0;
      const long long x = std::strtoll(digits.c_str(), &end, 10);
      if (!digits.empty() && end == digits.c_str() + digits.size() && errno == 0) return Value::Int(x);
      end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18) {
        return Value::Int(static_cast<int64_t>(std::trunc(d)));
      }
    }
    return def;
  }
  if (name == "float") {
    const Value def = ArgOr(a, 0, "default", Value::Float(0.0));
    if (v.is_number()) return Value::Float(v.as_double());
    if (v.is_string()) {
      const std::string s = PyStrip(v.str(), nullptr, true, true);
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size()) return Value::Float(d);
    }
    return def;
  }
  if (name == "abs") {
    if (v.is_float()) return Value::Float(std::fabs(v.float_value()));
    if (v.is_number()) return Value::Int(std::llabs(v.int_value()));
    return TypeError("bad operand type for abs(): '" + TypeName(v) + "'");
  }
  if (name == "round") {
    KV_ASSIGN_OR_RETURN(int64_t precision, IntArg(Arg(a, 0, "precision"), 0, "precision"));
    const Value method = ArgOr(a, 1, "method", Value::String("common"));
    return PyRound(v, precision, ToPyStr(method));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::List({});
    if (!v.is_dict() || v.is_namespace()) return TypeError("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict().entries) out.push_back(Value::List({k, x}, true));
    return Value::List(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_dict() || v.is_namespace()) return TypeError("You can only sort by either \"key\" or \"value\"");
    const bool case_sensitive = ArgOr(a, 0, "case_sensitive", Value::Bool(false)).truthy();
    const std::string by = ToPyStr(ArgOr(a, 1, "by", Value::String("key")));
    const bool reverse = ArgOr(a, 2, "reverse", Value::Bool(false)).truthy();
    if (by != "key" && by != "value") return TypeError("You can only sort by either \"key\" or \"value\"");
    std::vector<Value> pairs;
    for (const auto& [k, x] : v.dict().entries) pairs.push_back(Value::List({k, x}, true));
    Value key_attr = Value::String(by == "key" ? "0" : "1");
    KV_ASSIGN_OR_RETURN(Value sorted, SortedList(pairs, reverse, case_sensitive, &key_attr));
    std::vector<Value> items = sorted.items();
    return Value::List(std::move(items));
  }
  if (name == "sort") {
    KV_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    const bool reverse = ArgOr(a, 0, "reverse", Value::Bool(false)).truthy();
    const bool case_sensitive = ArgOr(a, 1, "case_sensitive", Value::Bool(false)).truthy();
    const Value* attribute = Arg(a, 2, "attribute");
    return SortedList(std::move(items), reverse, case_sensitive,
                      attribute != nullptr && !attribute->is_none() ? attribute : nullptr);
  }
  if (name == "unique") {
    KV_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    const bool case_sensitive = ArgOr(a, 0, "case_sensitive", Value::Bool(false)).truthy();
    const Value* attribute = Arg(a, 1, "attribute");
    std::vector<Value> seen, out;
    for (const Value& it : items) {
      Value key = it;
      if (attribute != nullptr && !attribute->is_none()) {
        KV_ASSIGN_OR_RETURN(key, Attribute(it, ToPyStr(*attribute)));
      }
      if (!case_sensitive && key.is_string()) key = Value::String(Lower(key.str()));
      bool dup = false;
      for (const Value& s : seen) {
        if (PyEqual(s, key)) dup = true;
      }
      if (dup) continue;
      seen.push_back(key);
      out.push_back(it);
    }
    return Value::List(std::move(out));
  }
  if (name == "min" || name == "max") {
    KV_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
    const bool case_sensitive = ArgOr(a, 0, "case_sensitive", Value::Bool(false)).truthy();
    const Value* attribute = Arg(a, 1, "attribute");
    KV_ASSIGN_OR_RETURN(Value sorted, SortedList(items, false, case_sensitive,
                                                 attribute != nullptr && !attribute->is_none() ? attribute : nullptr));
    return name == "min" ? sorted.items().front() : sorted.items().back();
  }
  if (name == "sum") {
    KV_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    const Value* attribute = Arg(a, 0, "attribute");
    Value total = ArgOr(a, 1, "start", Value::Int(0));
    for (const Value& it : items) {
      Value x = it;
      if (attribute != nullptr && !attribute->is_none()) {
        KV_ASSIGN_OR_RETURN(x, Attribute(it, ToPyStr(*attribute)));
      }
      if (!x.is_number() || !total.is_number()) return TypeError("unsupported operand type(s) for +");
      if (x.is_float() || total.is_float()) {
        total = Value::Float(total.as_double() + x.as_double());
      } else {
        int64_t r;
        if (__builtin_add_overflow(total.int_value(), x.int_value(), &r)) return TypeError("integer overflow");
        total = Value::Int(r);
      }
    }
    return total;
  }
  if (name == "select" || name == "reject") return SelectReject(env, v, a, name == "select", false);
  if (name == "selectattr" || name == "rejectattr") return SelectReject(env, v, a, name == "selectattr", true);
  if (name == "map") {
    KV_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    std::vector<Value> out;
    const Value* attribute = nullptr;
    for (const auto& [k, x] : a.kwargs) {
      if (k == "attribute") attribute = &x;
    }
    if (attribute != nullptr) {
      const Value* def = nullptr;
      for (const auto& [k, x] : a.kwargs) {
        if (k == "default") def = &x;
      }
      for (const Value& it : items) {
        KV_ASSIGN_OR_RETURN(Value x, Attribute(it, ToPyStr(*attribute)));
        if (x.is_undefined() && def != nullptr) x = *def;
        out.push_back(x);
      }
      return Value::List(std::move(out));
    }
    if (a.args.empty() || !a.args[0].is_string()) return TypeError("map: a filter name or attribute= is required");
    const std::string filter = a.args[0].str();
    if (!HasFilter(filter)) return TypeError("no filter named '" + filter + "'");
    CallArgs fa;
    fa.args.assign(a.args.begin() + 1, a.args.end());
    fa.kwargs = a.kwargs;
    for (const Value& it : items) {
      KV_ASSIGN_OR_RETURN(Value x, ApplyFilter(env, filter, it, fa));
      out.push_back(x);
    }
    return Value::List(std::move(out));
  }
  if (name == "attr") {
    const Value* n = Arg(a, 0, "name");
    if (n == nullptr || !n->is_string()) return TypeError("attr: name must be a string");
    return GetAttr(v, n->str());
  }
  if (name == "indent") {
    const Value width = ArgOr(a, 0, "width", Value::Int(4));
    const bool first = ArgOr(a, 1, "first", Value::Bool(false)).truthy();
    const bool blank = ArgOr(a, 2, "blank", Value::Bool(false)).truthy();
    std::string ind;
    if (width.is_string()) {
      ind = width.str();
    } else if (width.is_int()) {
      ind = std::string(std::clamp<int64_t>(width.int_value(), 0, 1000), ' ');
    } else {
      return TypeError("indent: width must be an integer or a string");
    }
    return Value::String(Indent(text(), ind, first, blank));
  }
  if (name == "format") {
    std::vector<Value> args = a.args;
    KV_ASSIGN_OR_RETURN(std::string s, PercentFormat(text(), args));
    return Value::String(std::move(s));
  }
  if (name == "center") {
    KV_ASSIGN_OR_RETURN(int64_t width, IntArg(Arg(a, 0, "width"), 80, "width"));
    const std::string s = text();
    const int64_t len = CodePointLength(s);
    if (width <= len) return Value::String(s);
    const int64_t pad = std::min<int64_t>(width, 100000) - len;
    const int64_t left = pad / 2 + (pad & width & 1);
    return Value::String(std::string(left, ' ') + s + std::string(pad - left, ' '));
  }
  if (name == "truncate" || name == "batch") return TypeError("filter '" + name + "' is not supported");
  return TypeError("no filter named '" + name + "'");
}

Value MakeGlobals(const Options& options, std::optional<std::time_t> now_unix_seconds,
                  std::vector<Value>* namespaces) {
  Value g = Value::Dict();
  auto add = [&](const char* name, std::function<StatusOr<Value>(const CallArgs&)> fn) {
    auto f = std::make_shared<Function>();
    f->name = name;
    f->builtin = std::move(fn);
    g.mutable_dict().Set(Value::String(name), Value::Func(std::move(f)));
  };
  const int64_t max_range = options.max_range;
  add("range", [max_range](const CallArgs& a) -> StatusOr<Value> {
    if (a.args.empty() || a.args.size() > 3) return TypeError("range expected 1 to 3 arguments");
    for (const Value& x : a.args) {
      if (!x.is_int() && !x.is_bool()) return TypeError("'" + TypeName(x) + "' object cannot be interpreted as an integer");
    }
    int64_t start = 0, stop, step = 1;
    if (a.args.size() == 1) {
      stop = a.args[0].int_value();
    } else {
      start = a.args[0].int_value();
      stop = a.args[1].int_value();
      if (a.args.size() == 3) step = a.args[2].int_value();
    }
    if (step == 0) return TypeError("range() arg 3 must not be zero");
    const double n = std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step)));
    if (n > static_cast<double>(max_range)) {
      return TypeError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(max_range) + ").");
    }
    std::vector<Value> items;
    for (int64_t i = 0, x = start; i < static_cast<int64_t>(n); ++i, x += step) items.push_back(Value::Int(x));
    return Value::List(std::move(items));
  });
  auto make_dict = [](const CallArgs& a, Value d) -> StatusOr<Value> {
    if (a.args.size() > 1) return TypeError("expected at most 1 positional argument");
    if (a.args.size() == 1) {
      if (!a.args[0].is_dict()) return TypeError("cannot convert '" + TypeName(a.args[0]) + "' to a mapping");
      for (const auto& [k, v] : a.args[0].dict().entries) d.mutable_dict().Set(k, v);
    }
    for (const auto& [k, v] : a.kwargs) d.mutable_dict().Set(Value::String(k), v);
    return d;
  };
  add("dict", [make_dict](const CallArgs& a) { return make_dict(a, Value::Dict()); });
  add("namespace", [make_dict, namespaces](const CallArgs& a) -> StatusOr<Value> {
    KV_ASSIGN_OR_RETURN(Value ns, make_dict(a, Value::Namespace()));
    if (namespaces != nullptr) namespaces->push_back(ns);
    return ns;
  });
  add("raise_exception", [](const CallArgs& a) -> StatusOr<Value> {
    const std::string msg = a.args.empty() ? "" : ToPyStr(a.args[0]);
    return InvalidArgumentError(std::string(kRaisePrefix) + msg);
  });
  const std::optional<std::time_t> now = now_unix_seconds;
  add("strftime_now", [now](const CallArgs& a) -> StatusOr<Value> {
    if (a.args.empty() || !a.args[0].is_string()) return TypeError("strftime_now expects a format string");
    const std::time_t t = now.value_or(std::time(nullptr));
    std::tm tm{};
    if (now.has_value()) {
      gmtime_r(&t, &tm);
    } else {
      localtime_r(&t, &tm);
    }
    char buf[512];
    const size_t n = std::strftime(buf, sizeof(buf), a.args[0].str().c_str(), &tm);
    if (n == 0 && !a.args[0].str().empty()) return TypeError("strftime_now: format too long or empty result");
    return Value::String(std::string(buf, n));
  });
  return g;
}

}  // namespace kvserve::jinja::internal
