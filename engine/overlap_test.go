package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestBucketLayout(t *testing.T) {
	// Layers of 10→4 (44 values, from 0), 4→3 (15, from 44), 3→2 (8,
	// from 59): 67 parameters, then the loss at 67.
	offsets, n := []int{0, 44, 59}, 67
	tests := []struct {
		name         string
		capF, firstF int
		want         [][2]int // offset, len in launch order
	}{
		{"one bucket per layer", 1000, 1000, [][2]int{{59, 9}, {44, 15}, {0, 44}}},
		{"small first bucket", 1000, 4, [][2]int{{64, 4}, {59, 5}, {44, 15}, {0, 44}}},
		{"large layers split", 20, 20, [][2]int{{59, 9}, {44, 15}, {24, 20}, {4, 20}, {0, 4}}},
		{"one value each", 1, 1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bs := bucketLayout(offsets, n, tc.capF, tc.firstF)
			end := n + 1
			for i, b := range bs {
				if b.Index != i || b.Offset+b.Len != end || b.Len < 1 {
					t.Fatalf("bucket %d = %+v, want Index %d ending at %d", i, b, i, end)
				}
				c := tc.capF
				if i == 0 {
					c = tc.firstF
				}
				if b.Len > c {
					t.Errorf("bucket %d has %d values, cap %d", i, b.Len, c)
				}
				for _, off := range offsets[1:] {
					if b.Offset < off && off < b.Offset+b.Len {
						t.Errorf("bucket %+v spans the layer boundary %d", b, off)
					}
				}
				end = b.Offset
			}
			if end != 0 {
				t.Fatalf("buckets stop at %d, want 0", end)
			}
			if tc.want != nil {
				var got [][2]int
				for _, b := range bs {
					got = append(got, [2]int{b.Offset, b.Len})
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("layout %v, want %v", got, tc.want)
				}
			}
		})
	}
	ds := synthDataset(1, 50, 10, 2)
	tr, err := NewTrainer(Config{Seed: 1, Hidden: []int{4, 3}, LearningRate: 1e-3, BatchPerRank: 5, World: 1, BucketBytes: 80, FirstBucketBytes: 16}, ds)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(tr.Buckets()); got != 6 { // 4+5 | 15 | 20, 20, 4
		t.Errorf("trainer has %d buckets, want 6: %+v", got, tr.Buckets())
	}
	one, _ := NewTrainer(Config{Seed: 1, Hidden: []int{4, 3}, LearningRate: 1e-3, BatchPerRank: 5, World: 1, Optimizer: OneBitAdam, FreezeStep: 2}, ds)
	bs := one.Buckets()
	if last := bs[len(bs)-1]; last.Offset != one.NumParams()+1 || last.Len != 6 {
		t.Errorf("OneBitAdam's last bucket %+v, want the 6 statistics after the loss", last)
	}
}

// bucketAverager is a synchronous BucketReducer over the averager: each
// bucket is averaged element-wise in rank order when it starts.
type bucketAverager struct {
	red    ReduceFunc
	starts int
}

func (b *bucketAverager) Start(ctx context.Context, _ Bucket, buf []float32) {
	b.starts++
	if err := b.red(ctx, buf); err != nil {
		panic(err)
	}
}
func (b *bucketAverager) Wait(context.Context) error { return nil }

