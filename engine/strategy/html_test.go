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

// TestWriteHTMLEvaluated: a page of plans the user gave says "Plan
// evaluated", not "Top 1 plan", and marks none best; spec numbers print as
// written (vTrain's 12.5 GB/s InfiniBand was "12 GB/s", the CPU's 0.21
// TFLOP/s "0"); a row priced at another ZeRO stage says "3→1" and why.
func TestWriteHTMLEvaluated(t *testing.T) {
	m, c := mustModel(t, "gpt3_18.4b"), mustCluster(t, "vtrain_a100_256")
	p, err := ParsePlan("tp=8,pp=2,dp=16,mb=2,recompute=full,zero=3")
	if err != nil {
		t.Fatal(err)
	}
	z3 := Evaluate(m, c, p)
	whole := Plan{TP: 1, PP: 1, DP: 256, CP: 1, EP: 1, MicroBatch: 4, VPP: 1, Recompute: RecomputeNone} // 18.4 B × 18 B per device
	cpu := c
	cpu.Device, err = DeviceProfile(ProfileLocalCPU)
	if err != nil {
		t.Fatal(err)
	}
	top, err := Search(context.Background(), m, c, SearchOptions{TopK: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		report   Report
		class    string
		contains []string
		not      []string
	}{
		{"evaluated", Report{Model: m, Cluster: c, Estimates: []Estimate{z3}, Evaluated: true}, "plan",
			[]string{"<h2>Plan evaluated</h2>", "12.5 GB/s inter-node", "300 GB/s intra-node", "<td>3→1</td>", "note: zero=3 with pp &gt; 1 is priced as ZeRO-1"},
			[]string{"Top 1 plan", "12 GB/s", "plan best"}},
		{"evaluated, infeasible", Report{Model: m, Cluster: cpu, Estimates: []Estimate{Evaluate(m, cpu, whole)}, Evaluated: true}, "plan infeasible",
			[]string{"<h2>Plan evaluated</h2>", "0.21 TFLOP/s peak", "12 GiB", "14.5 GB/s"},
			[]string{"Top 1 plan", "→"}},
		{"searched", Report{Model: m, Cluster: c, Estimates: top}, "plan best",
			[]string{"<h2>Top 2 plans</h2>", "12.5 GB/s inter-node"},
			[]string{"evaluated", "note: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteHTML(&b, tc.report); err != nil {
				t.Fatal(err)
			}
			page := b.String()
			_, classes := htmlRows(t, page)
			if len(classes) == 0 || classes[0] != tc.class {
				t.Errorf("first row class %v, want %q", classes, tc.class)
			}
			for _, s := range tc.contains {
				if !strings.Contains(page, s) {
					t.Errorf("page lacks %q", s)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(page, s) {
					t.Errorf("page has %q", s)
				}
			}
		})
	}
}
