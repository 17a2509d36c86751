// JSON Schema -> grammar: errors, acceptance of hand-written documents, and random walks
// through the token mask whose every completed output must parse and validate.
#include <random>
#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grammar/gbnf.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "grammar/test_vocab.h"
#include "grammar/token_masker.h"

namespace kvserve::grammar {
namespace {

using json = nlohmann::ordered_json;
using testing::kTestEosId;

// A validator for the subset of JSON Schema the converter supports (independent code).
class MiniValidator {
 public:
  explicit MiniValidator(const json& root) : root_(root) {}

  bool Valid(const json& v) { return Check(v, root_); }

 private:
  static size_t Utf8Length(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }

  bool Check(const json& v, const json& s) {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) {
      const std::string ref = s["$ref"];
      return Check(v, root_.at(json::json_pointer(ref.substr(1))));
    }
    if (s.contains("const") && v != s["const"]) return false;
    if (s.contains("enum")) {
      bool any = false;
      for (const json& e : s["enum"]) any |= (e == v);
      if (!any) return false;
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      int n = 0;
      for (const json& sub : s[key]) n += Check(v, sub);
      if (n == 0) return false;
    }
    if (s.contains("allOf")) {
      for (const json& sub : s["allOf"]) {
        if (!Check(v, sub)) return false;
      }
    }
    if (s.contains("type")) {
      std::vector<std::string> types;
      if (s["type"].is_string()) types.push_back(s["type"]);
      else for (const json& t : s["type"]) types.push_back(t);
      bool any = false;
      for (const std::string& t : types) {
        any |= (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
               (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
               (t == "integer" && v.is_number_integer()) || (t == "boolean" && v.is_boolean()) ||
               (t == "null" && v.is_null());
      }
      if (!any) return false;
    }
    if (v.is_object()) {
      const bool has_props = s.contains("properties") && !s["properties"].empty();
      if (s.contains("required")) {
        for (const json& r : s["required"]) {
          if (!v.contains(r.get<std::string>())) return false;
        }
      }
      for (const auto& [k, val] : v.items()) {
        if (has_props && s["properties"].contains(k)) {
          if (!Check(val, s["properties"][k])) return false;
        } else if (s.contains("additionalProperties")) {
          if (!Check(val, s["additionalProperties"])) return false;
        } else if (has_props) {
          return false;  // our documented default: no extra keys when properties are listed
        }
      }
    }
    if (v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
      if (s.contains("items")) {
        for (const json& item : v) {
          if (!Check(item, s["items"])) return false;
        }
      }
    }
    if (v.is_string()) {
      const std::string str = v.get<std::string>();
      if (s.contains("minLength") && Utf8Length(str) < s["minLength"].get<size_t>()) return false;
      if (s.contains("maxLength") && Utf8Length(str) > s["maxLength"].get<size_t>()) return false;
      if (s.contains("pattern") && !std::regex_match(str, std::regex(s["pattern"].get<std::string>()))) {
        return false;
      }
      if (s.contains("format")) {
        static const std::map<std::string, std::string> kFormats = {
            {"date", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))"},
            {"time", R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
            {"date-time", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
            {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
            // ajv-formats' "full" email: no empty, leading or trailing dot-atoms; domain labels
            // start and end alphanumeric.
            {"email", R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@)"
                      R"(([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)"},
        };
        const std::string& format = s["format"].get<std::string>();
        if (!std::regex_match(str, std::regex(kFormats.at(format)))) return false;
        if (format == "date" || format == "date-time") {
          // The day exists in that month (February 29 in leap years only), as ajv-formats checks.
          const int year = std::stoi(str.substr(0, 4));
          const int month = std::stoi(str.substr(5, 2));
          const int day = std::stoi(str.substr(8, 2));
          const bool leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
          static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
          if (day > kDays[month - 1] + (month == 2 && leap ? 1 : 0)) return false;
        }
      }
    }
    return true;
  }

  const json& root_;
};

std::shared_ptr<const CompiledGrammar> CompileSchema(const json& schema) {
  auto g = JsonSchemaToGrammar(schema);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  auto c = CompiledGrammar::Compile(*g);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

bool Accepts(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.AcceptString(text) && m.IsComplete();
}

// Random walk through the masks: picks random allowed tokens, steering towards closing
// characters after a while so most walks end. Returns true and the text when EOS was chosen.
bool RandomWalk(TokenMasker* masker, const Vocabulary& v, std::mt19937_64* rng, std::string* text) {
  TokenMasker::State state = masker->Start();
  text->clear();
  for (int step = 0; step < 400; ++step) {
    const auto& mask = masker->Mask(&state);
    std::vector<int32_t> allowed, closing;
    bool eos = false;
    for (int32_t id = 0; id < masker->trie().vocab_size(); ++id) {
      if (!((mask[id >> 6] >> (id & 63)) & 1)) continue;
      if (id == kTestEosId) {
        eos = true;
        continue;
      }
      allowed.push_back(id);
      if (v.token_bytes[id].find_first_of("\"}]") != std::string::npos) closing.push_back(id);
    }
    if (eos && (allowed.empty() || (*rng)() % 4 == 0 || step > 60)) {
      EXPECT_TRUE(masker->Advance(&state, kTestEosId));
      return true;
    }
    EXPECT_FALSE(allowed.empty()) << "dead end after '" << *text << "'";
    if (allowed.empty()) return false;
    const auto& pool = (step > 40 && !closing.empty() && (*rng)() % 5 != 0) ? closing : allowed;
    const int32_t id = pool[(*rng)() % pool.size()];
    EXPECT_TRUE(masker->Advance(&state, id));
    *text += v.token_bytes[id];
  }
  return false;
}

void WalkAndValidate(const json& schema, int num_walks, int min_completed) {
  const Vocabulary v = testing::MakeTestVocabulary();
  auto trie = TokenTrie::Build(v);
  TokenMasker masker(CompileSchema(schema), trie);
  MiniValidator validator(schema);
  std::mt19937_64 rng(123);
  int completed = 0;
  for (int i = 0; i < num_walks; ++i) {
    std::string text;
    if (!RandomWalk(&masker, v, &rng, &text)) continue;
    ++completed;
    json doc = json::parse(text, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << "does not parse: " << text;
    ASSERT_TRUE(validator.Valid(doc)) << "does not validate: " << text << "\nschema " << schema.dump();
  }
  EXPECT_GE(completed, min_completed) << schema.dump();
}

TEST(JsonSchemaTest, RandomWalksValidate) {
  const char* schemas[] = {
      R"({"type": "object", "properties": {
           "name": {"type": "string", "maxLength": 12},
           "age": {"type": "integer"},
           "score": {"type": "number"},
           "email": {"type": "string", "format": "email"},
           "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 3},
           "address": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                                                       "city": {"type": "string", "minLength": 1, "maxLength": 6}},
                       "required": ["zip"]},
           "kind": {"const": "person"},
           "note": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]},
           "ok": {"type": "boolean"}},
         "required": ["name", "age", "tags", "kind"]})",
      R"({"$defs": {"node": {"type": "object", "properties": {
            "v": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
          "required": ["v"]}},
         "$ref": "#/$defs/node"})",
      R"({"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 4})",
      R"({"type": "object", "properties": {
           "d": {"type": "string", "format": "date"}, "t": {"type": "string", "format": "time"},
           "dt": {"type": "string", "format": "date-time"}, "u": {"type": "string", "format": "uuid"}},
         "required": ["d", "t", "dt", "u"]})",
      R"({"type": "object", "additionalProperties": {"type": "integer"}})",
      R"({"type": ["string", "null"], "maxLength": 5})",
      R"({"definitions": {"color": {"enum": ["red", 1, null, {"a": [true]}]}},
         "type": "object", "properties": {"c": {"$ref": "#/definitions/color"},
                                          "list": {"type": "array", "items": {"$ref": "#/definitions/color"}}},
         "additionalProperties": true})",
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}}})",
      R"({"oneOf": [{"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
                    {"type": "array", "items": {"type": "string", "pattern": "[a-c]+\\d?"}, "maxItems": 2}]})",
      R"({})",
  };
  for (const char* s : schemas) {
    SCOPED_TRACE(s);
    WalkAndValidate(json::parse(s), 60, 40);
  }
}

