package strategy

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/cann-train/cann-train/internal/suggest"
	"github.com/cann-train/cann-train/internal/yamlpos"
)

// FieldError is one invalid field of a spec or plan. Line is 0 when unknown
// (a spec built in Go, or a plan string).
type FieldError struct {
	Field string `json:"field"` // YAML path without "$.", e.g. "device.peak_tflops"
	Line  int    `json:"line,omitempty"`
	Msg   string `json:"msg"`
}

func (e FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Msg)
}

// SpecError collects every problem found in one model spec, cluster spec or
// plan. File names the source ("model spec" etc. when there is none).
type SpecError struct {
	File   string       `json:"file"`
	Fields []FieldError `json:"fields"`
}

func (e *SpecError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d problem(s):", e.File, len(e.Fields))
	for _, f := range e.Fields {
		b.WriteString("\n  ")
		b.WriteString(f.Error())
	}
	return b.String()
}

// Has reports whether some problem names field exactly.
func (e *SpecError) Has(field string) bool {
	for _, f := range e.Fields {
		if f.Field == field {
			return true
		}
	}
	return false
}

// problems accumulates field errors during validation.
type problems []FieldError

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// err returns a *SpecError naming file, or nil when there is no problem.
func (p problems) err(file string) error {
	if len(p) == 0 {
		return nil
	}
	return &SpecError{File: file, Fields: append([]FieldError(nil), p...)}
}

const (
	unknownFieldMsg  = "unknown field"
	unknownFieldHint = unknownFieldMsg + " (check the spelling; `cann-train search --help` lists the fields)"
)

// decodeStrict decodes data into v rejecting unknown fields and wrong types;
// a failure comes back as a *SpecError carrying the field path and line.
func decodeStrict(name string, data []byte, file *ast.File, v any) error {
	err := yamlpos.Unmarshal(data, v, yaml.Strict(), yaml.DisallowUnknownField())
	if err == nil {
		return nil
	}
	fe := decodeError(err)
	if file != nil && fe.Field != "" {
		fe.Field = pathOfToken(file, err, fe.Field)
	}
	if !fieldPath(fe.Field) {
		fe.Field = "(document)"
	}
	if fe.Msg != unknownFieldHint {
		return &SpecError{File: name, Fields: []FieldError{fe}}
	}
	// Every unknown field, in order (the decoder names one at random).
	t := reflect.TypeOf(v)
	fields := []FieldError{fe}
	if all := yamlpos.UnknownFields(file, t); len(all) > 0 {
		fields = fields[:0]
		for _, u := range all {
			fields = append(fields, FieldError{Field: u.Path, Line: u.Line, Msg: unknownFieldHint})
		}
	}
	for i, f := range fields {
		names := yamlpos.Suggest(t, f.Field)
		if len(names) == 0 {
			// "flash_attn" for flash_attention: five edits away.
			names = yamlpos.SuggestBy(t, f.Field, suggest.Abbreviated)
		}
		if guess := suggest.DidYouMean(names); guess != "" {
			fields[i].Msg = unknownFieldMsg + "; " + guess + " (`cann-train search --help` lists the fields)"
		}
	}
	return &SpecError{File: name, Fields: fields}
}

// decodeAll is decodeStrict that keeps going past unknown fields: when an
// unknown field is all the strict decoder objects to, v is decoded again
// ignoring it, and the caller's validation still runs (see joinProblems),
// so one report names the misspelt field and every impossible value.
// unknown reports that case; with a type error v is left as the strict
// decoder left it and unknown is false.
func decodeAll(name string, data []byte, file *ast.File, v any) (strict error, unknown bool) {
	strict = decodeStrict(name, data, file, v)
	var se *SpecError
	if strict == nil || !errors.As(strict, &se) || !allUnknown(se.Fields) {
		return strict, false
	}
	if yamlpos.Unmarshal(data, v) != nil {
		return strict, false
	}
	return strict, true
}

// maxDecodePasses bounds how many times a spec file is parsed again
// without the fields found wrong (goOnPast).
const maxDecodePasses = 32

