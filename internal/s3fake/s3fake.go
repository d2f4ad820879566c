// Package s3fake serves an S3 bucket on loopback for tests: gofakes3 (the
// S3 REST API, conditional puts included, over real HTTP), addressed as a
// user addresses MinIO — endpoint, path-style URLs, credentials from the
// environment — and a wrapper that makes it stop answering.
package s3fake

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Bucket is BucketOn with a backend of its own: the bucket's s3:// URL.
func Bucket(t testing.TB, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	return BucketOn(t, s3mem.New(), wrap)
}

// BucketOn serves backend (a test may list what landed there) with the
// handler wrapped by wrap (nil: as it is) until the test ends, creates the
// bucket "ckpt", sets the credentials the s3blob driver (and child
// processes) read from the environment, and returns the bucket's s3://
// URL.
func BucketOn(t testing.TB, backend *s3mem.Backend, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	if err := backend.CreateBucket("ckpt"); err != nil {
		t.Fatal(err)
	}
	h := gofakes3.New(backend).Server()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for _, kv := range Credentials() {
		// (A test binary that set them for good, as one whose tests run
		// side by side must — t.Setenv refuses beside t.Parallel —, is
		// left as it is.)
		if k, v, _ := strings.Cut(kv, "="); os.Getenv(k) != v {
			t.Setenv(k, v)
		}
	}
	q := url.Values{"endpoint": {srv.URL}, "use_path_style": {"true"}, "region": {"us-east-1"}}
	return "s3://ckpt?" + q.Encode()
}

// Credentials is the environment BucketOn sets for the s3blob driver
// (and child processes) to read: fake keys, and the region.
func Credentials() []string {
	return []string{"AWS_ACCESS_KEY_ID=cann-train", "AWS_SECRET_ACCESS_KEY=cann-train-secret", "AWS_REGION=us-east-1"}
}

// Hang makes a server stop answering: while On, the requests Match selects
// (nil: every one) are taken and held unanswered until their clients give
// up; Held counts them.
type Hang struct {
	On    atomic.Bool
	Held  atomic.Int64
	Match func(*http.Request) bool
}

// Wrap is Hang in front of next (Bucket's wrap).
func (h *Hang) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.On.Load() && (h.Match == nil || h.Match(r)) {
			h.Held.Add(1)
			// (The body read, the server sees the client close the
			// connection as it gives up: its context ends.)
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
			return
		}
		next.ServeHTTP(w, r)
	})
}
