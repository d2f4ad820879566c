// Package suggest finds the names a misspelt one most likely meant: the
// "did you mean" of the job-file and spec readers and of the CLI's flags.
package suggest

import (
	"cmp"
	"slices"
	"strings"

	"github.com/agnivade/levenshtein"
)

// Nearest returns the names in known that name most likely meant, closest
// first, at most three: those one edit away, ignoring case, if any; else
// those a few edits away (at most 2, or a third of name's length) or that
// begin with name (of 3 letters or more). None when nothing is close.
func Nearest(name string, known []string) []string {
	if name == "" {
		return nil
	}
	type candidate struct {
		name string
		d    int
	}
	var cs []candidate
	lower := strings.ToLower(name)
	for _, k := range known {
		d := levenshtein.ComputeDistance(lower, strings.ToLower(k))
		if d <= max(2, len(name)/3) || len(name) >= 3 && strings.HasPrefix(strings.ToLower(k), lower) {
			cs = append(cs, candidate{k, d})
		}
	}
	slices.SortFunc(cs, func(a, b candidate) int { return cmp.Or(a.d-b.d, strings.Compare(a.name, b.name)) })
	cs = slices.CompactFunc(cs, func(a, b candidate) bool { return a.name == b.name })
	if len(cs) > 0 && cs[0].d <= 1 {
		i := 1
		for i < len(cs) && cs[i].d == cs[0].d {
			i++
		}
		cs = cs[:i]
	}
	var out []string
	for _, c := range cs[:min(len(cs), 3)] {
		out = append(out, c.name)
	}
	return out
}

// DidYouMean says names as a question ("did you mean nodes?", "did you
// mean a, b or c?"), "" for none.
func DidYouMean(names []string) string {
	switch n := len(names); n {
	case 0:
		return ""
	case 1:
		return "did you mean " + names[0] + "?"
	default:
		return "did you mean " + strings.Join(names[:n-1], ", ") + " or " + names[n-1] + "?"
	}
}

// Abbreviated returns the names in known that name abbreviates word by
// word, for a name no edit distance reaches ("flash_attn" is
// flash_attention, five edits away): as many _-separated words, each
// beginning with its known word's first letter and a subsequence of it.
// Case is ignored; name itself is not returned.
func Abbreviated(name string, known []string) []string {
	var out []string
	for _, k := range known {
		if abbreviates(strings.ToLower(name), strings.ToLower(k)) {
			out = append(out, k)
		}
	}
	return out
}

func abbreviates(short, long string) bool {
	sw, lw := strings.Split(short, "_"), strings.Split(long, "_")
	if len(sw) != len(lw) || short == long {
		return false
	}
	for i, s := range sw {
		l := lw[i]
		if s == "" || l == "" || s[0] != l[0] {
			return false
		}
		j := 0
		for k := 0; k < len(l) && j < len(s); k++ {
			if l[k] == s[j] {
				j++
			}
		}
		if j < len(s) {
			return false
		}
	}
	return true
}