// goOnPast is every problem of a spec file whose strict decoding stopped
// at a value of the wrong type (strict): that, then what the file says
// wrong once the fields it names are left out — found by parsing the rest
// again with parse, at most passes times —, in line order, each field
// once. (A job file's problems are found so too: `layers: three` no
// longer hides a typo or an impossible value below it.)
func goOnPast(name string, file *ast.File, strict *SpecError, passes int, parse func(data []byte, passes int) error) error {
	if file == nil || passes <= 1 {
		return strict
	}
	for _, f := range strict.Fields {
		if f.Field == "(document)" || !fieldPath(f.Field) || !yamlpos.Drop(file, f.Field) {
			return strict
		}
	}
	var se *SpecError
	if err := parse([]byte(file.String()), passes-1); !errors.As(err, &se) {
		return strict
	}
	out := slices.Clone(strict.Fields)
	said := func(field string) bool {
		return slices.ContainsFunc(out, func(f FieldError) bool {
			return field == f.Field || strings.HasPrefix(field, f.Field+".") || strings.HasPrefix(field, f.Field+"[")
		})
	}
	for _, f := range se.Fields {
		if f.Field == "(document)" || said(f.Field) {
			continue // (what is left of the file, or a field already said wrong)
		}
		if f.Line = lineOf(file, f.Field); f.Line == 0 && !strings.Contains(f.Msg, "required") {
			// Not in the file: a default derived from a field left out
			// (ffn_hidden from hidden), not the user's problem.
			continue
		}
		out = append(out, f) // (the nodes left keep this file's lines)
	}
	yamlpos.SortByLine(out, func(f FieldError) int { return f.Line })
	return &SpecError{File: name, Fields: out}
}

// allUnknown: fields are unknown-field errors, at least one.
func allUnknown(fields []FieldError) bool {
	for _, f := range fields {
		if !strings.HasPrefix(f.Msg, unknownFieldMsg) {
			return false
		}
	}
	return len(fields) > 0
}

// oneDocument refuses a spec file that is not one YAML document, naming
// the file: nothing in it (an empty file, only comments, a bare "---";
// decoded, every required field would be said missing, which hides what
// is wrong), or a second document after the first (the decoder reads the
// first and ignores the rest, their mistakes too). what says what a spec
// of the kind gives at least. A file that does not parse is left to the
// decoder, whose syntax error says more. (The job-file reader of package
// spec refuses such files so too; its check is not exported, and it
// counts the parser's documents, which drop what follows two "---" in a
// row: this one reads the tokens.)
func oneDocument(name string, data []byte, what string) error {
	if _, err := parser.ParseBytes(data, 0); err != nil {
		return nil
	}
	content, directive := false, false
	var boundary *token.Token // the first document marker after content
	for _, tk := range lexer.Tokenize(string(data)) {
		switch tk.Type {
		case token.CommentType:
			continue
		case token.DirectiveType: // %YAML 1.2: up to the "---" it needs
			directive = true
			continue
		case token.DocumentHeaderType, token.DocumentEndType:
			directive = false
			if content && boundary == nil {
				boundary = tk
			}
			continue
		}
		if directive {
			continue
		}
		if boundary != nil {
			fe := FieldError{Field: "(document)", Msg: "a second YAML document (---): one spec per file"}
			if boundary.Type == token.DocumentEndType {
				fe.Msg = "a second YAML document (after the document end ...): one spec per file"
			}
			if boundary.Position != nil {
				fe.Line = boundary.Position.Line
			}
			return &SpecError{File: name, Fields: []FieldError{fe}}
		}
		content = true
	}
	if !content {
		return &SpecError{File: name, Fields: []FieldError{{Field: "(document)", Msg: "empty file (no YAML mapping): " + what}}}
	}
	return nil
}

// joinProblems merges *SpecErrors of one file in line order (those
// without a line last, in the order given: the README promises a file's
// problems in line order, and strict decoding, the zeros a file writes
// and validation each find theirs in an order of their own); nil when
// there are none.
func joinProblems(name string, errs ...error) error {
	var fields []FieldError
	for _, err := range errs {
		var se *SpecError
		switch {
		case err == nil:
		case errors.As(err, &se):
			fields = append(fields, se.Fields...)
		default:
			return err
		}
	}
	if len(fields) == 0 {
		return nil
	}
	yamlpos.SortByLine(fields, func(f FieldError) int { return f.Line })
	return &SpecError{File: name, Fields: fields}
}

