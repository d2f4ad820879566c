// Package yamlpos finds where things are in a YAML document, so that
// configuration errors can name the field and its line. It is shared by the
// job-file reader (spec) and the strategy specs (engine/strategy); both
// decode strictly with github.com/goccy/go-yaml.
package yamlpos

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/cann-train/cann-train/internal/suggest"
)

// ErrDecoderPanic marks a document the YAML decoder could not survive:
// github.com/goccy/go-yaml v1.19.2 (the newest served) dereferences nil on
// some malformed input, e.g. an empty tagged value where a list is
// expected ("entrypoint: !x" followed by a stray mapping), which fuzzing
// the job-file reader found. Unmarshal turns that into this error.
var ErrDecoderPanic = errors.New("the YAML decoder failed on this document (malformed YAML)")

// Unmarshal is yaml.UnmarshalWithOptions that returns an error wrapping
// ErrDecoderPanic, naming what the decoder hit, where the decoder would
// panic, and a *FractionError where a number with a fractional part went
// into an integer field (the decoder truncates it: "nodes: 2.7" gave 2).
func Unmarshal(data []byte, v any, opts ...yaml.DecodeOption) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrDecoderPanic, r)
		}
	}()
	if err := yaml.UnmarshalWithOptions(data, v, opts...); err != nil {
		return err
	}
	return fractions(data, reflect.TypeOf(v))
}

// FractionError is a number with a fractional part (or not a number)
// written where a whole number is wanted.
type FractionError struct {
	Path  string // e.g. "model.hidden[0]"
	Line  int
	Value string // as written
}

func (e *FractionError) Error() string {
	return fmt.Sprintf("line %d: %s: %s", e.Line, e.Path, e.msg())
}

func (e *FractionError) msg() string { return "want a whole number, got " + e.Value }

// fractions finds the first float in data whose field in t (the type
// decoded into) is an integer.
func fractions(data []byte, t reflect.Type) error {
	file, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil // (it decoded: nothing to say)
	}
	var found *FractionError
	for _, doc := range file.Docs {
		ast.Walk(visitFunc(func(n ast.Node) {
			if found != nil {
				return
			}
			// A float, or a string the decoder reads as one ("1e-3").
			var x float64
			switch v := n.(type) {
			case *ast.FloatNode:
				x = v.Value
			case *ast.StringNode:
				var err error
				if x, err = strconv.ParseFloat(strings.TrimSpace(v.Value), 64); err != nil {
					return
				}
			default:
				return
			}
			if x == math.Trunc(x) {
				return
			}
			path := strings.TrimPrefix(n.GetPath(), "$.")
			if k, ok := kindAt(t, path); ok && integer(k) {
				tok := n.GetToken()
				found = &FractionError{Path: path, Value: tok.Value}
				if tok.Position != nil {
					found.Line = tok.Position.Line
				}
			}
		}), doc)
	}
	if found != nil {
		return found
	}
	return nil
}

func integer(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// kindAt is the kind of the value at path ("model.hidden[0]") in type t;
// false where typeAt is.
func kindAt(t reflect.Type, path string) (reflect.Kind, bool) {
	t, ok := typeAt(t, path, true)
	if !ok {
		return 0, false
	}
	return t.Kind(), true
}

// typeAt is the type of the value at path ("model.hidden[0]"; "" is t
// itself) in type t, pointers followed, following fields by their yaml
// name (else json, else lower-case name), slice and map elements; false
// where the path leaves what it can follow or, if opaque, reaches a type
// that decodes itself (which may read anything).
func typeAt(t reflect.Type, path string, opaque bool) (reflect.Type, bool) {
	if opaque && decodesItself(t) {
		return nil, false
	}
	for seg := range strings.SplitSeq(path, ".") {
		name, rest, _ := strings.Cut(seg, "[")
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case name == "":
		case t.Kind() == reflect.Struct:
			f, ok := fieldByYAMLName(t, name)
			if !ok {
				return nil, false
			}
			t = f.Type
		case t.Kind() == reflect.Map:
			t = t.Elem()
		default:
			return nil, false
		}
		for ; rest != ""; _, rest, _ = strings.Cut(rest, "[") {
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
				return nil, false
			}
			t = t.Elem()
		}
		if opaque && decodesItself(t) {
			return nil, false
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t, true
}

// Suggest names the fields an unknown field at path ("model.hidde", in
// the type t decoded into) most likely meant (suggest.Nearest among the
// fields beside it); none when nothing is close or the field's parent is
// not a struct.
func Suggest(t reflect.Type, path string) []string {
	return SuggestBy(t, path, suggest.Nearest)
}

// SuggestBy is Suggest picking among the fields beside path with pick
// (suggest.Nearest, suggest.Abbreviated).
func SuggestBy(t reflect.Type, path string, pick func(name string, known []string) []string) []string {
	parent, name := "", path
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		parent, name = path[:i], path[i+1:]
	}
	if name == "" || strings.Contains(name, "[") {
		return nil
	}
	// A struct that decodes itself most likely reads its mapping form into
	// its fields: its names are the best guess.
	t, ok := typeAt(t, parent, false)
	if !ok || t.Kind() != reflect.Struct {
		return nil
	}
	return pick(name, Fields(t))
}

