package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"testing/iotest"
	"time"

	"github.com/cann-train/cann-train/ascend"
)

// frameBufSizes are the read-buffer sizes the frame tests run with: the
// smallest possible (a header) up to the connection's.
var frameBufSizes = []int{minFrameBuf, minFrameBuf + 1, minFrameBuf + 5, 64, frameHdr + smallFrame}

func newFrameReader(r io.Reader, bufSize int) *frameReader {
	return &frameReader{r: r, buf: make([]byte, max(bufSize, minFrameBuf))}
}

// frame is the wire form of a frame: header, payload, zero padding.
func frame(tag uint32, p []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(p)))
	b = binary.LittleEndian.AppendUint32(b, tag)
	b = append(b, make([]byte, frameHdr-8)...)
	b = append(b, p...)
	return append(b, make([]byte, padLen(len(p)))...)
}

// TestFrameLayout pins the wire format: a 16-byte header (length, tag,
// zeros) and zero padding to a multiple of 16, so every payload starts
// 16-byte aligned in the stream, whatever the sizes before it.
func TestFrameLayout(t *testing.T) {
	a, b := tcpPair(t)
	c := newConn(a, 5*time.Second)
	defer c.Close()
	sizes := []int{5, 0, 16, 17, 40000, 3}
	go func() {
		for i, n := range sizes {
			_ = c.Send(context.Background(), uint32(i+1), bytes.Repeat([]byte{0xab}, n))
		}
	}()
	for i, n := range sizes {
		want := frame(uint32(i+1), bytes.Repeat([]byte{0xab}, n))
		if len(want)%frameAlign != 0 {
			t.Fatalf("frame of %d bytes is %d bytes on the wire", n, len(want))
		}
		got := make([]byte, len(want))
		if _, err := io.ReadFull(b, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("frame %d (%d bytes) on the wire:\n%x\nwant\n%x", i, n, got, want)
		}
	}
}

// TestFrameGarbage: a header whose reserved bytes, or padding, are not
// zero is a protocol error, on every read path.
func TestFrameGarbage(t *testing.T) {
	reserved := frame(1, []byte("abc"))
	reserved[9] = 1
	padding := append(frame(1, []byte("abc")), frame(2, nil)...)
	padding[frameHdr+3+5] = 7
	for name, in := range map[string][]byte{"reserved": reserved, "padding": padding} {
		for _, bs := range frameBufSizes {
			fr := newFrameReader(bytes.NewReader(in), bs)
			buf := make([]byte, 16)
			_, _, err := fr.next(buf)
			if name == "padding" && err == nil {
				_, _, err = fr.next(buf)
			}
			if !errors.Is(err, ascend.ErrProtocol) {
				t.Errorf("%s, buffer %d: got %v, want ErrProtocol", name, bs, err)
			}
		}
	}
}

