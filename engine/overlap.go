package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Bucket is a contiguous range [Offset, Offset+Len) of the step buffer
// (the gradient, or the momentum, plus the trailing loss) that a
// [BucketReducer] averages as one unit. Index is its launch order.
type Bucket struct {
	Index  int
	Offset int
	Len    int
}

// BucketReducer averages a step's buffer bucket by bucket while the
// backward pass is still running: [Trainer.StepOverlap] starts each bucket
// as soon as backward has finished it, and waits for what is left only
// when it needs the averages, before the optimizer update.
//
// Obligations: averaging means replacing a bucket's values, in place, by
// their element-wise average over all ranks, with bit-identical results on
// every rank (for example the same fixed-order reduction of each bucket on
// every rank, buckets reduced in Index order). Buckets arrive in Index
// order, from the end of the buffer to its start, and the layout is the
// same on every rank. The engine does not touch a started bucket's values
// until Wait returns, and it writes other parts of the buffer meanwhile.
type BucketReducer interface {
	// Start launches the averaging of bucket b, whose values are buf. It
	// must not wait for the communication, and must not retain buf after
	// the Wait that follows.
	Start(ctx context.Context, b Bucket, buf []float32)
	// Wait blocks until every bucket started since the previous Wait is
	// averaged, and returns the first error among them (then the step
	// fails and the trainer is left unchanged).
	Wait(ctx context.Context) error
}

// Buckets returns the bucket layout [Trainer.StepOverlap] uses, in launch
// order: walking the layers from the last to the first, each layer's
// weights and biases (the last layer's with the trailing loss) cut from
// their end into buckets of at most Config.BucketBytes, the very first one
// at most Config.FirstBucketBytes. Buckets never span two layers. With
// OneBitAdam a last bucket holds the per-tensor statistics after the loss,
// which are complete only when backward is.
func (t *Trainer) Buckets() []Bucket { return slices.Clone(t.buckets) }

// bucketFloats converts a byte cap (0: def) to a float count of at least 1.
func bucketFloats(bytes, def int) int {
	if bytes == 0 {
		bytes = def
	}
	return max(1, bytes/4)
}

// bucketLayout cuts [0, nParams+1) into buckets as described at Buckets;
// offsets[l] is where layer l starts.
func bucketLayout(offsets []int, nParams, capFloats, firstFloats int) []Bucket {
	var bs []Bucket
	hi := nParams + 1
	for l := len(offsets) - 1; l >= 0; l-- {
		lo := offsets[l]
		for hi > lo {
			c := capFloats
			if len(bs) == 0 {
				c = firstFloats
			}
			start := max(lo, hi-c)
			bs = append(bs, Bucket{Index: len(bs), Offset: start, Len: hi - start})
			hi = start
		}
	}
	return bs
}

// reached records that the buffer from off to its end is final and starts
// the buckets that completes (nothing outside StepOverlap).
func (t *Trainer) reached(off int) {
	if t.br == nil {
		return
	}
	for t.nextBucket < t.payloadBuckets {
		b := t.buckets[t.nextBucket]
		if b.Offset < off {
			return
		}
		end := b.Offset + b.Len
		if len(t.statAcc) > 0 {
			t.addStats(b.Offset, min(end, t.nParams))
		}
		if t.momentum {
			t.toMomentum(b.Offset, min(end, t.nParams))
		}
		t.br.Start(t.brCtx, b, t.grad[b.Offset:end:end])
		t.nextBucket++
	}
}

// StepOverlap is [Trainer.Step] with the averaging overlapped with the
// backward pass: each bucket of [Trainer.Buckets] is handed to r.Start as
// soon as backward has produced it (backward runs from the last layer to
// the first, so the buckets of the last layers leave first), and r.Wait is
// called once backward is done, before the optimizer update, which
// therefore waits only for the communication still in flight. The result
// is that of Step with a reduce that averages bucket by bucket; with the
// same reducer on every rank it is bit-deterministic. Errors are those of
// Step, and a failed step leaves the trainer unchanged.
func (t *Trainer) StepOverlap(ctx context.Context, r BucketReducer) (loss float32, err error) {
	if r == nil {
		return 0, errors.New("engine: StepOverlap: reducer is nil")
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("engine: step %d: %w", t.step, err)
	}
	t.loadBatch(t.step)
	t.br, t.brCtx, t.nextBucket, t.momentum = r, ctx, 0, t.Payload() == Momentum
	t.computeGrad()
	if len(t.statAcc) > 0 {
		// The per-tensor statistics are complete only now: they go last.
		t.writeStats()
		b := t.buckets[t.payloadBuckets]
		r.Start(ctx, b, t.grad[b.Offset:b.Offset+b.Len:b.Offset+b.Len])
	}
	t.br, t.brCtx = nil, nil
	if err := r.Wait(ctx); err != nil {
		return 0, fmt.Errorf("engine: step %d: reduce: %w", t.step, err)
	}
	return t.update()
}

