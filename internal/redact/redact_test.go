package redact

import (
	"strings"
	"testing"
)

// TestURL: a password in a URL, or in a URL among its parameters, is
// masked; a URL without one, or one that does not parse, is as it was.
func TestURL(t *testing.T) {
	for raw, want := range map[string]string{
		"s3://ckpt?region=us-east-1":                    "s3://ckpt?region=us-east-1",
		"s3://ckpt?endpoint=http://u:secret@minio:9000": "s3://ckpt?endpoint=http%3A%2F%2Fu%3Axxxxx%40minio%3A9000",
		"azblob://u:secret@container":                   "azblob://u:xxxxx@container",
		"file:///data/ckpt":                             "file:///data/ckpt",
		"s3://ckpt?endpoint=http://user@minio:9000":     "s3://ckpt?endpoint=http://user@minio:9000",
		"%zz not a url":                                 "%zz not a url",
	} {
		if got := URL(raw); got != want || strings.Contains(got, "secret") {
			t.Errorf("URL(%q) = %q, want %q", raw, got, want)
		}
	}
}
