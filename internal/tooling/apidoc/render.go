package main

import (
	"cmp"
	"fmt"
	"strings"
	"unicode"

	"github.com/stepgate/stepgate/internal/tooling/readme"
	"gopkg.in/yaml.v3"
)

// protocolTag is the tag of the gateway's operations that functions call while they
// run (checkpoints); they are documented with the function protocol.
const protocolTag = "protocol"

// keysTag is the tag of the API operations that give the keys a function verifies
// the gateway's signatures with; the protocol reference links to them.
const keysTag = "keys"

// functionSide is the function's half of the protocol: endpoints the function (or
// app) serves, which openapi.yaml describes in info.description and in these
// schemas, not as paths (their URLs are the function's own).
var functionSide = []struct {
	method, url     string
	request, answer string // component schemas; request "" for none
}{
	{"POST", "<function url>", "InvocationRequest", "InvocationAnswer"},
	{"GET", "<app url>", "", "Manifest"},
}

// files names the two generated pages; each links to the other by these names, so
// they are written to one directory.
type files struct {
	api, protocol string // base names
	spec          string // the path of openapi.yaml relative to the pages' directory
}

// generate renders the API reference and the protocol reference.
func generate(s *spec, f files) (api, protocol string, err error) {
	var apiOps, protoOps []*operation
	for _, op := range s.operations {
		if op.tag == protocolTag {
			protoOps = append(protoOps, op)
		} else {
			apiOps = append(apiOps, op)
		}
	}
	if len(protoOps) == 0 {
		return "", "", fmt.Errorf("no operation is tagged %q", protocolTag)
	}
	var protoRoots []string
	for _, fs := range functionSide {
		for _, name := range []string{fs.request, fs.answer} {
			if name == "" {
				continue
			}
			if s.schema(name) == nil {
				return "", "", fmt.Errorf("the function protocol's schema %s is not in components/schemas", name)
			}
			protoRoots = append(protoRoots, name)
		}
	}
	apiRoots, err := rootsOf(s, apiOps, "schemas")
	if err != nil {
		return "", "", err
	}
	more, err := rootsOf(s, protoOps, "schemas")
	if err != nil {
		return "", "", err
	}
	protoRoots = append(protoRoots, more...)
	apiSchemas, protoSchemas := s.closure(apiRoots), s.closure(protoRoots)
	// A schema no operation or protocol message reaches is still documented, with the API.
	for _, name := range s.componentNames("schemas") {
		if !apiSchemas[name] && !protoSchemas[name] {
			for n := range s.closure([]string{name}) {
				apiSchemas[n] = true
			}
		}
	}

	// A component header goes with the operations that name it; one no operation names
	// is one of the protocol's (the function side's requests and answers are no paths).
	apiHeaders, protoHeaders := map[string]bool{}, map[string]bool{}
	for _, set := range []struct {
		ops []*operation
		in  map[string]bool
	}{{apiOps, apiHeaders}, {protoOps, protoHeaders}} {
		names, err := rootsOf(s, set.ops, "headers")
		if err != nil {
			return "", "", err
		}
		for _, n := range names {
			set.in[n] = true
		}
	}
	for _, name := range s.componentNames("headers") {
		if !apiHeaders[name] && !protoHeaders[name] {
			protoHeaders[name] = true
		}
	}

	a := &doc{spec: s, files: f, self: f.api, other: f.protocol, schemas: apiSchemas, otherSchemas: protoSchemas,
		headers: apiHeaders, otherHeaders: protoHeaders}
	p := &doc{spec: s, files: f, self: f.protocol, other: f.api, schemas: protoSchemas, otherSchemas: apiSchemas,
		headers: protoHeaders, otherHeaders: apiHeaders}
	a.ops, a.otherOps = apiOps, protoOps
	p.ops, p.otherOps = protoOps, apiOps
	a.writeAPI()
	p.writeProtocol()
	if a.err != nil {
		return "", "", a.err
	}
	if p.err != nil {
		return "", "", p.err
	}
	return a.String(), p.String(), nil
}

func rootsOf(s *spec, ops []*operation, kind string) ([]string, error) {
	var roots []string
	for _, op := range ops {
		r, err := s.opRefs(op, kind)
		if err != nil {
			return nil, err
		}
		roots = append(roots, r...)
	}
	return roots, nil
}