// Unknown is a mapping key that names no field of the type decoded into.
type Unknown struct {
	Path string // e.g. "model.hiden"
	Line int    // 0 if unknown
}

// UnknownFields lists, in document order, every key of file that names no
// field of t, the type decoded into: the strict decoder reports only one of
// them, picked at random from a map. It does not look inside values of types
// that decode themselves, of interface types, or under merge keys.
func UnknownFields(file *ast.File, t reflect.Type) []Unknown {
	if file == nil {
		return nil
	}
	var out []Unknown
	for _, doc := range file.Docs {
		if doc != nil && doc.Body != nil {
			unknownIn(doc.Body, t, "", &out)
		}
	}
	return out
}

func unknownIn(n ast.Node, t reflect.Type, path string, out *[]Unknown) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if decodesItself(t) {
		return
	}
	switch n := n.(type) {
	case *ast.TagNode:
		unknownIn(n.Value, t, path, out)
	case *ast.AnchorNode:
		unknownIn(n.Value, t, path, out)
	case *ast.MappingNode:
		for _, mv := range n.Values {
			unknownIn(mv, t, path, out)
		}
	case *ast.SequenceNode:
		if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
			return
		}
		for i, v := range n.Values {
			unknownIn(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i), out)
		}
	case *ast.MappingValueNode:
		if n.Key == nil {
			return
		}
		key := ast.Node(n.Key)
		if k, ok := key.(*ast.MappingKeyNode); ok {
			key = k.Value
		}
		if key == nil || reflect.ValueOf(key).IsNil() {
			return
		}
		tok := key.GetToken()
		if tok == nil || tok.Value == "<<" {
			return
		}
		sub := tok.Value
		if path != "" {
			sub = path + "." + tok.Value
		}
		switch t.Kind() {
		case reflect.Struct:
			f, ok := fieldByYAMLName(t, tok.Value)
			if !ok {
				u := Unknown{Path: sub}
				if tok.Position != nil {
					u.Line = tok.Position.Line
				}
				*out = append(*out, u)
				return
			}
			unknownIn(n.Value, f.Type, sub, out)
		case reflect.Map:
			unknownIn(n.Value, t.Elem(), sub, out)
		}
	}
}

// decodesItself: t (or *t) has its own UnmarshalYAML (any of the
// decoder's forms) or UnmarshalText.
func decodesItself(t reflect.Type) bool {
	for _, m := range []string{"UnmarshalYAML", "UnmarshalText"} {
		if _, ok := t.MethodByName(m); ok {
			return true
		}
		if _, ok := reflect.PointerTo(t).MethodByName(m); ok {
			return true
		}
	}
	return false
}

func fieldByYAMLName(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, ok := yamlName(f); ok && tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// Fields lists the names the fields of struct type t (or a pointer to
// one) go by in YAML, in declaration order.
func Fields(t reflect.Type) []string {
	if t = structType(t); t == nil {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		if name, ok := yamlName(t.Field(i)); ok {
			out = append(out, name)
		}
	}
	return out
}

// structType is the struct type t is, or points to; nil for another.
func structType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	return t
}

// Paths lists every key a document decoding into t takes, in declaration
// order: each field's name, and below a struct field (or a pointer to
// one) that does not decode itself its fields' as section.name; an
// inline field's fields are its parent's.
func Paths(t reflect.Type) []string { return paths(t, "") }

func paths(t reflect.Type, prefix string) []string {
	if t = structType(t); t == nil {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, ok := yamlName(f)
		if !ok {
			continue
		}
		if _, opts, _ := strings.Cut(f.Tag.Get("yaml"), ","); strings.Contains(","+opts+",", ",inline,") {
			out = append(out, paths(f.Type, prefix)...)
			continue
		}
		out = append(out, prefix+name)
		if st := structType(f.Type); st != nil && !decodesItself(st) {
			out = append(out, paths(st, prefix+name+".")...)
		}
	}
	return out
}

