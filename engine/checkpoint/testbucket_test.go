package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"
)

// hookBucket is a driver.Bucket over another bucket that counts committed
// writes per key and lets a test fail or stall writes and existence checks.
type hookBucket struct {
	inner *blob.Bucket

	mu     sync.Mutex
	writes map[string]int   // Committed writes per key.
	bytes  map[string]int64 // Bytes committed per key, summed over writes.
	// beforeCommit runs when a write is about to commit; an error fails it
	// (the object is not written).
	beforeCommit func(key string) error
	// afterAttributes runs after every Attributes (and so Exists) call,
	// before its result is returned.
	afterAttributes func(key string, err error)
	// failRead, if it returns an error, fails reads of key.
	failRead func(key string) error
	// noIfNotExist makes conditional writes fail as Unimplemented.
	noIfNotExist bool
	// beforeDelete runs before every Delete.
	beforeDelete func(key string)
	// aged makes keys look older (Attributes, listings) by their duration,
	// until they are written again.
	aged map[string]time.Duration
}

// newHookBucket wraps inner; the returned *blob.Bucket goes to the Store,
// inner stays available for tampering.
func newHookBucket(t testing.TB, inner *blob.Bucket) (*hookBucket, *blob.Bucket) {
	h := &hookBucket{inner: inner, writes: map[string]int{}, bytes: map[string]int64{}}
	b := blob.NewBucket(h)
	t.Cleanup(func() { b.Close() })
	return h, b
}

// counts returns how many chunk objects and manifests were written, and the
// chunk bytes, since the last reset.
func (h *hookBucket) counts() (chunks, manifests int, chunkBytes int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, n := range h.writes {
		switch {
		case strings.Contains(k, "/"+chunksDir):
			chunks += n
			chunkBytes += h.bytes[k]
		case strings.HasSuffix(k, "/"+manifestName):
			manifests += n
		}
	}
	return chunks, manifests, chunkBytes
}

func (h *hookBucket) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.writes)
	clear(h.bytes)
}

// age makes every key under prefix that exists now look older by d,
// until it is written again.
func (h *hookBucket) age(t testing.TB, prefix string, d time.Duration) {
	t.Helper()
	it := h.inner.List(&blob.ListOptions{Prefix: prefix})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.aged == nil {
		h.aged = map[string]time.Duration{}
	}
	for {
		o, err := it.Next(t.Context())
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		h.aged[o.Key] = d
	}
}

// modTime is key's modification time as the hooks show it.
func (h *hookBucket) modTime(key string, t time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return t.Add(-h.aged[key])
}

func (h *hookBucket) setBeforeCommit(f func(key string) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.beforeCommit = f
}

func (h *hookBucket) setFailRead(f func(key string) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failRead = f
}

func (h *hookBucket) setAfterAttributes(f func(key string, err error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.afterAttributes = f
}

func (h *hookBucket) ErrorCode(err error) gcerrors.ErrorCode {
	if errors.As(err, new(errUnimplemented)) {
		return gcerrors.Unimplemented
	}
	return gcerrors.Code(err)
}

func (h *hookBucket) As(any) bool             { return false }
func (h *hookBucket) ErrorAs(error, any) bool { return false }
func (h *hookBucket) Close() error            { return nil }

func (h *hookBucket) SignedURL(context.Context, string, *driver.SignedURLOptions) (string, error) {
	return "", errors.New("hookBucket: no signed URLs")
}

func (h *hookBucket) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	a, err := h.inner.Attributes(ctx, key)
	h.mu.Lock()
	f := h.afterAttributes
	h.mu.Unlock()
	if f != nil {
		f(key, err)
	}
	if err != nil {
		return nil, err
	}
	return &driver.Attributes{ContentType: a.ContentType, Metadata: a.Metadata, CreateTime: a.CreateTime,
		ModTime: h.modTime(key, a.ModTime), Size: a.Size, MD5: a.MD5, ETag: a.ETag}, nil
}

