package engine

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
)

// Adam hyper-parameters (Kingma & Ba defaults).
const (
	adamBeta1 = 0.9
	adamBeta2 = 0.999
	adamEps   = 1e-8
)

// PCG stream selectors: the weight init and each epoch's permutation draw
// from distinct streams of the same Seed.
const (
	initStream = 0x696e69742d776569 // "init-wei"
	permStream = 0x7065726d2d65706f // "perm-epo"
)

// ReduceFunc replaces buf, in place, with the element-wise average of the
// buffers passed by all ranks for the same step, delivering bit-identical
// contents to every rank. It must not retain buf after returning. (With
// Config.GlobalBatch set each rank pre-scales its gradient sum by World/G,
// so the average is the sum over the global batch divided by G.)
type ReduceFunc func(ctx context.Context, buf []float32) error

// layer holds views into the flat parameter and gradient vectors.
type layer struct {
	in, out int
	w, b    []float32 // w is in×out, row-major: w[k*out+j] links input k to output j.
	gw, gb  []float32
}

// Trainer is one data-parallel replica of an MLP classifier. It is not safe
// for concurrent use.
type Trainer struct {
	cfg     Config
	sizes   []int
	train   *Dataset
	nParams int

	params []float32
	grad   []float32 // nParams gradient values + 1 trailing loss value.
	m, v   []float32
	step   int64
	adamT  int64
	layers []layer
	// offsets[l] is where layer l's weights start in params and grad.
	offsets []int

	// Overlap (StepOverlap): the bucket layout, and while a step runs its
	// reducer, context, next bucket to launch and payload.
	buckets        []Bucket
	payloadBuckets int // buckets[payloadBuckets:]: the statistics, sent last
	br             BucketReducer
	brCtx          context.Context
	nextBucket     int
	momentum       bool

	// OneBitAdam: per-tensor sums of squared gradients being accumulated
	// for this step, their moving average and its value at the freeze, and
	// the variance floor (computed from the frozen v when first needed).
	statAcc    []float64
	sq         []float64
	sqFrozen   []float64
	floor      []float32
	floorValid bool

	// Step scratch, allocated once.
	acts   [][]float32 // acts[l] is the output of layer l; acts[0] stays unused (lists[0] holds the input batch)
	deltas [][]float32 // deltas[l] is dLoss/d(pre-activation of acts[l]), l >= 1.
	yb     []uint8
	exps   []float64
	nz     columns // a layer's nonzero inputs by input (backward)
	// lists[l] holds each batch row's nonzero inputs of layer l, listed
	// once: lists[0] by loadBatch straight from the dataset (no dense
	// copy of the batch is made), the others by forward; backward groups
	// them by input from there.
	lists []rowLists
	// wT holds a layer's weights transposed (out rows of in) and outs
	// lists 0..widest output-1: backward propagates deltas through them
	// with axpyRows (see backward).
	wT   []float32
	outs []int32

	// Data order: this rank trains examples [lo, lo+rows) of each step's
	// global batch; gradScale multiplies each example's loss gradient
	// (1/rows, or World/G with a global batch G); lr is the learning rate.
	// All four are those of the schedule entry seg (-1: the Config's
	// own), set by applyBatch.
	lo        int64
	rows      int
	gradScale float64
	lr        float64
	seg       int
	perm      []int32
	permEpoch int64
	pcg       rand.PCG
}

