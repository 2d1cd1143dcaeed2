// Command chartschema writes charts/dynalimit/values.schema.json from
// charts/dynalimit/values.yaml: each value's type comes from its default and
// its description from the comment above it, and every object refuses the
// keys it does not list (additionalProperties: false), so that Helm refuses
// a misspelled value.
//
// Run it from the repository root:
//
//	go run ./internal/chartschema
//
// A comment line of the form
//
//	# @schema {"enum": ["memory", "dynamodb"]}
//
// is merged into the value's schema instead of joining its description. An
// object whose @schema sets additionalProperties is a free-form map: its
// default's keys are examples, not properties. An empty list needs an
// @schema that sets items, and a null default one that sets type. A value
// without a comment is an error.
package main
