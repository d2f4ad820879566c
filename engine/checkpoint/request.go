package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gocloud.dev/blob"
)

// DefaultRequestTimeout is the time allowed for one request to the bucket
// when Options.RequestTimeout is 0, plus a second per MiB it moves.
const DefaultRequestTimeout = time.Minute

// slowestRate is the slowest transfer, in bytes per second, a request's
// timeout allows for beyond its base: 1 MiB/s.
const slowestRate = 1 << 20

// ErrStalled reports a request to the bucket (a stat, an upload or a
// download of one object, a page of a listing) that did not finish in its
// time: the store or the network to it hangs. Match it with errors.Is.
var ErrStalled = errors.New("the bucket did not answer in time")

// requestTimeout is how long a request moving n bytes may take; 0 means
// no limit.
func (s *Store) requestTimeout(n int64) time.Duration {
	if s.opts.RequestTimeout <= 0 {
		return 0
	}
	return s.opts.RequestTimeout + slowestTransfer(n)
}

// slowestTransfer is how long moving n bytes takes at slowestRate.
func slowestTransfer(n int64) time.Duration {
	// (Whole seconds first: n·1e9 overflows past 9 GB.)
	return time.Duration(n/slowestRate)*time.Second + time.Duration(n%slowestRate)*time.Second/slowestRate
}

// LoadTimeout is how long a Load of an n-byte checkpoint by a Store with
// these options takes at most before it has either finished or failed with
// ErrStalled, while the bucket moves data at least at the slowest rate a
// request's timeout allows (1 MiB/s): the manifest's request timeout, and
// the payload's (its base, and n bytes at that rate). Without a request
// timeout (a negative RequestTimeout) nothing fails a stalled load, and
// LoadTimeout is only the transfer at that rate.
//
// Whoever waits for another process to restore a checkpoint — its peers,
// to form a group — waits at least this long, so that a bucket that stops
// answering is reported by the reader, not blamed on it.
func (o Options) LoadTimeout(n int64) time.Duration {
	switch {
	case o.RequestTimeout < 0:
		return slowestTransfer(n)
	case o.RequestTimeout == 0:
		o.RequestTimeout = DefaultRequestTimeout
	}
	return 2*o.RequestTimeout + slowestTransfer(n)
}

// within runs f, one request to the bucket moving about n bytes, under the
// request timeout, and says what its failure usually means (hint). Cloud
// SDKs set no deadline of their own on a request whose connection is open
// and silent (a black-holed endpoint, a hung server): without one, a save
// would wait for the TCP stack to give up, many minutes, while the run
// stands still.
func (s *Store) within(ctx context.Context, n int64, f func(context.Context) error) error {
	d := s.requestTimeout(n)
	if d == 0 {
		return s.hint(f(ctx), false)
	}
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := f(rctx)
	if err != nil && ctx.Err() == nil && rctx.Err() != nil {
		unit := time.Millisecond
		if d >= 10*time.Second {
			unit = time.Second
		}
		return fmt.Errorf("%w: no answer within %s (%w)", ErrStalled, d.Round(unit), err)
	}
	return s.hint(err, false)
}

func (s *Store) exists(ctx context.Context, key string) (ok bool, err error) {
	err = s.within(ctx, 0, func(ctx context.Context) error {
		ok, err = s.bucket.Exists(ctx, key)
		return err
	})
	return ok, err
}

func (s *Store) attributes(ctx context.Context, key string) (a *blob.Attributes, err error) {
	err = s.within(ctx, 0, func(ctx context.Context) error {
		a, err = s.bucket.Attributes(ctx, key)
		return err
	})
	return a, err
}

func (s *Store) remove(ctx context.Context, key string) error {
	return s.within(ctx, 0, func(ctx context.Context) error { return s.bucket.Delete(ctx, key) })
}

// readAll reads the object at key, expected to be about n bytes long.
func (s *Store) readAll(ctx context.Context, key string, n int64) (b []byte, err error) {
	err = s.within(ctx, n, func(ctx context.Context) error {
		b, err = s.bucket.ReadAll(ctx, key)
		return err
	})
	return b, err
}

// next is it.Next under the request timeout (a call that fetches a page
// is a request).
func (s *Store) next(ctx context.Context, it *blob.ListIterator) (o *blob.ListObject, err error) {
	err = s.within(ctx, 0, func(ctx context.Context) error {
		o, err = it.Next(ctx)
		return err
	})
	return o, err
}
