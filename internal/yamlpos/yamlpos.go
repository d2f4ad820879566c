// Package yamlpos finds where things are in a YAML document, so that
// configuration errors can name the field and its line. It is shared by the
// job-file reader (spec) and the strategy specs (engine/strategy); both
// decode strictly with github.com/goccy/go-yaml.
package yamlpos

import (
	"errors"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
)

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

type visitFunc func(ast.Node)

func (f visitFunc) Visit(n ast.Node) ast.Visitor {
	f(n)
	return f
}
