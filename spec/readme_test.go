package spec_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cann-train/cann-train/internal/yamlpos"
	"github.com/cann-train/cann-train/spec"
)

// TestReadmeJobFileKeys: README.md's job-file field list names every key
// a job file accepts, each at its place (`green:` (`zone`, …) is
// green.zone), and nothing else; every other place README presents a
// job-file key — a yaml block, `external.master_port`, "the job's
// `cancel_grace`", "a `compression:` block" — names one the parser
// accepts; and each yaml block decodes.
func TestReadmeJobFileKeys(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	keys := yamlpos.Paths(reflect.TypeFor[spec.RunSpec]())
	if len(keys) < 50 {
		t.Fatalf("only %d job-file keys found by reflection: %q", len(keys), keys)
	}
	for _, p := range checkReadmeJobKeys(string(data), keys) {
		t.Errorf("README.md:%s", p)
	}
}

// TestReadmeExamplesLoad: every job file under examples/ loads with the
// loader `cann-train run -f` uses.
func TestReadmeExamplesLoad(t *testing.T) {
	var files []string
	for _, pat := range []string{"../examples/*.yaml", "../examples/*/*.yaml", "../examples/*.yml", "../examples/*/*.yml"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 4 {
		t.Fatalf("found only %q", files)
	}
	for _, f := range files {
		if _, err := spec.LoadFile(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestReadmeJobKeyCheckerCatches: the checker behind TestReadmeJobFileKeys
// reports a key the list lacks, one it has that the parser does not take,
// a wrong key in a yaml block or a dotted span, and a section the list
// puts a key under wrongly.
func TestReadmeJobKeyCheckerCatches(t *testing.T) {
	keys := []string{"name", "nodes", "green", "green.zone", "green.batch", "green.batch.min", "external", "external.master_port"}
	list := "Job-file fields (all optional but `name`): `name`, `nodes`, `green:` (`zone`, `batch:` (`min`)), `external:` (`master_port`).\n"
	for _, tc := range []struct {
		name, doc string
		want      []string // each a problem's substring; none: no problem
	}{
		{"complete", list, nil},
		{"a key missing", strings.Replace(list, "`nodes`, ", "", 1), []string{"1: job-file key nodes is not in README's job-file field list"}},
		{"a key too many", strings.Replace(list, "`nodes`", "`nodes`, `nodez`", 1), []string{"1: field list names nodez, which a job file does not take"}},
		{"a key left out of its section", strings.Replace(list, "`zone`, ", "", 1), []string{"1: job-file key green.zone is not in"}},
		{"nested at the wrong place", "x\n\n" + strings.Replace(list, "(`min`))", ") `min`", 1), []string{"3: field list names min", "job-file key green.batch.min is not in"}},
		{"no list", "nothing here\n", []string{"no job-file field list"}},
		{"yaml block", list + "\n```yaml\nname: x\nnodse: 2\n```\n", []string{"5: yaml block: line 2: nodse: unknown field"}},
		{"dotted span", list + "\nset `external.master_prot` to fix it\n", []string{"3: `external.master_prot`: not a job-file key"}},
		{"the job's span", list + "\nas the job's `cancle_grace` says\n", []string{"3: `cancle_grace`: not a job-file key"}},
		{"a block", list + "\nan `overlap:` block\n", []string{"3: `overlap:`: not a job-file key"}},
		{"not a job key", list + "\nthe JSON's `storing_checkpoint`, `spec.nodse`\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkReadmeJobKeys(tc.doc, keys)
			if (len(got) == 0) != (len(tc.want) == 0) {
				t.Fatalf("problems %q, want ones with %q", got, tc.want)
			}
			all := strings.Join(got, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("problems %q lack %q", got, w)
				}
			}
		})
	}
}

var (
	spanRe = regexp.MustCompile("`([^`]+)`")
	// a key as README writes it: `key`, `key: value`, `section.key`.
	keySpanRe = regexp.MustCompile(`^([a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*)(:.*)?$`)
	// what README says before a span that names a job-file key.
	jobKeyLeadRe = regexp.MustCompile(`(?:job's|job file's|job file may set|job file sets|may set|job may set)\s+$`)
	// the field list's first words.
	fieldListRe = regexp.MustCompile(`^Job-file fields\b`)
)

// checkReadmeJobKeys returns README's problems with job-file keys as
// "LINE: problem"; keys are the ones the parser accepts.
func checkReadmeJobKeys(doc string, keys []string) []string {
	accepted := map[string]bool{}
	leaves := map[string]bool{}
	sections := map[string]bool{}
	for _, k := range keys {
		accepted[k] = true
		leaves[k[strings.LastIndex(k, ".")+1:]] = true
		if i := strings.LastIndex(k, "."); i > 0 {
			sections[k[:i]] = true
		}
	}
	var problems []string
	bad := func(line int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%d: ", line)+fmt.Sprintf(format, args...))
	}
	lines := strings.Split(doc, "\n")
	// The field list: its paragraph.
	listed := map[string]bool{}
	found, listLine := false, 0
	for i := 0; i < len(lines); i++ {
		if !fieldListRe.MatchString(lines[i]) {
			continue
		}
		found, listLine = true, i+1
		j := i
		for j < len(lines) && strings.TrimSpace(lines[j]) != "" {
			j++
		}
		for _, k := range fieldList(lines[i:j], i+1, bad) {
			listed[k.key] = true
			if !accepted[k.key] {
				bad(k.line, "field list names %s, which a job file does not take", k.key)
			}
		}
		i = j
	}
	if !found {
		bad(0, "no job-file field list (a paragraph starting %q)", "Job-file fields")
	}
	for _, k := range keys {
		if found && !listed[k] {
			bad(listLine, "job-file key %s is not in README's job-file field list", k)
		}
	}
	// Everywhere else.
	inFence, fenceLang, fenceStart := false, "", 0
	var block []string
	para, paraStart := "", 0
	flush := func() {
		for _, m := range spanRe.FindAllStringSubmatchIndex(para, -1) {
			span := strings.ReplaceAll(para[m[2]:m[3]], "\n", " ")
			line := paraStart + strings.Count(para[:m[0]], "\n")
			km := keySpanRe.FindStringSubmatch(span)
			if km == nil {
				continue
			}
			key, rest := km[1], para[m[1]:]
			switch {
			case strings.Contains(key, ".") && sections[key[:strings.LastIndex(key, ".")]]:
				// `external.master_port`, `green.batch.min`
				if !accepted[key] {
					bad(line, "`%s`: not a job-file key", span)
				}
			case strings.Contains(key, "."):
			case jobKeyLeadRe.MatchString(para[:m[0]]):
				// the job's `cancel_grace`, may set `optimizer: onebit-adam`
				if !leaves[key] {
					bad(line, "`%s`: not a job-file key", span)
				}
			case km[2] == ":" && regexp.MustCompile(`^\s+(block|policy|section)\b`).MatchString(rest):
				// an `external:` block
				if !sections[key] && !slices.ContainsFunc(keys, func(k string) bool { return strings.HasSuffix(k, "."+key) && sections[k] }) {
					bad(line, "`%s`: not a job-file key", span)
				}
			}
		}
		para = ""
	}
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			if inFence {
				if fenceLang == "yaml" || fenceLang == "yml" {
					problems = append(problems, checkYAMLBlock(strings.Join(block, "\n")+"\n", fenceStart)...)
				}
				inFence, block = false, nil
			} else {
				flush()
				inFence, fenceLang, fenceStart = true, strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(l), "`")), i+2
			}
			continue
		}
		if inFence {
			block = append(block, l)
			continue
		}
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "|") || fieldListRe.MatchString(l) {
			flush()
		}
		if para == "" {
			paraStart = i + 1
		}
		para += l + "\n"
	}
	flush()
	return problems
}

