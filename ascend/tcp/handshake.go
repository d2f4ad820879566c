package tcp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cann-train/cann-train/ascend"
)

// Wire constants of the handshake. Every message is
// [length uint16 LE][magic "ASCN"][version uint16 LE][type u8][status u8][body].
const (
	magic      = "ASCN"
	version    = 3 // 2: the link exchange (link.go) follows the handshake; 3: 16-byte frame headers, frames padded to 16 bytes
	hdrLen     = 8
	maxMsg     = 2048
	maxSession = 1024
	maxWorld   = 1 << 16
	nonceLen   = 32
	macLen     = sha256.Size
	helloFixed = 12 + nonceLen + 2 // world, from, to, nonce, session length
)

const (
	msgHello     = 1
	msgChallenge = 2
	msgProof     = 3
	msgResult    = 4
)

const (
	stOK       = 0
	stAuth     = 1
	stVersion  = 2
	stGroup    = 3
	stRetry    = 4
	stProtocol = 5
)

func statusErr(st byte) error {
	switch st {
	case stAuth:
		return ErrAuth
	case stVersion:
		return ErrVersion
	case stGroup:
		return ErrGroupMismatch
	case stRetry:
		return errRetry
	}
	return fmt.Errorf("%w: unknown handshake status %d", ascend.ErrProtocol, st)
}

func errStatus(err error) byte {
	switch {
	case err == nil:
		return stOK
	case errors.Is(err, ErrAuth):
		return stAuth
	case errors.Is(err, ErrVersion):
		return stVersion
	case errors.Is(err, ErrGroupMismatch):
		return stGroup
	case errors.Is(err, errRetry):
		return stRetry
	}
	return stProtocol
}

type hello struct {
	world, from, to int
	nonce           [nonceLen]byte
	session         string
}

func writeMsg(w io.Writer, typ, status byte, body []byte) error {
	b := make([]byte, 2+hdrLen+len(body))
	binary.LittleEndian.PutUint16(b, uint16(hdrLen+len(body)))
	copy(b[2:], magic)
	binary.LittleEndian.PutUint16(b[6:], version)
	b[8], b[9] = typ, status
	copy(b[10:], body)
	_, err := w.Write(b)
	return err
}