// fieldPath reports whether s looks like a YAML field path
// ("device.peak_tflops", "layers"), not a stray token such as "-".
func fieldPath(s string) bool {
	if s == "(document)" {
		return true
	}
	if s == "" || s[0] == '.' || s[0] == '[' {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '.' || r == '[' || r == ']' || r == '-' && s != "-" || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return s != "-"
}

// decodeError turns a goccy/go-yaml error (or a FieldError raised by a
// custom unmarshaler) into one FieldError with its line.
func decodeError(err error) FieldError {
	var fe FieldError
	if errors.As(err, &fe) {
		return fe
	}
	field, line, msg, unknown := yamlpos.DecodeError(err)
	if unknown {
		msg = unknownFieldHint
	}
	return FieldError{Field: field, Line: line, Msg: msg}
}

func pathOfToken(file *ast.File, err error, def string) string {
	return yamlpos.PathOfToken(file, err, def)
}

func lineOf(file *ast.File, field string) int { return yamlpos.LineOf(file, field) }

// withLines fills in the YAML line of every field error of err (a
// *SpecError from validation) and names the file.
func withLines(err error, name string, file *ast.File) error {
	var se *SpecError
	if !errors.As(err, &se) {
		return err
	}
	se.File = name
	for i := range se.Fields {
		// A field left out of the file is reported at its parent's line.
		for f := se.Fields[i].Field; se.Fields[i].Line == 0 && f != ""; {
			se.Fields[i].Line = lineOf(file, f)
			j := strings.LastIndexByte(f, '.')
			if j < 0 {
				break
			}
			f = f[:j]
		}
	}
	return se
}

// absent rewrites what Validate said of the fields a file leaves out, which
// it saw only as zeros: a required one (field → what it is) reads
// "required: <what>, <its range>", and one defaulted from another left out
// (derived: kv_heads → heads) is dropped, as that one's problem says it all.
// A field the file gives keeps Validate's word ("0 out of range …").
func absent(err error, file *ast.File, required, derived map[string]string) error {
	var se *SpecError
	if file == nil || !errors.As(err, &se) {
		return err
	}
	kept := se.Fields[:0]
	for _, f := range se.Fields {
		if lineOf(file, f.Field) == 0 {
			if base, ok := derived[f.Field]; ok && lineOf(file, base) == 0 {
				continue
			}
			if what, ok := required[f.Field]; ok {
				if rng, ok := strings.CutPrefix(f.Msg, "0 out of range "); ok {
					f.Msg = "required: " + what + ", " + rng
				}
			}
		}
		kept = append(kept, f)
	}
	if len(kept) == 0 {
		return nil
	}
	se.Fields = kept
	return se
}

// isNull reports whether field is in file with a null value ("seq_len: ~",
// "seq_len: null", or nothing after the colon).
func isNull(file *ast.File, field string) bool {
	found := false
	yamlpos.Walk(file, func(n ast.Node) {
		if mv, ok := n.(*ast.MappingValueNode); ok && !found && mv.Value != nil &&
			strings.TrimPrefix(mv.Value.GetPath(), "$.") == field {
			_, found = mv.Value.(*ast.NullNode)
		}
	})
	return found
}

// nulls rewrites what Validate said of the fields a file gives as null
// ("seq_len: ~"), which it saw only as zeros: "null: required: <what>,
// <its range>" for a required field, "null: want a value in <range>" for
// another, not "0 out of range", a 0 the file never wrote.
func nulls(err error, file *ast.File, required map[string]string) error {
	var se *SpecError
	if file == nil || !errors.As(err, &se) {
		return err
	}
	for i, f := range se.Fields {
		if !isNull(file, f.Field) {
			continue
		}
		rng, ok := strings.CutPrefix(f.Msg, "0 out of range ")
		if !ok {
			continue
		}
		if what, ok := required[f.Field]; ok {
			se.Fields[i].Msg = "null (no value): required: " + what + ", " + rng
		} else {
			se.Fields[i].Msg = "null (no value): want a value in " + rng
		}
	}
	return err
}
