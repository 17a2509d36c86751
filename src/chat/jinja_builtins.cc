// Filters, tests and the globals of the jinja subset (see jinja.h), following jinja2 3.x and
// Python 3 semantics. Methods of str and dict values are in jinja_methods.cc.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <set>
#include <utility>

#include "chat/jinja.h"
#include "chat/jinja_internal.h"

namespace kvserve::jinja::internal {

namespace {

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
// As jinja2, a falsy input (None, undefined, empty, 0) gives an empty result without being
// iterated, so `tools | selectattr(...)` works when tools is None.
StatusOr<Value> SelectReject(Env& env, const Value& v, const CallArgs& a, bool select, bool by_attr) {
  if (!v.truthy()) return Value::List({});
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
  // Markup-preserving filters keep the flag (Markup methods return Markup).
  auto same_kind = [&](std::string s) { return v.is_markup() ? Value::Markup(std::move(s)) : Value::String(std::move(s)); };
  if (name == "safe") return v.is_markup() ? v : Value::Markup(text());
  if (name == "string") return v.is_string() ? v : Value::String(text());
  if (name == "trim") {
    const Value* chars = Arg(a, 0, "chars");
    if (chars != nullptr && !chars->is_none() && !chars->is_string()) return TypeError("trim: chars must be a string");
    return same_kind(PyStrip(text(), (chars && chars->is_string()) ? &chars->str() : nullptr, true, true));
  }
  if (name == "upper") return same_kind(Upper(text()));
  if (name == "lower") return same_kind(Lower(text()));
  if (name == "title") return same_kind(Title(text()));
  if (name == "capitalize") return same_kind(Capitalize(text()));
  if ((name == "e" || name == "escape") && v.is_markup()) return v;
  if (name == "e" || name == "escape" || name == "forceescape") return Value::Markup(HtmlEscape(text()));
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
  // int(Undefined) / float(Undefined) raise in Python before the filter's fallback.
  if ((name == "int" || name == "float") && v.is_undefined()) {
    return TypeError(v.undefined_hint().empty() ? "undefined value" : v.undefined_hint());
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
    if (!v.truthy()) return Value::List({});  // jinja2: `if value:` before iterating
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
  if (name == "truncate") {  // jinja2's do_truncate with the default leeway of 5
    KV_ASSIGN_OR_RETURN(int64_t length, IntArg(Arg(a, 0, "length"), 255, "length"));
    const bool killwords = ArgOr(a, 1, "killwords", Value::Bool(false)).truthy();
    const std::string end = ToPyStr(ArgOr(a, 2, "end", Value::String("...")));
    KV_ASSIGN_OR_RETURN(int64_t leeway, IntArg(Arg(a, 3, "leeway"), 5, "leeway"));
    const std::u32string s = Decode(text()), e = Decode(end);
    if (length < static_cast<int64_t>(e.size()) || leeway < 0) return TypeError("truncate: bad length or leeway");
    if (static_cast<int64_t>(s.size()) <= length + leeway) return Value::String(text());
    std::u32string head = s.substr(0, length - e.size());
    if (!killwords) {
      const size_t sp = head.rfind(U' ');
      if (sp != std::u32string::npos) head = head.substr(0, sp);
    }
    return Value::String(Encode(head) + end);
  }
  if (name == "batch") {
    KV_ASSIGN_OR_RETURN(int64_t count, IntArg(Arg(a, 0, "linecount"), 1, "linecount"));
    if (count <= 0) return TypeError("batch: linecount must be positive");
    const Value* fill = Arg(a, 1, "fill_with");
    KV_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    std::vector<Value> out, cur;
    for (Value& it : items) {
      if (static_cast<int64_t>(cur.size()) == count) out.push_back(Value::List(std::exchange(cur, {})));
      cur.push_back(std::move(it));
    }
    if (!cur.empty()) {
      while (fill != nullptr && !fill->is_none() && static_cast<int64_t>(cur.size()) < count) cur.push_back(*fill);
      out.push_back(Value::List(std::move(cur)));
    }
    return Value::List(std::move(out));
  }
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
