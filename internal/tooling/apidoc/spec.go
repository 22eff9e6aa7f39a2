package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// spec is openapi.yaml parsed as YAML nodes, so that paths, methods, properties and
// schemas keep the file's order (kin-openapi's maps do not).
type spec struct {
	root       *yaml.Node // the document's mapping
	operations []*operation
	tags       []string // the top-level tags' order, then any tag only operations name
}

// operation is one method of one path.
type operation struct {
	method, path string
	node         *yaml.Node
	params       []*yaml.Node // the path's that the operation does not redefine, then its own; $refs resolved
	id           string
	tag          string // the first tag; "" when none
}

// methods are the keys of a path item that are operations; the others (parameters,
// summary, ...) are not.
var methods = map[string]bool{
	"get": true, "put": true, "post": true, "delete": true,
	"options": true, "head": true, "patch": true, "trace": true,
}

func loadSpec(path string) (*spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("parse %s: not a YAML mapping", path)
	}
	s := &spec{root: doc.Content[0]}
	if err := checkPropertyNames(s.root); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, t := range items(get(s.root, "tags")) {
		s.tags = append(s.tags, str(t, "name"))
	}
	for _, p := range pairs(get(s.root, "paths")) {
		path, item := p.key, p.value
		var common []*yaml.Node
		for _, prm := range items(get(item, "parameters")) {
			r, err := s.resolve(prm)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			common = append(common, r)
		}
		for _, m := range pairs(item) {
			if !methods[m.key] {
				continue
			}
			op := &operation{method: strings.ToUpper(m.key), path: path, node: m.value, id: str(m.value, "operationId")}
			if op.id == "" {
				return nil, fmt.Errorf("%s %s: no operationId", op.method, path)
			}
			if tags := items(get(m.value, "tags")); len(tags) > 0 {
				op.tag = tags[0].Value
			}
			own := map[string]bool{}
			var opParams []*yaml.Node
			for _, prm := range items(get(m.value, "parameters")) {
				r, err := s.resolve(prm)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", op.id, err)
				}
				own[str(r, "in")+" "+str(r, "name")] = true
				opParams = append(opParams, r)
			}
			for _, prm := range common {
				if !own[str(prm, "in")+" "+str(prm, "name")] {
					op.params = append(op.params, prm)
				}
			}
			op.params = append(op.params, opParams...)
			if !contains(s.tags, op.tag) {
				s.tags = append(s.tags, op.tag)
			}
			s.operations = append(s.operations, op)
		}
	}
	return s, nil
}

// identifier is what a schema's property may be named: a name that every generator can
// make a field of.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// schemaKeywords are the keys a Schema Object of OpenAPI 3.0 may have, besides x-
// extensions.
var schemaKeywords = map[string]bool{
	"$ref": true, "title": true, "description": true, "type": true, "format": true,
	"enum": true, "default": true, "example": true, "nullable": true, "deprecated": true,
	"readOnly": true, "writeOnly": true, "required": true, "properties": true,
	"additionalProperties": true, "items": true, "allOf": true, "oneOf": true, "anyOf": true,
	"not": true, "discriminator": true, "xml": true, "externalDocs": true,
	"multipleOf": true, "maximum": true, "exclusiveMaximum": true, "minimum": true,
	"exclusiveMinimum": true, "maxLength": true, "minLength": true, "pattern": true,
	"maxItems": true, "minItems": true, "uniqueItems": true, "maxProperties": true,
	"minProperties": true,
}

