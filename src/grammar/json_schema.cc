#include "grammar/json_schema.h"

#include <map>
#include <set>

#include "base/check.h"
#include "grammar/regex.h"

namespace kvserve::grammar {

namespace {

using json = nlohmann::ordered_json;

const std::set<std::string>& Annotations() {
  static const std::set<std::string> k = {"title",      "description", "default",   "examples",
                                          "$schema",    "$id",         "$comment",  "deprecated",
                                          "readOnly",   "writeOnly",   "$defs",     "definitions"};
  return k;
}

const std::set<std::string>& Supported() {
  static const std::set<std::string> k = {
      "type",     "properties", "required", "additionalProperties", "enum",      "const",
      "items",    "minItems",   "maxItems", "anyOf",                "oneOf",     "allOf",
      "$ref",     "minLength",  "maxLength", "pattern",             "format"};
  return k;
}

std::string EscapePointerToken(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string RuleHint(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    out += ok ? c : '-';
  }
  if (out.empty()) out = "value";
  return out.substr(0, 40);
}

class SchemaConverter {
 public:
  SchemaConverter(const json& root, const JsonSchemaOptions& options) : root_(root), options_(options) {}

  Grammar& grammar() { return g_; }

  Element Ws() {
    if (ws_ < 0) {
      ws_ = g_.NewRule("ws");
      g_.AddAlternative(ws_, {});
      g_.AddAlternative(ws_, {Element::Char(' ')});
      Sequence nl{Element::Char('\n')};
      if (options_.max_indent_chars > 0) {
        nl.push_back(g_.Repeat({Element::Set({{' ', ' '}, {'\t', '\t'}})}, 0,
                               options_.max_indent_chars, "ws-indent"));
      }
      g_.AddAlternative(ws_, std::move(nl));
    }
    return Element::Ref(ws_);
  }

  Element Lit(const std::string& text, const std::string& hint) {
    Sequence s;
    Grammar::AppendLiteral(&s, text);
    return g_.Alternatives({std::move(s)}, hint);
  }

