package tcp

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/cann-train/cann-train/ascend"
)

// MaxFrame is the largest frame payload accepted on the wire.
const MaxFrame = 64 << 20

const (
	frameHdr   = 8
	smallFrame = 32 << 10 // frames up to this size go out in one write
)

// conn is an ascend.Conn over one TCP connection.
type conn struct {
	nc        *net.TCPConn
	opTimeout time.Duration
	rhdr      [frameHdr]byte
	wbuf      []byte      // header + small payloads, allocated once
	iov       [2][]byte   // header and payload of a large frame
	bufs      net.Buffers // writev view of iov, consumed by each write
	closeOnce sync.Once
}

var _ ascend.Conn = (*conn)(nil)

func newConn(nc *net.TCPConn, opTimeout time.Duration) *conn {
	return &conn{nc: nc, opTimeout: opTimeout, wbuf: make([]byte, frameHdr+smallFrame)}
}

func (c *conn) deadline(ctx context.Context) time.Time {
	var d time.Time
	if c.opTimeout > 0 {
		d = time.Now().Add(c.opTimeout)
	}
	if cd, ok := ctx.Deadline(); ok && (d.IsZero() || cd.Before(d)) {
		d = cd
	}
	return d
}

// Send implements ascend.Conn.
func (c *conn) Send(ctx context.Context, tag uint32, p []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(p) > MaxFrame {
		return fmt.Errorf("%w: frame of %d bytes exceeds %d", ascend.ErrProtocol, len(p), MaxFrame)
	}
	if err := c.nc.SetWriteDeadline(c.deadline(ctx)); err != nil {
		return err
	}
	h := c.wbuf[:frameHdr]
	binary.LittleEndian.PutUint32(h[0:], uint32(len(p)))
	binary.LittleEndian.PutUint32(h[4:], tag)
	if len(p) <= smallFrame {
		n := copy(c.wbuf[frameHdr:], p)
		_, err := c.nc.Write(c.wbuf[:frameHdr+n])
		return err
	}
	// One writev: with TCP_NODELAY a separate header write would leave as
	// its own segment and wake the reader twice.
	c.iov = [2][]byte{h, p}
	c.bufs = c.iov[:]
	_, err := c.bufs.WriteTo(c.nc)
	c.iov = [2][]byte{}
	return err
}

// Recv implements ascend.Conn.
func (c *conn) Recv(ctx context.Context, p []byte) (uint32, int, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if err := c.nc.SetReadDeadline(c.deadline(ctx)); err != nil {
		return 0, 0, err
	}
	return readFrame(c.nc, &c.rhdr, p)
}

// Close implements ascend.Conn.
func (c *conn) Close() error {
	err := error(nil)
	c.closeOnce.Do(func() { err = c.nc.Close() })
	return err
}

// readFrame reads one frame into p. io.EOF means the stream ended cleanly
// between frames.
func readFrame(r io.Reader, hdr *[frameHdr]byte, p []byte) (tag uint32, n int, err error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, 0, err
	}
	size := binary.LittleEndian.Uint32(hdr[0:])
	tag = binary.LittleEndian.Uint32(hdr[4:])
	if size > MaxFrame {
		return tag, 0, fmt.Errorf("%w: frame of %d bytes exceeds %d", ascend.ErrProtocol, size, MaxFrame)
	}
	if int(size) > len(p) {
		return tag, 0, fmt.Errorf("tcp: frame of %d bytes for a %d-byte buffer: %w", size, len(p), io.ErrShortBuffer)
	}
	if _, err := io.ReadFull(r, p[:size]); err != nil {
		return tag, 0, eofIsUnexpected(err)
	}
	return tag, int(size), nil
}