// checkYAMLBlock decodes a README yaml block (whose first line is README's
// line first) as a job file.
func checkYAMLBlock(block string, first int) []string {
	_, err := spec.Parse("block", []byte(block))
	if err == nil {
		return nil
	}
	var se *spec.SpecError
	if !errors.As(err, &se) {
		return []string{fmt.Sprintf("%d: yaml block: %v", first, err)}
	}
	var problems []string
	for _, f := range se.Fields {
		problems = append(problems, fmt.Sprintf("%d: yaml block: line %d: %s: %s", first+max(f.Line-1, 0), f.Line, f.Field, f.Msg))
	}
	return problems
}

type listedKey struct {
	key  string
	line int
}

// fieldList reads the field list's paragraph (its first line is README's
// line first) up to its first full stop outside code spans and
// parentheses: each code span is a key; `section:` followed by " (" puts
// the spans up to the matching ")" under section.
func fieldList(para []string, first int, bad func(int, string, ...any)) []listedKey {
	type open struct {
		prefix string
		depth  int
	}
	var stack []open
	var keys []listedKey
	depth := 0
	prefix := func() string {
		if len(stack) == 0 {
			return ""
		}
		return stack[len(stack)-1].prefix
	}
	text := strings.Join(para, "\n")
	lineAt := func(i int) int { return first + strings.Count(text[:i], "\n") }
	flat := strings.ReplaceAll(text, "\n", " ")
	for i := 0; i < len(flat); i++ {
		switch flat[i] {
		case '.':
			if depth == 0 {
				return keys
			}
		case '(':
			depth++
		case ')':
			depth--
			if len(stack) > 0 && depth < stack[len(stack)-1].depth {
				stack = stack[:len(stack)-1]
			}
		case '`':
			end := strings.IndexByte(flat[i+1:], '`')
			if end < 0 {
				bad(lineAt(i), "field list: a code span does not end")
				return keys
			}
			span := flat[i+1 : i+1+end]
			line := lineAt(i)
			i += end + 1
			key, section := strings.CutSuffix(span, ":")
			if !keySpanRe.MatchString(key) || strings.Contains(key, ":") {
				bad(line, "field list: %q is not a key", span)
				continue
			}
			keys = append(keys, listedKey{prefix() + key, line})
			if section && strings.HasPrefix(flat[i+1:], " (") {
				i += 2 // the space, and the ( that opens the section
				depth++
				stack = append(stack, open{prefix() + key + ".", depth})
			}
		}
	}
	return keys
}
