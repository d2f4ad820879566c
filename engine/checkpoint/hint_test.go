package checkpoint

import (
	"context"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// s3URL is the s3:// URL of bucket ckpt at endpoint, each request tried
// once, with more parameters (name, value pairs).
func s3URL(endpoint string, more ...string) string {
	q := url.Values{"endpoint": {endpoint}, "region": {"us-east-1"}, MaxAttemptsParam: {"1"}}
	for i := 0; i+1 < len(more); i += 2 {
		q.Set(more[i], more[i+1])
	}
	return "s3://ckpt?" + q.Encode()
}

// fakeS3 is an S3 server holding the bucket ckpt (gofakes3).
func fakeS3(t *testing.T) http.Handler {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket("ckpt"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "cann-train")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "cann-train-secret")
	return gofakes3.New(backend).Server()
}

// resolvesNothing skips the test where this host's resolver does not say
// that host does not exist (no DNS server at all, one that times out).
func resolvesNothing(t *testing.T, host string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := net.DefaultResolver.LookupHost(ctx, host)
	var dns *net.DNSError
	if !errors.As(err, &dns) || !dns.IsNotFound {
		t.Skipf("this host's resolver does not say %s does not exist (%v)", host, err)
	}
}

// TestEndpointProblemsSayWhatToCheck: each way an s3:// URL's endpoint is
// commonly wrong, against a real local listener, fails every request — a
// write, a read, the worker's start check — with the SDK's text and then
// what to check, and says whether a setting is at fault (Misconfigured:
// a worker refuses to start on it) or the store may come back. Before,
// the AWS SDK's text alone reached the user ("tls: failed to verify
// certificate: x509: certificate signed by unknown authority", "dial tcp
// …: connection refused", "StatusCode: 400 … api error BadRequest").
// Where the hint names a setting, the same URL with that setting works.
func TestEndpointProblemsSayWhatToCheck(t *testing.T) {
	s3 := fakeS3(t)
	plain := httptest.NewServer(s3)
	defer plain.Close()
	tlsSrv := httptest.NewUnstartedServer(s3)
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // (the handshakes these clients fail)
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	plainPort := plain.URL[strings.LastIndex(plain.URL, ":")+1:]

	for _, tc := range []struct {
		name, url string
		dns       string // a host the case needs not to resolve
		want      string
		config    bool
		env       []string // name, value: with these, the URL works
		fixed     string   // or this URL works
	}{
		{name: "self-signed certificate", url: s3URL(tlsSrv.URL, "use_path_style", "true"),
			want:   "this process does not trust the endpoint's TLS certificate (a self-signed one, as MinIO makes, or a private CA's): give this worker the CA's certificate (PEM) in AWS_CA_BUNDLE",
			config: true, env: []string{"AWS_CA_BUNDLE", bundle}},
		{name: "nothing listens", url: s3URL("http://"+closed, "use_path_style", "true"),
			want: "nothing listens at " + closed + ": check the host and port of the checkpoint URL's endpoint parameter, and that the store (MinIO, …) runs"},
		{name: "https to a plain HTTP server", url: s3URL("https"+strings.TrimPrefix(plain.URL, "http"), "use_path_style", "true"),
			want:   "the endpoint serves plain HTTP, not HTTPS: write it http://… in the checkpoint URL's endpoint parameter, or add disable_https=true",
			config: true, fixed: s3URL("https"+strings.TrimPrefix(plain.URL, "http"), "use_path_style", "true", "disable_https", "true")},
		{name: "http to a TLS server", url: s3URL("http"+strings.TrimPrefix(tlsSrv.URL, "https"), "use_path_style", "true"),
			want:   "the endpoint answered 400 without an S3 request ID, as an HTTPS server answers plain HTTP: if it serves HTTPS, write it https://…",
			config: true},
		{name: "host that does not resolve", url: s3URL("http://no-such-host.invalid:9000", "use_path_style", "true"), dns: "no-such-host.invalid",
			want:   `host "no-such-host.invalid" does not resolve (yet?): check the host of the checkpoint URL's endpoint parameter, that the store runs, and this host's DNS`,
			config: false}, // (a store's container not started yet: may come)
		{name: "virtual-hosted bucket", url: s3URL("http://minio.invalid:" + plainPort), dns: "ckpt.minio.invalid",
			want:   `host "ckpt.minio.invalid" does not resolve: without use_path_style=true the client names the bucket as a subdomain of the endpoint's host`,
			config: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.dns != "" {
				resolvesNothing(t, tc.dns)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			s, err := OpenWithOptions(ctx, tc.url, Options{RequestTimeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, op := range []struct {
				name string
				do   func() error
			}{
				{"save", func() error { _, _, err := s.SaveIncremental(ctx, "r", 1, payload(1)); return err }},
				{"latest", func() error { _, err := s.Latest(ctx, "r"); return err }},
				{"load", func() error { _, err := s.Load(ctx, Ref{Run: "r", Step: 1}); return err }},
				{"start check", func() error { return s.Accessible(ctx) }},
			} {
				err := op.do()
				if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Count(err.Error(), "(") < 1 {
					t.Errorf("%s: %v; want it to say %q", op.name, err, tc.want)
				}
				if Misconfigured(err) != tc.config {
					t.Errorf("%s: Misconfigured = %v, want %v", op.name, !tc.config, tc.config)
				}
				if errors.Is(err, ErrStalled) || errors.Is(err, ErrNotFound) {
					t.Errorf("%s: %v; want neither stalled nor not found", op.name, err)
				}
			}
			if tc.env == nil && tc.fixed == "" {
				return
			}
			u := tc.url
			for i := 0; i+1 < len(tc.env); i += 2 {
				t.Setenv(tc.env[i], tc.env[i+1])
			}
			if tc.fixed != "" {
				u = tc.fixed
			}
			ok, err := Open(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			defer ok.Close()
			if err := ok.Accessible(ctx); err != nil {
				t.Errorf("as the hint says (%s %v): %v; want the bucket to answer", u, tc.env, err)
			}
		})
	}
}

// TestEndpointWithoutScheme: an endpoint parameter that is not an
// http(s):// URL is refused where the URL is opened or checked (a job's
// checkpoint_url, a worker's --checkpoint-url), its password hidden;
// before, every request failed with "failed to parse endpoint URL".
func TestEndpointWithoutScheme(t *testing.T) {
	for _, ep := range []string{"127.0.0.1:9000", "minio:9000", "ftp://minio:9000", "http://", "http://user:hunter2@:9000"} {
		u := s3URL(ep, "use_path_style", "true")
		_, err := Open(t.Context(), u)
		cerr := CheckURL(t.Context(), u)
		for _, err := range []error{err, cerr} {
			if err == nil || !strings.Contains(err.Error(), "want the store's URL with its scheme, http://host:port or https://host:port") {
				t.Errorf("endpoint %q: %v; want it refused", ep, err)
			} else if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("endpoint %q: %v shows the password", ep, err)
			}
		}
	}
	if err := CheckURL(t.Context(), s3URL("https://minio.example:9000", "use_path_style", "true")); err != nil {
		t.Errorf("an https endpoint: %v", err)
	}
}

// TestRedact: a bucket URL in a message keeps everything but a password.
func TestRedact(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"s3://ckpt?endpoint=http://minio:9000&region=us-east-1", "s3://ckpt?endpoint=http://minio:9000&region=us-east-1"},
		{"file:///data/ckpt", "file:///data/ckpt"},
		{"s3://ckpt?region=us-east-1&endpoint=http%3A%2F%2Fadmin%3Ahunter2%40minio%3A9000", "s3://ckpt?endpoint=http%3A%2F%2Fadmin%3Axxxxx%40minio%3A9000&region=us-east-1"},
		{"s3://key:hunter2@ckpt?region=us-east-1", "s3://key:xxxxx@ckpt?region=us-east-1"},
		{"::not a url", "::not a url"},
	} {
		if got := Redact(tc.raw); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

// TestRefusedCredentialsSayWhatToFix: a store that refuses the
// credentials with a reason of its own (MinIO's InvalidAccessKeyId for a
// key it does not know, SignatureDoesNotMatch for a wrong secret), which
// gocloud reports as an unknown error, says what to check on every
// request — a listing, a save, the worker's start check — and is a
// setting's fault.
func TestRefusedCredentialsSayWhatToFix(t *testing.T) {
	for _, code := range []string{"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied"} {
		t.Run(code, func(t *testing.T) {
			s := refusingS3(t, code)
			const want = "(the bucket refuses this process's credentials, or their rights: for s3://, check AWS_ACCESS_KEY_ID"
			for name, do := range map[string]func() error{
				"latest":      func() error { _, err := s.Latest(t.Context(), "r"); return err },
				"save":        func() error { _, _, err := s.SaveIncremental(t.Context(), "r", 1, payload(1)); return err },
				"start check": func() error { return s.Accessible(t.Context()) },
			} {
				// (A save's first request is a HEAD, whose answer has no body
				// to name the reason.)
				if err := do(); err == nil || strings.Count(err.Error(), want) != 1 || name != "save" && !strings.Contains(err.Error(), code) || !Misconfigured(err) {
					t.Errorf("%s: %v; want %s and %q once, a setting's fault", name, err, code, want)
				}
			}
		})
	}
}

// TestClockSkewIsNoSetting: a store refusing a request signed at a time
// too far from its own (RequestTimeTooSkewed: a host booted before its
// clock synced) says to sync the clock, and is no setting's fault — a
// worker starting then warns rather than refuse to start.
func TestClockSkewIsNoSetting(t *testing.T) {
	err := refusingS3(t, "RequestTimeTooSkewed").Accessible(t.Context())
	if err == nil || !strings.Contains(err.Error(), "this host's clock is off from the store's") || Misconfigured(err) {
		t.Errorf("%v; want the clock named, not a setting's fault", err)
	}
}

// refusingS3 is a store on an S3 endpoint that answers every request 403
// with the error code (its reason, as MinIO and AWS name it), closed with
// the test.
func refusingS3(t *testing.T, code string) *Store {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.Header().Set("X-Amz-Request-Id", "17E3A0C2B1D7F1A2")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>refused</Message></Error>`))
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	s, err := Open(t.Context(), s3URL(srv.URL, "use_path_style", "true"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