func TestReadFrame(t *testing.T) {
	for _, bs := range frameBufSizes {
		for _, oneByte := range []bool{false, true} {
			src := func(b []byte) io.Reader {
				if oneByte {
					return iotest.OneByteReader(bytes.NewReader(b))
				}
				return bytes.NewReader(b)
			}
			buf := make([]byte, 16)
			in := append(frame(7, []byte("hello")), frame(8, nil)...)
			in = append(in, frame(9, []byte("0123456789abcdef"))...)
			fr := newFrameReader(src(in), bs)
			for i := range buf {
				buf[i] = '.'
			}
			if tag, n, err := fr.next(buf); err != nil || tag != 7 || string(buf[:n]) != "hello" {
				t.Fatalf("buf %d: frame 1: %d %q %v", bs, tag, buf[:n], err)
			}
			if string(buf[5:]) != "..........." {
				t.Fatalf("buf %d: bytes past the frame written: %q", bs, buf)
			}
			if tag, n, err := fr.next(buf); err != nil || tag != 8 || n != 0 {
				t.Fatalf("buf %d: frame 2: %d %d %v", bs, tag, n, err)
			}
			if tag, n, err := fr.next(buf); err != nil || tag != 9 || string(buf[:n]) != "0123456789abcdef" {
				t.Fatalf("buf %d: frame 3: %d %q %v", bs, tag, buf[:n], err)
			}
			if _, _, err := fr.next(buf); err != io.EOF {
				t.Fatalf("buf %d: clean end: %v", bs, err)
			}
			for name, tc := range map[string]struct {
				in   []byte
				want error
			}{
				"short buffer": {frame(1, make([]byte, 17)), io.ErrShortBuffer},
				"huge":         {binary.LittleEndian.AppendUint32(nil, MaxFrame+1), io.ErrUnexpectedEOF},
				"truncated":    {frame(1, []byte("abc"))[:frameHdr+1], io.ErrUnexpectedEOF},
				"no padding":   {frame(1, []byte("abc"))[:frameHdr+3], io.ErrUnexpectedEOF},
				"torn header":  {[]byte{1, 2, 3}, io.ErrUnexpectedEOF},
				"torn 2nd":     {append(frame(1, nil), 1, 2, 3), io.ErrUnexpectedEOF},
			} {
				fr := newFrameReader(src(tc.in), bs)
				_, _, err := fr.next(buf)
				if (name == "torn 2nd" || name == "no padding") && err == nil {
					_, _, err = fr.next(buf)
				}
				if !errors.Is(err, tc.want) {
					t.Errorf("buf %d: %s: got %v, want %v", bs, name, err, tc.want)
				}
			}
			huge := append(binary.LittleEndian.AppendUint32(nil, MaxFrame+1), make([]byte, frameHdr-4)...)
			if _, _, err := newFrameReader(src(huge), bs).next(buf); !errors.Is(err, ascend.ErrProtocol) {
				t.Errorf("buf %d: oversized frame: %v", bs, err)
			}
		}
	}
}