// checkPropertyNames returns an error naming, with its line, each key of a schema (one in
// components.schemas or under a `schema`, and their properties, items, allOf, ...) that is
// neither a schema keyword nor an x- extension, and each property whose name is not an
// identifier. A flow mapping's unquoted comma makes a key of the rest of a description:
// `runs: { type: integer, description: Runs stored, not yet deleted by retention. }` had a
// key `not yet deleted by retention.`, which YAML, oapi-codegen and openapi-typescript all
// accept without a word.
func checkPropertyNames(root *yaml.Node) error {
	var bad []string
	var schema func(n *yaml.Node, where string)
	schema = func(n *yaml.Node, where string) {
		if n.Kind != yaml.MappingNode {
			return
		}
		for _, p := range pairs(n) {
			k, v := p.key, p.value
			at := where + "/" + k
			switch {
			case strings.HasPrefix(k, "x-"):
			case !schemaKeywords[k]:
				bad = append(bad, fmt.Sprintf("line %d: %s: %q is not a schema keyword", p.line, where, k))
			case k == "properties":
				for _, prop := range pairs(v) {
					if !identifier.MatchString(prop.key) {
						bad = append(bad, fmt.Sprintf("line %d: %s: property %q is not an identifier", prop.line, at, prop.key))
					}
					schema(prop.value, at+"/"+prop.key)
				}
			case k == "items" || k == "additionalProperties" || k == "not":
				schema(v, at)
			case k == "allOf" || k == "oneOf" || k == "anyOf":
				for i, c := range items(v) {
					schema(c, fmt.Sprintf("%s/%d", at, i))
				}
			}
		}
	}
	// walk finds the schemas: the values of `schema` keys outside examples and x-
	// extensions, which hold any JSON.
	var walk func(n *yaml.Node, where string)
	walk = func(n *yaml.Node, where string) {
		switch n.Kind {
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s/%d", where, i))
			}
		case yaml.MappingNode:
			for _, p := range pairs(n) {
				switch {
				case p.key == "example" || p.key == "examples" || strings.HasPrefix(p.key, "x-"):
				case p.key == "schema":
					schema(p.value, where+"/schema")
				default:
					walk(p.value, where+"/"+p.key)
				}
			}
		}
	}
	walk(root, "#")
	for _, p := range pairs(get(get(root, "components"), "schemas")) {
		schema(p.value, "#/components/schemas/"+p.key)
	}
	if len(bad) > 0 {
		return fmt.Errorf("schemas with keys that are not schema keywords, or properties whose names are not identifiers "+
			"(an unquoted comma in a flow mapping?): %s", strings.Join(bad, "; "))
	}
	return nil
}

// resolve follows a $ref to a component (parameters, responses, ...) until it reaches
// a node without one. Schemas are not resolved this way: they are linked.
func (s *spec) resolve(n *yaml.Node) (*yaml.Node, error) {
	for range 10 {
		ref := str(n, "$ref")
		if ref == "" {
			return n, nil
		}
		kind, name, ok := componentRef(ref)
		if !ok {
			return nil, fmt.Errorf("unsupported $ref %q", ref)
		}
		target := get(get(get(s.root, "components"), kind), name)
		if target == nil {
			return nil, fmt.Errorf("$ref %q: no such component", ref)
		}
		n = target
	}
	return nil, fmt.Errorf("$ref chain too long at %q", str(n, "$ref"))
}

// schema returns the component schema named name, or nil.
func (s *spec) schema(name string) *yaml.Node {
	return get(get(get(s.root, "components"), "schemas"), name)
}

// componentRef splits "#/components/<kind>/<name>".
func componentRef(ref string) (kind, name string, ok bool) {
	rest, ok := strings.CutPrefix(ref, "#/components/")
	if !ok {
		return "", "", false
	}
	kind, name, ok = strings.Cut(rest, "/")
	return kind, name, ok && name != "" && !strings.Contains(name, "/")
}

// schemaRef returns the name of the component schema n refers to, or "".
func schemaRef(n *yaml.Node) string {
	kind, name, ok := componentRef(str(n, "$ref"))
	if !ok || kind != "schemas" {
		return ""
	}
	return name
}

