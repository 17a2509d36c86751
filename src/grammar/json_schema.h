// JSON Schema and json_object -> Grammar (response_format json_schema / json_object, vLLM's
// guided_json, tool-call arguments).
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "grammar/grammar.h"

namespace kvserve::grammar {

struct JsonSchemaOptions {
  // Whitespace between tokens is "" | " " | "\n" followed by at most this many spaces or
  // tabs, so a model cannot loop forever on whitespace.
  int max_indent_chars = 20;
  // Objects that list `properties` and do not say `additionalProperties` accept no other keys
  // (as OpenAI's strict mode and llama.cpp do). Objects without `properties` accept any keys.
  bool additional_properties_default = false;
};

// Converts a JSON Schema to a grammar of the JSON texts that validate against it.
// Supported: boolean schemas (true), `type` (string or list of: object, array, string, number,
// integer, boolean, null), `properties` (emitted in declared order; required ones always,
// optional ones may be left out), `required`, `additionalProperties` (bool or schema), `enum`,
// `const`, `items`, `minItems`/`maxItems`, `anyOf`/`oneOf` (oneOf as anyOf), `allOf` with one
// entry, `$ref` to `#`, `#/$defs/...`, `#/definitions/...` or any JSON pointer into the
// document, string `minLength`/`maxLength`, `pattern` (full match, see regex.h for the subset)
// and `format` date, time, date-time, uuid, email; annotations (title, description, default,
// examples, $schema, $id, $comment, deprecated, readOnly, writeOnly) are ignored.
// Any other keyword is an InvalidArgument error that names it and its JSON pointer, e.g.
// "json_schema: unsupported keyword 'minimum' at /properties/age".
// Numbers are bounded to 16 integer digits, 16 fraction digits and 2 exponent digits (so
// every number parses as a finite double).
// Takes nlohmann::ordered_json so `properties` keep their declared order (nlohmann::json
// sorts keys; a schema parsed with it gets its properties in alphabetical order, which still
// validates but is not the order the user wrote).
StatusOr<Grammar> JsonSchemaToGrammar(const nlohmann::ordered_json& schema,
                                      const JsonSchemaOptions& options = {});
// The same from the schema's JSON text (an InvalidArgument error when it does not parse).
StatusOr<Grammar> JsonSchemaTextToGrammar(std::string_view schema_text,
                                          const JsonSchemaOptions& options = {});

// Any JSON object ({"type": "json_object"}).
Grammar JsonObjectGrammar(const JsonSchemaOptions& options = {});

}  // namespace kvserve::grammar