// BucketFunc averages one bucket in place across ranks, blocking until it
// is done: a [ReduceFunc] for a part of the buffer. It must honour ctx.
type BucketFunc func(ctx context.Context, b Bucket, buf []float32) error

// OverlapStats is an [AsyncReducer]'s running account.
type OverlapStats struct {
	Steps   int64 // Waits
	Buckets int64 // buckets averaged
	// Comm is the time the communication goroutine spent averaging.
	Comm time.Duration
	// Waited is the time Wait blocked: communication the computation did
	// not hide.
	Waited time.Duration
}

// HiddenFraction returns 1 − Waited/Comm, the fraction of the
// communication time hidden behind computation (1 with no communication).
func (s OverlapStats) HiddenFraction() float64 {
	if s.Comm <= 0 {
		return 1
	}
	return max(0, 1-s.Waited.Seconds()/s.Comm.Seconds())
}

// Sub returns s − o, the account of what happened between two readings.
func (s OverlapStats) Sub(o OverlapStats) OverlapStats {
	return OverlapStats{Steps: s.Steps - o.Steps, Buckets: s.Buckets - o.Buckets, Comm: s.Comm - o.Comm, Waited: s.Waited - o.Waited}
}

// ErrReducerClosed is returned by Wait for buckets started after Close.
var ErrReducerClosed = errors.New("engine: bucket reducer is closed")

// AsyncReducer is a [BucketReducer] that runs a BucketFunc on its own
// goroutine, one bucket after another in Start order, so that every rank
// reduces the same buckets in the same order. After a bucket fails, the
// rest of the step's buckets are skipped and Wait returns the error. Wait
// does not return before the goroutine is done with every started
// bucket's values, whatever ctx does (the BucketFunc sees Start's ctx and
// must give up when it is done). Start, Wait and Close must be called from
// one goroutine; Stats from any. The steady state does not allocate.
type AsyncReducer struct {
	f    BucketFunc
	done chan struct{}

	mu      sync.Mutex
	cond    sync.Cond
	queue   []asyncItem // this step's buckets; queue[next:] not yet taken
	next    int
	pending int // started, not finished
	err     error
	closed  bool
	stats   OverlapStats
}

type asyncItem struct {
	ctx context.Context
	b   Bucket
	buf []float32
}

// NewAsyncReducer starts the goroutine that runs f; Close stops it.
func NewAsyncReducer(f BucketFunc) *AsyncReducer {
	a := &AsyncReducer{f: f, done: make(chan struct{})}
	a.cond.L = &a.mu
	go a.loop()
	return a
}

func (a *AsyncReducer) loop() {
	defer close(a.done)
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		for a.next == len(a.queue) && !a.closed {
			a.cond.Wait()
		}
		if a.next == len(a.queue) {
			return // closed, nothing left
		}
		it := a.queue[a.next]
		a.next++
		skip := a.err != nil
		a.mu.Unlock()
		var err error
		var d time.Duration
		if !skip {
			t0 := time.Now()
			err = a.f(it.ctx, it.b, it.buf)
			d = time.Since(t0)
		}
		a.mu.Lock()
		if err != nil && a.err == nil {
			a.err = fmt.Errorf("bucket %d [%d, %d): %w", it.b.Index, it.b.Offset, it.b.Offset+it.b.Len, err)
		}
		if !skip {
			a.stats.Buckets++
			a.stats.Comm += d
		}
		a.pending--
		if a.pending == 0 {
			a.cond.Broadcast()
		}
	}
}

// Start queues bucket b for the goroutine.
func (a *AsyncReducer) Start(ctx context.Context, b Bucket, buf []float32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		if a.err == nil {
			a.err = ErrReducerClosed
		}
		return
	}
	a.queue = append(a.queue, asyncItem{ctx: ctx, b: b, buf: buf})
	a.pending++
	a.cond.Broadcast()
}

// Wait blocks until every started bucket is done and returns the first
// error since the previous Wait.
func (a *AsyncReducer) Wait(context.Context) error {
	t0 := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.pending > 0 {
		a.cond.Wait()
	}
	err := a.err
	a.err = nil
	clear(a.queue) // drop the references to contexts and buffers
	a.queue, a.next = a.queue[:0], 0
	a.stats.Steps++
	a.stats.Waited += time.Since(t0)
	return err
}

// Stats returns the account so far.
func (a *AsyncReducer) Stats() OverlapStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// Close finishes the started buckets and stops the goroutine.
func (a *AsyncReducer) Close() {
	a.mu.Lock()
	a.closed = true
	a.cond.Broadcast()
	a.mu.Unlock()
	<-a.done
}
