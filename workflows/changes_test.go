package workflows

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
)

// TestEveryChangeHasAHistory: every change ID the workflows ask
// workflow.GetVersion for is recorded in some replay history (its version
// marker), so that a change to its new path that breaks running workflows
// fails TestReplayRecordedHistories. A new change comes with its history:
// an end-to-end test's (CANN_TRAIN_RECORD_ALL) or a scenario of `make
// record-histories` (record_test.go).
func TestEveryChangeHasAHistory(t *testing.T) {
	declared := declaredChanges(t)
	if len(declared) < 50 {
		t.Fatalf("found %d change IDs in the workflow sources: the scan is broken", len(declared))
	}
	recorded := recordedChanges(t)
	for _, id := range declared {
		if !recorded[id] {
			t.Errorf("no history in testdata passes through change %q: record one", id)
		}
	}
}

// declaredChanges are the string constants named version* in the
// workflow sources (the change IDs).
func declaredChanges(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, sp := range g.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "version") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					id, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, id)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// recordedChanges are the change IDs the testdata histories' version
// markers name.
func recordedChanges(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		h, err := client.HistoryFromJSON(r, client.HistoryJSONOptions{})
		r.Close()
		if err != nil {
			t.Fatalf("read %s: %v", f, err)
		}
		for _, id := range changesAsked(t, f, h) {
			out[id] = true
		}
	}
	return out
}

// changesAsked lists the change IDs of a history's version markers, in
// order (where names the history in a failure).
func changesAsked(t *testing.T, where string, h *historypb.History) []string {
	t.Helper()
	var out []string
	for _, ev := range h.Events {
		m := ev.GetMarkerRecordedEventAttributes()
		if m.GetMarkerName() != "Version" {
			continue
		}
		for _, p := range m.GetDetails()["change-id"].GetPayloads() {
			var id string
			if err := json.Unmarshal(p.GetData(), &id); err != nil {
				t.Fatalf("%s: version marker %d: %v", where, ev.GetEventId(), err)
			}
			out = append(out, id)
		}
	}
	return out
}
