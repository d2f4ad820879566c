package suggest

import (
	"slices"
	"strings"
	"testing"
)

func TestNearest(t *testing.T) {
	known := []string{"nodes", "model", "checkpoint_url", "checkpoint_every", "intra_node_gbps", "inter_node_gbps", "list-presets", "show-preset", "steps"}
	tests := []struct {
		name string
		want []string
	}{
		{"nodse", []string{"nodes"}},
		{"Nodes", []string{"nodes"}},                                   // case alone: the exact match, not model (two edits)
		{"intra_node_gbs", []string{"intra_node_gbps"}},                // one edit beats two
		{"checkpoint", []string{"checkpoint_url", "checkpoint_every"}}, // names it begins, closest first
		{"list-preset", []string{"list-presets"}},
		{"step", []string{"steps"}},
		{"zzz", nil},
		{"", nil},
	}
	for _, tc := range tests {
		if got := Nearest(tc.name, known); !slices.Equal(got, tc.want) {
			t.Errorf("Nearest(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := Nearest("nodse", []string{"nodes", "nodes"}); !slices.Equal(got, []string{"nodes"}) {
		t.Errorf("a name known twice: %q", got)
	}
}

func TestDidYouMean(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"a"}, "did you mean a?"},
		{[]string{"a", "b"}, "did you mean a or b?"},
		{[]string{"a", "b", "c"}, "did you mean a, b or c?"},
	} {
		if got := DidYouMean(tc.in); got != tc.want {
			t.Errorf("DidYouMean(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestAbbreviated(t *testing.T) {
	known := []string{"flash_attention", "gated_mlp", "seq_len", "no_dropout"}
	for _, tc := range []struct {
		name string
		want string
	}{
		{"flash_attn", "flash_attention"},
		{"Flash_Attn", "flash_attention"},
		{"seq_length", ""}, // a word longer than the known one's
		{"flash_attention", ""},
		{"fa", ""}, // not as many words
	} {
		if got := strings.Join(Abbreviated(tc.name, known), ","); got != tc.want {
			t.Errorf("Abbreviated(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}