  Element JsonChar() {
    if (char_ < 0) {
      char_ = g_.NewRule("json-char");
      g_.AddAlternative(char_, {Element::Set({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, true)});
      g_.AddAlternative(char_, {Element::Char('\\'), Element::Set({{'"', '"'}, {'\\', '\\'}, {'/', '/'},
                                                                   {'b', 'b'}, {'f', 'f'}, {'n', 'n'},
                                                                   {'r', 'r'}, {'t', 't'}})});
      Element hex = Element::Set({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
      g_.AddAlternative(char_, {Element::Char('\\'), Element::Char('u'), hex, hex, hex, hex});
    }
    return Element::Ref(char_);
  }

  Element String(int min_length, int max_length) {
    if (min_length == 0 && max_length < 0 && string_ >= 0) return Element::Ref(string_);
    const int32_t r = g_.NewRule("json-string");
    g_.AddAlternative(r, {Element::Char('"'), g_.Repeat({JsonChar()}, min_length, max_length, "json-chars"),
                          Element::Char('"')});
    if (min_length == 0 && max_length < 0) string_ = r;
    return Element::Ref(r);
  }

  Element Integer() {
    if (integer_ < 0) {
      integer_ = g_.NewRule("json-integer");
      Element digits = g_.Alternatives(
          {{Element::Char('0')}, {Element::Set({{'1', '9'}}), g_.Repeat({Element::Set({{'0', '9'}})}, 0, 15, "json-digits")}},
          "json-int-digits");
      g_.AddAlternative(integer_, {g_.Repeat({Element::Char('-')}, 0, 1, "json-minus"), digits});
    }
    return Element::Ref(integer_);
  }

  Element Number() {
    if (number_ < 0) {
      number_ = g_.NewRule("json-number");
      Element digit = Element::Set({{'0', '9'}});
      Element frac = g_.Repeat({Element::Char('.'), g_.Repeat({digit}, 1, 16, "json-frac-digits")}, 0, 1, "json-frac");
      Element exp = g_.Repeat({Element::Set({{'e', 'e'}, {'E', 'E'}}),
                               g_.Repeat({Element::Set({{'+', '+'}, {'-', '-'}})}, 0, 1, "json-exp-sign"),
                               g_.Repeat({digit}, 1, 2, "json-exp-digits")},
                              0, 1, "json-exp");
      g_.AddAlternative(number_, {Integer(), frac, exp});
    }
    return Element::Ref(number_);
  }

  Element Boolean() {
    if (boolean_ < 0) {
      Sequence t, f;
      Grammar::AppendLiteral(&t, "true");
      Grammar::AppendLiteral(&f, "false");
      boolean_ = g_.Alternatives({t, f}, "json-boolean").rule;
    }
    return Element::Ref(boolean_);
  }

  Element Null() {
    if (null_ < 0) null_ = Lit("null", "json-null").rule;
    return Element::Ref(null_);
  }

  // Any JSON value, any object, any array.
  Element AnyValue() {
    if (value_ < 0) {
      value_ = g_.NewRule("json-value");
      object_ = g_.NewRule("json-object");
      array_ = g_.NewRule("json-array");
      for (Element e : {Element::Ref(object_), Element::Ref(array_), String(0, -1), Number(), Boolean(), Null()}) {
        g_.AddAlternative(value_, {e});
      }
      Element value = Element::Ref(value_);
      Sequence kv = {String(0, -1), Ws(), Element::Char(':'), Ws(), value, Ws()};
      Sequence more_kv = {Element::Char(','), Ws()};
      more_kv.insert(more_kv.end(), kv.begin(), kv.end());
      Sequence members = kv;
      members.push_back(g_.Repeat(more_kv, 0, -1, "json-members"));
      g_.AddAlternative(object_, {Element::Char('{'), Ws(), g_.Repeat(members, 0, 1, "json-object-body"),
                                  Element::Char('}')});
      Sequence items = {value, Ws(), g_.Repeat({Element::Char(','), Ws(), value, Ws()}, 0, -1, "json-items")};
      g_.AddAlternative(array_, {Element::Char('['), Ws(), g_.Repeat(items, 0, 1, "json-array-body"),
                                 Element::Char(']')});
    }
    return Element::Ref(value_);
  }
  Element AnyObject() {
    AnyValue();
    return Element::Ref(object_);
  }

  Status Error(const std::string& what, const std::string& pointer) {
    return InvalidArgumentError("json_schema: " + what + " at " + (pointer.empty() ? "/" : pointer));
  }

  StatusOr<int> NonNegativeInt(const json& s, const char* key, const std::string& ptr, int dflt) {
    if (!s.contains(key)) return dflt;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 10000) {
      return Error(std::string("'") + key + "' must be an integer in [0, 10000]", ptr + "/" + key);
    }
    return static_cast<int>(v.get<int64_t>());
  }

  StatusOr<Element> Ref(const std::string& ref, const std::string& ptr) {
    auto it = refs_.find(ref);
    if (it != refs_.end()) return Element::Ref(it->second);
    if (ref.empty() || ref[0] != '#') {
      return Error("only local $ref ('#/...') is supported, got '" + ref + "'", ptr + "/$ref");
    }
    const json* target = nullptr;
    try {
      json::json_pointer jp(ref.substr(1));
      if (root_.contains(jp)) target = &root_.at(jp);
    } catch (const std::exception&) {
    }
    if (target == nullptr) return Error("$ref '" + ref + "' does not resolve", ptr + "/$ref");
    const size_t slash = ref.rfind('/');
    const int32_t r = g_.NewRule(RuleHint(slash == std::string::npos ? "ref" : ref.substr(slash + 1)));
    refs_[ref] = r;
    KV_ASSIGN_OR_RETURN(Element e, Visit(*target, ref.substr(1), "ref"));
    g_.AddAlternative(r, {e});
    return Element::Ref(r);
  }

  StatusOr<Element> Visit(const json& s, const std::string& ptr, const std::string& hint) {
    if (++depth_ > 64) return Error("schema nested too deeply", ptr);
    struct DepthGuard {
      int* d;
      ~DepthGuard() { --*d; }
    } guard{&depth_};
    if (s.is_boolean()) {
      if (!s.get<bool>()) return Error("schema 'false' matches nothing", ptr);
      return AnyValue();
    }
    if (!s.is_object()) return Error("a schema must be an object or a boolean", ptr);
    for (const auto& [key, value] : s.items()) {
      if (!Supported().count(key) && !Annotations().count(key)) {
        return Error("unsupported keyword '" + key + "'", ptr.empty() ? "/" + EscapePointerToken(key) : ptr + "/" + EscapePointerToken(key));
      }
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) return Error("'$ref' must be a string", ptr + "/$ref");
      return Ref(s["$ref"].get<std::string>(), ptr);
    }
    if (s.contains("const")) return Lit(s["const"].dump(), hint + "-const");
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) return Error("'enum' must be a non-empty array", ptr + "/enum");
      std::vector<Sequence> alts;
      for (const json& v : e) {
        Sequence seq;
        Grammar::AppendLiteral(&seq, v.dump());
        alts.push_back(std::move(seq));
      }
      return g_.Alternatives(std::move(alts), hint + "-enum");
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      if (!s.contains(key)) continue;
      const json& list = s[key];
      const std::string p = ptr + "/" + key;
      if (!list.is_array() || list.empty()) return Error(std::string("'") + key + "' must be a non-empty array", p);
      if (std::string(key) == "allOf" && list.size() != 1) {
        return Error("'allOf' with more than one schema is not supported", p);
      }
      std::vector<Sequence> alts;
      for (size_t i = 0; i < list.size(); ++i) {
        KV_ASSIGN_OR_RETURN(Element e, Visit(list[i], p + "/" + std::to_string(i), hint));
        alts.push_back({e});
      }
      return g_.Alternatives(std::move(alts), hint + "-alt");
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const json& x : t) {
          if (!x.is_string()) return Error("'type' entries must be strings", ptr + "/type");
          types.push_back(x.get<std::string>());
        }
      } else {
        return Error("'type' must be a string or a non-empty array of strings", ptr + "/type");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else {
      return AnyValue();
    }
    std::vector<Sequence> alts;
    for (const std::string& type : types) {
      Element e;
      if (type == "string") {
        KV_ASSIGN_OR_RETURN(e, StringSchema(s, ptr, hint));
      } else if (type == "number") {
        e = Number();
      } else if (type == "integer") {
        e = Integer();
      } else if (type == "boolean") {
        e = Boolean();
      } else if (type == "null") {
        e = Null();
      } else if (type == "object") {
        KV_ASSIGN_OR_RETURN(e, ObjectSchema(s, ptr, hint));
      } else if (type == "array") {
        KV_ASSIGN_OR_RETURN(e, ArraySchema(s, ptr, hint));
      } else {
        return Error("unknown type '" + type + "'", ptr + "/type");
      }
      alts.push_back({e});
    }
    if (alts.size() == 1) return alts[0][0];
    return g_.Alternatives(std::move(alts), hint + "-types");
  }