// doc is one Markdown page being written.
type doc struct {
	strings.Builder
	spec                  *spec
	files                 files
	self, other           string // this page's and the other page's base names
	ops, otherOps         []*operation
	schemas, otherSchemas map[string]bool
	headers, otherHeaders map[string]bool // component headers
	anchors               map[string]bool
	err                   error
}

// heading writes a heading and records its anchor; two headings with one anchor are
// an error, since GitHub would suffix the second and links to it would miss.
func (d *doc) heading(level int, text string) {
	a := slug(text)
	if d.anchors == nil {
		d.anchors = map[string]bool{}
	}
	if d.anchors[a] && d.err == nil {
		d.err = fmt.Errorf("%s: two headings have the anchor #%s (the second %q)", d.self, a, text)
	}
	d.anchors[a] = true
	fmt.Fprintf(d, "%s %s\n\n", strings.Repeat("#", level), text)
}

func (d *doc) para(format string, args ...any) {
	fmt.Fprintf(d, format, args...)
	d.WriteString("\n\n")
}

func (d *doc) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *doc) generatedNote() {
	d.para("Generated from [openapi.yaml](%s) by `go generate ./internal/tooling/apidoc`: edit openapi.yaml, not this page.", d.files.spec)
}

func (d *doc) writeAPI() {
	d.heading(1, "HTTP API reference")
	d.para("%s", "With this page you can call every operation of stepgate's HTTP API from any language or tool: "+
		"its method and path, the permission it needs, its parameters, its request body, its responses, "+
		"and the fields of every schema they carry. What a function itself receives and answers, and the "+
		"checkpoint operations it calls while it runs, are in the [function protocol reference]("+d.other+").")
	d.generatedNote()

	intro, sections := splitDescription(str(get(d.spec.root, "info"), "description"))
	d.heading(2, "Overview")
	d.para("From the description of openapi.yaml:")
	d.para("%s", intro)
	for _, sec := range sections {
		if !sec.protocol {
			d.heading(2, sec.title)
			d.para("%s", sec.body)
		}
	}

	d.heading(2, "Base URL")
	var servers []string
	for _, sv := range items(get(d.spec.root, "servers")) {
		line := "`" + str(sv, "url") + "`"
		if desc := str(sv, "description"); desc != "" {
			line += ": " + oneLine(desc)
		}
		servers = append(servers, line)
	}
	d.para("Paths are relative to the gateway's URL. openapi.yaml's `servers`: %s.", strings.Join(servers, ", "))

	d.writeAuthentication(true)
	d.writeErrors()
	d.writePagination()
	d.writeIdempotency()
	d.writeLongPolls()
	d.writeLimits()

	d.writeContents()
	d.writeOperations()
	d.writeHeaders()
	d.writeSchemas()
}

func (d *doc) writeProtocol() {
	d.heading(1, "Function protocol reference")
	d.para("%s", "This page is for implementers of the function protocol: the author of an SDK for stepgate, or of a "+
		"function served over raw HTTP in a language with no SDK. It gives what the gateway sends to a "+
		"function and what the function answers, the gateway's operations a function calls while it runs, "+
		"and the fields of every schema they carry. The rest of the HTTP API is in the [HTTP API reference]("+d.other+").")
	d.generatedNote()

	_, sections := splitDescription(str(get(d.spec.root, "info"), "description"))
	first := ""
	for _, sec := range sections {
		if sec.protocol {
			if first == "" {
				first = sec.title
			}
			d.heading(2, sec.title)
			d.para("%s", sec.body)
		}
	}
	if first == "" {
		d.fail(fmt.Errorf("info.description has no section on the function protocol (a \"## \" heading naming it)"))
	}

	d.writeAuthentication(false)

	d.heading(2, "Served by the function")
	d.para("The gateway sends these requests to the function's (or the app's) own URL; each is signed: see [%s](#%s).", first, slug(first))
	for _, fs := range functionSide {
		d.heading(3, fs.method+" `"+fs.url+"`")
		if fs.request != "" {
			d.para("Request body: %s. %s", d.schemaLink(fs.request), firstParagraph(str(d.spec.schema(fs.request), "description")))
		}
		d.para("Answer: %s. %s", d.schemaLink(fs.answer), firstParagraph(str(d.spec.schema(fs.answer), "description")))
	}

	var related []*operation
	for _, op := range d.otherOps {
		if op.tag == keysTag {
			related = append(related, op)
		}
	}
	if len(related) > 0 {
		d.heading(2, "Related operations of the HTTP API")
		d.para("The `%s` operations, in the [HTTP API reference](%s):", keysTag, d.other)
		for _, op := range related {
			fmt.Fprintf(d, "- %s: %s\n", d.opLink(op), oneLine(str(op.node, "summary")))
		}
		d.WriteString("\n")
	}

	d.writeContents()
	d.writeOperations()
	d.writeHeaders()
	d.writeSchemas()
}

