package ascend

import (
	"context"
	"time"
)

// OpDeadline is when one operation under ctx must end: now plus timeout
// (0: no limit of its own) or ctx's deadline, whichever comes first; zero
// means none. Transports and the direct algorithms bound their waits by it.
func OpDeadline(ctx context.Context, timeout time.Duration) time.Time {
	var d time.Time
	if timeout > 0 {
		d = time.Now().Add(timeout)
	}
	if cd, ok := ctx.Deadline(); ok && (d.IsZero() || cd.Before(d)) {
		d = cd
	}
	return d
}

// Conn is a reliable, ordered, framed, bidirectional link to one peer, as a
// transport provides it to a [Communicator].
//
// One Send and one Recv may be in progress at the same time (the
// Communicator sends from a writer goroutine while it receives), but never
// two Sends or two Recvs.
type Conn interface {
	// Send writes p as one frame labelled tag. It returns once the frame
	// has been handed to the transport; p may be reused afterwards. It must
	// fail rather than block past ctx's deadline or the transport's own
	// per-operation timeout.
	Send(ctx context.Context, tag uint32, p []byte) error
	// Recv reads the next frame into p and returns its tag and length. A
	// frame longer than len(p) is an error wrapping io.ErrShortBuffer, after
	// which the Conn is unusable. Like Send it must honour ctx's deadline
	// and the transport's timeout. A Conn need not watch ctx.Done() while
	// blocked: the Communicator interrupts blocked calls by closing the Conn.
	Recv(ctx context.Context, p []byte) (tag uint32, n int, err error)
	// Close closes the link and makes blocked Send and Recv calls return.
	// It is safe to call concurrently with them and more than once; calls
	// after the first return nil.
	Close() error
}

// TrySendResult is what a TrySender did with a frame.
type TrySendResult uint8

const (
	// TrySent: the whole frame was handed to the transport, which no
	// longer reads p.
	TrySent TrySendResult = iota
	// TryRefused: nothing was sent; send the frame with Send.
	TryRefused
	// TryPartial: part of the frame was sent and the Conn holds the
	// rest; FinishSend sends it (so does the next Send, first).
	TryPartial
)

// A TrySender is a Conn that can take a small frame without blocking.
// Collectives send small frames through it from the calling goroutine,
// which saves a hand-off to the peer's writer goroutine (a few
// microseconds, as much as the transfer itself). Like Send, TrySend and
// FinishSend are never called concurrently with another Send.
type TrySender interface {
	// TrySend sends p as one frame as far as it can without waiting. An
	// error is final: the frame must not be sent again.
	TrySend(ctx context.Context, tag uint32, p []byte) (TrySendResult, error)
	// FinishSend sends what TrySend left (nothing if nothing is left),
	// waiting like Send.
	FinishSend(ctx context.Context) error
}

// An InlineSender is a TrySender that says how much of one message the
// Communicator should offer it from the calling goroutine, frame by frame,
// before it hands the rest to the peer's writer goroutine. Without it the
// Communicator offers one frame of at most DefaultChunkBytes. A transport
// that takes large messages without waiting (a shared-memory ring with
// room) wants more when ranks outnumber cores: there the writer goroutine
// needs a second thread the host has no core for.
type InlineSender interface {
	TrySender
	// InlineBytes is the budget in bytes; it may change between calls.
	InlineBytes() int
}

// A FramesSender is a TrySender that sends a message as several frames in
// fewer system calls than one Send or TrySend per frame: a TCP stream
// moves faster when the kernel gets large writes (see maxBatch and
// BenchmarkSendFrames in ascend/tcp). Like Send its methods are never
// called concurrently with another Send.
type FramesSender interface {
	TrySender
	// SendFrames sends p as frames of frame bytes each (the last one
	// shorter), all labelled tag: what successive Sends of those pieces
	// would put on the link. It returns once the last frame has been handed
	// to the transport; frame is positive.
	SendFrames(ctx context.Context, tag uint32, p []byte, frame int) error
	// TrySendFrames is SendFrames as far as the transport takes the frames
	// without waiting. n is how many bytes of p went out in frames begun:
	// with TrySent they are all sent (n < len(p) when the transport filled
	// up at a frame boundary) and the caller sends p[n:] later; with
	// TryPartial the Conn holds the tail of the last frame begun, which
	// FinishSend (or the next Send) sends first, and p must stay intact
	// until then; TryRefused sends nothing. An error is final.
	TrySendFrames(ctx context.Context, tag uint32, p []byte, frame int) (n int, res TrySendResult, err error)
}

// A FrameSink consumes a frame's payload where the transport holds it
// (see InPlaceReceiver).
type FrameSink interface {
	// Accept is called with the frame's tag and payload length before any
	// payload; an error ends the receive with that error, the payload
	// unread (the Conn is then unusable).
	Accept(tag uint32, n int) error
	// Consume gets consecutive pieces of the payload: views of the
	// transport's memory, valid only during the call.
	Consume(p []byte)
}

// An InPlaceReceiver is a Conn whose frames can be consumed without a copy
// into a receive buffer: reductions fold straight out of a shared-memory
// ring, saving one pass over the data.
type InPlaceReceiver interface {
	RecvInPlace(ctx context.Context, sink FrameSink) error
}