// NewTrainer builds a replica for cfg on the training set train, with
// parameters initialised deterministically from cfg.Seed (He-uniform for the
// ReLU layers, Glorot-uniform for the output layer, zero biases). The Trainer
// keeps a reference to train, which must not be modified afterwards.
func NewTrainer(cfg Config, train *Dataset) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := train.validate(); err != nil {
		return nil, fmt.Errorf("engine: training set: %w", err)
	}
	global := int64(cfg.GlobalBatchSize())
	if global > int64(train.N) {
		what := "BatchPerRank*World"
		if cfg.GlobalBatch > 0 {
			what = "GlobalBatch"
		}
		return nil, fmt.Errorf("engine: global batch %s=%d exceeds the %d training examples", what, global, train.N)
	}
	for i, b := range cfg.Schedule {
		if b.GlobalBatch > train.N {
			return nil, fmt.Errorf("engine: Schedule[%d].GlobalBatch=%d exceeds the %d training examples", i, b.GlobalBatch, train.N)
		}
	}
	if train.N > math.MaxInt32 {
		return nil, fmt.Errorf("engine: training set has %d examples, at most %d supported", train.N, math.MaxInt32)
	}
	cfg = cfg.clone()
	sizes := cfg.layerSizes(train.Dim, train.Classes)
	n, err := countParams(sizes)
	if err != nil {
		return nil, err
	}
	lo, hi := cfg.RankSlice()
	rows := hi - lo
	// Each rank's buffer is averaged over World ranks by reduce. Per rank
	// mode: the rank-local mean (scale 1/rows) averaged over ranks is the
	// global mean. Global batch mode: scaling the rank-local sum by World/G
	// makes the average sum/G whatever World is; with G = BatchPerRank*World
	// the scale is the same float64 as 1/BatchPerRank, so the two modes
	// then train bit-identically.
	gradScale := 1 / float64(rows)
	if cfg.GlobalBatch > 0 {
		gradScale = float64(cfg.World) / float64(cfg.GlobalBatch)
	}
	nStats := 0 // OneBitAdam: one gradient statistic per tensor (2 per layer)
	if cfg.Optimizer == OneBitAdam {
		nStats = 2 * (len(sizes) - 1)
	}
	t := &Trainer{
		statAcc:   make([]float64, nStats),
		sq:        make([]float64, nStats),
		sqFrozen:  make([]float64, nStats),
		floor:     make([]float32, nStats),
		cfg:       cfg,
		sizes:     sizes,
		train:     train,
		nParams:   n,
		params:    make([]float32, n),
		grad:      make([]float32, n+1+nStats),
		m:         make([]float32, n),
		v:         make([]float32, n),
		yb:        make([]uint8, cfg.maxRows()),
		exps:      make([]float64, train.Classes),
		lo:        int64(lo),
		rows:      rows,
		gradScale: gradScale,
		lr:        cfg.LearningRate,
		seg:       -1,
		perm:      make([]int32, train.N),
		permEpoch: -1,
	}
	off := 0
	for l := 0; l+1 < len(sizes); l++ {
		in, out := sizes[l], sizes[l+1]
		t.offsets = append(t.offsets, off)
		t.layers = append(t.layers, layer{in: in, out: out, w: t.params[off : off+in*out : off+in*out], b: t.params[off+in*out : off+in*out+out : off+in*out+out]})
		off += in*out + out
	}
	t.bindGrad()
	t.buckets = bucketLayout(t.offsets, n, bucketFloats(cfg.BucketBytes, DefaultBucketBytes), bucketFloats(cfg.FirstBucketBytes, DefaultFirstBucketBytes))
	t.payloadBuckets = len(t.buckets)
	if nStats > 0 {
		t.buckets = append(t.buckets, Bucket{Index: len(t.buckets), Offset: n + 1, Len: nStats})
	}
	t.acts = allocActs(sizes, len(t.yb))
	t.deltas = allocActs(sizes, len(t.yb))
	t.deltas[0] = nil
	t.nz.reserve(len(t.yb), widestInput(sizes))
	t.lists = newRowLists(sizes, len(t.yb))
	for l := 1; l < len(t.layers); l++ {
		ly := t.layers[l]
		t.wT = slices.Grow(t.wT, ly.in*ly.out)[:max(len(t.wT), ly.in*ly.out)]
		for len(t.outs) < ly.out {
			t.outs = append(t.outs, int32(len(t.outs)))
		}
	}
	t.initParams()
	return t, nil
}

// bindGrad points the layers' gradient views into t.grad.
func (t *Trainer) bindGrad() {
	for l := range t.layers {
		ly := &t.layers[l]
		off, in, out := t.offsets[l], ly.in, ly.out
		ly.gw = t.grad[off : off+in*out : off+in*out]
		ly.gb = t.grad[off+in*out : off+in*out+out : off+in*out+out]
	}
}

// UseStepBuffer makes buf (BufferLen elements) the step buffer — the
// gradients, loss and statistics a step averages across ranks — until
// the returned function moves the trainer back to its own buffer. The
// point is memory the averaging reads without copying (a communicator's
// shared buffer, which the peers of a host read directly). The buffer's
// contents carry over both ways; buf must stay valid until the restore.
func (t *Trainer) UseStepBuffer(buf []float32) (restore func(), err error) {
	if len(buf) != len(t.grad) {
		return nil, fmt.Errorf("engine: step buffer of %d elements, want %d", len(buf), len(t.grad))
	}
	own := t.grad
	copy(buf, own)
	t.grad = buf
	t.bindGrad()
	return func() {
		if &t.grad[0] != &buf[0] {
			return // restored already, or another buffer since
		}
		copy(own, t.grad)
		t.grad = own
		t.bindGrad()
	}, nil
}

func allocActs(sizes []int, rows int) [][]float32 {
	a := make([][]float32, len(sizes))
	for l, s := range sizes {
		a[l] = make([]float32, rows*s)
	}
	return a
}

