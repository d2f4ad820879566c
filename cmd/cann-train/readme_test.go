package main

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cann-train/cann-train/internal/yamlpos"
	"github.com/cann-train/cann-train/spec"
)

// TestReadmeCommands: every `cann-train …` command line README.md shows —
// in fenced code blocks and in inline code spans, the CLI table's
// synopses included — names a subcommand that exists and only flags
// that command defines (or inherits), and no deprecated flag is used
// where README does not say it is deprecated. Nothing is run.
func TestReadmeCommands(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	root := newRootCmd(&env{out: io.Discard, err: io.Discard, command: childCommand})
	cmds := readmeCommands(string(data))
	if len(cmds) < 100 {
		t.Fatalf("found only %d command lines in README.md: is the extraction broken?", len(cmds))
	}
	for _, p := range checkReadme(root, string(data)) {
		t.Errorf("README.md:%s", p)
	}
}

// TestReadmeCheckerCatches: the checker behind TestReadmeCommands reports
// what it is for (a checker that finds nothing would pass any README).
func TestReadmeCheckerCatches(t *testing.T) {
	root := newRootCmd(&env{out: io.Discard, err: io.Discard, command: childCommand})
	for _, tc := range []struct {
		name, doc string
		want      []string // each a problem's substring; none: no problem
	}{
		{"fine", "```sh\ncann-train run -f job.yaml --wait -o json   # a comment --bogus\ncann-train status RUN\n```\n", nil},
		{"unknown long flag", "```sh\ncann-train run -f job.yaml --bogus\n```\n", []string{`2: cann-train run: unknown flag --bogus`}},
		{"unknown flag with value", "text\n\n```\n$ cann-train status RUN --colour=red\nout --put\n```\n", []string{`4: cann-train status: unknown flag --colour`}},
		{"unknown shorthand", "`cann-train status RUN -Z json`\n", []string{`1: cann-train status: unknown flag -Z`}},
		{"unknown subcommand", "see `cann-train checkpoint lst RUN`\n", []string{`cann-train checkpoint: unknown subcommand "lst"`}},
		{"unknown top-level command", "```sh\ncann-train statuss RUN\n```\n", []string{`unknown command "statuss"`}},
		{"continuation", "```sh\ncann-train worker node --id n \\\n    --no-such-flag x\n```\n", []string{`2: cann-train worker node: unknown flag --no-such-flag`}},
		{"after &&", "`go install x && cann-train quickstart --nods 3`\n", []string{`unknown flag --nods`}},
		{"after pipe and $(", "```sh\necho $(cann-train status r --jsn) | cann-train dashboard --bad\n```\n", []string{`--jsn`, `--bad`}},
		{"in quotes is not a command", "```sh\necho 'cann-train status --bad'\n```\n", nil},
		{"table alternatives", "| `cann-train checkpoint ls\\|verfy RUN [--url URL]` | x |\n", []string{`unknown subcommand "verfy"`}},
		{"table bracket groups", "| `cann-train dev [--port 7233 --ui-prt 8233]` | x |\n", []string{`unknown flag --ui-prt`}},
		{"flag alternatives", "| `cann-train run -f F [--resume\\|--frsh]` | x |\n", []string{`unknown flag --frsh`}},
		{"table row's bare flags", "| `cann-train bench collective --ranks N` (also `--nope` (-b)) | x |\n", []string{`cann-train bench collective: unknown flag --nope`}},
		{"subcommand without prefix", "then `worker node --idd X`\n", []string{`unknown flag --idd`}},
		{"wrong group member", "`nodes drian NODE`\n", []string{`unknown subcommand "drian"`}},
		{"deprecated flag used", "```sh\ncann-train bench collective --warmup_iters 5\n```\n", []string{`deprecated flag --warmup_iters`}},
		{"deprecated flag named as such", "`--warmup_iters` still works, deprecated\n", nil},
		{"deprecated flag mentioned", "Give `--warmup_iters` to warm up.\n", []string{`deprecated flag --warmup_iters`}},
		{"placeholders", "`cann-train green plan … --forecast persistence|perfect`, `cann-train green override RUN [--for 6h | --until T | --clear]`\n", nil},
		{"inherited flags, help", "`cann-train status RUN --address h:1 --namespace ml --help`\n", nil},
		{"diagram", "```\n  cann-train CLI ──▶ Temporal\n```\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkReadme(root, tc.doc)
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

// readmeCmd is one command line README shows.
type readmeCmd struct {
	line int
	text string // as written (continuations joined)
	// bare: text is only flags, of the CLI table row's command row
	// (`--minbytes` (-b) beside its synopsis), not a command line.
	row  string
	bare bool
}

// checkReadme returns README's problems as "LINE: problem (text)".
func checkReadme(root *cobra.Command, doc string) []string {
	var problems []string
	for _, c := range readmeCommands(doc) {
		for _, p := range checkCommand(root, c) {
			problems = append(problems, fmt.Sprintf("%d: %s (in %q)", c.line, p, c.text))
		}
	}
	return append(problems, deprecatedMentions(root, doc)...)
}

var (
	fenceRe = regexp.MustCompile("^\\s*```")
	// a command's start in a shell line: the line's start (after a
	// prompt), or after &&, ||, ;, | or $(.
	shellSepRe = regexp.MustCompile(`&&|\|\||;|\s\|\s|\$\(`)
	// box drawing: a diagram, not commands.
	diagramRe = regexp.MustCompile(`[─│┌┐└┘┴┬▶▼]`)
	// a command's start in a code span: after &&, ; or $( (a|b there
	// names alternatives).
	spanSepRe = regexp.MustCompile(`&&|;|\$\(`)
	// a negative number: a value, not a flag.
	negativeRe = regexp.MustCompile(`^-\d`)
)

// readmeCommands extracts the cann-train command lines README shows.
func readmeCommands(doc string) []readmeCmd {
	lines := strings.Split(doc, "\n")
	var cmds []readmeCmd
	var para []string // a paragraph outside fenced blocks
	paraStart := 0
	flush := func() {
		cmds = append(cmds, spanCommands(para, paraStart)...)
		para = nil
	}
	for i := 0; i < len(lines); i++ {
		if fenceRe.MatchString(lines[i]) {
			flush()
			start := i + 1
			j := start
			for j < len(lines) && !fenceRe.MatchString(lines[j]) {
				j++
			}
			lang := strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(lines[i]), "`"))
			cmds = append(cmds, fencedCommands(lang, lines[start:j], start+1)...)
			i = j
			continue
		}
		if strings.TrimSpace(lines[i]) == "" || strings.HasPrefix(lines[i], "|") {
			flush()
		}
		if strings.HasPrefix(lines[i], "|") { // a table row: its own paragraph
			cmds = append(cmds, spanCommands([]string{lines[i]}, i+1)...)
			continue
		}
		if len(para) == 0 {
			paraStart = i + 1
		}
		para = append(para, lines[i])
	}
	flush()
	return cmds
}

// fencedCommands: the command lines of a fenced block whose first line is
// README's line first. Blocks in yaml or toml, and diagrams, hold none; in
// a block with `$ ` prompts only the prompted lines are commands.
func fencedCommands(lang string, block []string, first int) []readmeCmd {
	switch lang {
	case "yaml", "yml", "toml", "json":
		return nil
	}
	prompted := false
	for _, l := range block {
		if diagramRe.MatchString(l) {
			return nil
		}
		if strings.HasPrefix(strings.TrimSpace(l), "$ ") {
			prompted = true
		}
	}
	var cmds []readmeCmd
	for i := 0; i < len(block); i++ {
		line, n := block[i], i
		for strings.HasSuffix(strings.TrimRight(stripComment(line), " \t"), `\`) && i+1 < len(block) {
			line = strings.TrimSuffix(strings.TrimRight(stripComment(line), " \t"), `\`) + " " + block[i+1]
			i++
		}
		line = strings.TrimSpace(stripComment(line))
		if prompted {
			var ok bool
			if line, ok = strings.CutPrefix(line, "$ "); !ok {
				continue
			}
		}
		for _, part := range splitOutsideQuotes(line, shellSepRe) {
			part = strings.TrimSpace(strings.TrimRight(strings.TrimSpace(part), ")"))
			if strings.HasPrefix(part, "cann-train ") {
				cmds = append(cmds, readmeCmd{line: first + n, text: part})
			}
		}
	}
	return cmds
}

// stripComment cuts a shell comment: # at a word's start, outside quotes.
func stripComment(s string) string {
	var q rune
	for i, r := range s {
		switch {
		case q != 0:
			if r == q {
				q = 0
			}
		case r == '\'' || r == '"':
			q = r
		case r == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return s[:i]
		}
	}
	return s
}

// splitOutsideQuotes splits s at sep's matches outside quotes.
func splitOutsideQuotes(s string, sep *regexp.Regexp) []string {
	var parts []string
	last := 0
	for _, m := range sep.FindAllStringIndex(s, -1) {
		if quoted(s[:m[0]]) {
			continue
		}
		parts = append(parts, s[last:m[0]])
		last = m[1]
	}
	return append(parts, s[last:])
}

// quoted: s leaves a quote open.
func quoted(s string) bool {
	var q rune
	for _, r := range s {
		switch {
		case q != 0 && r == q:
			q = 0
		case q == 0 && (r == '\'' || r == '"'):
			q = r
		}
	}
	return q != 0
}

var spanRe = regexp.MustCompile("`([^`]+)`")

// topLevel is the root's subcommands by name (commandLike's; a tree of
// its own, whose suggestion distance it sets).
var topLevel = sync.OnceValue(func() map[string]*cobra.Command {
	m := map[string]*cobra.Command{}
	for _, c := range newRootCmd(&env{out: io.Discard, err: io.Discard, command: childCommand}).Commands() {
		m[c.Name()] = c
	}
	return m
})

// commandLike: words (a code span's, without "cann-train") read as a
// command line: a subcommand's name, then a flag, or a word that names
// one of its subcommands or that cobra suggests one for (`nodes drian`).
func commandLike(words []string) bool {
	c := topLevel()[words[0]]
	switch {
	case c == nil || len(words) < 2:
		return false
	case strings.HasPrefix(words[1], "-"):
		return true
	case !c.HasSubCommands():
		return false
	}
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's default (this tree is the test's own)
	}
	for _, alt := range strings.Split(words[1], "|") {
		if sub, _, err := c.Find([]string{alt}); err == nil && sub != c || len(c.SuggestionsFor(alt)) > 0 {
			return true
		}
	}
	return false
}

// spanCommands: the command lines in a paragraph's code spans (a span may
// run across lines). A span is one when it starts with `cann-train` and
// goes on, or is commandLike (`worker node --id X`, `nodes release RUN`),
// or holds `cann-train` after && or ;. In a table row (a line starting with |) `\|` is | and a|b
// names alternatives; in the CLI table's first cell a span that is only
// flags is a flag of the row's command.
func spanCommands(para []string, first int) []readmeCmd {
	text := strings.Join(para, "\n")
	table := strings.HasPrefix(text, "|")
	firstCell := len(text)
	if table {
		text = strings.ReplaceAll(text, `\|`, "\x00")
		if i := strings.Index(text[1:], "|"); i >= 0 {
			firstCell = i + 1
		}
	}
	var cmds []readmeCmd
	row := ""
	for _, m := range spanRe.FindAllStringSubmatchIndex(text, -1) {
		span := strings.ReplaceAll(strings.ReplaceAll(text[m[2]:m[3]], "\x00", "|"), "\n", " ")
		line := first + strings.Count(text[:m[0]], "\n")
		for _, part := range splitOutsideQuotes(span, spanSepRe) {
			part = strings.TrimSpace(strings.TrimRight(strings.TrimSpace(part), ")"))
			words := strings.Fields(part)
			switch {
			case len(words) > 0 && table && m[0] < firstCell && row != "" && strings.HasPrefix(words[0], "-") && part == strings.TrimSpace(span):
				cmds = append(cmds, readmeCmd{line: line, text: part, row: row, bare: true})
			case len(words) < 2: // `cann-train`: the program, its queue
			case words[0] == "cann-train":
				if table && m[0] < firstCell {
					row = part
				}
				cmds = append(cmds, readmeCmd{line: line, text: part})
			case commandLike(words) && part == strings.TrimSpace(span):
				part = "cann-train " + part
				if table && m[0] < firstCell {
					row = part
				}
				cmds = append(cmds, readmeCmd{line: line, text: part})
			}
		}
	}
	return cmds
}

// placeholderRe: a word that stands for a value (RUN, FILE, LO-HI).
var placeholderRe = regexp.MustCompile(`^[A-Z][A-Z0-9_-]*$`)

// docWords splits a documented command into words: shell quoting undone,
// brackets of optional groups dropped, "…" and lone "|" (alternatives)
// left out.
func docWords(s string) []string {
	var words []string
	var b strings.Builder
	var q rune
	in := false
	end := func() {
		if in {
			w := strings.Trim(b.String(), "[]")
			if w != "" && w != "…" && w != "..." && w != "|" {
				words = append(words, w)
			}
		}
		b.Reset()
		in = false
	}
	for _, r := range s {
		switch {
		case q != 0 && r == q:
			q = 0
		case q != 0:
			b.WriteRune(r)
		case r == '\'' || r == '"':
			q, in = r, true
		case r == ' ' || r == '\t':
			end()
		default:
			b.WriteRune(r)
			in = true
		}
	}
	end()
	return words
}

// checkCommand checks one command line against the command tree.
func checkCommand(root *cobra.Command, c readmeCmd) []string {
	words := docWords(c.text)[1:] // cann-train
	if c.bare {
		words = docWords(c.row)[1:]
	}
	// The subcommand path: a word a|b at a subcommand's place names each.
	var problems []string
	var paths [][]string
	var expand func(done, rest []string)
	expand = func(done, rest []string) {
		cmd, _, err := root.Find(done)
		if err != nil {
			problems = append(problems, err.Error())
			return
		}
		if len(done) > 0 && cmd.Name() != done[len(done)-1] && !cmd.HasAlias(done[len(done)-1]) {
			paths = append(paths, done) // an unknown subcommand: said below
			return
		}
		i := slices.IndexFunc(rest, func(w string) bool { return !strings.HasPrefix(w, "-") })
		if !cmd.HasSubCommands() || len(rest) == 0 || i != 0 {
			paths = append(paths, done)
			return
		}
		if cmd.Runnable() && placeholderRe.MatchString(rest[0]) {
			paths = append(paths, done) // a placeholder: the group's argument
			return
		}
		for _, alt := range strings.Split(rest[0], "|") {
			expand(append(slices.Clip(done), alt), rest[1:])
		}
	}
	expand(nil, words)
	for _, path := range paths {
		cmd, _, _ := root.Find(path)
		if len(path) > 0 && cmd.Name() != path[len(path)-1] && !cmd.HasAlias(path[len(path)-1]) {
			problems = append(problems, fmt.Sprintf("%s: unknown subcommand %q", cmd.CommandPath(), path[len(path)-1]))
			continue
		}
		rest := words[len(path):]
		if cmd.HasSubCommands() && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") && !placeholderRe.MatchString(rest[0]) {
			problems = append(problems, fmt.Sprintf("%s: unknown subcommand %q", cmd.CommandPath(), rest[0]))
			continue
		}
		if c.bare {
			rest = docWords(c.text)
		}
		problems = append(problems, checkFlags(cmd, rest)...)
	}
	return problems
}

// checkFlags checks the flags among a command's words with pflag's own
// lookups: a flag that takes a value takes the next word unless written
// --flag=value.
func checkFlags(cmd *cobra.Command, words []string) []string {
	cmd.InitDefaultHelpFlag()
	lookup := func(name string, short bool) *pflag.Flag {
		for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.InheritedFlags()} {
			if short {
				if f := fs.ShorthandLookup(name); f != nil {
					return f
				}
			} else if f := fs.Lookup(name); f != nil {
				return f
			}
		}
		return nil
	}
	var problems []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "-") || w == "-" || negativeRe.MatchString(w) {
			continue // an argument or a value
		}
		takesValue := false
		for _, alt := range strings.Split(w, "|") { // --resume|--fresh
			name, _, hasValue := strings.Cut(alt, "=")
			var f *pflag.Flag
			switch {
			case strings.HasPrefix(name, "--"):
				f = lookup(name[2:], false)
			case len(name) == 2:
				f = lookup(name[1:], true)
			default:
				problems = append(problems, fmt.Sprintf("%s: %s is not a flag (one dash takes one letter)", cmd.CommandPath(), name))
				continue
			}
			if f == nil {
				problems = append(problems, fmt.Sprintf("%s: unknown flag %s", cmd.CommandPath(), name))
				continue
			}
			takesValue = !hasValue && f.NoOptDefVal == ""
		}
		if takesValue {
			i++
		}
	}
	return problems
}

