package codec

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
)

// Reducer is what PowerSGD needs of a communicator (*ascend.Communicator
// has it through a one-line adapter: its AllReduce takes an ascend.Op).
type Reducer interface {
	Size() int
	// AllReduceSum sums buf across ranks in place.
	AllReduceSum(ctx context.Context, buf []float32) error
}

// Matrix is one gradient tensor viewed as Rows×Cols, row-major. Vectors
// (Rows or Cols 1) are reduced uncompressed.
type Matrix struct {
	Rows, Cols int
	Data       []float32
}

// PowerSGD is rank-r PowerSGD (Vogels et al. 2019) with error feedback and
// warm start, in the form of PyTorch's powerSGD_hook: for each matrix
// M = G + E, P = M·Q, allreduce P, orthonormalise P, Q = Mᵀ·P, allreduce Q,
// and the result P·Qᵀ/n replaces G; E = M − result. It is linear, so it
// rides on plain allreduces of (Rows+Cols)·r values per matrix instead of
// Rows·Cols.
type PowerSGD struct {
	Rank int // r ≥ 1
	Seed uint64

	shapes   []Matrix // shapes of the first call: later calls must match
	q        [][]float32
	residual [][]float32
	pbuf     []float32 // all P's, then all Q's (one allreduce each)
	qbuf     []float32
	dense    []float32 // vectors, reduced as they are
}

// NewPowerSGD returns a rank-r reducer.
func NewPowerSGD(rank int, seed uint64) (*PowerSGD, error) {
	if rank < 1 || rank > 1024 {
		return nil, fmt.Errorf("%w: PowerSGD rank %d, want 1..1024", ErrInvalid, rank)
	}
	return &PowerSGD{Rank: rank, Seed: seed}, nil
}

func (p *PowerSGD) compressible(m Matrix) bool {
	return m.Rows > 1 && m.Cols > 1 && (m.Rows+m.Cols)*p.Rank < m.Rows*m.Cols
}

func (p *PowerSGD) init(mats []Matrix) error {
	p.shapes = make([]Matrix, len(mats))
	p.q = make([][]float32, len(mats))
	p.residual = make([][]float32, len(mats))
	rng := rand.New(rand.NewPCG(p.Seed, 0x5067)) // same Q on every rank
	for i, m := range mats {
		if m.Rows < 1 || m.Cols < 1 || len(m.Data) != m.Rows*m.Cols {
			return fmt.Errorf("%w: matrix %d is %d×%d with %d values", ErrInvalid, i, m.Rows, m.Cols, len(m.Data))
		}
		p.shapes[i] = Matrix{Rows: m.Rows, Cols: m.Cols}
		p.residual[i] = make([]float32, len(m.Data))
		if p.compressible(m) {
			q := make([]float32, m.Cols*p.Rank)
			for j := range q {
				q[j] = float32(rng.NormFloat64())
			}
			p.q[i] = q
		}
	}
	return nil
}

// Traffic returns the values one allreduce of mats moves with PowerSGD and
// without.
func (p *PowerSGD) Traffic(mats []Matrix) (compressed, dense int) {
	for _, m := range mats {
		dense += m.Rows * m.Cols
		if p.compressible(m) {
			compressed += (m.Rows + m.Cols) * p.Rank
		} else {
			compressed += m.Rows * m.Cols
		}
	}
	return compressed, dense
}