// initParams draws the weights from the Seed's init stream.
func (t *Trainer) initParams() {
	t.pcg.Seed(t.cfg.Seed, initStream)
	last := len(t.layers) - 1
	for l, ly := range t.layers {
		var limit float64
		if l < last {
			limit = math.Sqrt(6 / float64(ly.in)) // He uniform (ReLU follows).
		} else {
			limit = math.Sqrt(6 / float64(ly.in+ly.out)) // Glorot uniform.
		}
		for i := range ly.w {
			u := float64(int64(t.pcg.Uint64()>>11)-1<<52) * 0x1p-52 // [-1,1), exact.
			ly.w[i] = float32(u * limit)
		}
		clear(ly.b)
	}
}

// NumParams returns the number of trainable parameters.
func (t *Trainer) NumParams() int { return t.nParams }

// Tensor is one parameter tensor's place in the flat parameter vector (and
// in the gradient buffer Step hands to its ReduceFunc): Rows×Cols values,
// row-major, from Offset.
type Tensor struct {
	Name       string
	Offset     int
	Rows, Cols int
}

// Tensors lists the parameter tensors in vector order (per layer: the
// in×out weights, then the biases), for codecs that work per tensor.
func (t *Trainer) Tensors() []Tensor {
	var ts []Tensor
	for l, ly := range t.layers {
		off := t.offsets[l]
		ts = append(ts,
			Tensor{Name: fmt.Sprintf("layer%d.weight", l), Offset: off, Rows: ly.in, Cols: ly.out},
			Tensor{Name: fmt.Sprintf("layer%d.bias", l), Offset: off + ly.in*ly.out, Rows: 1, Cols: ly.out})
	}
	return ts
}

// GlobalStep returns the global step the next call to [Trainer.Step] will
// train, which is also the number of steps applied so far. (It is not named
// Step because that is the training method.)
func (t *Trainer) GlobalStep() int64 { return t.step }

// Config returns a copy of the trainer's configuration.
func (t *Trainer) Config() Config { return t.cfg.clone() }

// Params returns the flat parameter vector: for each layer in order, its
// in×out row-major weights followed by its out biases. The slice aliases the
// trainer's storage; callers must not modify it.
func (t *Trainer) Params() []float32 { return t.params }

// WeightsSHA256 returns the hex SHA-256 of the parameters' little-endian
// IEEE-754 bytes.
func (t *Trainer) WeightsSHA256() string { return weightsSHA256(t.params) }

