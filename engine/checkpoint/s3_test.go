package checkpoint

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cann-train/cann-train/internal/s3fake"
)

// s3Bucket is a bucket on a loopback S3 server (gofakes3 over real HTTP),
// by the s3:// URL a user would give for MinIO.
func s3Bucket(t *testing.T) string { return s3fake.Bucket(t, nil) }

// TestS3MaxAttempts: an s3:// store tries a request as many times as the
// URL's max_attempts says, else AWS_MAX_ATTEMPTS: a bucket that answers
// every request 503 sees that many of one read. (gocloud's own opener
// tried three times whatever either said.) A value that is not a number
// of tries is an error naming where it came from.
func TestS3MaxAttempts(t *testing.T) {
	for _, tc := range []struct {
		name, param, env string
		want             int64 // requests of one read; 0: Open fails
		err              string
	}{
		{name: "URL", param: "1", want: 1},
		{name: "environment", env: "2", want: 2},
		{name: "URL over environment", param: "1", env: "2", want: 1},
		{name: "zero in the URL", param: "0", err: `URL parameter max_attempts="0": want the number of times a request is tried, 1 or more`},
		{name: "words in the environment", env: "few", err: `AWS_MAX_ATTEMPTS="few": want the number of times`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var down atomic.Bool
			var answered atomic.Int64
			u := s3fake.Bucket(t, func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if !down.Load() {
						next.ServeHTTP(w, r)
						return
					}
					answered.Add(1)
					http.Error(w, "down", http.StatusServiceUnavailable)
				})
			})
			t.Setenv("AWS_MAX_ATTEMPTS", tc.env)
			if tc.param != "" {
				u += "&" + MaxAttemptsParam + "=" + tc.param
			}
			s, err := Open(t.Context(), u)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Open(%s): %v; want an error saying %q", u, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%s): %v", u, err)
			}
			defer s.Close()
			if err := s.WriteBlob(t.Context(), "side/x", []byte("x"), "text/plain"); err != nil {
				t.Fatal(err)
			}
			down.Store(true)
			if _, err := s.ReadBlob(t.Context(), "side/x", 10); err == nil {
				t.Fatal("read from a bucket answering 503: no error")
			}
			if n := answered.Load(); n != tc.want {
				t.Fatalf("one read was tried %d times; want %d", n, tc.want)
			}
		})
	}
}

// TestS3MaxAttemptsKeepsTheURLsOptions: a bucket opened with
// max_attempts still encrypts its writes as its URL's ssetype and
// kmskeyid say.
func TestS3MaxAttemptsKeepsTheURLsOptions(t *testing.T) {
	var sse, key atomic.Value
	u := s3fake.Bucket(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut {
				sse.Store(r.Header.Get("X-Amz-Server-Side-Encryption"))
				key.Store(r.Header.Get("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id"))
			}
			next.ServeHTTP(w, r)
		})
	})
	s, err := Open(t.Context(), u+"&ssetype=aws:KMS&kmskeyid=key-1&"+MaxAttemptsParam+"=1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.WriteBlob(t.Context(), "side/x", []byte("x"), "text/plain"); err != nil {
		t.Fatal(err)
	}
	if sse.Load() != "aws:kms" || key.Load() != "key-1" {
		t.Fatalf("the write's encryption %q, key %q; want aws:kms, key-1", sse.Load(), key.Load())
	}
}

// TestOpenS3 opens a store by its s3:// URL, as `cann-train node
// --checkpoint-url` does, and round-trips a checkpoint through it; a
// missing bucket is an error at the first write, naming the key.
func TestOpenS3(t *testing.T) {
	ctx := t.Context()
	u := s3Bucket(t)
	s, err := Open(ctx, u)
	if err != nil {
		t.Fatalf("Open(%s): %v", u, err)
	}
	defer s.Close()
	ref := mustSave(t, s, "run-s3", 7)
	inc, st, err := s.SaveIncremental(ctx, "run-s3", 8, payload(8))
	if err != nil {
		t.Fatalf("SaveIncremental: %v", err)
	}
	if st.ChunksWritten == 0 {
		t.Fatalf("incremental save wrote no chunks: %+v", st)
	}
	// The manifest commit is a conditional put (If-None-Match: *) on S3,
	// not the existence-check fallback: a second writer of the same key is
	// refused by the server.
	if s.noIfNotExist.Load() {
		t.Fatal("conditional writes fell back to existence checks on S3")
	}
	if err := s.writeObject(ctx, "probe/once", []byte("a"), "text/plain", true); err != nil {
		t.Fatal(err)
	}
	if err := s.writeObject(ctx, "probe/once", []byte("b"), "text/plain", true); !isPrecondition(err) {
		t.Fatalf("second conditional write of one key: %v, want a precondition failure", err)
	}
	latest, err := s.Latest(ctx, "run-s3")
	if err != nil {
		t.Fatal(err)
	}
	if latest.Step != 8 || latest.SHA256 != inc.SHA256 {
		t.Fatalf("latest %+v, want step 8 sha %s", latest, inc.SHA256)
	}
	for _, r := range []struct {
		ref  Ref
		want []byte
	}{{ref, payload(7)}, {inc, payload(8)}} {
		got, err := s.Load(ctx, r.ref)
		if err != nil {
			t.Fatalf("Load step %d: %v", r.ref.Step, err)
		}
		if string(got) != string(r.want) {
			t.Fatalf("step %d: loaded %d bytes that differ from the %d saved", r.ref.Step, len(got), len(r.want))
		}
	}

	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := parsed.RawQuery
	missing, err := Open(ctx, "s3://no-such-bucket?"+q)
	if err != nil {
		t.Fatal(err)
	}
	defer missing.Close()
	if _, err := missing.Save(ctx, "run-s3", 1, payload(1)); err == nil {
		t.Fatal("a save into a missing bucket succeeded")
	}
	if _, err := missing.Latest(ctx, "run-s3"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("Latest on a missing bucket: %v, want an error other than ErrNotFound", err)
	}
}

