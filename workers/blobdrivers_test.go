package workers

import (
	"slices"
	"testing"

	"gocloud.dev/blob"

	_ "github.com/cann-train/cann-train/engine/checkpoint" // file://, mem://
	"github.com/cann-train/cann-train/spec"
)

// TestCheckpointSchemesMatchDrivers: a job file is checked against
// spec.CheckpointSchemes before it starts; the workers must open exactly
// those.
func TestCheckpointSchemesMatchDrivers(t *testing.T) {
	got := blob.DefaultURLMux().BucketSchemes()
	slices.Sort(got)
	if want := spec.CheckpointSchemes(); !slices.Equal(got, want) {
		t.Errorf("drivers registered for %v, spec accepts %v", got, want)
	}
}
