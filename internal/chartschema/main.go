package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// Default paths, relative to the repository root.
const (
	DefaultValues = "charts/dynalimit/values.yaml"
	DefaultSchema = "charts/dynalimit/values.schema.json"
)

func main() {
	values := flag.String("values", DefaultValues, "values.yaml to read")
	out := flag.String("out", DefaultSchema, "schema file to write")
	flag.Parse()
	if err := run(*values, *out); err != nil {
		fmt.Fprintln(os.Stderr, "chartschema:", err)
		os.Exit(1)
	}
}

func run(valuesFile, out string) error {
	src, err := os.ReadFile(valuesFile)
	if err != nil {
		return err
	}
	schema, err := Generate(src)
	if err != nil {
		return fmt.Errorf("%s: %w", valuesFile, err)
	}
	return os.WriteFile(out, schema, 0o644)
}

// Generate returns the JSON schema of the values file src, indented, with a
// final newline.
func Generate(src []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("the values are not a mapping")
	}
	root, err := object(doc.Content[0], "")
	if err != nil {
		return nil, err
	}
	root["$schema"] = "http://json-schema.org/draft-07/schema#"
	root["title"] = "Values of the dynalimit chart"
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// object is the schema of a mapping whose keys are all properties.
func object(m *yaml.Node, path string) (map[string]any, error) {
	props := map[string]any{}
	var errs []error
	for i := 0; i+1 < len(m.Content); i += 2 {
		key, val := m.Content[i], m.Content[i+1]
		p := key.Value
		if path != "" {
			p = path + "." + key.Value
		}
		s, err := property(key, val, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		props[key.Value] = s
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return map[string]any{"type": "object", "additionalProperties": false, "properties": props}, nil
}

// property is the schema of one value: its comment's description and
// @schema lines, merged over what its default implies.
func property(key, val *yaml.Node, path string) (map[string]any, error) {
	desc, extra, err := comment(key.HeadComment)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if desc == "" {
		return nil, fmt.Errorf("%s: no comment describes it", path)
	}
	var s map[string]any
	switch {
	case val.Kind == yaml.MappingNode && extra["additionalProperties"] != nil:
		s = map[string]any{"type": "object"}
	case val.Kind == yaml.MappingNode:
		if s, err = object(val, path); err != nil {
			return nil, err
		}
	case val.Kind == yaml.SequenceNode:
		s = map[string]any{"type": "array"}
		if extra["items"] == nil {
			if len(val.Content) == 0 || val.Content[0].Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("%s: a list whose default is empty or not of scalars needs an @schema with items", path)
			}
			t, err := scalarType(val.Content[0])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			s["items"] = map[string]any{"type": t}
		}
	case val.Kind == yaml.ScalarNode:
		s = map[string]any{}
		if t, err := scalarType(val); err == nil {
			s["type"] = t
		} else if extra["type"] == nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	default:
		return nil, fmt.Errorf("%s: unsupported YAML node (anchors and aliases are not)", path)
	}
	s["description"] = desc
	for k, v := range extra {
		s[k] = v
	}
	return s, nil
}

func scalarType(n *yaml.Node) (string, error) {
	switch n.Tag {
	case "!!str":
		return "string", nil
	case "!!int":
		return "integer", nil
	case "!!float":
		return "number", nil
	case "!!bool":
		return "boolean", nil
	}
	return "", fmt.Errorf("default of type %s says nothing of the type: give it an @schema with type", n.Tag)
}

// comment splits a head comment into its description (the lines joined
// with spaces, the first paragraph above a blank line dropped when the
// comment has several, as that is the file's header) and the fields of its
// @schema lines.
func comment(c string) (string, map[string]any, error) {
	paragraphs := strings.Split(c, "\n\n")
	c = paragraphs[len(paragraphs)-1]
	var words []string
	extra := map[string]any{}
	for _, line := range strings.Split(c, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if rest, ok := strings.CutPrefix(line, "@schema "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(rest), &m); err != nil {
				return "", nil, fmt.Errorf("@schema %s: %w", rest, err)
			}
			for k, v := range m {
				extra[k] = v
			}
			continue
		}
		if line != "" {
			words = append(words, line)
		}
	}
	return strings.Join(words, " "), extra, nil
}