// section is a "## " section of info.description.
type section struct {
	title, body string
	protocol    bool // its title names the function protocol
}

// splitDescription splits info.description at its "## " headings.
func splitDescription(desc string) (intro string, sections []section) {
	var cur *section
	var b strings.Builder
	flush := func() {
		text := strings.TrimSpace(b.String())
		b.Reset()
		if cur == nil {
			intro = text
			return
		}
		cur.body = text
		sections = append(sections, *cur)
	}
	for _, line := range strings.Split(desc, "\n") {
		if title, ok := strings.CutPrefix(line, "## "); ok {
			flush()
			title = strings.TrimSpace(title)
			cur = &section{title: title, protocol: strings.Contains(strings.ToLower(title), "protocol")}
			continue
		}
		b.WriteString(line)
		b.WriteString("\n")
	}
	flush()
	return intro, sections
}

// writeAuthentication documents the security schemes this page's operations use; on
// the API page also the operations that differ from the default and the permissions.
func (d *doc) writeAuthentication(api bool) {
	d.heading(2, "Authentication")
	used := map[string]bool{}
	var differ []*operation
	global := schemeNames(get(d.spec.root, "security"))
	for _, op := range d.ops {
		names := d.security(op)
		for _, n := range names {
			used[n] = true
		}
		if strings.Join(names, ",") != strings.Join(global, ",") {
			differ = append(differ, op)
		}
	}
	schemes := get(get(d.spec.root, "components"), "securitySchemes")
	d.para("The security schemes of openapi.yaml these operations use:")
	for _, p := range pairs(schemes) {
		if !used[p.key] {
			continue
		}
		fmt.Fprintf(d, "- `%s`: %s. %s\n", p.key, schemeKind(p.value), oneLine(str(p.value, "description")))
	}
	d.WriteString("\n")
	if !api {
		return
	}
	if len(global) > 0 {
		d.para("Every operation takes %s unless it says otherwise; these do:", codeList(global))
		for _, op := range differ {
			fmt.Fprintf(d, "- %s: %s\n", d.opLink(op), d.authText(op))
		}
		d.WriteString("\n")
	}

	d.heading(3, "Permissions")
	d.para("Each operation names the one permission it needs (`x-permission` in openapi.yaml); the roles table of the overview says which roles grant it.")
	var perms []string
	byPerm := map[string][]string{}
	for _, op := range d.ops {
		perm := str(op.node, "x-permission")
		if perm == "" {
			continue
		}
		if byPerm[perm] == nil {
			perms = append(perms, perm)
		}
		byPerm[perm] = append(byPerm[perm], d.opLink(op))
	}
	d.WriteString("| permission | operations |\n|---|---|\n")
	for _, perm := range perms {
		fmt.Fprintf(d, "| `%s` | %s |\n", perm, strings.Join(byPerm[perm], ", "))
	}
	d.WriteString("\n")
}

// security returns the names of the schemes an operation accepts (its own security,
// else the document's).
func (d *doc) security(op *operation) []string {
	if sec := get(op.node, "security"); sec != nil {
		return schemeNames(sec)
	}
	return schemeNames(get(d.spec.root, "security"))
}

func schemeNames(sec *yaml.Node) []string {
	var names []string
	for _, req := range items(sec) {
		for _, p := range pairs(req) {
			names = append(names, p.key)
		}
	}
	return names
}