  StatusOr<Element> StringSchema(const json& s, const std::string& ptr, const std::string& hint) {
    KV_ASSIGN_OR_RETURN(int min_length, NonNegativeInt(s, "minLength", ptr, 0));
    KV_ASSIGN_OR_RETURN(int max_length, NonNegativeInt(s, "maxLength", ptr, -1));
    if (max_length >= 0 && max_length < min_length) return Error("maxLength < minLength", ptr);
    std::string pattern;
    std::string pattern_ptr;
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) return Error("'pattern' must be a string", ptr + "/pattern");
      pattern = s["pattern"].get<std::string>();
      pattern_ptr = ptr + "/pattern";
    } else if (s.contains("format")) {
      if (!s["format"].is_string()) return Error("'format' must be a string", ptr + "/format");
      // RFC 3339 full-date with the days of each month (February 29 only in leap years:
      // multiples of 4 but not of 100, or of 400), full-time with a time zone; emails with
      // dot-separated local atoms and hyphens only inside domain labels. Every string each
      // pattern accepts is valid for ajv-formats' "full" mode (tested in the e2e suite).
      static const std::string kDate =
          "([0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)"
          "|02-(0[1-9]|1[0-9]|2[0-8]))"
          "|([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26]|00)00)-02-29)";
      static const std::string kTime =
          R"(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))";
      static const std::map<std::string, std::string> kFormats = {
          {"date", kDate},
          {"time", kTime},
          {"date-time", kDate + "T" + kTime},
          {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
          {"email",
           R"([a-zA-Z0-9_%+-]{1,32}(\.[a-zA-Z0-9_%+-]{1,32}){0,3}@([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.){1,4}[a-zA-Z]{2,24})"},
      };
      const std::string format = s["format"].get<std::string>();
      auto it = kFormats.find(format);
      if (it == kFormats.end()) {
        return Error("unsupported format '" + format + "' (supported: date, time, date-time, uuid, email)",
                     ptr + "/format");
      }
      pattern = it->second;
      pattern_ptr = ptr + "/format";
    }
    if (pattern.empty() && !s.contains("pattern")) return String(min_length, max_length);
    if (s.contains("minLength") || s.contains("maxLength")) {
      return Error("'minLength'/'maxLength' together with 'pattern' or 'format' is not supported", ptr);
    }
    RegexOptions ro;
    ro.json_string = true;
    auto inner = AddRegex(&g_, pattern, ro);
    if (!inner.ok()) return Error(inner.status().message(), pattern_ptr);
    const int32_t r = g_.NewRule(hint + "-string");
    g_.AddAlternative(r, {Element::Char('"'), *inner, Element::Char('"')});
    return Element::Ref(r);
  }