TEST(JsonSchemaTest, JsonObjectWalksParseAsObjects) {
  const Vocabulary v = testing::MakeTestVocabulary();
  auto trie = TokenTrie::Build(v);
  TokenMasker masker(*CompiledGrammar::Compile(JsonObjectGrammar()), trie);
  std::mt19937_64 rng(5);
  int completed = 0;
  for (int i = 0; i < 60; ++i) {
    std::string text;
    if (!RandomWalk(&masker, v, &rng, &text)) continue;
    ++completed;
    json doc = json::parse(text, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << text;
    ASSERT_TRUE(doc.is_object()) << text;
  }
  EXPECT_GE(completed, 40);
}

TEST(JsonSchemaTest, GbnfRegexChoiceWalksMatch) {
  const Vocabulary v = testing::MakeTestVocabulary();
  auto trie = TokenTrie::Build(v);
  std::mt19937_64 rng(9);
  struct Case {
    GrammarKind kind;
    const char* text;
    const char* check_regex;  // ECMAScript, full match
  };
  const Case cases[] = {
      {GrammarKind::kGbnf, R"(root ::= "ab" ("," [0-9]{1,3})* "}")", R"(ab(,[0-9]{1,3})*\})"},
      {GrammarKind::kRegex, R"(\d{3}-[a-z]+(x|yz)?")", R"(\d{3}-[a-z]+(x|yz)?")"},
      {GrammarKind::kChoice, R"(["red", "green", "blue", "日本"])", R"(red|green|blue|日本)"},
  };
  for (const Case& c : cases) {
    auto g = CompileGrammar({c.kind, c.text});
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    TokenMasker masker(*g, trie);
    std::regex re(c.check_regex);
    int completed = 0;
    for (int i = 0; i < 40; ++i) {
      std::string text;
      if (!RandomWalk(&masker, v, &rng, &text)) continue;
      ++completed;
      ASSERT_TRUE(std::regex_match(text, re)) << c.text << " produced '" << text << "'";
    }
    EXPECT_GE(completed, 30) << c.text;
  }
}

