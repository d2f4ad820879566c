package checkpoint

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"

	"github.com/cann-train/cann-train/engine"
)

// Benchmarks use a realistic engine.State encoding: an MLP on 784 inputs
// with hidden layers 2048-2048-1024 and 10 classes, 7.9 M parameters, so
// params + Adam m + v come to 95 MB. CHECKPOINT_BENCH_HIDDEN=4096,2048,1024
// (say) picks other widths. Run them briefly, e.g.
//
//	go test -run '^$' -bench . -benchtime 5x ./engine/checkpoint/

type benchStateT struct {
	payload []byte
	params  int // Number of parameters.
	offs    [3]int
	last    int // Parameters of the last layer.
}

var benchState = sync.OnceValue(func() benchStateT {
	hidden := []int{2048, 2048, 1024}
	if env := os.Getenv("CHECKPOINT_BENCH_HIDDEN"); env != "" {
		hidden = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				panic("CHECKPOINT_BENCH_HIDDEN: " + err.Error())
			}
			hidden = append(hidden, n)
		}
	}
	sizes := append(append([]int{784}, hidden...), 10)
	n := 0
	for i := 1; i < len(sizes); i++ {
		n += sizes[i-1]*sizes[i] + sizes[i]
	}
	last := sizes[len(sizes)-2]*10 + 10
	r := rand.New(rand.NewPCG(1, 2))
	st := &engine.State{
		Seed: 1, Hidden: hidden, LearningRate: 1e-3, BatchPerRank: 32, World: 1, Dim: 784, Classes: 10,
		Step: 1000, AdamT: 1000,
		Params: make([]float32, n), M: make([]float32, n), V: make([]float32, n),
	}
	for i := range n {
		st.Params[i] = float32(r.NormFloat64() * 0.02)
		m := r.NormFloat64() * 1e-3
		st.M[i] = float32(m)
		st.V[i] = float32(m*m + 1e-8)
	}
	payload, err := st.MarshalBinary()
	if err != nil {
		panic(err)
	}
	h := 64 + 4*len(hidden)
	return benchStateT{payload: payload, params: n, offs: [3]int{h, h + 4*n, h + 8*n}, last: last}
})

func benchStore(b *testing.B, backend string) *Store {
	b.Helper()
	var bucket *blob.Bucket
	if backend == "memblob" {
		bucket = memblob.OpenBucket(nil)
	} else {
		var err error
		if bucket, err = fileblob.OpenBucket(b.TempDir(), nil); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { bucket.Close() })
	s, err := NewWithOptions(bucket, Options{GCGrace: -1})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// perturbAll changes one byte in every chunk, as a dense optimizer step
// does, so that no chunk of the next save already exists.
func perturbAll(p []byte, cs int) {
	for off := 64; off < len(p); off += cs {
		p[off] ^= 1
	}
}

// drop removes run's checkpoints and collects their chunks, untimed.
func drop(b *testing.B, s *Store) {
	b.Helper()
	ctx := context.Background()
	refs, err := s.List(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range refs {
		if err := s.Delete(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.GC(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkMemcpy is the floor for BenchmarkSaveStall: copying the state
// into warm memory.
func BenchmarkMemcpy(b *testing.B) {
	src := benchState().payload
	dst := make([]byte, len(src))
	copy(dst, src)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		copy(dst, src)
	}
}

// BenchmarkStage is the copy SaveAsync does: stage splits large payloads
// over up to min(4, GOMAXPROCS) goroutines.
func BenchmarkStage(b *testing.B) {
	src := benchState().payload
	dst := make([]byte, len(src))
	copy(dst, src)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		stage(dst, src)
	}
}

// BenchmarkSaveStall times SaveAsync until it returns: what a training step
// pays for a checkpoint. The background part is reported as bg-ms/op.
func BenchmarkSaveStall(b *testing.B) {
	for _, backend := range []string{"memblob", "fileblob"} {
		b.Run(backend, func(b *testing.B) {
			ctx := context.Background()
			s := benchStore(b, backend)
			payload := slices.Clone(benchState().payload)
			// The first save allocates the staging buffer.
			p, err := s.SaveAsync(ctx, "bench", 0, payload)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := p.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			drop(b, s)
			var bg time.Duration
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				perturbAll(payload, s.opts.ChunkBytes)
				b.StartTimer()
				p, err := s.SaveAsync(ctx, "bench", int64(i+1), payload)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				bg += p.Stats().Duration
				drop(b, s)
				b.StartTimer()
			}
			b.ReportMetric(float64(bg.Milliseconds())/float64(b.N), "bg-ms/op")
			b.ReportMetric(float64(len(payload))/1e6, "MB")
			if s.pool.allocs.Load() != 1 {
				b.Fatalf("%d staging buffers allocated, want 1", s.pool.allocs.Load())
			}
		})
	}
}

// BenchmarkSaveSync times synchronous saves of the same state: Save (format
// 1, one object) and SaveIncremental (format 2) with every chunk new.
func BenchmarkSaveSync(b *testing.B) {
	for _, format := range []string{"v1", "v2"} {
		for _, backend := range []string{"memblob", "fileblob"} {
			b.Run(format+"/"+backend, func(b *testing.B) {
				ctx := context.Background()
				s := benchStore(b, backend)
				payload := slices.Clone(benchState().payload)
				b.SetBytes(int64(len(payload)))
				b.ResetTimer()
				for i := range b.N {
					b.StopTimer()
					perturbAll(payload, s.opts.ChunkBytes)
					b.StartTimer()
					var err error
					if format == "v1" {
						_, err = s.Save(ctx, "bench", int64(i+1), payload)
					} else {
						_, _, err = s.SaveIncremental(ctx, "bench", int64(i+1), payload)
					}
					b.StopTimer()
					if err != nil {
						b.Fatal(err)
					}
					drop(b, s)
					b.StartTimer()
				}
			})
		}
	}
}

// BenchmarkSaveIncremental saves, after a full checkpoint, states in which
// only the last layer (the classifier head, with its Adam m and v) and the
// header's step and trailing CRC changed: fine-tuning with frozen layers.
// It reports what each save wrote.
func BenchmarkSaveIncremental(b *testing.B) {
	for _, cs := range []int{1 << 20, 64 << 10} {
		b.Run(strconv.Itoa(cs>>10)+"KiB", func(b *testing.B) {
			ctx := context.Background()
			bs := benchState()
			s := benchStore(b, "memblob")
			s.opts.ChunkBytes = cs
			payload := slices.Clone(bs.payload)
			if _, _, err := s.SaveIncremental(ctx, "bench", 0, payload); err != nil {
				b.Fatal(err)
			}
			var written, chunks int64
			var total int
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				// Values not seen before, so nothing deduplicates by chance.
				payload[24] = byte(i + 1) // Step.
				for _, off := range bs.offs {
					end := off + 4*bs.params
					for j := end - 4*bs.last; j < end; j += 4 {
						payload[j] = byte(i + 1)
					}
				}
				payload[len(payload)-1] = byte(i + 1) // CRC.
				b.StartTimer()
				_, st, err := s.SaveIncremental(ctx, "bench", int64(i+1), payload)
				if err != nil {
					b.Fatal(err)
				}
				written += st.BytesWritten
				chunks += int64(st.ChunksWritten)
				total = st.Chunks
			}
			b.ReportMetric(float64(written)/1e6/float64(b.N), "written-MB/op")
			b.ReportMetric(float64(chunks)/float64(b.N), "chunks-written/op")
			b.ReportMetric(float64(total), "chunks")
		})
	}
}
