package checkpoint

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gocloud.dev/gcerrors"

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

// TestCheckURLSuggests: CheckURL takes every parameter the s3 driver
// takes (s3Params, the list its hints come from, is the driver's: each
// opens without "unknown query parameter"), refuses a misspelt one
// naming what it may have meant, and leaves other schemes to their nodes.
func TestCheckURLSuggests(t *testing.T) {
	ctx := t.Context()
	values := map[string]string{"region": "us-east-1", "endpoint": "http://127.0.0.1:9", "use_path_style": "true",
		"s3ForcePathStyle": "true", "disable_https": "true", "dualstack": "true", "fips": "true", "accelerate": "false",
		"rate_limiter_capacity": "10", "anonymous": "true", "hostname_immutable": "true", "ssetype": "AES256",
		"kmskeyid": "k", "request_checksum_calculation": "when_required", "response_checksum_validation": "when_required",
		MaxAttemptsParam: "3", "awssdk": "v2", "profile": "default", "role": "arn:aws:iam::123456789012:role/x"}
	for _, p := range s3Params {
		v, ok := values[p]
		if !ok {
			t.Errorf("no test value for %s", p)
			continue
		}
		if err := CheckURL(ctx, "s3://ckpt?"+p+"="+url.QueryEscape(v)); err != nil && strings.Contains(err.Error(), "unknown query parameter") {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, tc := range []struct{ raw, want string }{
		{"s3://ckpt?endpoint=http://127.0.0.1:9000&use_path_stlye=true&region=us-east-1", `unknown query parameter "use_path_stlye" (did you mean use_path_style?)`},
		{"s3://ckpt?regoin=us-east-1", `unknown query parameter "regoin" (did you mean region?)`},
		{"s3://ckpt?zzz=1", `unknown query parameter "zzz"`},
		{"s3://ckpt?endpoint=http://127.0.0.1:9000&use_path_style=true&region=us-east-1", ""},
		{"gs://bucket?whatever=1", ""},
		{"file:///tmp/x?whatever=1", ""},
	} {
		err := CheckURL(ctx, tc.raw)
		if (err == nil) != (tc.want == "") || err != nil && !strings.HasSuffix(err.Error(), tc.want) {
			t.Errorf("CheckURL(%q) = %v, want %q", tc.raw, err, tc.want)
		}
	}
}

// TestStorageRefusalsSayWhatToFix: a save into a bucket that does not
// exist, or that refuses the credentials, fails saying so, once — the run
// holds for its storage on either, and its status shows this error —
// while the error keeps its code (the run's classification reads it) and
// is a setting's fault (Misconfigured).
func TestStorageRefusalsSayWhatToFix(t *testing.T) {
	ctx := t.Context()
	forbidden := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match</Message></Error>`))
	}))
	defer forbidden.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	missing := strings.Replace(s3Bucket(t), "s3://ckpt?", "s3://nobucket?", 1)
	for _, tc := range []struct {
		name, url, want string
		code            gcerrors.ErrorCode
	}{
		{"no such bucket", missing, "(the bucket does not exist: create it, or name one that does in the checkpoint URL)", gcerrors.NotFound},
		{"credentials refused", "s3://ckpt?endpoint=" + url.QueryEscape(forbidden.URL) + "&use_path_style=true&region=us-east-1&max_attempts=1",
			"(the bucket refuses this process's credentials, or their rights: for s3://, check AWS_ACCESS_KEY_ID", gcerrors.PermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(ctx, tc.url)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, _, err = s.SaveIncremental(ctx, "r", 100, payload(100))
			if err == nil || strings.Count(err.Error(), tc.want) != 1 || gcerrors.Code(err) != tc.code || !Misconfigured(err) {
				t.Errorf("save: %v (code %v); want %q once, code %v, a setting's fault", err, gcerrors.Code(err), tc.want, tc.code)
			}
		})
	}
}
