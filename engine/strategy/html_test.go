package strategy

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

// htmlRows parses page (leniently, as HTML) and returns the text of every
// table row of class "plan", failing on markup that does not nest.
func htmlRows(t *testing.T, page string) (rows []string, classes []string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(page))
	d.Strict = false
	d.AutoClose = xml.HTMLAutoClose
	d.Entity = xml.HTMLEntity
	var stack []string
	var cur *strings.Builder
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("HTML does not parse: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			stack = append(stack, tok.Name.Local)
			if tok.Name.Local == "tr" {
				for _, a := range tok.Attr {
					if a.Name.Local == "class" && strings.HasPrefix(a.Value, "plan") {
						cur = &strings.Builder{}
						classes = append(classes, a.Value)
					}
				}
			}
		case xml.EndElement:
			if len(stack) == 0 || stack[len(stack)-1] != tok.Name.Local {
				t.Fatalf("</%s> closes %v", tok.Name.Local, stack)
			}
			stack = stack[:len(stack)-1]
			if tok.Name.Local == "tr" && cur != nil {
				rows = append(rows, cur.String())
				cur = nil
			}
		case xml.CharData:
			if cur != nil {
				cur.Write(tok)
				cur.WriteByte(' ')
			}
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unclosed elements %v", stack)
	}
	return rows, classes
}

func TestWriteHTML(t *testing.T) {
	m, err := PresetModel("gpt3_3.6b")
	if err != nil {
		t.Fatal(err)
	}
	c, err := PresetCluster("vtrain_a100_64")
	if err != nil {
		t.Fatal(err)
	}
	top, err := Search(context.Background(), m, c, SearchOptions{TopK: 4})
	if err != nil {
		t.Fatal(err)
	}
	bad := Evaluate(m, c, Plan{TP: 3, PP: 1, DP: 1, CP: 1, EP: 1, MicroBatch: 1, VPP: 1, Recompute: RecomputeNone})
	if bad.Feasible {
		t.Fatal("tp=3 on 64 devices is feasible?")
	}
	evil := `<script>alert("x")</script> & <b>co</b>`
	for _, tc := range []struct {
		name      string
		report    Report
		rows      int
		classes   []string
		contains  []string
		notInHTML []string
	}{
		{name: "top 4", report: Report{Model: m, Cluster: c, Estimates: top}, rows: 4,
			classes:  []string{"plan best", "plan", "plan", "plan"},
			contains: []string{top[0].Plan.String(), top[3].Plan.String(), "tokens/s", "headroom GiB", "blast radius", "Parallel strategies: " + m.Name + " on " + c.Name}},
		{name: "infeasible row", report: Report{Model: m, Cluster: c, Estimates: []Estimate{top[0], bad}}, rows: 2,
			classes:  []string{"plan best", "plan infeasible"},
			contains: []string{bad.Plan.String(), "tp"}},
		{name: "escapes names", report: Report{Title: evil, Model: withName(m, evil), Cluster: withClusterName(c, evil), Estimates: top[:1]}, rows: 1,
			classes:   []string{"plan best"},
			contains:  []string{"&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &lt;b&gt;co&lt;/b&gt;"},
			notInHTML: []string{"<script", "<b>co"}},
		{name: "empty", report: Report{Model: m, Cluster: c}, rows: 0, contains: []string{"Top 0 plans"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteHTML(&b, tc.report); err != nil {
				t.Fatal(err)
			}
			page := b.String()
			rows, classes := htmlRows(t, page)
			if len(rows) != tc.rows {
				t.Fatalf("%d plan rows, want %d", len(rows), tc.rows)
			}
			for i, cl := range tc.classes {
				if classes[i] != cl {
					t.Errorf("row %d class %q, want %q", i, classes[i], cl)
				}
			}
			for i, e := range tc.report.Estimates {
				if !strings.Contains(rows[i], e.Plan.String()) {
					t.Errorf("row %d lacks its plan %s: %s", i, e.Plan, rows[i])
				}
				if !e.Feasible && !strings.Contains(rows[i], oneLine(e.Reason)[:20]) {
					t.Errorf("infeasible row %d lacks its reason: %s", i, rows[i])
				}
			}
			for _, s := range tc.contains {
				if !strings.Contains(page, s) {
					t.Errorf("page lacks %q", s)
				}
			}
			// Self-contained and nothing html/template had to neutralise.
			for _, s := range append([]string{"http://", "https://", "src=", "<link", "<script", "ZgotmplZ", "url("}, tc.notInHTML...) {
				if strings.Contains(page, s) {
					t.Errorf("page contains %q", s)
				}
			}
			if !strings.HasPrefix(page, "<!DOCTYPE html>") || !strings.Contains(page, "<style>") {
				t.Error("not an HTML page with inline CSS")
			}
		})
	}
}

func withName(m Model, name string) Model            { m.Name = name; return m }
func withClusterName(c Cluster, name string) Cluster { c.Name = name; return c }
