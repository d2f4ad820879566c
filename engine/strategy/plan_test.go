package strategy

import (
	"context"
	"strings"
	"testing"
)

func TestParsePlan(t *testing.T) {
	p, err := ParsePlan("tp=8,pp=12,dp=4,mb=1,recompute=full,zero=0,vpp=1,sp=true,ep=1,cp=1")
	if err != nil {
		t.Fatal(err)
	}
	want := Plan{TP: 8, PP: 12, DP: 4, CP: 1, EP: 1, MicroBatch: 1, Recompute: RecomputeFull, VPP: 1, SP: true}
	if p != want {
		t.Errorf("got %+v, want %+v", p, want)
	}
	q, err := ParsePlan(p.String())
	if err != nil || q != p {
		t.Errorf("round trip: %+v, %v", q, err)
	}
	d, err := ParsePlan(" DP = 64 , recompute = Selective ")
	if err != nil {
		t.Fatal(err)
	}
	if d.DP != 64 || d.TP != 1 || d.Recompute != RecomputeSelective || d.MicroBatch != 1 || d.VPP != 1 {
		t.Errorf("defaults: %+v", d)
	}
}

func TestParsePlanErrors(t *testing.T) {
	tests := []struct{ in, field, msg string }{
		{"", "plan", "empty"},
		{"tp=8,,pp=2", "plan", "empty item"},
		{"tp", "plan", "key=value"},
		{"tp=eight", "tp", "integer"},
		{"tp=0", "tp", "integer"},
		{"pp=-2", "pp", "integer"},
		{"zero=4", "zero", "0..3"},
		{"sp=maybe", "sp", `"maybe": want true, false, 1 or 0`},
		// Only what the message lists: strconv.ParseBool's t, f, T, F no more.
		{"sp=yes", "sp", "want true, false, 1 or 0"},
		{"overlap=t", "overlap", `"t": want true, false, 1 or 0`},
		{"sp=F", "sp", "want true, false, 1 or 0"},
		{"overlap=2", "overlap", "want true, false, 1 or 0"},
		{"recompute=half", "recompute", "none, selective or full"},
		{"tp=2,tp=4", "tp", "twice"},
		{"xp=2", "xp", "unknown key"},
		{"tp=1048576,dp=1048576", "plan", "exceeds"},
	}
	for _, tc := range tests {
		_, err := ParsePlan(tc.in)
		if err == nil {
			t.Errorf("%q accepted", tc.in)
			continue
		}
		specErr(t, err, tc.field, 0, tc.msg)
	}
}

// TestParsePlanOn: a plan without dp takes the devices the other degrees
// leave (Megatron's data-parallel size); a given dp stays (Check refuses
// one that does not fit); degrees whose product does not divide the
// devices, dp left out, are an error naming both.
func TestParsePlanOn(t *testing.T) {
	c := mustCluster(t, "1024_ascend910b")
	for _, tc := range []struct {
		in string
		dp int
	}{
		{"tp=8,pp=16", 8},
		{"tp=8,pp=16,cp=2", 4},
		{"TP=4, PP=8, mb=2", 32},
		{"tp=8,pp=16,dp=2", 2}, // given: kept (Check refuses it)
	} {
		p, err := ParsePlanOn(tc.in, c)
		if err != nil || p.DP != tc.dp {
			t.Errorf("%q: dp %d, %v; want %d", tc.in, p.DP, err, tc.dp)
		}
	}
	if _, err := ParsePlanOn("tp=8,pp=12", c); err == nil || !strings.Contains(err.Error(),
		"dp left out, and tp·pp·cp = 96 does not divide cluster ascend910b-1024's 1024 devices") {
		t.Errorf("tp=8,pp=12 on 1,024 devices: %v; want an error (96 does not divide 1,024)", err)
	}
	if _, err := ParsePlanOn("tp=eight", c); err == nil {
		t.Error("a bad plan parsed")
	}
}

// TestParsePlanBooleans: sp and overlap take exactly what the error
// message lists, true, false, 1 or 0, in any case.
func TestParsePlanBooleans(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"sp=true", true}, {"sp=TRUE", true}, {"sp=True", true}, {"sp=1", true},
		{"sp=false", false}, {"sp=False", false}, {"sp=0", false}, {" sp = 1 ", true},
	} {
		p, err := ParsePlan(tc.in)
		if err != nil || p.SP != tc.want {
			t.Errorf("%q: sp %t, %v; want %t", tc.in, p.SP, err, tc.want)
		}
		q, err := ParsePlan(strings.Replace(tc.in, "sp", "overlap", 1))
		if err != nil || q.Overlap != tc.want {
			t.Errorf("%q as overlap: %t, %v; want %t", tc.in, q.Overlap, err, tc.want)
		}
	}
}

