package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommittedSchema: values.schema.json is what the generator makes of
// values.yaml.
func TestCommittedSchema(t *testing.T) {
	root := filepath.Join("..", "..")
	src, err := os.ReadFile(filepath.Join(root, DefaultValues))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Generate(src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, DefaultSchema))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run go run ./internal/chartschema", DefaultSchema)
	}
}

func TestGenerateRefuses(t *testing.T) {
	cases := []struct{ name, values, want string }{
		{"no comment", "# Replicas.\nreplicaCount: 1\nother: x\n", "other: no comment"},
		{"empty list", "# Things.\nthings: []\n", "needs an @schema with items"},
		{"null", "# Thing.\nthing:\n", "give it an @schema with type"},
		{"bad @schema", "# Thing.\n# @schema {nope}\nthing: 1\n", "@schema"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Generate([]byte(tc.values))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestGenerateTypes(t *testing.T) {
	out, err := Generate([]byte("# Header.\n\n# N.\nn: 1\n# F.\nf: 0.5\n# B.\nb: true\n# S.\ns: x\n# L.\nl: [a]\n# M.\n# @schema {\"additionalProperties\": {\"type\": \"string\"}}\nm: {k: v}\n# O.\no:\n  # Inner.\n  i: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"type": "integer"`, `"type": "number"`, `"type": "boolean"`, `"type": "string"`, `"type": "array"`,
		`"additionalProperties": false`, `"description": "Inner."`, `"description": "N."`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("schema lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "Header") {
		t.Errorf("the file header became a description:\n%s", out)
	}
	if strings.Contains(string(out), `"k"`) {
		t.Errorf("a free-form map's example key became a property:\n%s", out)
	}
}

// TestDocumented: docs/kubernetes.md names every value of the schema.
func TestDocumented(t *testing.T) {
	root := filepath.Join("..", "..")
	src, err := os.ReadFile(filepath.Join(root, DefaultSchema))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(src, &schema); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(s map[string]any, path string)
	walk = func(s map[string]any, path string) {
		props, ok := s["properties"].(map[string]any)
		if !ok {
			if !strings.Contains(string(doc), "| `"+path+"` |") {
				t.Errorf("docs/kubernetes.md has no row for the value %s", path)
			}
			return
		}
		for k, v := range props {
			p := k
			if path != "" {
				p = path + "." + k
			}
			walk(v.(map[string]any), p)
		}
	}
	walk(schema, "")
}