// yamlName is the name f goes by in YAML: its yaml tag's, else its json
// tag's, else its lower-case name; false for a field the decoder skips.
func yamlName(f reflect.StructField) (string, bool) {
	tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if tag == "" {
		tag, _, _ = strings.Cut(f.Tag.Get("json"), ",")
	}
	if tag == "" {
		tag = strings.ToLower(f.Name)
	}
	return tag, tag != "-" && f.IsExported()
}

// DecodeError describes a goccy/go-yaml decode error: the token it points
// at (or "(document)"), its line (0 if unknown), its message, and whether
// the error is an unknown field.
func DecodeError(err error) (field string, line int, msg string, unknownField bool) {
	var fe *FractionError
	if errors.As(err, &fe) {
		return fe.Path, fe.Line, fe.msg(), false
	}
	var ye yaml.Error
	if !errors.As(err, &ye) {
		return "(document)", 0, err.Error(), false
	}
	field, msg = "(document)", ye.GetMessage()
	tok := ye.GetToken()
	if tok != nil && tok.Position != nil {
		line = tok.Position.Line
	}
	var syntax *yaml.SyntaxError
	if errors.As(err, &syntax) {
		if _, at, ok := strings.Cut(msg, "already defined at ["); ok && tok != nil {
			first, _, _ := strings.Cut(at, ":")
			return tok.Value, line, "written twice (first at line " + first + "): a key appears once", false
		}
		return "(syntax)", line, syntaxHint(msg, tok), false
	}
	if tok != nil && tok.Position != nil {
		if tok.Value != "" {
			field = tok.Value
		}
		msg = plainType(msg, tok.Value)
	}
	var uf *yaml.UnknownFieldError
	return field, line, msg, errors.As(err, &uf)
}

// syntaxHint says a YAML syntax error the way a person would fix it: the
// parser's words for the common slips, with what they usually mean.
func syntaxHint(msg string, tok *token.Token) string {
	switch {
	case strings.Contains(msg, "found character '\t'"):
		return "a tab character: YAML indents with spaces only"
	case strings.Contains(msg, "mapping value is not allowed in this context"):
		after := ""
		if tok != nil && strings.TrimSpace(tok.Value) != "" {
			after = fmt.Sprintf(" after %q", strings.TrimSpace(tok.Value))
		}
		return "a ':' where no key may start" + after + ": a line indented deeper than the one before it, " +
			"or an unquoted value holding \": \" (quote it)"
	}
	return strings.Join(strings.Fields(msg), " ")
}

// plainType says a decoder's type error ("cannot unmarshal string into Go
// struct field RunSpec.Nodes of type int") in the file's terms ("want a
// whole number, got three"); other messages stay as they are.
func plainType(msg, value string) string {
	if !strings.Contains(msg, "cannot unmarshal") {
		switch {
		case strings.Contains(msg, "where sequence is expected"):
			return fmt.Sprintf("want a list, e.g. [%s]", strings.Join(strings.Fields(value), ", "))
		case strings.Contains(msg, "where mapping is expected"):
			return "want a mapping (indented key: value lines)"
		}
		return msg
	}
	_, typ, ok := strings.Cut(msg, " of type ")
	if !ok {
		_, typ, ok = strings.Cut(msg, "Go value of type ")
	}
	if !ok {
		return msg
	}
	typ, _, _ = strings.Cut(typ, " ")
	var want string
	switch {
	case strings.HasPrefix(typ, "uint"):
		want = "a whole number, 0 or more"
	case strings.HasPrefix(typ, "int"):
		want = "a whole number"
	case strings.HasPrefix(typ, "float"):
		want = "a number"
	case typ == "bool":
		want = "true or false"
	case typ == "string":
		want = "a string"
	default:
		return msg
	}
	switch {
	case strings.Contains(msg, "overflow"):
		return fmt.Sprintf("%s: out of range for %s", value, want)
	case value == "[" || value == "-":
		value = "a list"
	case value == "{":
		value = "a mapping"
	}
	return fmt.Sprintf("want %s, got %s", want, value)
}

// PathOfToken names the YAML path (without "$.") of the node a decode error
// points at, e.g. "model.hidden[0]"; def when none is found.
func PathOfToken(file *ast.File, err error, def string) string {
	var ye yaml.Error
	if file == nil || !errors.As(err, &ye) || ye.GetToken() == nil || ye.GetToken().Position == nil {
		return def
	}
	at := ye.GetToken().Position
	found := def
	for _, doc := range file.Docs {
		ast.Walk(visitFunc(func(n ast.Node) {
			tok := n.GetToken()
			if tok == nil || tok.Position == nil || tok.Position.Line != at.Line || tok.Position.Column != at.Column {
				return
			}
			if p := strings.TrimPrefix(n.GetPath(), "$."); p != "$" && p != "" {
				found = p
			}
		}), doc)
	}
	return found
}