func schemeKind(s *yaml.Node) string {
	switch {
	case str(s, "type") == "http" && str(s, "scheme") == "bearer":
		return "`Authorization: Bearer <" + cmp.Or(str(s, "bearerFormat"), "token") + ">`"
	case str(s, "type") == "http":
		return "HTTP " + str(s, "scheme") + " authentication"
	case str(s, "type") == "apiKey":
		return fmt.Sprintf("an API key in the %s `%s`", str(s, "in"), str(s, "name"))
	default:
		return str(s, "type")
	}
}

func (d *doc) authText(op *operation) string {
	names := d.security(op)
	if len(names) == 0 {
		return "none"
	}
	links := make([]string, len(names))
	for i, n := range names {
		links[i] = "[`" + n + "`](#authentication)"
	}
	return strings.Join(links, ", ")
}

func (d *doc) writeErrors() {
	d.heading(2, "Errors")
	d.para("The responses openapi.yaml shares between operations (`components/responses`):")
	d.WriteString("| response | description | body | example |\n|---|---|---|---|\n")
	for _, p := range pairs(get(get(d.spec.root, "components"), "responses")) {
		body, example := d.bodyText(p.value), ""
		if ex := exampleOf(p.value); ex != nil {
			j, err := compactJSON(ex)
			if err != nil {
				d.fail(err)
			}
			example = "`" + j + "`"
		}
		fmt.Fprintf(d, "| `%s` | %s | %s | %s |\n", p.key, cell(str(p.value, "description")+d.headersText(p.value)), body, cell(example))
	}
	d.WriteString("\n")
}

// exampleOf returns the example of a response's (or body's) first media type.
func exampleOf(n *yaml.Node) *yaml.Node {
	for _, mt := range pairs(get(n, "content")) {
		return get(mt.value, "example")
	}
	return nil
}

func (d *doc) writePagination() {
	d.heading(2, "Pagination")
	d.para("The operations that take a cursor, with the field of their answer that gives the next page's:")
	d.WriteString("| operation | cursor | limit | next page |\n|---|---|---|---|\n")
	for _, op := range d.ops {
		for _, p := range op.params {
			name := str(p, "name")
			if str(p, "in") != "query" || (name != "cursor" && !strings.HasSuffix(name, "_cursor")) {
				continue
			}
			prefix := strings.TrimSuffix(name, "cursor")
			limit := "—"
			for _, l := range op.params {
				if str(l, "name") == prefix+"limit" {
					limit = "`" + prefix + "limit`: " + strings.TrimSpace(str(l, "description")+constraintsSuffix(get(l, "schema")))
				}
			}
			next := "—"
			if f, desc := d.nextField(op, prefix+"next_cursor"); f != "" {
				next = "`" + f + "`: " + desc
			}
			fmt.Fprintf(d, "| %s | `%s`: %s | %s | %s |\n", d.opLink(op), name, cell(str(p, "description")), cell(limit), cell(next))
		}
	}
	d.WriteString("\n")
}

// nextField finds the field named field in the schema of op's 200 answer (through
// allOf), with its description.
func (d *doc) nextField(op *operation, field string) (string, string) {
	resp, err := d.spec.resolve(get(get(op.node, "responses"), "200"))
	if err != nil || resp == nil {
		return "", ""
	}
	var find func(s *yaml.Node, depth int) (string, string)
	find = func(s *yaml.Node, depth int) (string, string) {
		if s == nil || depth > 5 {
			return "", ""
		}
		if name := schemaRef(s); name != "" {
			return find(d.spec.schema(name), depth+1)
		}
		if prop := get(get(s, "properties"), field); prop != nil {
			return field, str(prop, "description")
		}
		for _, part := range items(get(s, "allOf")) {
			if f, desc := find(part, depth+1); f != "" {
				return f, desc
			}
		}
		return "", ""
	}
	for _, mt := range pairs(get(resp, "content")) {
		if f, desc := find(get(mt.value, "schema"), 0); f != "" {
			return f, desc
		}
	}
	return "", ""
}

