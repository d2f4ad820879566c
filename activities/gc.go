package activities

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/spec"
)

// Retention deletes a run's old checkpoint manifests; the chunks only they
// referenced stay in the bucket until a GC pass. The node that saves a
// run's checkpoints (its rank 0) runs that pass itself, in the background,
// after its retention has deleted checkpoints — the one process where the
// checkpoint package's GC is safe alongside saves (its pins) — at most
// once per gcEvery(grace): chunks younger than the grace are kept anyway,
// so a run's storage stays near its retained checkpoints plus the grace
// period's worth of chunks instead of growing with every checkpoint.
//
// Another process may save the run meanwhile — after a recovery moved
// rank 0, the new writer — while a pass that began on the old one still
// runs: the chunks it uploads are younger than the grace and stay; a
// chunk it reuses is one the checkpoint it restored references (a state's
// unchanged bytes), which no pass deletes, or else it writes the chunk
// again first if the chunk is old enough to be collected, and the pass
// looks at each chunk's age again before deleting it. A chunk is lost
// only if that rewrite falls between the pass's look and its deletion,
// and a load then reports that checkpoint corrupt and falls back.

// gcTimeout bounds one background GC pass.
const gcTimeout = 30 * time.Minute

// gcEvery is how long after a pass the next one may start: a quarter of
// the grace (the chunks a pass keeps for being young are old enough for
// the pass after), at least a second.
func gcEvery(grace time.Duration) time.Duration {
	return max(grace/4, time.Second)
}

// gcKey names one run's checkpoints in one bucket.
type gcKey struct{ url, run string }

// collector runs GC passes in the background, one at a time per run and
// bucket. The zero value is ready; close stops them.
type collector struct {
	mu     sync.Mutex
	passes map[gcKey]*gcPass
	wg     sync.WaitGroup
	closed bool
}

type gcPass struct {
	last    time.Time          // when the last pass began
	running context.CancelFunc // non-nil while one runs
}

// deleted notes that retention deleted run's checkpoints in the bucket at
// url and starts a pass (gc) when none runs and the last began every ago.
func (c *collector) deleted(key gcKey, every time.Duration, gc func(context.Context)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if c.passes == nil {
		c.passes = map[gcKey]*gcPass{}
	}
	p := c.passes[key]
	if p == nil {
		p = &gcPass{}
		c.passes[key] = p
	}
	now := time.Now()
	if p.running != nil || (!p.last.IsZero() && now.Sub(p.last) < every) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), gcTimeout)
	p.last, p.running = now, cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel()
		gc(ctx)
		c.mu.Lock()
		p.running = nil
		c.mu.Unlock()
	}()
}

// wait returns once no pass runs.
func (c *collector) wait() { c.wg.Wait() }

// close cancels the passes that run and waits for them; later deletions
// start none.
func (c *collector) close() {
	c.mu.Lock()
	c.closed = true
	for _, p := range c.passes {
		if p.running != nil {
			p.running()
		}
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// retain applies the job's retention (s: its spec; keep_checkpoints,
// keep_every) after this node saved its checkpoint at step in the bucket
// at url (checkpoints above step are another timeline's and stay), then
// collects the chunks no remaining checkpoint references. Both are best
// effort: a failure is logged, the checkpoint stands.
func (n *Node) retain(ctx context.Context, store *checkpoint.Store, url string, s spec.RunSpec, step int64, log *zap.Logger) {
	run := s.Name
	keepLast, keepEvery := s.Retention()
	deleted, err := store.RetainFrom(ctx, run, step, keepLast, keepEvery)
	if err != nil {
		log.Warn("checkpoint retention", zap.String("bucket", checkpoint.Redact(url)), zap.Error(err))
	}
	if len(deleted) == 0 {
		return
	}
	n.gc.deleted(gcKey{url, run}, gcEvery(store.GCGrace()), func(ctx context.Context) {
		st, err := store.GC(ctx, run)
		if err != nil {
			log.Warn("checkpoint chunks not collected", zap.String("run", run), zap.String("bucket", checkpoint.Redact(url)), zap.Error(err))
			return
		}
		log.Debug("checkpoint chunks collected", zap.String("run", run), zap.Int("deleted", st.Deleted),
			zap.Int64("deleted_bytes", st.DeletedBytes), zap.Int("young", st.Young), zap.Int("referenced", st.Referenced))
	})
}