// deprecatedMentions: every mention of a deprecated flag (--name in a code
// span or block) with no "deprecated" near it.
func deprecatedMentions(root *cobra.Command, doc string) []string {
	var problems []string
	seen := map[string]bool{}
	eachCommand(root, func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Deprecated == "" || seen[f.Name] {
				return
			}
			seen[f.Name] = true
			re := regexp.MustCompile(`--` + regexp.QuoteMeta(f.Name) + `\b(?:[^-\w]|$)`)
			for _, m := range re.FindAllStringIndex(doc, -1) {
				near := strings.ToLower(doc[max(m[0]-200, 0):min(m[1]+200, len(doc))])
				if !strings.Contains(near, "deprecated") {
					problems = append(problems, fmt.Sprintf("%d: deprecated flag --%s (%s) named without saying it is deprecated",
						strings.Count(doc[:m[0]], "\n")+1, f.Name, f.Deprecated))
				}
			}
		})
	})
	return problems
}

// TestRunHelpNamesEveryJobKey: `cann-train run --help`'s field list names
// every key a job file takes — its last part, as a word (the list nests
// sections in parentheses and indentation).
func TestRunHelpNamesEveryJobKey(t *testing.T) {
	root := newRootCmd(&env{out: io.Discard, err: io.Discard, command: childCommand})
	run, _, err := root.Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(run.Long, "Job file fields")
	if !ok {
		t.Fatalf("run's help has no job file field list:\n%s", run.Long)
	}
	keys := yamlpos.Paths(reflect.TypeFor[spec.RunSpec]())
	if len(keys) < 50 {
		t.Fatalf("only %d job-file keys found: %q", len(keys), keys)
	}
	for _, k := range keys {
		leaf := k[strings.LastIndexByte(k, '.')+1:]
		if !regexp.MustCompile(`(^|[^a-z_])` + regexp.QuoteMeta(leaf) + `($|[^a-z_])`).MatchString(list) {
			t.Errorf("run's help does not name job-file key %s", k)
		}
	}
}

