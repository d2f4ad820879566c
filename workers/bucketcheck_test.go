package workers

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/cann-train/cann-train/internal/s3fake"
)

// TestCheckDefaultBucket: a node worker looks at its default checkpoint
// bucket as it starts, within a bound. One a setting makes unusable —
// missing, refusing the worker's credentials, behind a certificate the
// worker does not trust — refuses the start, naming the node, the bucket
// and what to fix (before, the worker only warned, registered free, and
// a run that got it failed at its first checkpoint); one that is down,
// does not answer or cuts the worker's connections may come back and is
// only said, naming the bucket; file:// and mem:// answer at once.
func TestCheckDefaultBucket(t *testing.T) {
	backend := s3mem.New()
	good := s3fake.BucketOn(t, backend, nil)
	forbidden := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code><Message>The Access Key Id you provided does not exist in our records.</Message></Error>`))
	}))
	defer forbidden.Close()
	selfSigned := httptest.NewUnstartedServer(http.NotFoundHandler())
	selfSigned.Config.ErrorLog = log.New(io.Discard, "", 0)
	selfSigned.StartTLS()
	defer selfSigned.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	// (A route to the bucket that is cut, as the cut-off e2e tests give
	// a worker they start: every connection closed as it arrives.)
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}))
	defer cut.Close()
	hang := &s3fake.Hang{}
	hang.On.Store(true)
	silent := s3fake.Bucket(t, hang.Wrap)
	// Credentials that may list but not write (or not delete): S3's
	// AccessDenied for the requests refused.
	refuse := func(method string) func(http.Handler) http.Handler {
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != method {
					next.ServeHTTP(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied.</Message></Error>`))
			})
		}
	}
	readOnly := s3fake.Bucket(t, refuse(http.MethodPut))
	noDelete := s3fake.Bucket(t, refuse(http.MethodDelete))
	at := func(endpoint string) string {
		return "s3://ckpt?" + url.Values{"endpoint": {endpoint}, "use_path_style": {"true"}, "region": {"us-east-1"}, "max_attempts": {"1"}}.Encode()
	}

	const within = 2 * time.Second
	for _, tc := range []struct {
		name, url string
		refused   string // the start's error says so; "": it starts
		warns     string // the warning says so
		fast      bool
	}{
		{name: "s3", url: good},
		{name: "file", url: "file://" + t.TempDir(), fast: true},
		{name: "mem", url: "mem://", warns: "default checkpoint bucket mem:// is this process's memory", fast: true},
		{name: "missing bucket", url: strings.Replace(good, "s3://ckpt?", "s3://nobucket?", 1),
			refused: "bucket does not exist (create it, or name one that does in the checkpoint URL)"},
		{name: "credentials refused", url: at(forbidden.URL),
			refused: "the bucket refuses this process's credentials, or their rights: for s3://, check AWS_ACCESS_KEY_ID"},
		{name: "untrusted certificate", url: at(selfSigned.URL),
			refused: "this process does not trust the endpoint's TLS certificate (a self-signed one, as MinIO makes, or a private CA's): give this worker the CA's certificate (PEM) in AWS_CA_BUNDLE"},
		{name: "read-only credentials", url: readOnly + "&max_attempts=1",
			refused: "checkpoint: write runs/.write-probe-node-x-"},
		{name: "no right to delete", url: noDelete + "&max_attempts=1",
			refused: "(written; old checkpoints are deleted so too): blob"},
		{name: "nothing listens", url: at("http://" + closed), warns: "nothing listens at " + closed},
		{name: "no answer", url: silent, warns: "no answer within 2s"},
		{name: "cut off", url: at(cut.URL), warns: "default checkpoint bucket not accessible"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.WarnLevel)
			start := time.Now()
			err := checkDefaultBucket(t.Context(), NodeOptions{ID: "node-x", CheckpointURL: tc.url}, within, zap.New(core))
			took := time.Since(start)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) ||
					!strings.Contains(err.Error(), "node node-x: default checkpoint bucket "+tc.url+" (--checkpoint-url) is unusable") {
					t.Fatalf("start: %v; want it refused, saying %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatalf("start: %v; want it to start", err)
			}
			var said []string
			for _, e := range logs.All() {
				m := e.ContextMap()
				said = append(said, fmt.Sprint(e.Message, " ", m["url"], " ", m["error"]))
			}
			if tc.warns == "" && len(said) > 0 || tc.warns != "" && (len(said) != 1 || !strings.Contains(said[0], tc.warns) || !strings.Contains(said[0], tc.url)) {
				t.Errorf("warnings %q; want %q, naming %s", said, tc.warns, tc.url)
			}
			if took > within+time.Second || tc.fast && took > within/2 { // (fast: no wait for an answer; a loaded host is slow)
				t.Errorf("the check took %s", took)
			}
		})
	}

	// The write probe left nothing in the bucket.
	if objs, err := backend.ListBucket("ckpt", nil, gofakes3.ListBucketPage{}); err != nil || len(objs.Contents) != 0 {
		t.Errorf("the bucket holds %v after the checks (%v); want nothing", objs, err)
	}

	// The worker refuses to start before it asks Temporal anything.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	missing := strings.Replace(good, "s3://ckpt?", "s3://nobucket?", 1)
	if err := RunNode(ctx, nil, NodeOptions{ID: "node-x", CheckpointURL: missing}, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "is unusable") {
		t.Errorf("a worker whose default bucket does not exist: %v; want it refused", err)
	}
}