// TestStepOverlapMatchesStep: with an element-wise, fixed-order average
// per bucket, StepOverlap trains exactly like Step, for Adam and for
// OneBitAdam across the freeze.
func TestStepOverlapMatchesStep(t *testing.T) {
	ds := synthDataset(7, 300, 16, 4)
	for _, cfg := range []Config{
		{Seed: 3, Hidden: []int{12, 6}, LearningRate: 1e-2, BatchPerRank: 6, World: 2, BucketBytes: 64, FirstBucketBytes: 12},
		{Seed: 3, Hidden: []int{12, 6}, LearningRate: 1e-2, BatchPerRank: 6, World: 2, BucketBytes: 64, FirstBucketBytes: 12, Optimizer: OneBitAdam, FreezeStep: 8},
	} {
		t.Run(cfg.Optimizer.String(), func(t *testing.T) {
			const steps = 30
			plain := newRanks(t, cfg, ds)
			runLockstep(t, plain, steps)
			over := newRanks(t, cfg, ds)
			avg := newAverager(cfg.World)
			var wg sync.WaitGroup
			errs := make([]error, cfg.World)
			for r, tr := range over {
				wg.Add(1)
				go func() {
					defer wg.Done()
					br := &bucketAverager{red: avg.reduceFor(r)}
					for range steps {
						if _, err := tr.StepOverlap(context.Background(), br); err != nil {
							errs[r] = err
							return
						}
					}
					if br.starts != steps*len(tr.Buckets()) {
						errs[r] = errors.New("not every bucket was started every step")
					}
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for r := range over {
				if over[r].WeightsSHA256() != plain[0].WeightsSHA256() {
					t.Fatalf("rank %d: StepOverlap differs from Step", r)
				}
			}
		})
	}
}

// recorder checks, at each Start, that buckets come in order and that
// backward is still running when the first one leaves; it keeps a copy
// of each bucket to compare with what the engine holds after Wait.
type recorder struct {
	t       *Trainer
	next    int
	copies  [][]float32
	early   bool // the first bucket left before layer 0's gradient existed
	stats   bool // the statistics bucket came last
	waiting bool
}

func (r *recorder) Start(_ context.Context, b Bucket, buf []float32) {
	if b.Index != r.next {
		panic("bucket out of order")
	}
	if b.Index == 0 {
		r.early = !slices.ContainsFunc(r.t.grad[:r.t.layers[0].in*r.t.layers[0].out], func(g float32) bool { return g != 0 })
	}
	if b.Offset > r.t.nParams {
		r.stats = b.Index == len(r.t.buckets)-1
	}
	r.next++
	r.copies = append(r.copies, slices.Clone(buf))
}

func (r *recorder) Wait(context.Context) error {
	for i, b := range r.t.buckets {
		if !slices.Equal(r.copies[i], r.t.grad[b.Offset:b.Offset+b.Len]) {
			return errors.New("a bucket changed after it was started")
		}
	}
	r.waiting = true
	return nil
}

// TestStepOverlapLaunchesDuringBackward: buckets leave in order, while
// backward is still running, and are final when they leave.
func TestStepOverlapLaunchesDuringBackward(t *testing.T) {
	ds := synthDataset(8, 100, 30, 3)
	for _, opt := range []Optimizer{Adam, OneBitAdam} {
		cfg := Config{Seed: 3, Hidden: []int{20, 10}, LearningRate: 1e-2, BatchPerRank: 8, World: 1, BucketBytes: 200, FirstBucketBytes: 40, Optimizer: opt}
		if opt == OneBitAdam {
			cfg.FreezeStep = 1
		}
		tr, err := NewTrainer(cfg, ds)
		if err != nil {
			t.Fatal(err)
		}
		for s := range 3 {
			rec := &recorder{t: tr}
			if _, err := tr.StepOverlap(context.Background(), rec); err != nil {
				t.Fatalf("%v step %d: %v", opt, s, err)
			}
			if rec.next != len(tr.Buckets()) || !rec.waiting {
				t.Fatalf("%v step %d: %d of %d buckets started, waited %v", opt, s, rec.next, len(tr.Buckets()), rec.waiting)
			}
			if !rec.early {
				t.Errorf("%v step %d: the first bucket left after backward had finished", opt, s)
			}
			if opt == OneBitAdam && !rec.stats {
				t.Errorf("step %d: the statistics bucket was not last", s)
			}
		}
	}
}

func TestAsyncReducer(t *testing.T) {
	ds := synthDataset(1, 100, 12, 3)
	cfg := Config{Seed: 3, Hidden: []int{8}, LearningRate: 1e-2, BatchPerRank: 10, World: 1, BucketBytes: 40, FirstBucketBytes: 8}
	errBoom := errors.New("link down")
	tests := []struct {
		name    string
		failAt  int // bucket index whose BucketFunc fails, -1 none
		wantRun int // buckets the function runs for
	}{
		{"all succeed", -1, -1},
		{"first fails", 0, 1},
		{"third fails", 2, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, _ := NewTrainer(cfg, ds)
			ref, _ := NewTrainer(cfg, ds)
			var mu sync.Mutex
			var ran []int
			ar := NewAsyncReducer(func(_ context.Context, b Bucket, buf []float32) error {
				mu.Lock()
				ran = append(ran, b.Index)
				mu.Unlock()
				if b.Index == tc.failAt {
					clear(buf) // a failed collective may leave garbage
					return errBoom
				}
				return nil
			})
			defer ar.Close()
			before := tr.Snapshot()
			_, err := tr.StepOverlap(context.Background(), ar)
			if tc.failAt < 0 {
				if err != nil {
					t.Fatal(err)
				}
				ref.Step(context.Background(), noReduce)
				if tr.WeightsSHA256() != ref.WeightsSHA256() {
					t.Error("StepOverlap with a no-op reducer differs from Step")
				}
				if st := ar.Stats(); st.Steps != 1 || st.Buckets != int64(len(tr.Buckets())) || st.HiddenFraction() < 0 || st.HiddenFraction() > 1 {
					t.Errorf("stats %+v", st)
				}
				return
			}
			if !errors.Is(err, errBoom) || !strings.Contains(err.Error(), "bucket") {
				t.Fatalf("StepOverlap error %v, want one wrapping %v and naming the bucket", err, errBoom)
			}
			if len(ran) != tc.wantRun {
				t.Errorf("the function ran for buckets %v, want the first %d only", ran, tc.wantRun)
			}
			after := tr.Snapshot()
			if after.Step != before.Step || !slices.Equal(after.Params, before.Params) || !slices.Equal(after.M, before.M) {
				t.Fatal("failed StepOverlap changed the trainer")
			}
			// The reducer recovers: the next step succeeds.
			if _, err := tr.StepOverlap(context.Background(), ar); err == nil && tc.failAt >= 0 {
				t.Fatal("the bucket fails every step, want the error again")
			}
		})
	}
	ar := NewAsyncReducer(func(context.Context, Bucket, []float32) error { return nil })
	ar.Close()
	ar.Start(context.Background(), Bucket{}, nil)
	if err := ar.Wait(context.Background()); !errors.Is(err, ErrReducerClosed) {
		t.Errorf("Wait after Close = %v, want ErrReducerClosed", err)
	}
	ar.Close() // twice is fine
	if _, err := (&Trainer{}).StepOverlap(context.Background(), nil); err == nil {
		t.Error("StepOverlap with a nil reducer succeeded")
	}
}

func TestStepOverlapDoesNotAllocate(t *testing.T) {
	ds := synthDataset(1, 100, 20, 5)
	for _, opt := range []Optimizer{Adam, OneBitAdam} {
		cfg := Config{Seed: 1, Hidden: []int{16, 8}, LearningRate: 1e-3, BatchPerRank: 10, World: 1, BucketBytes: 128, FirstBucketBytes: 32, Optimizer: opt}
		if opt == OneBitAdam {
			cfg.FreezeStep = 3
		}
		tr, err := NewTrainer(cfg, ds)
		if err != nil {
			t.Fatal(err)
		}
		ar := NewAsyncReducer(func(context.Context, Bucket, []float32) error { return nil })
		ctx := context.Background()
		allocs := testing.AllocsPerRun(20, func() {
			if _, err := tr.StepOverlap(ctx, ar); err != nil {
				t.Fatal(err)
			}
		})
		ar.Close()
		if allocs != 0 {
			t.Errorf("%v: StepOverlap allocates %.1f times per call, want 0", opt, allocs)
		}
	}
}