// LineOf finds the line of a field path such as "device.hbm_gbps" or
// "model.hidden[1]": the line of its key for a mapping value (so a nested
// mapping is reported where it starts), else the line of the node; 0 when
// the path is not in the file.
func LineOf(file *ast.File, field string) int {
	if file == nil {
		return 0
	}
	line := 0
	for _, doc := range file.Docs {
		ast.Walk(visitFunc(func(n ast.Node) {
			if line != 0 {
				return
			}
			if mv, ok := n.(*ast.MappingValueNode); ok && mv.Key != nil && mv.Value != nil {
				if strings.TrimPrefix(mv.Value.GetPath(), "$.") == field {
					if tok := mv.Key.GetToken(); tok != nil && tok.Position != nil {
						line = tok.Position.Line
					}
				}
				return
			}
			if strings.TrimPrefix(n.GetPath(), "$.") == field {
				if tok := n.GetToken(); tok != nil && tok.Position != nil {
					line = tok.Position.Line
				}
			}
		}), doc)
	}
	return line
}

// Walk calls f on every node of file's documents (none for a nil file),
// safely for empty documents (see visitFunc).
func Walk(file *ast.File, f func(ast.Node)) {
	if file == nil {
		return
	}
	for _, doc := range file.Docs {
		ast.Walk(visitFunc(f), doc)
	}
}

// visitFunc calls itself on every node below a document. An empty
// document (an empty file, only comments, a bare "---") has a nil body,
// which ast.Walk passes on, and a DocumentNode's GetToken dereferences
// its body: documents themselves are walked through, never looked at.
type visitFunc func(ast.Node)

func (f visitFunc) Visit(n ast.Node) ast.Visitor {
	switch n := n.(type) {
	case nil:
		return nil
	case *ast.DocumentNode:
		if n.Body == nil {
			return nil
		}
		return f
	}
	f(n)
	return f
}

// Drop removes from file the mapping entry that holds the value at path
// ("model.hidden[1]" drops model.hidden: a list goes whole), and with it
// a mapping it leaves empty (model, were hidden its only key), so that
// what decodes into defaults stays at them. False when path names no
// entry of file.
func Drop(file *ast.File, path string) bool {
	if file == nil {
		return false
	}
	if i := strings.IndexByte(path, '['); i >= 0 {
		path = path[:i]
	}
	if path == "" {
		return false
	}
	for _, doc := range file.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if body, empty, ok := dropIn(doc.Body, path); ok {
			if empty {
				doc.Body = nil
			} else {
				doc.Body = body
			}
			return true
		}
	}
	return false
}

// dropIn removes path's entry below n: n as it is after (a mapping of one
// entry may be a bare MappingValueNode), whether nothing is left of it,
// and whether the entry was found.
func dropIn(n ast.Node, path string) (ast.Node, bool, bool) {
	valuePath := func(mv *ast.MappingValueNode) string {
		if mv.Value == nil {
			return ""
		}
		return strings.TrimPrefix(mv.Value.GetPath(), "$.")
	}
	switch n := n.(type) {
	case *ast.TagNode:
		v, empty, ok := dropIn(n.Value, path)
		n.Value = v
		return n, empty, ok
	case *ast.MappingValueNode:
		if valuePath(n) == path {
			return n, true, true
		}
		if !strings.HasPrefix(path, valuePath(n)+".") {
			return n, false, false
		}
		v, empty, ok := dropIn(n.Value, path)
		if empty {
			return n, true, ok
		}
		n.Value = v
		return n, false, ok
	case *ast.MappingNode:
		for i, mv := range n.Values {
			_, empty, ok := dropIn(mv, path)
			if !ok {
				continue
			}
			if empty {
				n.Values = slices.Delete(n.Values, i, i+1)
			}
			return n, len(n.Values) == 0, true
		}
	}
	return n, false, false
}

// SortByLine puts a file's problems in line order — line gives each one's
// line, 0 for none —, those without a line last, in the order found
// otherwise.
func SortByLine[S ~[]E, E any](problems S, line func(E) int) {
	slices.SortStableFunc(problems, func(a, b E) int {
		la, lb := line(a), line(b)
		switch {
		case la == lb:
			return 0
		case la == 0:
			return 1
		case lb == 0:
			return -1
		}
		return la - lb
	})
}