func (d *doc) writeIdempotency() {
	d.heading(2, "Idempotency keys")
	d.para("The operations that take an `Idempotency-Key` header; each one's description says what a repeat does:")
	d.WriteString("| operation | required | description |\n|---|---|---|\n")
	for _, op := range d.ops {
		for _, p := range op.params {
			if str(p, "in") == "header" && strings.EqualFold(str(p, "name"), "Idempotency-Key") {
				fmt.Fprintf(d, "| %s | %s | %s |\n", d.opLink(op), yesNo(str(p, "required") == "true"), cell(str(p, "description")+constraintsSuffix(get(p, "schema"))))
			}
		}
	}
	d.WriteString("\n")
}

func (d *doc) writeLongPolls() {
	d.heading(2, "Long-polls")
	d.para("The operations that take a `wait` query parameter, to hold the request open until there is something to answer:")
	d.WriteString("| operation | `wait` |\n|---|---|\n")
	for _, op := range d.ops {
		for _, p := range op.params {
			if str(p, "in") == "query" && str(p, "name") == "wait" {
				fmt.Fprintf(d, "| %s | %s |\n", d.opLink(op), cell(str(p, "description")))
			}
		}
	}
	d.WriteString("\n")
}

// writeLimits lists the operations that may answer 429 or 503, the statuses a client
// retries after `Retry-After`.
func (d *doc) writeLimits() {
	d.heading(2, "Rate limits and Retry-After")
	d.para("The operations that may answer 429 (a limit is reached) or 503 (unavailable), with the response each gives:")
	d.WriteString("| status | response | description | operations |\n|---|---|---|---|\n")
	for _, status := range []string{"429", "503"} {
		var order []string // responses: a component's name, or an inline one's description
		ops := map[string][]string{}
		text := map[string]string{}
		for _, op := range d.ops {
			r := get(get(op.node, "responses"), status)
			if r == nil {
				continue
			}
			resolved, err := d.spec.resolve(r)
			if err != nil {
				d.fail(err)
				continue
			}
			key := "inline: " + str(resolved, "description")
			if _, name, ok := componentRef(str(r, "$ref")); ok {
				key = name
			}
			if ops[key] == nil {
				order = append(order, key)
				text[key] = str(resolved, "description") + d.headersText(resolved)
			}
			ops[key] = append(ops[key], d.opLink(op))
		}
		for _, key := range order {
			name := "`" + key + "`"
			if strings.HasPrefix(key, "inline: ") {
				name = "inline"
			}
			fmt.Fprintf(d, "| %s | %s | %s | %s |\n", status, name, cell(text[key]), strings.Join(ops[key], ", "))
		}
	}
	d.WriteString("\n")
}

func (d *doc) writeContents() {
	d.heading(2, "Contents")
	for _, tag := range d.spec.tags {
		var ops []*operation
		for _, op := range d.ops {
			if op.tag == tag {
				ops = append(ops, op)
			}
		}
		if len(ops) == 0 {
			continue
		}
		title := tagTitle(tag)
		fmt.Fprintf(d, "- [%s](#%s)\n", title, slug(title))
		for _, op := range ops {
			fmt.Fprintf(d, "  - %s (`%s`): %s\n", d.opLink(op), op.id, firstSentence(oneLine(str(op.node, "summary"))))
		}
	}
	if d.hasHeaders() {
		fmt.Fprintf(d, "- [Headers](#headers)\n")
	}
	fmt.Fprintf(d, "- [Schemas](#schemas)\n\n")
}

func tagTitle(tag string) string {
	if tag == "" {
		return "Operations without a tag"
	}
	return "Operations: " + tag
}

func (d *doc) writeOperations() {
	for _, tag := range d.spec.tags {
		first := true
		for _, op := range d.ops {
			if op.tag != tag {
				continue
			}
			if first {
				d.heading(2, tagTitle(tag))
				if t := d.tagDescription(tag); t != "" {
					d.para("%s", t)
				}
				first = false
			}
			d.writeOperation(op)
		}
	}
}

func (d *doc) tagDescription(tag string) string {
	for _, t := range items(get(d.spec.root, "tags")) {
		if str(t, "name") == tag {
			return strings.TrimSpace(str(t, "description"))
		}
	}
	return ""
}