  StatusOr<Element> ArraySchema(const json& s, const std::string& ptr, const std::string& hint) {
    KV_ASSIGN_OR_RETURN(int min_items, NonNegativeInt(s, "minItems", ptr, 0));
    KV_ASSIGN_OR_RETURN(int max_items, NonNegativeInt(s, "maxItems", ptr, -1));
    if (max_items >= 0 && max_items < min_items) return Error("maxItems < minItems", ptr);
    Element item;
    if (s.contains("items")) {
      KV_ASSIGN_OR_RETURN(item, Visit(s["items"], ptr + "/items", hint + "-item"));
    } else {
      item = AnyValue();
    }
    const int32_t r = g_.NewRule(hint + "-array");
    if (max_items == 0) {
      g_.AddAlternative(r, {Element::Char('['), Ws(), Element::Char(']')});
      return Element::Ref(r);
    }
    Sequence more = {Element::Char(','), Ws(), item, Ws()};
    const int more_max = max_items < 0 ? -1 : max_items - 1;
    Sequence body = {item, Ws()};
    if (min_items <= 1) {
      if (more_max != 0) body.push_back(g_.Repeat(more, 0, more_max, hint + "-more"));
    } else {
      body.push_back(g_.Repeat(more, min_items - 1, more_max, hint + "-more"));
    }
    Element content = min_items == 0 ? g_.Repeat(body, 0, 1, hint + "-body") : g_.Alternatives({body}, hint + "-body");
    g_.AddAlternative(r, {Element::Char('['), Ws(), content, Element::Char(']')});
    return Element::Ref(r);
  }