// TestStalledBucketFailsInTime: against an S3 endpoint that takes requests
// and never answers, a save, a load and a listing fail with ErrStalled,
// naming the object, within the request timeout — the SDK alone would wait
// for the TCP stack. Nothing is lost: once the endpoint answers again the
// same store saves and loads.
func TestStalledBucketFailsInTime(t *testing.T) {
	ctx := t.Context()
	hang := &s3fake.Hang{} // every request, as a hung MinIO or a load balancer in front of a dead one
	u := s3fake.Bucket(t, hang.Wrap)
	const timeout = 300 * time.Millisecond
	s, err := OpenWithOptions(ctx, u, Options{RequestTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const run = "run-hang"
	saved, _, err := s.SaveIncremental(ctx, run, 1, payload(1))
	if err != nil {
		t.Fatal(err)
	}

	hang.On.Store(true)
	for _, tc := range []struct {
		name string
		op   func(context.Context) error
	}{
		{"save", func(ctx context.Context) error { _, _, err := s.SaveIncremental(ctx, run, 2, payload(2)); return err }},
		{"load", func(ctx context.Context) error { _, err := s.Load(ctx, saved); return err }},
		{"latest", func(ctx context.Context) error { _, err := s.Latest(ctx, run); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Far above the request timeout: without it, the call would
			// end here, not with ErrStalled.
			octx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			start := time.Now()
			err := tc.op(octx)
			took := time.Since(start)
			if !errors.Is(err, ErrStalled) {
				t.Fatalf("%s against a silent endpoint: %v (after %s), want ErrStalled", tc.name, err, took)
			}
			if !strings.Contains(err.Error(), "runs/"+run+"/") || !strings.Contains(err.Error(), timeout.String()) {
				t.Errorf("error %q does not name the object and the time it waited", err)
			}
			if took > 10*time.Second {
				t.Errorf("%s took %s to give up; the request timeout is %s", tc.name, took, timeout)
			}
		})
	}
	if hang.Held.Load() == 0 {
		t.Fatal("no request reached the silent endpoint")
	}

	hang.On.Store(false)
	ref, _, err := s.SaveIncremental(ctx, run, 2, payload(2))
	if err != nil {
		t.Fatalf("save once the endpoint answers again: %v", err)
	}
	for _, r := range []Ref{saved, ref} {
		got, err := s.Load(ctx, r)
		if err != nil || string(got) != string(payload(r.Step)) {
			t.Fatalf("load step %d once the endpoint answers again: %v", r.Step, err)
		}
	}
}

// TestRequestTimeout: the time a request may take grows with the bytes it
// moves, at 1 MiB/s beyond its base; a negative option sets no limit.
func TestRequestTimeout(t *testing.T) {
	const dflt = DefaultRequestTimeout
	for _, tc := range []struct {
		opt  time.Duration
		n    int64
		want time.Duration // one request moving n bytes
		load time.Duration // a Load of an n-byte checkpoint (Options.LoadTimeout)
	}{
		{0, 0, dflt, 2 * dflt},
		{0, 1 << 20, dflt + time.Second, 2*dflt + time.Second},
		{0, 64 << 20, dflt + 64*time.Second, 2*dflt + 64*time.Second},
		{5 * time.Second, 512 << 10, 5*time.Second + 500*time.Millisecond, 10*time.Second + 500*time.Millisecond},
		{0, 100 << 30, dflt + 100*1024*time.Second, 2*dflt + 100*1024*time.Second}, // a 100 GiB object
		{-1, 1 << 30, 0, 1024 * time.Second},                                       // no limit: only the transfer
	} {
		o, err := Options{RequestTimeout: tc.opt}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		s := newStore(nil, o)
		if got := s.requestTimeout(tc.n); got != tc.want {
			t.Errorf("RequestTimeout %s, %d bytes: %s, want %s", tc.opt, tc.n, got, tc.want)
		}
		if got := (Options{RequestTimeout: tc.opt}).LoadTimeout(tc.n); got != tc.load {
			t.Errorf("RequestTimeout %s: LoadTimeout(%d) = %s, want %s", tc.opt, tc.n, got, tc.load)
		}
	}
}