TEST(JsonSchemaTest, AcceptsAndRejectsHandWrittenDocuments) {
  auto g = CompileSchema(json::parse(R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}}, "required": ["b"]})"));
  EXPECT_TRUE(Accepts(g, R"({"b": "x"})"));
  EXPECT_TRUE(Accepts(g, R"({"a": -12, "b": "x", "c": true})"));
  EXPECT_TRUE(Accepts(g, "{\n  \"a\": 0,\n  \"b\": \"\\u00e9\\n\"\n}"));
  EXPECT_FALSE(Accepts(g, R"({"a": 1})"));               // b missing
  EXPECT_FALSE(Accepts(g, R"({"b": "x", "a": 1})"));     // declared order
  auto zyx = CompileSchema(json::parse(R"({"properties": {"z": {"type": "integer"}, "y": {"type": "integer"}},
                                            "required": ["z", "y"]})"));
  EXPECT_TRUE(Accepts(zyx, R"({"z": 1, "y": 2})"));      // declared, not alphabetical
  EXPECT_FALSE(Accepts(zyx, R"({"y": 2, "z": 1})"));
  EXPECT_FALSE(Accepts(g, R"({"b": "x", "d": 1})"));     // no extra keys by default
  EXPECT_FALSE(Accepts(g, R"({"a": 01, "b": "x"})"));    // leading zero
  EXPECT_FALSE(Accepts(g, R"({"a": 1.5, "b": "x"})"));   // integer
  EXPECT_FALSE(Accepts(g, "{\"b\": \"x\"" + std::string(30, ' ') + "}"));  // whitespace bounded
  EXPECT_FALSE(Accepts(g, "{\"b\": \"a\tb\"}"));          // raw control character
  auto arr = CompileSchema(json::parse(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2})"));
  EXPECT_FALSE(Accepts(arr, "[]"));
  EXPECT_TRUE(Accepts(arr, "[1]"));
  EXPECT_TRUE(Accepts(arr, "[1, 2]"));
  EXPECT_FALSE(Accepts(arr, "[1, 2, 3]"));
  auto pat = CompileSchema(json::parse(R"({"type": "string", "pattern": "^a\"b\\\\c$"})"));
  EXPECT_TRUE(Accepts(pat, R"("a\"b\\c")"));
}