func (d *doc) writeOperation(op *operation) {
	d.heading(3, op.method+" "+op.path)
	fmt.Fprintf(d, "- Operation: `%s`\n", op.id)
	perm := "none"
	if p := str(op.node, "x-permission"); p != "" {
		perm = "`" + p + "`"
	}
	fmt.Fprintf(d, "- Permission: %s\n", perm)
	fmt.Fprintf(d, "- Authentication: %s\n\n", d.authText(op))
	if s := strings.TrimSpace(str(op.node, "summary")); s != "" {
		d.para("%s", s)
	}
	if s := strings.TrimSpace(str(op.node, "description")); s != "" {
		d.para("%s", s)
	}

	if len(op.params) > 0 {
		d.para("Parameters:")
		d.WriteString("| name | in | type | required | description |\n|---|---|---|---|---|\n")
		for _, p := range op.params {
			desc := str(p, "description") + constraintsSuffix(get(p, "schema"))
			if ex := get(p, "example"); ex != nil && ex.Kind == yaml.ScalarNode {
				desc += " Example `" + ex.Value + "`."
			}
			fmt.Fprintf(d, "| `%s` | %s | %s | %s | %s |\n", str(p, "name"), str(p, "in"), d.typeOf(get(p, "schema")),
				yesNo(str(p, "required") == "true"), cell(desc))
		}
		d.WriteString("\n")
	}

	if rb := get(op.node, "requestBody"); rb != nil {
		rb, err := d.spec.resolve(rb)
		if err != nil {
			d.fail(err)
			return
		}
		req := "optional"
		if str(rb, "required") == "true" {
			req = "required"
		}
		body := d.bodyText(rb)
		text := fmt.Sprintf("Request body (%s): %s.", req, body)
		if desc := strings.TrimSpace(str(rb, "description")); desc != "" {
			text += " " + desc
		}
		d.para("%s", text)
		if ex := exampleOf(rb); ex != nil {
			j, err := toJSON(ex)
			if err != nil {
				d.fail(fmt.Errorf("%s: %w", op.id, err))
			}
			d.para("```json\n%s\n```", j)
		}
	}

	d.para("Responses:")
	d.WriteString("| status | description | body |\n|---|---|---|\n")
	for _, r := range pairs(get(op.node, "responses")) {
		resp, err := d.spec.resolve(r.value)
		if err != nil {
			d.fail(err)
			continue
		}
		body := d.bodyText(resp)
		fmt.Fprintf(d, "| %s | %s | %s |\n", r.key, cell(str(resp, "description")+d.headersText(resp)), body)
	}
	d.WriteString("\n")
}

// bodyText describes a request body's or response's content: its schema per media
// type ("—" for none); the media type is named unless it is application/json.
func (d *doc) bodyText(n *yaml.Node) string {
	var parts []string
	for _, mt := range pairs(get(n, "content")) {
		t := d.typeOf(get(mt.value, "schema"))
		if mt.key != "application/json" {
			t += " (`" + mt.key + "`)"
		}
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", or ")
}

// headersText describes a response's headers, as sentences to append to its
// description.
func (d *doc) headersText(resp *yaml.Node) string {
	var b strings.Builder
	for _, h := range pairs(get(resp, "headers")) {
		hdr, err := d.spec.resolve(h.value)
		if err != nil {
			d.fail(err)
			continue
		}
		fmt.Fprintf(&b, " Header `%s`", h.key)
		if _, name, ok := componentRef(str(h.value, "$ref")); ok {
			fmt.Fprintf(&b, " (%s)", d.headerLink(name))
		} else if t := str(get(hdr, "schema"), "type"); t != "" {
			fmt.Fprintf(&b, " (%s)", t)
		}
		if desc := oneLine(str(hdr, "description")); desc != "" {
			fmt.Fprintf(&b, ": %s", desc)
		} else {
			b.WriteString(".")
		}
	}
	return b.String()
}

func (d *doc) hasHeaders() bool {
	for _, name := range d.spec.componentNames("headers") {
		if d.headers[name] {
			return true
		}
	}
	return false
}