// TestHelpFitsEightyColumns: every command's description (--help's text
// above Usage) fits a terminal's 80 columns.
func TestHelpFitsEightyColumns(t *testing.T) {
	root := newRootCmd(&env{out: io.Discard, err: io.Discard, command: childCommand})
	seen := 0
	eachCommand(root, func(c *cobra.Command) {
		seen++
		long := c.Long
		if long == "" {
			long = c.Short // (what --help shows without one)
		}
		for i, line := range strings.Split(long, "\n") {
			if n := utf8.RuneCountInString(line); n > 80 {
				t.Errorf("%s --help, line %d: %d columns, want 80 at most: %s", c.CommandPath(), i+1, n, line)
			}
		}
	})
	if seen < 40 {
		t.Fatalf("walked only %d commands", seen)
	}
}

// TestHang: hang breaks at spaces within the width, indents the lines
// after the first as far as the text starts, and gives a word longer than
// a line one of its own.
func TestHang(t *testing.T) {
	for _, tc := range []struct {
		head, s string
		width   int
		want    string
	}{
		{"", "a b c", 80, "a b c"},
		{"", "aaa bbb ccc", 7, "aaa bbb\nccc"},
		{"  x: ", "aa bb cc", 10, "  x: aa bb\n     cc"},
		{"  x: ", "aaaaaaaaaa b", 8, "  x: aaaaaaaaaa\n     b"},
		{"h ", "", 10, "h "},
	} {
		if got := hang(tc.head, tc.s, tc.width); got != tc.want {
			t.Errorf("hang(%q, %q, %d) = %q, want %q", tc.head, tc.s, tc.width, got, tc.want)
		}
	}
}
