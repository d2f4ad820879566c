package activities

import (
	"strings"
	"testing"

	"github.com/cann-train/cann-train/spec"
)

// TestCheckIncarnation: a chunk planned for another process of this node
// fails; when that process started after this one, nothing restarted —
// a second worker took the ID — and the message and Superseded say so.
func TestCheckIncarnation(t *testing.T) {
	for _, tc := range []struct {
		name, planned, want string
		superseded          bool
	}{
		{"same process", "200.1", "", false},
		{"no incarnation planned", "", "", false},
		{"this one restarted", "100.9", "node dup restarted (process 200.1) after the run planned this chunk for its process 100.9 at 10.0.0.2:29500", false},
		{"a newer worker took the ID", "300.9", "two workers serve node dup: process 300.9 at 10.0.0.2:29500 registered it after this one (process 200.1 at ?)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			told := false
			n := &Node{ID: "dup", Incarnation: "200.1", Superseded: func(error) { told = true }}
			err := n.checkIncarnation(spec.Node{ID: "dup", Incarnation: tc.planned, CommAddr: "10.0.0.2:29500"})
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("err = %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("err = %v, want %q", err, tc.want)
			}
			if told != tc.superseded {
				t.Errorf("superseded told %v, want %v", told, tc.superseded)
			}
		})
	}
}
