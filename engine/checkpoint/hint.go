package checkpoint

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"gocloud.dev/gcerrors"

	"github.com/cann-train/cann-train/internal/redact"
)

// hintError is a storage error with what to check, in words a user acts
// on (the SDK's own text stays, hint follows it in parentheses). config
// marks a setting's fault, which no retry mends: refused credentials, a
// missing bucket, an endpoint named wrong.
type hintError struct {
	err    error
	hint   string
	config bool
}

func (e *hintError) Error() string { return e.err.Error() + " (" + e.hint + ")" }
func (e *hintError) Unwrap() error { return e.err }

// Misconfigured reports whether err is a refusal of the storage that a
// setting causes and no retry mends — credentials the bucket refuses, a
// bucket that does not exist, an endpoint whose host does not resolve,
// whose TLS certificate this process does not trust, or that speaks
// HTTP where the URL says HTTPS (or the reverse) — rather than a store
// that is down or does not answer (which may come back).
func Misconfigured(err error) bool {
	var h *hintError
	return errors.As(err, &h) && h.config || errors.Is(err, ErrNoBucket)
}

// hint adds to err, one request's failure, what it usually means and
// what to check (once: an error hinted already is left as it is). For a
// write, a bucket that is not found is a bucket that does not exist.
func (s *Store) hint(err error, write bool) error {
	var h *hintError
	if err == nil || errors.As(err, &h) {
		return err
	}
	var (
		dns      *net.DNSError
		op       *net.OpError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		record   tls.RecordHeaderError
	)
	code, status := gcerrors.Code(err), httpStatus(err)
	switch {
	case strings.Contains(err.Error(), "RequestTimeTooSkewed"):
		// (A 403 too, but no setting of ours: a host booting before its
		// clock is synced.)
		return &hintError{err, "this host's clock is off from the store's by more than it allows: sync it (NTP)", false}
	case code == gcerrors.PermissionDenied || status == http.StatusUnauthorized || status == http.StatusForbidden:
		// (gocloud's s3blob says Unknown for a refusal whose answer names
		// its reason: MinIO's InvalidAccessKeyId, SignatureDoesNotMatch.)
		return &hintError{err, "the bucket refuses this process's credentials, or their rights: for s3://, check AWS_ACCESS_KEY_ID and " +
			"AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, in the environment of this worker, and the bucket's policy", true}
	case write && code == gcerrors.NotFound:
		return &hintError{err, "the bucket does not exist: create it, or name one that does in the checkpoint URL", true}
	case errors.As(err, &hostname):
		return &hintError{err, "the endpoint's TLS certificate is for another host name: name the endpoint by a host its certificate holds", true}
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return &hintError{err, "the endpoint's TLS certificate has expired or is not valid yet (or this host's clock is off)", true}
	case errors.As(err, &verify) || errors.As(err, new(x509.UnknownAuthorityError)) || errors.As(err, &invalid):
		return &hintError{err, "this process does not trust the endpoint's TLS certificate (a self-signed one, as MinIO makes, or a private CA's): " +
			s.caHint() + "; or, if the endpoint serves plain HTTP, write it http://… in the checkpoint URL's endpoint parameter", true}
	case errors.Is(err, http.ErrSchemeMismatch) || errors.As(err, &record) && string(record.RecordHeader[:]) == "HTTP/":
		return &hintError{err, "the endpoint serves plain HTTP, not HTTPS: write it http://… in the checkpoint URL's endpoint parameter, or add disable_https=true", true}
	case s.plainToTLS(err):
		return &hintError{err, "the endpoint answered 400 without an S3 request ID, as an HTTPS server answers plain HTTP: " +
			"if it serves HTTPS, write it https://… in the checkpoint URL's endpoint parameter", true}
	case errors.As(err, &dns) && dns.IsNotFound:
		hint, config := s.dnsHint(dns.Name)
		return &hintError{err, hint, config}
	case errors.Is(err, syscall.ECONNREFUSED):
		addr := "its address"
		if errors.As(err, &op) && op.Addr != nil {
			addr = op.Addr.String()
		}
		return &hintError{err, fmt.Sprintf("nothing listens at %s: check the host and port of the checkpoint URL's endpoint parameter, "+
			"and that the store (MinIO, …) runs", addr), false}
	}
	return err
}

