package activities

import (
	"context"
	"errors"
	"testing"

	"github.com/cann-train/cann-train/engine/checkpoint"
)

// fakeUpload is a background save that ends when end is closed, with err;
// waiting is closed once someone waits for it.
type fakeUpload struct {
	end, waiting chan struct{}
	err          error
}

func (u *fakeUpload) Done() <-chan struct{} { return u.end }

func (u *fakeUpload) Wait(ctx context.Context) (checkpoint.Ref, error) {
	close(u.waiting)
	select {
	case <-u.end:
		return checkpoint.Ref{Step: 400}, u.err
	case <-ctx.Done():
		return checkpoint.Ref{}, ctx.Err()
	}
}

func (u *fakeUpload) Stats() checkpoint.SaveStats { return checkpoint.SaveStats{} }

// TestSettle: a stopping worker waits for rank 0's upload still going and
// says how it went; one over before, or none, is nothing to wait for; a
// context that ends first ends the wait.
func TestSettle(t *testing.T) {
	refused := errors.New("bucket refused")
	for _, tc := range []struct {
		name     string
		pending  bool
		overSoon bool // the upload had ended before Settle
		err      error
		cancel   bool // ctx ends while it waits
		wantRun  string
		wantErr  error
	}{
		{name: "nothing uploading"},
		{name: "over before", pending: true, overSoon: true},
		{name: "finishes", pending: true, wantRun: "r"},
		{name: "fails", pending: true, err: refused, wantRun: "r", wantErr: refused},
		{name: "outlasts the grace", pending: true, cancel: true, wantRun: "r", wantErr: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Node{}
			u := &fakeUpload{end: make(chan struct{}), waiting: make(chan struct{}), err: tc.err}
			if tc.pending {
				n.pending = &pendingSave{run: "r", url: "mem://", step: 400, save: u}
			}
			if tc.overSoon {
				close(u.end)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				run  string
				step int64
				err  error
			}
			got := make(chan result, 1)
			go func() {
				run, step, err := n.Settle(ctx)
				got <- result{run, step, err}
			}()
			if tc.wantRun != "" {
				select {
				case r := <-got:
					t.Fatalf("Settle returned %+v without waiting for the upload", r)
				case <-u.waiting:
				}
				if tc.cancel {
					cancel()
				} else {
					close(u.end)
				}
			}
			r := <-got
			if r.run != tc.wantRun || !errors.Is(r.err, tc.wantErr) || (r.run != "" && r.step != 400) {
				t.Errorf("Settle = %q, %d, %v; want %q, 400, %v", r.run, r.step, r.err, tc.wantRun, tc.wantErr)
			}
		})
	}
}