// TestCheckContextParallelChunks: cp > 1 cuts the sequence into 2·cp
// chunks (Megatron's causal load balancing), so seq_len must divide by
// 2·cp, not only by cp; the search keeps to the same rule.
func TestCheckContextParallelChunks(t *testing.T) {
	m := mustModel(t, "gpt3_3.6b") // seq_len 2048, 32 heads
	c := mustCluster(t, "vtrain_a100_64")
	for _, tc := range []struct {
		seq  int
		plan string
		want string // "" accepted
	}{
		{4098, "tp=1,pp=1,dp=32,cp=2", "seq_len (4098) not divisible by 2·cp (4): context parallelism cuts the sequence into 2·cp chunks"},
		{4100, "tp=1,pp=1,dp=32,cp=2", ""},
		{2052, "tp=1,pp=1,dp=16,cp=4", "seq_len (2052) not divisible by 2·cp (8)"},
		{2056, "tp=1,pp=1,dp=16,cp=4", ""},
		{4097, "tp=1,pp=1,dp=64,cp=1", ""}, // no context parallelism: any length
	} {
		mm := m
		mm.SeqLen = tc.seq
		p, err := ParsePlan(tc.plan)
		if err != nil {
			t.Fatal(err)
		}
		err = Check(mm, c, p)
		if tc.want == "" {
			if err != nil {
				t.Errorf("seq_len %d, %s: %v", tc.seq, tc.plan, err)
			}
			continue
		}
		specErr(t, err, "cp", 0, tc.want)
	}
	m.SeqLen = 4098 // 2·3·683: cp 2 and beyond cannot cut it into 2·cp chunks
	res, err := Search(context.Background(), m, c, SearchOptions{TopK: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res {
		if e.Plan.CP > 1 {
			t.Errorf("seq_len 4098: the search lists %s", e.Config)
		}
	}
}

func TestCheck(t *testing.T) {
	m := mustModel(t, "gpt3_174.6b") // 96 layers, 96 heads, batch 1536
	c := mustCluster(t, "selene_a100_384")
	moe := mustModel(t, "moe_bert") // 64 experts, 16 heads, batch 4096
	asc := mustCluster(t, "1024_ascend910b")
	tests := []struct {
		name  string
		m     Model
		c     Cluster
		plan  string
		field string
		msg   string
	}{
		{"ok", m, c, "tp=8,pp=12,dp=4,mb=1,recompute=full", "", ""},
		{"device count", m, c, "tp=8,pp=12,dp=2", "plan", "384 devices"},
		{"heads vs tp", m, c, "tp=64,pp=6,dp=1", "tp", "heads (96) not divisible by tp (64)"},
		{"batch vs dp·mb", m, c, "tp=8,pp=12,dp=4,mb=7", "mb", "global_batch (1536) not divisible"},
		{"too many stages", m, c, "tp=1,pp=128,dp=3", "pp", "128 stages for 96 layers"},
		{"vpp without pp", m, c, "tp=8,pp=1,dp=48,vpp=2", "vpp", "needs pp > 1"},
		{"vpp layers", m, c, "tp=8,pp=12,dp=4,vpp=5", "vpp", "cannot be split into 12 stages of 5 chunks"},
		{"vpp micro-batches", m, c, "tp=8,pp=12,dp=4,mb=64,vpp=2", "vpp", "multiple of pp"},
		{"cp", m, c, "tp=8,pp=4,dp=4,cp=3", "cp", "seq_len (2048) not divisible by 2·cp (6)"},
		{"ep dense", m, c, "tp=8,pp=12,dp=4,ep=2", "ep", "needs a model with experts"},
		{"ep ok", moe, asc, "tp=2,pp=1,dp=512,ep=64,sp=true,recompute=full", "", ""},
		{"ep experts", moe, asc, "tp=1,pp=1,dp=1024,ep=128", "ep", "experts (64) not divisible"},
		{"ep divides dp", moe, asc, "tp=8,pp=4,dp=32,ep=64,sp=true", "ep", "must divide dp·cp"},
		{"ep needs sp", moe, asc, "tp=2,pp=1,dp=512,ep=8", "sp", "needs sequence parallelism"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePlan(tc.plan)
			if err != nil {
				t.Fatal(err)
			}
			err = Check(tc.m, tc.c, p)
			e := Evaluate(tc.m, tc.c, p)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				if !e.Feasible || e.StepTimeS <= 0 {
					t.Errorf("estimate: %+v", e)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			specErr(t, err, tc.field, 0, tc.msg)
			if e.Feasible || !strings.Contains(e.Reason, tc.msg) {
				t.Errorf("Evaluate: feasible=%t reason %q, want it to contain %q", e.Feasible, e.Reason, tc.msg)
			}
		})
	}
}