  StatusOr<Element> ObjectSchema(const json& s, const std::string& ptr, const std::string& hint) {
    if (s.contains("properties") && !s["properties"].is_object()) {
      return Error("'properties' must be an object", ptr + "/properties");
    }
    const bool has_properties = s.contains("properties") && !s["properties"].empty();
    // Additional properties: a value element, or none.
    bool additional = has_properties ? options_.additional_properties_default : true;
    Element additional_value = AnyValue();
    if (s.contains("additionalProperties")) {
      const json& ap = s["additionalProperties"];
      if (ap.is_boolean()) {
        additional = ap.get<bool>();
      } else {
        additional = true;
        KV_ASSIGN_OR_RETURN(additional_value, Visit(ap, ptr + "/additionalProperties", hint + "-extra"));
      }
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return Error("'required' must be an array", ptr + "/required");
      for (const json& r : s["required"]) {
        if (!r.is_string()) return Error("'required' entries must be strings", ptr + "/required");
        required.insert(r.get<std::string>());
        if (!s.contains("properties") || !s["properties"].contains(r.get<std::string>())) {
          return Error("required property '" + r.get<std::string>() + "' is not in 'properties'",
                       ptr + "/required");
        }
      }
    }
    if (!has_properties && additional_value.kind == Element::Kind::kRuleRef &&
        additional_value.rule == value_ && additional) {
      return AnyObject();
    }
    struct Prop {
      Sequence kv;  // "name" ws ":" ws value ws
      bool required;
    };
    std::vector<Prop> props;
    if (has_properties) {
      for (const auto& [name, sub] : s["properties"].items()) {
        KV_ASSIGN_OR_RETURN(Element value, Visit(sub, ptr + "/properties/" + EscapePointerToken(name), RuleHint(name)));
        Prop p;
        Grammar::AppendLiteral(&p.kv, json(name).dump());
        p.kv.insert(p.kv.end(), {Ws(), Element::Char(':'), Ws(), value, Ws()});
        p.required = required.count(name) > 0;
        props.push_back(std::move(p));
      }
    }
    Sequence extra_kv;
    if (additional) extra_kv = {String(0, -1), Ws(), Element::Char(':'), Ws(), additional_value, Ws()};
    const size_t n = props.size();
    // rest[i]: properties i.. each preceded by a comma; first[i]: the same with no comma before
    // the first one emitted.
    std::vector<Element> rest(n + 1), first(n + 1);
    {
      const int32_t r = g_.NewRule(hint + "-rest");
      if (additional) {
        Sequence more = {Element::Char(','), Ws()};
        more.insert(more.end(), extra_kv.begin(), extra_kv.end());
        g_.AddAlternative(r, {g_.Repeat(more, 0, -1, hint + "-extra")});
      } else {
        g_.AddAlternative(r, {});
      }
      rest[n] = Element::Ref(r);
    }
    for (size_t i = n; i-- > 0;) {
      const int32_t r = g_.NewRule(hint + "-rest");
      Sequence with = {Element::Char(','), Ws()};
      with.insert(with.end(), props[i].kv.begin(), props[i].kv.end());
      with.push_back(rest[i + 1]);
      g_.AddAlternative(r, std::move(with));
      if (!props[i].required) g_.AddAlternative(r, {rest[i + 1]});
      rest[i] = Element::Ref(r);
    }
    for (size_t i = 0; i <= n; ++i) {
      const int32_t r = g_.NewRule(hint + "-first");
      bool all_optional = true;
      for (size_t j = i; j < n; ++j) {
        Sequence seq = props[j].kv;
        seq.push_back(rest[j + 1]);
        g_.AddAlternative(r, std::move(seq));
        if (props[j].required) {
          all_optional = false;
          break;
        }
      }
      if (all_optional) {
        if (additional) {
          Sequence seq = extra_kv;
          seq.push_back(rest[n]);
          g_.AddAlternative(r, std::move(seq));
        }
        g_.AddAlternative(r, {});
      }
      first[i] = Element::Ref(r);
    }
    const int32_t obj = g_.NewRule(hint + "-object");
    g_.AddAlternative(obj, {Element::Char('{'), Ws(), first[0], Element::Char('}')});
    return Element::Ref(obj);
  }

 private:
  const json& root_;
  JsonSchemaOptions options_;
  Grammar g_;
  std::map<std::string, int32_t> refs_;
  int32_t ws_ = -1, char_ = -1, string_ = -1, integer_ = -1, number_ = -1, boolean_ = -1, null_ = -1;
  int32_t value_ = -1, object_ = -1, array_ = -1;
  int depth_ = 0;
};

}  // namespace

StatusOr<Grammar> JsonSchemaToGrammar(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options) {
  SchemaConverter c(schema, options);
  const int32_t root = c.grammar().GetOrAddRule("root");
  KV_ASSIGN_OR_RETURN(Element e, c.Visit(schema, "", "root"));
  c.grammar().AddAlternative(root, {e});
  c.grammar().set_root(root);
  KV_RETURN_IF_ERROR(c.grammar().Validate().WithContext("json_schema"));
  return std::move(c.grammar());
}

StatusOr<Grammar> JsonSchemaTextToGrammar(std::string_view schema_text, const JsonSchemaOptions& options) {
  json schema = json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return InvalidArgumentError("json_schema: the schema is not valid JSON");
  return JsonSchemaToGrammar(schema, options);
}

Grammar JsonObjectGrammar(const JsonSchemaOptions& options) {
  const json empty = json::object();
  SchemaConverter c(empty, options);
  const int32_t root = c.grammar().GetOrAddRule("root");
  c.grammar().AddAlternative(root, {c.AnyObject()});
  c.grammar().set_root(root);
  KV_CHECK(c.grammar().Validate().ok());
  return std::move(c.grammar());
}

}  // namespace kvserve::grammar