TEST(JsonSchemaTest, FormatsAcceptOnlyRealDatesAndWellFormedEmails) {
  auto compile = [](const char* format) {
    auto g = JsonSchemaTextToGrammar(std::string(R"({"type": "string", "format": ")") + format + "\"}");
    EXPECT_TRUE(g.ok());
    return *CompiledGrammar::Compile(*g);
  };
  auto date = compile("date");
  for (const char* ok : {"2024-02-29", "2000-02-29", "0000-02-29", "1996-02-29", "2023-02-28",
                         "2023-01-31", "2023-04-30", "2023-12-31"}) {
    EXPECT_TRUE(Accepts(date, std::string("\"") + ok + "\"")) << ok;
  }
  for (const char* bad : {"2023-02-29", "1900-02-29", "2100-02-29", "2023-02-30", "2023-04-31",
                          "2023-06-31", "2023-09-31", "2023-11-31", "2023-13-01", "2023-00-10",
                          "2023-01-00", "2023-01-32"}) {
    EXPECT_FALSE(Accepts(date, std::string("\"") + bad + "\"")) << bad;
  }
  auto date_time = compile("date-time");
  EXPECT_TRUE(Accepts(date_time, R"("2024-02-29T23:59:59.5+01:00")"));
  EXPECT_FALSE(Accepts(date_time, R"("2023-02-29T10:00:00Z")"));
  auto email = compile("email");
  EXPECT_TRUE(Accepts(email, R"("a.b+c@mail.example.org")"));
  for (const char* bad : {"\".a@b.cc\"", "\"a..b@b.cc\"", "\"a.@b.cc\"", "\"a@-b.cc\"",
                          "\"a@b-.cc\"", "\"a@b\""}) {
    EXPECT_FALSE(Accepts(email, bad)) << bad;
  }
}

TEST(JsonSchemaTest, ErrorsNameKeywordAndPointer) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type": "integer", "minimum": 0})", "unsupported keyword 'minimum' at /minimum"},
      {R"({"properties": {"a": {"type": "string", "format": "uri"}}})", "at /properties/a/format"},
      {R"({"properties": {"a/b": {"not": {}}}})", "unsupported keyword 'not' at /properties/a~1b/not"},
      {R"({"$ref": "#/$defs/missing"})", "$ref '#/$defs/missing' does not resolve"},
      {R"({"$ref": "http://example.com/s.json"})", "only local $ref"},
      {R"({"type": "widget"})", "unknown type 'widget' at /type"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "required property 'b'"},
      {R"j({"type": "string", "pattern": "(?=a)"})j", "lookaround"},
      {R"({"items": {"type": "string"}, "maxItems": -1})", "'maxItems' must be an integer"},
      {R"({"allOf": [{}, {}]})", "'allOf' with more than one schema"},
      {R"(false)", "matches nothing"},
      {R"({"anyOf": []})", "'anyOf' must be a non-empty array at /anyOf"},
  };
  for (const auto& [text, needle] : cases) {
    auto g = JsonSchemaToGrammar(json::parse(text));
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(needle), std::string::npos) << text << " -> " << g.status().message();
  }
}

TEST(JsonSchemaTest, WrappedToolCalls) {
  // tool_choice "required" with two tools, Hermes format, parallel calls allowed.
  auto args = JsonSchemaToGrammar(json::parse(R"({"anyOf": [
      {"type": "object", "properties": {"name": {"const": "get_weather"},
        "arguments": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
       "required": ["name", "arguments"]},
      {"type": "object", "properties": {"name": {"const": "add"},
        "arguments": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                      "required": ["a", "b"]}},
       "required": ["name", "arguments"]}]})"));
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  auto g = CompiledGrammar::Compile(WrapGrammar(*args, "<tool_call>\n", "\n</tool_call>", 1, -1, "\n"));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(Accepts(*g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>"));
  EXPECT_TRUE(Accepts(*g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>\n"
                          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(*g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(*g, "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}"));
}

TEST(JsonSchemaTest, RecursiveRefsCompile) {
  auto g = CompileSchema(json::parse(R"({"$defs": {"list": {"anyOf": [{"type": "null"},
      {"type": "object", "properties": {"head": {"type": "integer"}, "tail": {"$ref": "#/$defs/list"}},
       "required": ["head", "tail"]}]}}, "$ref": "#/$defs/list"})"));
  EXPECT_TRUE(Accepts(g, R"({"head": 1, "tail": {"head": 2, "tail": null}})"));
  EXPECT_FALSE(Accepts(g, R"({"head": 1})"));
  // Large bounds lower to long rule chains; compiling them stays quick (linear).
  auto big = CompileSchema(json::parse(R"({"type": "array", "maxItems": 10000,
      "items": {"type": "string", "maxLength": 10000}})"));
  EXPECT_TRUE(Accepts(big, R"(["abc", ""])"));
}

}  // namespace
}  // namespace kvserve::grammar
