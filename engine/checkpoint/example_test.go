package checkpoint_test

import (
	"context"
	"fmt"
	"log"

	"github.com/cann-train/cann-train/engine"
	"github.com/cann-train/cann-train/engine/checkpoint"
)

// Example shows the intended pairing with package engine: snapshot a
// trainer, store it, and resume a fresh trainer from the newest valid
// checkpoint.
func Example() {
	ctx := context.Background()
	ds := &engine.Dataset{ // A tiny stand-in for MNIST.
		X: []float32{0, 1, 1, 0, 1, 1, 0, 0}, Y: []uint8{0, 1, 1, 0}, N: 4, Dim: 2, Classes: 2,
	}
	cfg := engine.Config{Seed: 1, Hidden: []int{4}, LearningRate: 1e-2, BatchPerRank: 2, World: 1}
	noop := func(context.Context, []float32) error { return nil }

	tr, err := engine.NewTrainer(cfg, ds)
	if err != nil {
		log.Fatal(err)
	}
	for range 10 {
		if _, err := tr.Step(ctx, noop); err != nil {
			log.Fatal(err)
		}
	}
	payload, err := tr.Snapshot().MarshalBinary()
	if err != nil {
		log.Fatal(err)
	}
	store, err := checkpoint.Open(ctx, "mem://")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Save(ctx, "demo", tr.GlobalStep(), payload); err != nil {
		log.Fatal(err)
	}

	data, ref, skipped, err := store.LoadLatestValid(ctx, "demo")
	if err != nil {
		log.Fatal(err)
	}
	var st engine.State
	if err := st.UnmarshalBinary(data); err != nil {
		log.Fatal(err)
	}
	resumed, err := engine.NewTrainer(cfg, ds)
	if err != nil {
		log.Fatal(err)
	}
	if err := resumed.Restore(&st); err != nil {
		log.Fatal(err)
	}
	fmt.Println(ref.Key, len(skipped), resumed.GlobalStep(), resumed.WeightsSHA256() == tr.WeightsSHA256())
	// Output: runs/demo/ckpt/000000000010/manifest.json 0 10 true
}

// ExampleStore_SaveAsync saves in the background and prunes old checkpoints.
// Only the chunks that changed since the previous checkpoint are uploaded.
func ExampleStore_SaveAsync() {
	ctx := context.Background()
	store, err := checkpoint.OpenWithOptions(ctx, "mem://", checkpoint.Options{GCGrace: -1})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	state := make([]byte, 3<<20) // Stands in for tr.Snapshot().MarshalBinary().
	for step := int64(1); step <= 3; step++ {
		state[0] = byte(step) // Only the first 1 MiB chunk changes.
		p, err := store.SaveAsync(ctx, "demo", step, state)
		if err != nil {
			log.Fatal(err)
		}
		// Training goes on here; state may be overwritten right away.
		ref, err := p.Wait(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("step", ref.Step, "chunks written:", p.Stats().ChunksWritten)
	}
	deleted, err := store.Retain(ctx, "demo", 1, 0)
	if err != nil {
		log.Fatal(err)
	}
	gc, err := store.GC(ctx, "demo")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("checkpoints deleted:", len(deleted), "chunks collected:", gc.Deleted)
	// Output:
	// step 1 chunks written: 2
	// step 2 chunks written: 1
	// step 3 chunks written: 1
	// checkpoints deleted: 2 chunks collected: 2
}
