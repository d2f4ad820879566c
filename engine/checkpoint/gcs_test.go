package checkpoint

import (
	"net"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	_ "gocloud.dev/blob/gcsblob" // gs:// URLs, as the node workers register them
)

// gcsBucket starts a Cloud Storage server on loopback (fake-gcs-server:
// the JSON API over real HTTP, preconditions included), creates a bucket
// and returns the gs:// URL for it; the client finds the server through
// STORAGE_EMULATOR_HOST, as it finds any emulator.
func gcsBucket(t *testing.T) string {
	t.Helper()
	// The client reads objects through the XML API at the emulator's
	// address, which the server answers only as its public host: the
	// listener comes first, to name it, and stays ours (picking a free
	// port and binding it again raced other tests for the port).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{Scheme: "http", NoListener: true,
		PublicHost: addr, ExternalURL: "http://" + addr})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv.HTTPHandler())
	hs.Listener.Close()
	hs.Listener = l
	hs.Start()
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Stop)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "ckpt"})
	u, err := url.Parse(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("STORAGE_EMULATOR_HOST", u.Host)
	return "gs://ckpt"
}

// TestOpenGCS opens a store by its gs:// URL and round-trips a full and an
// incremental checkpoint; the commit is a server-side conditional write.
func TestOpenGCS(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, gcsBucket(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ref := mustSave(t, s, "run-gs", 7)
	inc, _, err := s.SaveIncremental(ctx, "run-gs", 8, payload(8))
	if err != nil {
		t.Fatalf("SaveIncremental: %v", err)
	}
	for _, r := range []struct {
		ref  Ref
		want []byte
	}{{ref, payload(7)}, {inc, payload(8)}} {
		got, err := s.Load(ctx, r.ref)
		if err != nil || string(got) != string(r.want) {
			t.Fatalf("Load step %d: %d bytes, %v", r.ref.Step, len(got), err)
		}
	}
	if err := s.writeObject(ctx, "probe/once", []byte("a"), "text/plain", true); err != nil {
		t.Fatal(err)
	}
	if err := s.writeObject(ctx, "probe/once", []byte("b"), "text/plain", true); !isPrecondition(err) || s.noIfNotExist.Load() {
		t.Fatalf("second conditional write of one key: %v (fallback %v), want the server's precondition failure", err, s.noIfNotExist.Load())
	}
}