func (h *hookBucket) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	token := opts.PageToken
	if token == nil {
		token = blob.FirstPageToken
	}
	size := opts.PageSize
	if size <= 0 {
		size = 1000
	}
	objs, next, err := h.inner.ListPage(ctx, token, size, &blob.ListOptions{Prefix: opts.Prefix, Delimiter: opts.Delimiter})
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	page := &driver.ListPage{NextPageToken: next}
	for _, o := range objs {
		page.Objects = append(page.Objects, &driver.ListObject{Key: o.Key, ModTime: h.modTime(o.Key, o.ModTime), Size: o.Size, MD5: o.MD5, IsDir: o.IsDir})
	}
	return page, nil
}

func (h *hookBucket) NewRangeReader(ctx context.Context, key string, offset, length int64, _ *driver.ReaderOptions) (driver.Reader, error) {
	h.mu.Lock()
	f := h.failRead
	h.mu.Unlock()
	if f != nil {
		if err := f(key); err != nil {
			return nil, err
		}
	}
	r, err := h.inner.NewRangeReader(ctx, key, offset, length, nil)
	if err != nil {
		return nil, err
	}
	return &hookReader{r}, nil
}

type hookReader struct{ r *blob.Reader }

func (r *hookReader) Read(p []byte) (int, error) { return r.r.Read(p) }
func (r *hookReader) Close() error               { return r.r.Close() }
func (r *hookReader) As(any) bool                { return false }
func (r *hookReader) Attributes() *driver.ReaderAttributes {
	return &driver.ReaderAttributes{ContentType: r.r.ContentType(), ModTime: r.r.ModTime(), Size: r.r.Size()}
}

func (h *hookBucket) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	if opts.IfNotExist && h.noIfNotExist {
		return nil, errUnimplemented{}
	}
	return &hookWriter{h: h, ctx: ctx, key: key, contentType: contentType, ifNotExist: opts.IfNotExist}, nil
}

// errUnimplemented is what a driver without conditional writes returns;
// hookBucket.ErrorCode classifies it as gcerrors.Unimplemented.
type errUnimplemented struct{}

func (errUnimplemented) Error() string { return "hookBucket: IfNotExist unimplemented" }

type hookWriter struct {
	h           *hookBucket
	ctx         context.Context
	key         string
	contentType string
	ifNotExist  bool
	buf         bytes.Buffer
}

func (w *hookWriter) Write(p []byte) (int, error) { return w.buf.Write(p) }

func (w *hookWriter) Close() error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	w.h.mu.Lock()
	f := w.h.beforeCommit
	w.h.mu.Unlock()
	if f != nil {
		if err := f(w.key); err != nil {
			return err
		}
	}
	if err := w.h.inner.WriteAll(w.ctx, w.key, w.buf.Bytes(), &blob.WriterOptions{ContentType: w.contentType, IfNotExist: w.ifNotExist}); err != nil {
		return err
	}
	w.h.mu.Lock()
	w.h.writes[w.key]++
	w.h.bytes[w.key] += int64(w.buf.Len())
	delete(w.h.aged, w.key)
	w.h.mu.Unlock()
	return nil
}

func (h *hookBucket) Copy(ctx context.Context, dst, src string, _ *driver.CopyOptions) error {
	return h.inner.Copy(ctx, dst, src, nil)
}

func (h *hookBucket) Delete(ctx context.Context, key string, _ *driver.DeleteOptions) error {
	h.mu.Lock()
	f := h.beforeDelete
	h.mu.Unlock()
	if f != nil {
		f(key)
	}
	return h.inner.Delete(ctx, key)
}

// hooked runs f against a hookBucket over a memblob and over a temp-dir
// fileblob. s stores through the hooks; raw is the bucket underneath.
func hooked(t *testing.T, o Options, f func(t *testing.T, s *Store, h *hookBucket, raw *blob.Bucket)) {
	t.Helper()
	for _, backend := range []string{"memblob", "fileblob"} {
		t.Run(backend, func(t *testing.T) {
			var raw *blob.Bucket
			if backend == "memblob" {
				raw = memblob.OpenBucket(nil)
			} else {
				var err error
				if raw, err = fileblob.OpenBucket(t.TempDir(), nil); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { raw.Close() })
			h, b := newHookBucket(t, raw)
			s, err := NewWithOptions(b, o)
			if err != nil {
				t.Fatal(err)
			}
			f(t, s, h, raw)
		})
	}
}
