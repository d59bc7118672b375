// Structured output: a JSON Schema becomes a GBNF grammar (llama.cpp's grammar language, start rule
// "root") that the grammar sampler enforces, so every sentence of the grammar is a JSON document valid
// against the schema. Used for OpenAI's response_format {type: json_schema} and {type: json_object}
// and llama-server's `json_schema` field.
//
// Goal: soundness. A keyword that constrains the output is either enforced or refused, never ignored;
// where the grammar is narrower than the schema (below), that only removes valid documents.
// Non-goal: completeness. The grammar generates a canonical subset of each schema's instances.
//
// The documents the grammar generates:
//  * Compact JSON, with optional whitespace only after '{', '[', ',' and ':' and before ':', '}' and
//    ']', each gap being nothing, one space, or a newline and up to 20 spaces/tabs (rule `ws`), so
//    pretty-printed output up to 20 levels deep is accepted and a model cannot loop on blanks. No
//    whitespace before the document or after it: once the top-level value closes, only the end remains.
//  * Object properties in the schema's `properties` order: required ones always, optional ones may be
//    omitted (but not reordered). Then, where additionalProperties allows them (true, absent, or a
//    schema), any number of extra properties, whose names can be none of the listed ones (keys in a
//    JSON string's plain spelling; an extra key may not start with an escape while it still matches
//    the beginning of a listed name). Names in `required` that `properties` does not list come right
//    after the listed ones, with the additionalProperties schema. Extra keys are not checked against
//    each other.
//  * Strings: '"', then characters other than '"', '\', DEL and C0 controls, or the JSON escapes
//    (\" \\ \/ \b \f \n \r \t, and \uXXXX except UTF-16 surrogates: characters outside the BMP
//    are written as themselves), then '"'. Each counts as one character for minLength/maxLength,
//    which is the code point count JSON Schema uses.
//  * Numbers: -?(0|[1-9][0-9]{0,15})(.[0-9]{1,16})?([eE][-+]?[0-9]{1,2})?, always a finite double;
//    integers without fraction or exponent. Bounded digit counts stop a model from looping on digits.
//  * enum/const values as their compact serialisation (nlohmann's dump()), whatever their type.
//
// Keywords:
//  * type (a name or an array of names), enum, const, properties, required, additionalProperties,
//    items, prefixItems (and the older array form of items with additionalItems), minItems, maxItems,
//    minLength, maxLength, $ref to any local JSON pointer ("#", "#/$defs/x", "#/definitions/x"; the
//    referenced schemas may recurse), nullable (OpenAPI: adds null), uniqueItems: false.
//  * anyOf and oneOf: alternatives. oneOf is generated as anyOf: a document matching two branches is
//    accepted (graft does not check exclusivity). Sibling keywords are merged into each branch.
//  * allOf, and $ref with constraining siblings: merged into one schema where that is trivial
//    (disjoint keywords, equal values, unions of `required`, tightest bounds, types intersected,
//    properties merged per name); otherwise refused (kUnsupported), e.g. different values of one
//    keyword, a part adding properties where another restricts additionalProperties, array parts
//    with different prefixItems, nullable in only some parts.
//  * Integer minimum/maximum/exclusiveMinimum/exclusiveMaximum: exact, as digit ranges (bounds within
//    ±(10^18-1)). On numbers only "minimum": 0 (no minus sign) is implemented; other bounds refused.
//  * format: "date", "time", "date-time" (RFC 3339, exact calendar with leap years, years 0001-9999;
//    'T' and 'Z' in upper case, up to 9 fraction digits, no leap seconds), "uuid"; any other format
//    is refused, on any type.
//  * A schema without `type` is restricted to the types its keywords talk about (properties → object,
//    items → array, minLength → string, ...), or any JSON value when it names none.
//  * Annotations (title, description, default, examples, $schema, $id at the root, $comment,
//    deprecated, readOnly, writeOnly, content*, discriminator, $defs, definitions, "x-..." extensions)
//    are ignored: they do not constrain.
//  * Refused (kUnsupported): pattern, patternProperties, propertyNames, min/maxProperties,
//    dependencies, dependentRequired, dependentSchemas, not, if/then/else, contains, min/maxContains,
//    uniqueItems: true, unevaluatedItems/Properties, multipleOf, $anchor, $dynamicRef, $recursiveRef,
//    nested $id, remote $refs, and any keyword graft does not know.
//
// Errors: graft::Error; kBadRequest for a malformed or unsatisfiable schema, kUnsupported for a
// keyword (or value) graft does not implement, kLimit for a length/count bound above 10000 or a
// grammar over 100000 bytes (the grammar parser's limits). Messages name the JSON pointer of the
// offending schema: "json_schema: /properties/age: 'minimum' must be a number" ("(root)" for the top
// level).
//
// Rule names are derived from property and $defs names ([a-z0-9-]+, made unique by a numeric suffix)
// and are the same for the same schema on every run.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace graft::engine {

// GBNF text (root rule "root") for JSON documents valid against `schema`.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);

// GBNF for any JSON value whose top level is an object (OpenAI's json_object mode).
std::string json_object_gbnf();

}  // namespace graft::engine