// readMsg reads one message and checks its framing, magic, version and type.
// A version mismatch is reported as ErrVersion (the header layout is stable
// across versions, so the caller can still answer).
func readMsg(r io.Reader, wantType byte) (status byte, body []byte, err error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.LittleEndian.Uint16(l[:]))
	if n < hdrLen || n > maxMsg {
		return 0, nil, fmt.Errorf("%w: handshake message of %d bytes", ascend.ErrProtocol, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, nil, eofIsUnexpected(err)
	}
	if string(b[:4]) != magic {
		return 0, nil, fmt.Errorf("%w: bad magic %q", ascend.ErrProtocol, b[:4])
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != version {
		return 0, nil, fmt.Errorf("%w: peer speaks version %d, we speak %d", ErrVersion, v, version)
	}
	if b[6] != wantType {
		return 0, nil, fmt.Errorf("%w: handshake message type %d, want %d", ascend.ErrProtocol, b[6], wantType)
	}
	return b[7], b[hdrLen:], nil
}

func encodeHello(h hello) []byte {
	b := make([]byte, helloFixed+len(h.session))
	binary.LittleEndian.PutUint32(b[0:], uint32(h.world))
	binary.LittleEndian.PutUint32(b[4:], uint32(h.from))
	binary.LittleEndian.PutUint32(b[8:], uint32(h.to))
	copy(b[12:], h.nonce[:])
	binary.LittleEndian.PutUint16(b[12+nonceLen:], uint16(len(h.session)))
	copy(b[helloFixed:], h.session)
	return b
}

func decodeHello(b []byte) (hello, error) {
	var h hello
	if len(b) < helloFixed {
		return h, fmt.Errorf("%w: hello of %d bytes", ascend.ErrProtocol, len(b))
	}
	world := binary.LittleEndian.Uint32(b[0:])
	from := binary.LittleEndian.Uint32(b[4:])
	to := binary.LittleEndian.Uint32(b[8:])
	copy(h.nonce[:], b[12:])
	sl := int(binary.LittleEndian.Uint16(b[12+nonceLen:]))
	switch {
	case world < 1 || world > maxWorld:
		return h, fmt.Errorf("%w: hello world size %d", ascend.ErrProtocol, world)
	case from >= world || to >= world:
		return h, fmt.Errorf("%w: hello ranks %d→%d in world %d", ascend.ErrProtocol, from, to, world)
	case sl == 0 || sl > maxSession || len(b) != helloFixed+sl:
		return h, fmt.Errorf("%w: hello session of %d bytes in a %d-byte message", ascend.ErrProtocol, sl, len(b))
	}
	h.world, h.from, h.to = int(world), int(from), int(to)
	h.session = string(b[helloFixed:])
	return h, nil
}

// mac computes the proof of one side: HMAC-SHA256(token, role ‖ transcript).
func mac(token []byte, role string, h hello, nonceS []byte) []byte {
	m := hmac.New(sha256.New, token)
	var b [4]byte
	m.Write([]byte("ascend/tcp handshake " + role))
	binary.LittleEndian.PutUint32(b[:], version)
	m.Write(b[:])
	binary.LittleEndian.PutUint32(b[:], uint32(len(h.session)))
	m.Write(b[:])
	m.Write([]byte(h.session))
	for _, v := range []int{h.world, h.from, h.to} {
		binary.LittleEndian.PutUint32(b[:], uint32(v))
		m.Write(b[:])
	}
	m.Write(h.nonce[:])
	m.Write(nonceS)
	return m.Sum(nil)
}

// side is one end's view of the group for a handshake.
type side struct {
	token   []byte
	session string
	world   int
	rank    int
	rand    io.Reader
}

// clientHandshake runs the dialer's side with peer. remote reports that the
// peer refused us (as opposed to us refusing the peer).
func clientHandshake(rw io.ReadWriter, s side, peer int) (remote bool, err error) {
	h := hello{world: s.world, from: s.rank, to: peer, session: s.session}
	if _, err := io.ReadFull(s.rand, h.nonce[:]); err != nil {
		return false, fmt.Errorf("tcp: nonce: %w", err)
	}
	if err := writeMsg(rw, msgHello, stOK, encodeHello(h)); err != nil {
		return false, err
	}
	st, body, err := readMsg(rw, msgChallenge)
	if err != nil {
		return false, err
	}
	if st != stOK {
		return true, statusErr(st)
	}
	if len(body) != nonceLen+macLen {
		return false, fmt.Errorf("%w: challenge of %d bytes", ascend.ErrProtocol, len(body))
	}
	nonceS := body[:nonceLen]
	if !hmac.Equal(body[nonceLen:], mac(s.token, "server", h, nonceS)) {
		_ = writeMsg(rw, msgProof, stAuth, nil)
		return false, ErrAuth
	}
	if err := writeMsg(rw, msgProof, stOK, mac(s.token, "client", h, nonceS)); err != nil {
		return false, err
	}
	st, body, err = readMsg(rw, msgResult)
	if err != nil {
		return false, err
	}
	if st != stOK {
		return true, statusErr(st)
	}
	if len(body) != 0 {
		return false, fmt.Errorf("%w: result of %d bytes", ascend.ErrProtocol, len(body))
	}
	return false, nil
}

// serverHandshake runs the listener's side for a hello already read.
func serverHandshake(rw io.ReadWriter, s side, h hello) (remote bool, err error) {
	switch {
	case h.session != s.session || h.to != s.rank:
		err = fmt.Errorf("%w: hello for session %q rank %d reached session %q rank %d", ErrGroupMismatch, h.session, h.to, s.session, s.rank)
	case h.world != s.world:
		err = fmt.Errorf("%w: peer rank %d has world size %d, we have %d", ErrGroupMismatch, h.from, h.world, s.world)
	case h.from <= s.rank:
		err = fmt.Errorf("%w: rank %d dialled rank %d (only higher ranks dial)", ErrGroupMismatch, h.from, s.rank)
	}
	if err != nil {
		_ = writeMsg(rw, msgChallenge, stGroup, nil)
		return false, err
	}
	body := make([]byte, nonceLen, nonceLen+macLen)
	if _, err := io.ReadFull(s.rand, body); err != nil {
		return false, fmt.Errorf("tcp: nonce: %w", err)
	}
	body = append(body, mac(s.token, "server", h, body)...)
	if err := writeMsg(rw, msgChallenge, stOK, body); err != nil {
		return false, err
	}
	st, proof, err := readMsg(rw, msgProof)
	if err != nil {
		return false, err
	}
	if st != stOK {
		return true, statusErr(st)
	}
	if !hmac.Equal(proof, mac(s.token, "client", h, body[:nonceLen])) {
		_ = writeMsg(rw, msgResult, stAuth, nil)
		return false, ErrAuth
	}
	return false, writeMsg(rw, msgResult, stOK, nil)
}

func eofIsUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