func weightsSHA256(p []float32) string {
	h := sha256.New()
	var buf [4096]byte
	for len(p) > 0 {
		n := min(len(p), len(buf)/4)
		for i, x := range p[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
		}
		h.Write(buf[:4*n])
		p = p[n:]
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Step trains one global step; see the package documentation for the
// contract of reduce. It returns the mean loss over the global batch (with
// BatchPerRank, the rank-local mean losses averaged over ranks, which is the
// same thing). If ctx is done before reduce is called, or reduce fails, or
// the averaged gradient or loss is not finite, Step returns an error and
// leaves the trainer unchanged.
//
// With Config.Optimizer OneBitAdam, from FreezeStep on the buffer holds the
// local momentum instead of the gradient ([Trainer.Payload] says which);
// reduce averages it all the same.
func (t *Trainer) Step(ctx context.Context, reduce ReduceFunc) (loss float32, err error) {
	if reduce == nil {
		return 0, errors.New("engine: Step: reduce is nil (use a no-op for World=1)")
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("engine: step %d: %w", t.step, err)
	}
	t.loadBatch(t.step)
	t.computeGrad()
	if len(t.statAcc) > 0 {
		// Bucket by bucket, as StepOverlap does, for the same rounding.
		for _, b := range t.buckets[:t.payloadBuckets] {
			t.addStats(b.Offset, min(b.Offset+b.Len, t.nParams))
		}
		t.writeStats()
	}
	if t.Payload() == Momentum {
		t.toMomentum(0, t.nParams)
	}
	if err := reduce(ctx, t.grad); err != nil {
		return 0, fmt.Errorf("engine: step %d: reduce: %w", t.step, err)
	}
	return t.update()
}

// update checks the averaged buffer and applies the optimizer.
func (t *Trainer) update() (loss float32, err error) {
	loss = t.grad[t.nParams]
	if i := firstNonFinite(t.grad); i >= 0 {
		what := fmt.Sprintf("%s[%d]", t.Payload(), i)
		if i == t.nParams {
			what = "loss"
		}
		return 0, fmt.Errorf("engine: step %d: averaged %s is %v", t.step, what, t.grad[i])
	}
	if len(t.sq) > 0 {
		t.trackSq()
	}
	if t.Payload() == Momentum {
		t.frozenAdam()
	} else {
		t.adam()
	}
	t.step++
	return loss, nil
}

// firstNonFinite returns the index of the first NaN or ±Inf in x, or -1.
// The fast path (anyNonFinite) is branch-free: a float32 is not finite
// exactly when its exponent bits are all ones, and adding one to an
// all-ones exponent carries into the sign bit.
func firstNonFinite(x []float32) int {
	if !anyNonFinite(x) {
		return -1
	}
	for i, v := range x {
		if math.Float32bits(v)&expBits == expBits {
			return i
		}
	}
	return -1
}

// expBits are a float32's exponent bits; oneExp is the lowest of them.
const expBits, oneExp = 0x7f800000, 0x00800000

// anyNonFinitePortable reports whether x holds a NaN or ±Inf
// (anyNonFinite, kernels_*.go, runs it or a vector kernel).
func anyNonFinitePortable(x []float32) bool {
	var bad uint32
	for _, v := range x {
		bad |= (math.Float32bits(v)&expBits + oneExp) >> 31
	}
	return bad != 0
}

// loadBatch lists the nonzero features of this rank's slice of the global
// batch of step s into lists[0] (straight from the dataset: MNIST's rows
// are four-fifths zeros, and the first layer and its gradient read only
// the nonzeros) and its labels into yb.
func (t *Trainer) loadBatch(s int64) {
	dim := t.train.Dim
	l0 := &t.lists[0]
	rows := t.batchIndices(s)
	for i, idx := range rows {
		// The rows lie at random in the dataset (188 MB for MNIST): ask
		// for the next one while this one is listed.
		if i+1 < len(rows) {
			next := int(rows[i+1]) * dim
			prefetch(t.train.X[next : next+dim])
		}
		ri, rv := l0.slot(i)
		l0.n[i] = int32(listNonzero(t.train.X[int(idx)*dim:(int(idx)+1)*dim], ri, rv))
		t.yb[i] = t.train.Y[idx]
	}
}

// batchIndices returns the training-set indices of this rank's examples in
// step s: entries [off+lo, off+lo+rows) of the epoch's permutation, where
// off is the step's position (without a schedule (s mod E)*global, E the
// whole batches per epoch; see [Trainer.position]). The global batch, and
// so the union of all ranks' slices, depends only on (Seed, s, global
// batch and schedule), not on World. The result aliases t.perm and is
// valid until the next epoch is permuted.
func (t *Trainer) batchIndices(s int64) []int32 {
	t.applyBatch(s)
	epoch, off := t.position(s)
	if epoch != t.permEpoch {
		t.permute(epoch)
	}
	off += t.lo
	return t.perm[off : off+int64(t.rows)]
}

// permute fills t.perm with the permutation of epoch e (Fisher-Yates over
// the epoch's PCG stream). It rewrites the preallocated slice in place.
func (t *Trainer) permute(e int64) {
	for i := range t.perm {
		t.perm[i] = int32(i)
	}
	t.pcg.Seed(t.cfg.Seed^permStream, uint64(e))
	for i := len(t.perm) - 1; i > 0; i-- {
		j := uniformN(&t.pcg, uint64(i)+1)
		t.perm[i], t.perm[j] = t.perm[j], t.perm[i]
	}
	t.permEpoch = e
}

// uniformN returns a uniform value in [0,n) using Lemire's multiply-shift
// with rejection. It is spelled out here (rather than rand.Rand.Uint64N) so
// the data order is fixed by this package, not by the Go release.
func uniformN(src *rand.PCG, n uint64) uint64 {
	hi, lo := bits.Mul64(src.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(src.Uint64(), n)
		}
	}
	return hi
}

// computeGrad runs forward and backward on the batch in lists[0]/yb, writes
// the gradient sum scaled by t.gradScale into t.grad[:nParams] and the loss
// sum scaled likewise into t.grad[nParams] (the rank-local means with
// BatchPerRank, and World/GlobalBatch times the rank-local sums with
// GlobalBatch), and returns the loss. With a bucket reducer set, buckets
// are launched as backward completes them.
func (t *Trainer) computeGrad() float32 {
	rows := t.rows
	forward(t.layers, t.acts, rows, t.lists, true)
	last := len(t.layers)
	classes := t.sizes[last]
	logits, dlog := t.acts[last], t.deltas[last]
	inv := t.gradScale
	var total float64
	for i := 0; i < rows; i++ {
		z := logits[i*classes : (i+1)*classes]
		d := dlog[i*classes : (i+1)*classes]
		y := int(t.yb[i])
		mx, sum := softmaxExps(z, t.exps)
		total += math.Log(sum) - float64(z[y]-mx)
		for j, e := range t.exps[:len(d)] {
			p := e / sum
			if j == y {
				p--
			}
			d[j] = float32(p * inv)
		}
	}
	loss := float32(total * inv)
	t.grad[t.nParams] = loss
	t.backward(rows)
	return loss
}

// softmaxExps stores exp(z[j]-max z) into exps and returns max z and the sum.
func softmaxExps(z []float32, exps []float64) (mx float32, sum float64) {
	mx = z[0]
	for _, v := range z {
		if v > mx {
			mx = v
		}
	}
	exps = exps[:len(z)]
	j := 0
	for ; j+4 <= len(z); j += 4 {
		// Four independent exponentials at once: expNonPos is a chain of
		// 24 dependent operations, and one at a time waits on each.
		zz, ee := z[j:j+4:j+4], exps[j:j+4:j+4]
		ee[0], ee[1], ee[2], ee[3] = expNonPos4(float64(zz[0]-mx), float64(zz[1]-mx), float64(zz[2]-mx), float64(zz[3]-mx))
	}
	for ; j < len(z); j++ {
		exps[j] = expNonPos(float64(z[j] - mx))
	}
	for _, e := range exps {
		sum += e
	}
	return mx, sum
}

// forward computes acts[1..] for the first rows rows, listing each row's
// nonzero inputs of layer l into lists[l] on the way; with listed0 the
// input rows are already listed in lists[0] (acts[0] is not read),
// otherwise they are read from acts[0].
func forward(layers []layer, acts [][]float32, rows int, lists []rowLists, listed0 bool) {
	last := len(layers) - 1
	for l, ly := range layers {
		in, out := acts[l][:rows*ly.in], acts[l+1][:rows*ly.out]
		ls := &lists[l]
		for i := 0; i < rows; i++ {
			o := out[i*ly.out : (i+1)*ly.out]
			copy(o, ly.b)
			// Sparse inputs (MNIST background, dead ReLUs) are skipped:
			// their indices are listed first without a branch on the
			// data, then walked in order (the same sums as a walk that
			// tests each input).
			ri, rv := ls.slot(i)
			if l > 0 || !listed0 {
				ls.n[i] = int32(listNonzero(in[i*ly.in:(i+1)*ly.in], ri, rv))
			}
			k := ls.n[i]
			axpyRows(o, ly.w, ly.out, ri[:k], rv[:k])
			if l < last {
				relu(o)
			}
		}
	}
}

// reluPortable sets every x < 0 to +0, leaving ±0, NaN and the rest as
// they are (what "if x < 0 { x = 0 }" does), without a branch on the
// data: about half the pre-activations are negative, at random, and the
// branch mispredicted that often. relu (kernels_*.go) runs it or a vector
// kernel with the same bits.
func reluPortable(x []float32) {
	for j, v := range x {
		b := math.Float32bits(v)
		mag := b & 0x7fffffff
		isZero := (mag - 1) >> 31         // 1 for ±0 only (mag ≤ 0x7fffffff)
		isNaN := (0x7f800000 - mag) >> 31 // 1 for NaN only
		clamp := (b >> 31) &^ (isZero | isNaN)
		x[j] = math.Float32frombits(b &^ -clamp)
	}
}

// axpyPortable computes y += a*x without letting the compiler fuse the
// multiply-add (axpy, kernels_*.go, runs it or a vector kernel with the
// same bits).
// It is unrolled by four, which roughly halves loop overhead; the result does
// not depend on the unrolling since every element is independent.
func axpyPortable(y, x []float32, a float32) {
	x = x[:len(y)]
	j := 0
	for ; j+4 <= len(y); j += 4 {
		yy, xx := y[j:j+4:j+4], x[j:j+4:j+4]
		yy[0] += float32(a * xx[0])
		yy[1] += float32(a * xx[1])
		yy[2] += float32(a * xx[2])
		yy[3] += float32(a * xx[3])
	}
	for ; j < len(y); j++ {
		y[j] += float32(a * x[j])
	}
}

// axpyRowsPortable adds vals[t]·m[idx[t]·stride:][:len(y)] to y for t =
// 0, 1, … in order: axpyPortable once per listed row of m.
func axpyRowsPortable(y, m []float32, stride int, idx []int32, vals []float32) {
	vals = vals[:len(idx)]
	for t, j := range idx {
		off := int(j) * stride
		axpyPortable(y, m[off:off+len(y)], vals[t])
	}
}

// backward accumulates the parameter gradients from t.deltas[last], summing
// over the batch in row order so results do not depend on scheduling. It
// produces the gradient buffer from its end to its start (last layer
// first; in a layer the biases, then the weights of the last input down to
// the first) and reports each completed tail to t.reached, which launches
// the buckets it completes.
func (t *Trainer) backward(rows int) {
	clear(t.grad[:t.nParams])
	t.reached(t.nParams) // the loss
	for l := len(t.layers) - 1; l >= 0; l-- {
		ly := t.layers[l]
		a, dz := t.acts[l][:rows*ly.in], t.deltas[l+1][:rows*ly.out]
		for i := 0; i < rows; i++ {
			axpy(ly.gb, dz[i*ly.out:(i+1)*ly.out], 1)
		}
		wOff := t.offsets[l]
		t.reached(wOff + ly.in*ly.out)
		// Input k's weight row sums x[i][k]·d[i] over the rows i in order,
		// exactly as a row-by-row accumulation would; the nonzero inputs
		// listed per row (by loadBatch or forward) are grouped by input
		// first.
		nz := t.nz.gather(&t.lists[l], rows, ly.in)
		for k := ly.in - 1; k >= 0; k-- {
			lo, n := k*nz.rows, int(nz.count[k])
			axpyRows(ly.gw[k*ly.out:(k+1)*ly.out], dz, ly.out, nz.row[lo:lo+n], nz.val[lo:lo+n])
			t.reached(wOff + k*ly.out)
		}
		if l == 0 {
			break
		}
		// Propagate to the previous layer's pre-activations through ReLU.
		propagate(t.deltas[l][:rows*ly.in], a, dz, ly.w, t.wT[:ly.in*ly.out], t.outs[:ly.out], ly.in, ly.out)
	}
}

// propagate sets da (rows of in) to the deltas of a layer's inputs: row i,
// input k gets dot(dz[i], w[k]) (the outputs in order from a zero sum,
// multiply then add), or 0 where the input activation a was clamped to 0
// by ReLU (a NaN input counts as nonzero, as x == 0 would say). With w
// transposed into wT (out rows of in), axpyRows computes a row's deltas
// for every input at once, each input's terms added in the same order
// from the same zero, so the bits are dot's: one pass over wT per row,
// many inputs in registers, instead of one short scalar dot per input
// (the default model's last layer: 4096 dots of 10 per step). outs lists
// 0..out-1.
func propagate(da, a, dz, w, wT []float32, outs []int32, in, out int) {
	for k := 0; k < in; k++ {
		for j, v := range w[k*out : (k+1)*out] {
			wT[j*in+k] = v
		}
	}
	for i := 0; i < len(da)/in; i++ {
		ar, dr := a[i*in:(i+1)*in], da[i*in:(i+1)*in]
		clear(dr)
		axpyRows(dr, wT, in, outs, dz[i*out:(i+1)*out])
		zeroWhereZero(dr, ar)
	}
}

// zeroWhereZeroPortable sets d[k] = +0 where a[k] is ±0 (a NaN counts as
// nonzero), without a branch (ReLU zeroes about half the inputs, at
// random): d[k]'s bits are kept under a mask made from a[k]'s.
// zeroWhereZero (kernels_*.go) runs it or a vector kernel with the same
// bits.
func zeroWhereZeroPortable(d, a []float32) {
	a = a[:len(d)]
	for k, x := range a {
		nz := math.Float32bits(x) & 0x7fffffff
		keep := uint32(int32(nz|-nz) >> 31)
		d[k] = math.Float32frombits(math.Float32bits(d[k]) & keep)
	}
}

// columns holds a batch's nonzero inputs grouped by input: input k's are
// row[k*rows:k*rows+count[k]] (ascending rows) with values val[...].
type columns struct {
	rows  int
	count []int32
	row   []int32
	val   []float32
}

// rowLists holds the nonzero inputs of one layer for the rows of a batch:
// row i's are the first n[i] of its slot's indices and values. A slot is
// in+listSlack long, what listNonzero may write.
type rowLists struct {
	in  int
	n   []int32
	idx []int32
	val []float32
}

// newRowLists returns the lists for batches of rows on a model of sizes,
// one per layer.
func newRowLists(sizes []int, rows int) []rowLists {
	rows = max(rows, 1)
	ls := make([]rowLists, len(sizes)-1)
	for l := range ls {
		w := sizes[l] + listSlack
		ls[l] = rowLists{in: sizes[l], n: make([]int32, rows), idx: make([]int32, rows*w), val: make([]float32, rows*w)}
	}
	return ls
}

// slot returns row i's index and value buffers.
func (r *rowLists) slot(i int) ([]int32, []float32) {
	w := r.in + listSlack
	lo := i * w
	return r.idx[lo : lo+w : lo+w], r.val[lo : lo+w : lo+w]
}

// widestInput is the most inputs any layer of sizes has.
func widestInput(sizes []int) int { return slices.Max(sizes[:len(sizes)-1]) }

// reserve sizes the buffers for batches of rows on layers of at most in
// inputs.
func (c *columns) reserve(rows, in int) {
	if cap(c.count) < in {
		c.count = make([]int32, in)
	}
	if cap(c.row) < rows*in {
		c.row = make([]int32, rows*in)
		c.val = make([]float32, rows*in)
	}
}

// gather groups the listed nonzeros of rows rows (ls, as forward or
// loadBatch listed them; ls holds at least rows rows) by input, rows
// ascending within an input: each row's nonzeros go to their inputs' next
// slots.
func (c *columns) gather(ls *rowLists, rows, in int) *columns {
	c.reserve(rows, in) // no-op but for a batch larger than reserved
	c.rows = rows
	count := c.count[:in]
	clear(count)
	row, val := c.row[:rows*in], c.val[:rows*in]
	for i := 0; i < rows; i++ {
		ri, rv := ls.slot(i)
		n := ls.n[i]
		rv = rv[:n]
		for t, k := range ri[:n] {
			j := int(k)*rows + int(count[k])
			row[j], val[j] = int32(i), rv[t]
			count[k]++
		}
	}
	return c
}

// listSlack is how far past its result listNonzero may write: its
// buffers are len(x)+listSlack long.
const listSlack = 8

// listNonzeroPortable writes the indices and values of x's nonzero
// elements (nonzero) to idx and val in order and returns their count,
// without a branch on the data; idx and val hold at least len(x).
func listNonzeroPortable(x []float32, idx []int32, val []float32) int {
	idx, val = idx[:len(x)], val[:len(x)]
	k := 0
	for j, a := range x {
		idx[k], val[k] = int32(j), a
		k += int(nonzero(a))
	}
	return k
}

// nonzero is 1 for x != 0 (either zero's sign) and 0 for ±0, without a
// branch.
func nonzero(x float32) int32 {
	b := math.Float32bits(x) << 1 // drop the sign
	return int32((b | -b) >> 31)
}

// adam applies one Adam update with the (averaged) gradient in t.grad.
func (t *Trainer) adam() {
	t.adamT++
	bc1 := 1 - powInt(adamBeta1, t.adamT)
	bc2 := 1 - powInt(adamBeta2, t.adamT)
	// p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps), as in PyTorch.
	k := adamConsts{
		b1: adamBeta1, omb1: 1 - adamBeta1, b2: adamBeta2, omb2: 1 - adamBeta2,
		step: float32(t.lr / bc1), invSqrtBC2: float32(1 / math.Sqrt(bc2)), eps: adamEps,
	}
	adamUpdate(t.params, t.m[:len(t.params)], t.v[:len(t.params)], t.grad[:len(t.params)], &k)
}

// adamConsts are one Adam step's constants, in float32 as the update
// uses them (the layout adamAVX2 reads).
type adamConsts struct {
	b1, omb1, b2, omb2, step, invSqrtBC2, eps float32
}

// adamPortable applies one Adam step to p with first and second moments m
// and v and gradient g (all of p's length), every operation an IEEE
// single-precision one in a fixed order (adamUpdate, kernels_*.go, runs
// it or a vector kernel with the same bits).
func adamPortable(p, m, v, g []float32, k *adamConsts) {
	m, v, g = m[:len(p)], v[:len(p)], g[:len(p)]
	for i := range p {
		gi := g[i]
		mi := float32(k.b1*m[i]) + float32(k.omb1*gi)
		vi := float32(k.b2*v[i]) + float32(k.omb2*float32(gi*gi))
		m[i], v[i] = mi, vi
		// The square root of a float32 computed in float64 and rounded is
		// the correctly rounded float32 square root.
		denom := float32(float32(math.Sqrt(float64(vi)))*k.invSqrtBC2) + k.eps
		p[i] -= float32(k.step*mi) / denom
	}
}

// powInt returns b**n by repeated squaring (exactly reproducible, unlike a
// libm pow).
func powInt(b float64, n int64) float64 {
	r := 1.0
	for n > 0 {
		if n&1 == 1 {
			r *= b
		}
		b *= b
		n >>= 1
	}
	return r
}

// expNonPos returns e**x for x <= 0 (x > 0 is accepted but unused here),
// computed with plain IEEE operations so it is bit-identical on every
// platform. Relative error is below 1e-13, far below float32 resolution.
func expNonPos(x float64) float64 {
	switch {
	case x != x:
		return x
	case x < -700:
		return 0
	case x > 700:
		return math.Inf(1)
	}
	k, r := expReduce(x)
	p := expTaylor[0]
	for _, c := range expTaylor[1:] {
		p = float64(p*r) + c
	}
	return expScale(p, k)
}

// expTaylor holds the Taylor coefficients of e**r for |r| <= ln2/2,
// degree 12 down to 0 (Horner form).
var expTaylor = [...]float64{
	1.0 / 479001600, 1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040,
	1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1, 1,
}

// expReduce splits x into k·ln2 + r with integral k and |r| <= ln2/2 (ln2
// in two parts, so r keeps the bits k·ln2 would round away).
func expReduce(x float64) (k, r float64) {
	const (
		ln2Hi = 6.93147180369123816490e-01
		ln2Lo = 1.90821492927058770002e-10
		log2e = 1.44269504088896338700e+00
	)
	k = math.Floor(float64(x*log2e) + 0.5)
	r = float64(x - float64(k*ln2Hi))
	return k, float64(r - float64(k*ln2Lo))
}

// expScale returns p·2**k.
func expScale(p, k float64) float64 { return p * math.Float64frombits(uint64(int64(k)+1023)<<52) }

// expNonPos4 is expNonPos of four arguments, its Horner steps interleaved
// so that the four dependency chains overlap: each result has expNonPos's
// bits.
func expNonPos4(x0, x1, x2, x3 float64) (e0, e1, e2, e3 float64) {
	for _, x := range [...]float64{x0, x1, x2, x3} {
		if x != x || x < -700 || x > 700 {
			return expNonPos(x0), expNonPos(x1), expNonPos(x2), expNonPos(x3)
		}
	}
	k0, r0 := expReduce(x0)
	k1, r1 := expReduce(x1)
	k2, r2 := expReduce(x2)
	k3, r3 := expReduce(x3)
	p0, p1, p2, p3 := expTaylor[0], expTaylor[0], expTaylor[0], expTaylor[0]
	for _, c := range expTaylor[1:] {
		p0 = float64(p0*r0) + c
		p1 = float64(p1*r1) + c
		p2 = float64(p2*r2) + c
		p3 = float64(p3*r3) + c
	}
	return expScale(p0, k0), expScale(p1, k1), expScale(p2, k2), expScale(p3, k3)
}

// Evaluate returns the classification accuracy and mean cross-entropy loss
// of the current parameters over all of ds. It does not change the trainer.
// If ds does not fit the model both results are NaN; [Trainer.EvaluateErr]
// says why.
func (t *Trainer) Evaluate(ds *Dataset) (accuracy, loss float64) {
	acc, l, err := t.evaluate(ds)
	if err != nil {
		return math.NaN(), math.NaN()
	}
	return acc, l
}

// EvaluateErr is [Trainer.Evaluate] with an error for a dataset that does not
// fit the model, instead of NaN results.
func (t *Trainer) EvaluateErr(ds *Dataset) (accuracy, loss float64, err error) {
	return t.evaluate(ds)
}

func (t *Trainer) evaluate(ds *Dataset) (accuracy, loss float64, err error) {
	if err := ds.validate(); err != nil {
		return 0, 0, fmt.Errorf("engine: evaluate: %w", err)
	}
	if ds.Dim != t.sizes[0] || ds.Classes != t.sizes[len(t.sizes)-1] {
		return 0, 0, fmt.Errorf("engine: evaluate: dataset is %d features x %d classes, model is %d x %d",
			ds.Dim, ds.Classes, t.sizes[0], t.sizes[len(t.sizes)-1])
	}
	const chunk = 256
	acts := allocActs(t.sizes, chunk)
	lists := newRowLists(t.sizes, chunk)
	exps := make([]float64, ds.Classes)
	classes := ds.Classes
	var correct int
	var total float64
	for start := 0; start < ds.N; start += chunk {
		rows := min(chunk, ds.N-start)
		copy(acts[0], ds.X[start*ds.Dim:(start+rows)*ds.Dim])
		forward(t.layers, acts, rows, lists, false)
		logits := acts[len(acts)-1]
		for i := 0; i < rows; i++ {
			z := logits[i*classes : (i+1)*classes]
			y := int(ds.Y[start+i])
			mx, sum := softmaxExps(z, exps)
			total += math.Log(sum) - float64(z[y]-mx)
			best := 0
			for j, v := range z {
				if v > z[best] {
					best = j
				}
			}
			if best == y {
				correct++
			}
		}
	}
	return float64(correct) / float64(ds.N), total / float64(ds.N), nil
}