// caHint says where this process takes a private CA's certificate from.
func (s *Store) caHint() string {
	if s.scheme() == "s3" {
		return "give this worker the CA's certificate (PEM) in AWS_CA_BUNDLE"
	}
	return "give this worker the CA's certificate (PEM) in SSL_CERT_FILE"
}

// dnsHint says what to check about a host that does not resolve: an
// S3 client that addressed the bucket as a subdomain of the endpoint's
// host (virtual-hosted style) needs use_path_style=true for MinIO and
// most S3-compatible stores — a setting's fault (config). Any other host
// that does not resolve may yet: a store's container not started (Docker's
// DNS knows no stopped container's name), a name service coming up.
func (s *Store) dnsHint(host string) (hint string, config bool) {
	if s.scheme() != "s3" {
		return fmt.Sprintf("host %q does not resolve: check the checkpoint URL, and this host's DNS", host), false
	}
	q := s.where.Query()
	ep, _ := url.Parse(q.Get("endpoint"))
	switch {
	case ep == nil || ep.Host == "":
		return fmt.Sprintf("host %q does not resolve: check the checkpoint URL's region, and for a store other than AWS S3 give its endpoint parameter", host), false
	case strings.EqualFold(host, s.where.Host+"."+ep.Hostname()) && !pathStyle(q):
		return fmt.Sprintf("host %q does not resolve: without use_path_style=true the client names the bucket as a subdomain of the endpoint's host; "+
			"MinIO and most S3-compatible stores need use_path_style=true in the checkpoint URL", host), true
	}
	return fmt.Sprintf("host %q does not resolve (yet?): check the host of the checkpoint URL's endpoint parameter, that the store runs, and this host's DNS", host), false
}

// pathStyle reports whether an s3:// URL's parameters ask for path-style
// requests (either of the names gocloud takes).
func pathStyle(q url.Values) bool {
	for _, k := range []string{"use_path_style", "s3ForcePathStyle"} {
		if ok, _ := strconv.ParseBool(q.Get(k)); ok {
			return true
		}
	}
	return false
}

// plainToTLS reports an s3:// request to an http:// endpoint answered
// 400 with no S3 request ID: what a TLS server (Go's, MinIO's) answers a
// client that speaks plain HTTP to it ("Client sent an HTTP request to an
// HTTPS server"). An S3 store's own 400s carry a request ID.
func (s *Store) plainToTLS(err error) bool {
	if s.scheme() != "s3" {
		return false
	}
	ep, perr := url.Parse(s.where.Query().Get("endpoint"))
	if perr != nil || ep.Scheme != "http" {
		return false
	}
	var id interface{ ServiceRequestID() string }
	return httpStatus(err) == http.StatusBadRequest && (!errors.As(err, &id) || id.ServiceRequestID() == "")
}

// httpStatus is the HTTP status of the answer err reports (the AWS SDK's
// response errors), 0 without one.
func httpStatus(err error) int {
	var status interface{ HTTPStatusCode() int }
	if errors.As(err, &status) {
		return status.HTTPStatusCode()
	}
	return 0
}

// scheme is the scheme of the URL the store was opened at ("" for a
// store on a bucket opened elsewhere: New).
func (s *Store) scheme() string {
	if s.where == nil {
		return ""
	}
	return s.where.Scheme
}

// checkEndpoint refuses an s3:// URL's endpoint parameter that is not an
// http:// or https:// URL with a host: the driver takes it, and every
// request then fails ("failed to parse endpoint URL", or a request to
// a host named "minio:9000").
func checkEndpoint(q url.Values) error {
	if !q.Has("endpoint") {
		return nil
	}
	raw := q.Get("endpoint")
	ep, err := url.Parse(raw)
	if err != nil || ep.Scheme != "http" && ep.Scheme != "https" || ep.Hostname() == "" {
		return fmt.Errorf("endpoint %q: want the store's URL with its scheme, http://host:port or https://host:port", Redact(raw))
	}
	return nil
}

// Redact is a bucket URL as messages may show it: without the password
// of a user in it, or in a URL among its parameters (an endpoint's).
// What does not parse as a URL is shown as it is (redact.URL).
func Redact(raw string) string { return redact.URL(raw) }