// writeHeaders documents the component headers of this page.
func (d *doc) writeHeaders() {
	if !d.hasHeaders() {
		return
	}
	d.heading(2, "Headers")
	d.para("The headers openapi.yaml defines once (`components/headers`), by their name there:")
	for _, p := range pairs(get(get(d.spec.root, "components"), "headers")) {
		if !d.headers[p.key] {
			continue
		}
		d.heading(3, p.key)
		if desc := strings.TrimSpace(str(p.value, "description")); desc != "" {
			d.para("%s", desc)
		}
		line := "Type: " + d.typeOf(get(p.value, "schema")) + "."
		if c := constraints(get(p.value, "schema")); c != "" {
			line += " " + c
		}
		d.para("%s", line)
	}
}

func (d *doc) headerLink(name string) string {
	switch {
	case d.headers[name]:
		return "[" + name + "](#" + slug(name) + ")"
	case d.otherHeaders[name]:
		return "[" + name + "](" + d.other + "#" + slug(name) + ")"
	default:
		d.fail(fmt.Errorf("%s: header %s is documented in neither page", d.self, name))
		return "`" + name + "`"
	}
}

func (d *doc) writeSchemas() {
	d.heading(2, "Schemas")
	var links []string
	for _, name := range d.spec.componentNames("schemas") {
		if d.schemas[name] {
			links = append(links, d.schemaLink(name))
		}
	}
	d.para("%s", strings.Join(links, " · "))
	for _, name := range d.spec.componentNames("schemas") {
		if d.schemas[name] {
			d.writeSchema(name)
		}
	}
}

func (d *doc) writeSchema(name string) {
	s := d.spec.schema(name)
	d.heading(3, name)
	if desc := strings.TrimSpace(str(s, "description")); desc != "" {
		d.para("%s", desc)
	}
	var rows []row
	var bases []string
	for _, part := range items(get(s, "allOf")) {
		if ref := schemaRef(part); ref != "" {
			bases = append(bases, d.schemaLink(ref))
			continue
		}
		d.fields("", part, &rows)
	}
	if len(bases) > 0 {
		d.para("All the fields of %s, and these:", strings.Join(bases, " and "))
	}
	d.fields("", s, &rows)
	if len(rows) > 0 {
		d.WriteString("| field | type | required | description |\n|---|---|---|---|\n")
		for _, r := range rows {
			fmt.Fprintf(d, "| `%s` | %s | %s | %s |\n", r.name, r.typ, yesNo(r.required), cell(r.desc))
		}
		d.WriteString("\n")
		if ap := get(s, "additionalProperties"); ap != nil && ap.Kind == yaml.MappingNode {
			d.para("Other fields: %s.", d.typeOf(ap))
		}
		return
	}
	if len(bases) > 0 {
		return
	}
	line := "Type: " + d.typeOf(s) + "."
	if c := constraints(s); c != "" {
		line += " " + c
	}
	d.para("%s", line)
}

type row struct {
	name, typ, desc string
	required        bool
}

// fields appends the rows of an inline object schema's properties, and those of its
// inline objects' properties under dotted names.
func (d *doc) fields(prefix string, s *yaml.Node, rows *[]row) {
	required := map[string]bool{}
	for _, r := range scalars(get(s, "required")) {
		required[r] = true
	}
	for _, p := range pairs(get(s, "properties")) {
		desc := str(p.value, "description")
		if schemaRef(p.value) == "" {
			desc += constraintsSuffix(p.value)
		}
		*rows = append(*rows, row{name: prefix + p.key, typ: d.typeOf(p.value), desc: desc, required: required[p.key]})
		if schemaRef(p.value) == "" && get(p.value, "properties") != nil {
			d.fields(prefix+p.key+".", p.value, rows)
		}
		if it := get(p.value, "items"); it != nil && schemaRef(it) == "" && get(it, "properties") != nil {
			d.fields(prefix+p.key+"[].", it, rows)
		}
	}
}

