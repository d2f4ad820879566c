package checkpoint

import (
	"errors"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	_ "gocloud.dev/blob/s3blob" // s3:// URLs, as the node workers register them
)

// s3Bucket starts an S3 server on loopback (gofakes3: the S3 REST API,
// conditional puts included, over real HTTP), creates a bucket and returns
// the s3:// URL a user would give for MinIO: endpoint, path-style
// addressing, credentials from the environment.
func s3Bucket(t *testing.T) string {
	t.Helper()
	backend := s3mem.New()
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	if err := backend.CreateBucket("ckpt"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "cann-train")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "cann-train-secret")
	t.Setenv("AWS_REGION", "us-east-1")
	q := url.Values{"endpoint": {srv.URL}, "use_path_style": {"true"}, "region": {"us-east-1"}}
	return "s3://ckpt?" + q.Encode()
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