// refsOf returns the components of a kind ("schemas", "headers") that n refers to,
// directly or through inline schemas, in the order they appear; each once.
func refsOf(n *yaml.Node, kind string) []string {
	var out []string
	seen := map[string]bool{}
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		n = deref(n)
		if n == nil {
			return
		}
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i].Value, n.Content[i+1]
				if k == "$ref" {
					if k, name, ok := componentRef(v.Value); ok && k == kind && !seen[name] {
						seen[name] = true
						out = append(out, name)
					}
					continue
				}
				if k == "example" || k == "examples" || k == "description" {
					continue
				}
				walk(v)
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c)
			}
		}
	}
	walk(n)
	return out
}

// closure returns the set of schemas reachable from roots, roots included.
func (s *spec) closure(roots []string) map[string]bool {
	in := map[string]bool{}
	queue := append([]string(nil), roots...)
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if in[name] {
			continue
		}
		in[name] = true
		queue = append(queue, refsOf(s.schema(name), "schemas")...)
	}
	return in
}

// opRefs returns the components of a kind that an operation's parameters, body and
// responses refer to, resolving component parameters and responses.
func (s *spec) opRefs(op *operation, kind string) ([]string, error) {
	var out []string
	for _, p := range op.params {
		out = append(out, refsOf(p, kind)...)
	}
	out = append(out, refsOf(get(op.node, "requestBody"), kind)...)
	for _, r := range pairs(get(op.node, "responses")) {
		resp, err := s.resolve(r.value)
		if err != nil {
			return nil, fmt.Errorf("%s response %s: %w", op.id, r.key, err)
		}
		out = append(out, refsOf(resp, kind)...)
	}
	return out, nil
}

// componentNames returns the names of the components of a kind, in the file's order.
func (s *spec) componentNames(kind string) []string {
	var names []string
	for _, p := range pairs(get(get(s.root, "components"), kind)) {
		names = append(names, p.key)
	}
	return names
}

type pair struct {
	key   string
	value *yaml.Node
	line  int // the key's
}

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// get returns the value of key in the mapping n, or nil.
func get(n *yaml.Node, key string) *yaml.Node {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return deref(n.Content[i+1])
		}
	}
	return nil
}

// str returns the scalar value of key in the mapping n, or "".
func str(n *yaml.Node, key string) string {
	v := get(n, key)
	if v == nil || v.Kind != yaml.ScalarNode {
		return ""
	}
	return v.Value
}

// pairs returns the entries of the mapping n in the file's order.
func pairs(n *yaml.Node) []pair {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	out := make([]pair, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		out = append(out, pair{n.Content[i].Value, deref(n.Content[i+1]), n.Content[i].Line})
	}
	return out
}

// items returns the elements of the sequence n.
func items(n *yaml.Node) []*yaml.Node {
	n = deref(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	out := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		out[i] = deref(c)
	}
	return out
}

// scalars returns the values of the sequence n of scalars.
func scalars(n *yaml.Node) []string {
	var out []string
	for _, c := range items(n) {
		out = append(out, c.Value)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// toJSON renders a YAML value as indented JSON, keeping the mapping's key order.
func toJSON(n *yaml.Node) (string, error) {
	var b bytes.Buffer
	if err := writeJSON(&b, n); err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return "", err
	}
	return out.String(), nil
}

// compactJSON renders a YAML value as JSON on one line, keeping the mapping's key
// order.
func compactJSON(n *yaml.Node) (string, error) {
	var b bytes.Buffer
	err := writeJSON(&b, n)
	return b.String(), err
}

func writeJSON(b *bytes.Buffer, n *yaml.Node) error {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		b.WriteByte('{')
		for i, p := range pairs(n) {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(p.key)
			b.Write(k)
			b.WriteByte(':')
			if err := writeJSON(b, p.value); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, c); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return err
		}
		j, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("example at line %d: %w", n.Line, err)
		}
		b.Write(j)
	default:
		return fmt.Errorf("example at line %d: unsupported YAML node", n.Line)
	}
	return nil
}
