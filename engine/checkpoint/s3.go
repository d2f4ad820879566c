package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"

	"github.com/cann-train/cann-train/internal/suggest"
)

// MaxAttemptsParam is the s3:// URL parameter that bounds how many times
// the AWS SDK tries one request (its first try included); without it,
// AWS_MAX_ATTEMPTS does, and without that the SDK's default of three.
const MaxAttemptsParam = "max_attempts"

// openBucket opens u's bucket: s3:// through openS3, the other schemes
// through gocloud's default URL mux (file:// and mem:// are registered
// here, the cloud ones where their drivers are imported).
func openBucket(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	if u.Scheme != s3blob.Scheme {
		return blob.DefaultURLMux().OpenBucketURL(ctx, u)
	}
	return openS3(ctx, u)
}

// openS3 opens an s3:// bucket as gocloud's URL opener does, its requests
// tried at most max_attempts times (the URL's, else AWS_MAX_ATTEMPTS's);
// an endpoint parameter that is not an http(s):// URL is refused.
// gocloud's opener installs a retryer of its own, and the AWS SDK then
// drops the configured maximum: every request was tried three times
// whatever AWS_MAX_ATTEMPTS said — ~7 s of backoff before a node cut off
// from the bucket could say so.
func openS3(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	q := u.Query()
	if err := checkEndpoint(q); err != nil {
		return nil, err
	}
	attempts, err := maxAttempts(q)
	if err != nil {
		return nil, err
	}
	q.Del(MaxAttemptsParam)
	gu := *u
	gu.RawQuery = q.Encode()
	b, err := blob.DefaultURLMux().OpenBucketURL(ctx, &gu)
	if err != nil || attempts == 0 {
		return b, err
	}
	var c *s3.Client
	if !b.As(&c) {
		_ = b.Close()
		return nil, errors.New("s3 bucket without an S3 client")
	}
	if err := b.Close(); err != nil {
		return nil, err
	}
	// The bucket's options as gocloud read them from the URL (it took the
	// URL: its values are valid).
	o := s3blob.Options{
		KMSEncryptionID:            q.Get("kmskeyid"),
		RequestChecksumCalculation: c.Options().RequestChecksumCalculation,
	}
	if v := q.Get("ssetype"); v != "" {
		for _, t := range types.ServerSideEncryption("").Values() {
			if strings.EqualFold(string(t), v) {
				o.EncryptionType = t
			}
		}
	}
	c = s3.New(c.Options(), func(o *s3.Options) { o.RetryMaxAttempts = attempts })
	return s3blob.OpenBucket(ctx, c, u.Host, &o)
}

// maxAttempts is the s3:// URL's max_attempts, else AWS_MAX_ATTEMPTS, as
// a number of tries (1 or more); 0 where neither is set.
func maxAttempts(q url.Values) (int, error) {
	v, from := q.Get(MaxAttemptsParam), "URL parameter "+MaxAttemptsParam
	if !q.Has(MaxAttemptsParam) {
		v, from = os.Getenv("AWS_MAX_ATTEMPTS"), "AWS_MAX_ATTEMPTS"
		if v == "" {
			return 0, nil
		}
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want the number of times a request is tried, 1 or more", from, v)
	}
	return n, nil
}

// s3Params are the s3:// URL parameters gocloud's driver takes (its
// s3blob and aws packages, at the version go.mod names), and ours
// (max_attempts): only for the "did you mean" of an unknown one — the
// driver itself decides what it takes (TestCheckURLSuggests opens each).
var s3Params = []string{
	"region", "endpoint", "profile", "dualstack", "fips", "rate_limiter_capacity", "anonymous", "role",
	"hostname_immutable", "awssdk", "request_checksum_calculation", "response_checksum_validation",
	"ssetype", "kmskeyid", "accelerate", "use_path_style", "s3ForcePathStyle", "disable_https", MaxAttemptsParam,
}

// CheckURL refuses a bucket URL its driver would refuse, without
// contacting the storage: an s3:// URL's parameters are the driver's to
// take, and a misspelt one ("use_path_stlye") is named, with what it may
// have meant. Other schemes are left to their nodes: their drivers need
// credentials, or a path on the nodes' hosts, just to open.
func CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" {
		return nil // (spec.CheckBucketURL says what is wrong with its form)
	}
	b, err := openS3(ctx, u)
	if err != nil {
		msg := err.Error()
		if _, name, ok := strings.Cut(msg, `unknown query parameter "`); ok {
			name, _, _ = strings.Cut(name, `"`)
			msg = fmt.Sprintf("unknown query parameter %q", name)
			if hint := suggest.DidYouMean(suggest.Nearest(name, s3Params)); hint != "" {
				msg += " (" + hint + ")"
			}
		}
		return fmt.Errorf("%q: %s", Redact(raw), msg)
	}
	return b.Close()
}