// AllReduce replaces every matrix's Data by the rank-r approximation of
// the mean over ranks of (gradient + residual), and keeps the residual.
func (p *PowerSGD) AllReduce(ctx context.Context, comm Reducer, mats []Matrix) error {
	if p.shapes == nil {
		if err := p.init(mats); err != nil {
			return err
		}
	}
	if len(mats) != len(p.shapes) {
		return fmt.Errorf("%w: %d matrices, PowerSGD state for %d", ErrInvalid, len(mats), len(p.shapes))
	}
	r := p.Rank
	np, nq, nd := 0, 0, 0
	for i, m := range mats {
		if m.Rows != p.shapes[i].Rows || m.Cols != p.shapes[i].Cols || len(m.Data) != m.Rows*m.Cols {
			return fmt.Errorf("%w: matrix %d is %d×%d, was %d×%d", ErrInvalid, i, m.Rows, m.Cols, p.shapes[i].Rows, p.shapes[i].Cols)
		}
		if p.q[i] != nil {
			np += m.Rows * r
			nq += m.Cols * r
		} else {
			nd += len(m.Data)
		}
	}
	p.pbuf = grow(p.pbuf, np)
	p.qbuf = grow(p.qbuf, nq)
	p.dense = grow(p.dense, nd)
	// M = G + E (kept in the residual buffers until the end), P = M·Q.
	po, do := 0, 0
	for i, m := range mats {
		e := p.residual[i]
		for j, g := range m.Data {
			e[j] += g
		}
		if p.q[i] == nil {
			copy(p.dense[do:], e)
			do += len(e)
			continue
		}
		matMul(p.pbuf[po:po+m.Rows*r], e, p.q[i], m.Rows, m.Cols, r)
		po += m.Rows * r
	}
	if err := comm.AllReduceSum(ctx, p.pbuf); err != nil {
		return fmt.Errorf("powersgd: allreduce of P: %w", err)
	}
	if nd > 0 {
		if err := comm.AllReduceSum(ctx, p.dense); err != nil {
			return fmt.Errorf("powersgd: allreduce of vectors: %w", err)
		}
	}
	// Orthonormalise each P, Q = Mᵀ·P.
	po, qo := 0, 0
	for i, m := range mats {
		if p.q[i] == nil {
			continue
		}
		pm := p.pbuf[po : po+m.Rows*r]
		orthonormalize(pm, m.Rows, r)
		matTMul(p.qbuf[qo:qo+m.Cols*r], p.residual[i], pm, m.Rows, m.Cols, r)
		po += m.Rows * r
		qo += m.Cols * r
	}
	if err := comm.AllReduceSum(ctx, p.qbuf); err != nil {
		return fmt.Errorf("powersgd: allreduce of Q: %w", err)
	}
	inv := 1 / float32(comm.Size())
	po, qo, do = 0, 0, 0
	for i, m := range mats {
		e := p.residual[i]
		if p.q[i] == nil {
			for j := range m.Data {
				m.Data[j] = p.dense[do+j] * inv
			}
			do += len(m.Data)
			clear(e)
			continue
		}
		pm, qm := p.pbuf[po:po+m.Rows*r], p.qbuf[qo:qo+m.Cols*r]
		for j := range qm {
			qm[j] *= inv
		}
		// result = P·Qᵀ (the mean approximation); E = M − result.
		for a := range m.Rows {
			for b := range m.Cols {
				var s float32
				for k := range r {
					s += pm[a*r+k] * qm[b*r+k]
				}
				m.Data[a*m.Cols+b] = s
				e[a*m.Cols+b] -= s
			}
		}
		copy(p.q[i], qm) // warm start
		po += m.Rows * r
		qo += m.Cols * r
	}
	return nil
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// matMul: out (rows×r) = a (rows×cols) · q (cols×r).
func matMul(out, a, q []float32, rows, cols, r int) {
	clear(out)
	for i := range rows {
		row := a[i*cols : (i+1)*cols]
		o := out[i*r : (i+1)*r]
		for j, v := range row {
			if v == 0 {
				continue
			}
			qj := q[j*r : (j+1)*r]
			for k := range r {
				o[k] += v * qj[k]
			}
		}
	}
}

// matTMul: out (cols×r) = aᵀ (cols×rows) · p (rows×r).
func matTMul(out, a, p []float32, rows, cols, r int) {
	clear(out)
	for i := range rows {
		row := a[i*cols : (i+1)*cols]
		pi := p[i*r : (i+1)*r]
		for j, v := range row {
			if v == 0 {
				continue
			}
			o := out[j*r : (j+1)*r]
			for k := range r {
				o[k] += v * pi[k]
			}
		}
	}
}

// orthonormalize makes the r columns of p (rows×r, row-major) orthonormal
// (modified Gram–Schmidt). A column that is (numerically) in the span of
// the previous ones becomes zero: normalising its rounding noise would
// make a vector that is not orthogonal to them at all.
func orthonormalize(p []float32, rows, r int) {
	for k := range r {
		var before float64
		for i := range rows {
			before += float64(p[i*r+k]) * float64(p[i*r+k])
		}
		for j := range k {
			var dot float64
			for i := range rows {
				dot += float64(p[i*r+k]) * float64(p[i*r+j])
			}
			for i := range rows {
				p[i*r+k] -= float32(dot) * p[i*r+j]
			}
		}
		var norm float64
		for i := range rows {
			norm += float64(p[i*r+k]) * float64(p[i*r+k])
		}
		if norm <= 1e-8*before || norm == 0 {
			for i := range rows {
				p[i*r+k] = 0
			}
			continue
		}
		norm = math.Sqrt(norm)
		for i := range rows {
			p[i*r+k] = float32(float64(p[i*r+k]) / norm)
		}
	}
}

// Residuals returns the error-feedback buffers, one per matrix (nil before
// the first AllReduce).
func (p *PowerSGD) Residuals() [][]float32 { return p.residual }
