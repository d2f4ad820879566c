// Package yamlpos finds where things are in a YAML document, so that
// configuration errors can name the field and its line. It is shared by the
// job-file reader (spec) and the strategy specs (engine/strategy); both
// decode strictly with github.com/goccy/go-yaml.
package yamlpos

import (
	"errors"
	"fmt"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
)

// ErrDecoderPanic marks a document the YAML decoder could not survive:
// github.com/goccy/go-yaml v1.19.2 (the newest served) dereferences nil on
// some malformed input, e.g. an empty tagged value where a list is
// expected ("entrypoint: !x" followed by a stray mapping), which fuzzing
// the job-file reader found. Unmarshal turns that into this error.
var ErrDecoderPanic = errors.New("the YAML decoder failed on this document (malformed YAML)")

// Unmarshal is yaml.UnmarshalWithOptions that returns an error wrapping
// ErrDecoderPanic, naming what the decoder hit, where the decoder would
// panic.
func Unmarshal(data []byte, v any, opts ...yaml.DecodeOption) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrDecoderPanic, r)
		}
	}()
	return yaml.UnmarshalWithOptions(data, v, opts...)
}

// DecodeError describes a goccy/go-yaml decode error: the token it points
// at (or "(document)"), its line (0 if unknown), its message, and whether
// the error is an unknown field.
func DecodeError(err error) (field string, line int, msg string, unknownField bool) {
	var ye yaml.Error
	if !errors.As(err, &ye) {
		return "(document)", 0, err.Error(), false
	}
	field, msg = "(document)", ye.GetMessage()
	if tok := ye.GetToken(); tok != nil && tok.Position != nil {
		line = tok.Position.Line
		if tok.Value != "" {
			field = tok.Value
		}
	}
	var uf *yaml.UnknownFieldError
	return field, line, msg, errors.As(err, &uf)
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