func TestConnRoundTrip(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.AcceptTCP()
		if err != nil {
			return
		}
		c := newConn(nc, time.Second)
		buf := make([]byte, 1<<20)
		for {
			tag, n, err := c.Recv(context.Background(), buf)
			if err != nil {
				c.Close()
				return
			}
			if err := c.Send(context.Background(), tag+1, buf[:n]); err != nil {
				return
			}
		}
	}()
	nc, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	c := newConn(nc, time.Second)
	defer c.Close()
	buf := make([]byte, 1<<20)
	for _, n := range []int{0, 1, smallFrame, smallFrame + 1, 1 << 20} {
		p := bytes.Repeat([]byte{byte(n)}, n)
		if err := c.Send(context.Background(), uint32(n), p); err != nil {
			t.Fatal(err)
		}
		tag, m, err := c.Recv(context.Background(), buf)
		if err != nil || tag != uint32(n)+1 || !bytes.Equal(buf[:m], p) {
			t.Fatalf("n=%d: tag %d len %d err %v", n, tag, m, err)
		}
	}
	// OpTimeout: nothing comes back for a frame never sent.
	start := time.Now()
	c.opTimeout = 100 * time.Millisecond
	if _, _, err := c.Recv(context.Background(), buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("idle Recv: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("timeout took %v", d)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

// FuzzFrame feeds arbitrary bytes to the frame decoder: it must return
// frames or errors, never panic, never claim more bytes than the buffer.
func FuzzFrame(f *testing.F) {
	f.Add(frame(1, []byte("abc")), 8)
	f.Add(append(frame(1, nil), frame(2, []byte{1, 2, 3, 4})...), 4)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, 16)
	f.Add([]byte{}, 0)
	f.Fuzz(func(t *testing.T, data []byte, size int) {
		if size < 0 || size > 1<<16 {
			return
		}
		buf := make([]byte, size)
		// The buffered reader must decode what a plain header-then-payload
		// parse does, for every buffer size.
		fr := newFrameReader(bytes.NewReader(data), frameHdr+size%61)
		rest, pad := data, 0
		for range 1000 {
			tag, n, err := fr.next(buf)
			if err != nil {
				return
			}
			if n < 0 || n > size {
				t.Fatalf("frame of %d bytes in a %d-byte buffer", n, size)
			}
			rest = rest[pad:]
			want := binary.LittleEndian.Uint32(rest[4:])
			if tag != want || !zero(rest[8:frameHdr]) || !bytes.Equal(buf[:n], rest[frameHdr:frameHdr+n]) {
				t.Fatalf("frame decoded as tag %d %x, want tag %d %x", tag, buf[:n], want, rest[frameHdr:frameHdr+n])
			}
			rest, pad = rest[frameHdr+n:], padLen(n)
		}
	})
}

// rw is a scripted peer: reads come from in, writes are recorded.
type rw struct {
	in  io.Reader
	out bytes.Buffer
}

func (x *rw) Read(p []byte) (int, error)  { return x.in.Read(p) }
func (x *rw) Write(p []byte) (int, error) { return x.out.Write(p) }

// FuzzHandshake feeds arbitrary peer bytes to the hello decoder and to both
// sides of the handshake: they must fail cleanly, never panic, and never
// succeed without the token.
func FuzzHandshake(f *testing.F) {
	h := hello{world: 4, from: 3, to: 1, session: "run/x/g0/e0"}
	var helloMsg bytes.Buffer
	writeMsg(&helloMsg, msgHello, stOK, encodeHello(h))
	f.Add(helloMsg.Bytes())
	var chal bytes.Buffer
	writeMsg(&chal, msgChallenge, stOK, make([]byte, nonceLen+macLen))
	writeMsg(&chal, msgResult, stOK, nil)
	f.Add(chal.Bytes())
	var proof bytes.Buffer
	writeMsg(&proof, msgProof, stOK, make([]byte, macLen))
	f.Add(proof.Bytes())
	f.Add([]byte{8, 0, 'A', 'S', 'C', 'N', 2, 0, 2, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		if st, body, err := readMsg(bytes.NewReader(data), msgHello); err == nil && st == stOK {
			if h, err := decodeHello(body); err == nil {
				if h.world < 1 || h.from >= h.world || h.to >= h.world || len(h.session) == 0 || len(h.session) > maxSession {
					t.Fatalf("decoded an invalid hello: %+v", h)
				}
				if !bytes.Equal(encodeHello(h), body) {
					t.Fatalf("hello does not round-trip")
				}
			}
		}
		s := side{token: []byte("secret"), session: h.session, world: 4, rank: 1, rand: bytes.NewReader(make([]byte, 64))}
		if _, err := serverHandshake(&rw{in: bytes.NewReader(data)}, s, h); err == nil {
			t.Fatalf("server accepted a client that does not know the token")
		}
		c := side{token: []byte("secret"), session: h.session, world: 4, rank: 3, rand: bytes.NewReader(make([]byte, 64))}
		if _, err := clientHandshake(&rw{in: bytes.NewReader(data)}, c, 1); err == nil {
			t.Fatalf("client accepted a server that does not know the token")
		}
	})
}

// TestConnRecvPolled reads a stream of frames through the polling,
// vectored read path, with receive buffers of exactly the frame's size and
// larger ones (which read past the frame), the stream arriving at once or
// in small pieces.
func TestConnRecvPolled(t *testing.T) {
	sizes := []int{0, 5, 100, 40000, 3, smallFrame, smallFrame + 7, 70000, 1, 0, 12, 1 << 20, 9}
	var stream []byte
	for i, n := range sizes {
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(i*31 + j)
		}
		stream = append(stream, frame(uint32(100+i), p)...)
	}
	for _, pieces := range []int{0, 997} {
		a, b := tcpPair(t)
		go func() {
			if pieces == 0 {
				_, _ = a.Write(stream)
				return
			}
			for s := stream; len(s) > 0; {
				k := min(len(s), pieces)
				if _, err := a.Write(s[:k]); err != nil {
					return
				}
				s = s[k:]
				time.Sleep(10 * time.Microsecond)
			}
		}()
		c := newConn(b, 5*time.Second)
		c.setSpin(50*time.Microsecond, false)
		big := make([]byte, 2<<20)
		for i, n := range sizes {
			buf := big[:n]
			if i%2 == 1 {
				buf = big
			}
			tag, m, err := c.Recv(context.Background(), buf)
			if err != nil || tag != uint32(100+i) || m != n {
				t.Fatalf("pieces %d frame %d: tag %d len %d err %v", pieces, i, tag, m, err)
			}
			for j := range m {
				if buf[j] != byte(i*31+j) {
					t.Fatalf("pieces %d frame %d: byte %d is %d", pieces, i, j, buf[j])
				}
			}
		}
		a.Close()
		if _, _, err := c.Recv(context.Background(), big); err != io.EOF {
			t.Errorf("pieces %d: after the last frame: %v", pieces, err)
		}
		c.Close()
	}
}