// typeOf renders a schema's type: a link for a component schema, else its type,
// format and element type.
func (d *doc) typeOf(s *yaml.Node) string {
	if s == nil {
		return "—"
	}
	if name := schemaRef(s); name != "" {
		return d.schemaLink(name)
	}
	if all := items(get(s, "allOf")); len(all) > 0 {
		var parts []string
		for _, p := range all {
			parts = append(parts, d.typeOf(p))
		}
		return strings.Join(parts, " and ")
	}
	for _, key := range []string{"oneOf", "anyOf"} {
		if alts := items(get(s, key)); len(alts) > 0 {
			var parts []string
			for _, p := range alts {
				parts = append(parts, d.typeOf(p))
			}
			return strings.Join(parts, " or ")
		}
	}
	t := str(s, "type")
	switch t {
	case "":
		if get(s, "properties") != nil {
			t = "object"
		} else {
			t = "any JSON"
		}
	case "array":
		t = "array of " + d.typeOf(get(s, "items"))
	case "object":
		if ap := get(s, "additionalProperties"); ap != nil && ap.Kind == yaml.MappingNode && get(s, "properties") == nil {
			t = "map of string to " + d.typeOf(ap)
		}
	}
	if f := str(s, "format"); f != "" {
		t += " (" + f + ")"
	}
	if str(s, "nullable") == "true" {
		t += ", nullable"
	}
	return t
}

// constraints renders a schema's enum, default, bounds, pattern and example as sentences.
func constraints(s *yaml.Node) string {
	if s == nil {
		return ""
	}
	var parts []string
	if e := scalars(get(s, "enum")); len(e) > 0 {
		parts = append(parts, "One of "+codeList(e)+".")
	}
	if v := get(s, "default"); v != nil && v.Kind == yaml.ScalarNode {
		parts = append(parts, "Default `"+v.Value+"`.")
	}
	for _, b := range []struct{ key, text string }{
		{"minimum", "Minimum"}, {"maximum", "Maximum"},
		{"minLength", "Minimum length"}, {"maxLength", "Maximum length"},
		{"minItems", "Minimum items"}, {"maxItems", "Maximum items"},
	} {
		if v := str(s, b.key); v != "" {
			parts = append(parts, b.text+" "+v+".")
		}
	}
	if v := str(s, "pattern"); v != "" {
		parts = append(parts, "Pattern `"+v+"`.")
	}
	if v := get(s, "example"); v != nil && v.Kind == yaml.ScalarNode {
		parts = append(parts, "Example `"+v.Value+"`.")
	}
	return strings.Join(parts, " ")
}

func constraintsSuffix(s *yaml.Node) string {
	if c := constraints(s); c != "" {
		return " " + c
	}
	return ""
}

func (d *doc) schemaLink(name string) string {
	switch {
	case d.schemas[name]:
		return "[" + name + "](#" + slug(name) + ")"
	case d.otherSchemas[name]:
		return "[" + name + "](" + d.other + "#" + slug(name) + ")"
	default:
		d.fail(fmt.Errorf("%s: schema %s is documented in neither page", d.self, name))
		return "`" + name + "`"
	}
}

func (d *doc) opLink(op *operation) string {
	text := op.method + " " + op.path
	for _, o := range d.ops {
		if o == op {
			return "[" + text + "](#" + slug(text) + ")"
		}
	}
	return "[" + text + "](" + d.other + "#" + slug(text) + ")"
}

// slug is the anchor GitHub gives a heading (readme.Anchor, the rule the docs' link
// check applies too).
func slug(heading string) string { return readme.Anchor(heading) }

// cell makes text fit one cell of a Markdown table: one line, pipes escaped.
func cell(s string) string {
	s = oneLine(s)
	if s == "" {
		return ""
	}
	return strings.ReplaceAll(s, "|", `\|`)
}

// oneLine joins the lines (and paragraphs) of s with single spaces.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func firstParagraph(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, "\n\n"); i >= 0 {
		s = s[:i]
	}
	return oneLine(s)
}

// firstSentence cuts s after its first period followed by a space and a capital.
func firstSentence(s string) string {
	for i := 0; i+2 < len(s); i++ {
		if s[i] == '.' && s[i+1] == ' ' && unicode.IsUpper(rune(s[i+2])) {
			return s[:i+1]
		}
	}
	return s
}

func codeList(list []string) string {
	quoted := make([]string, len(list))
	for i, s := range list {
		quoted[i] = "`" + s + "`"
	}
	return strings.Join(quoted, ", ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
