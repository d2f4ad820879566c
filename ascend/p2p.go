package ascend

// Point-to-point messages. Each ordered pair of ranks has its own message
// sequence, independent of the collectives' sequence, so a Send needs no
// participation of the other ranks. Messages between two ranks are
// matched in order, and a link carries one thing at a time: a Send must
// be matched by the peer's Recv before either of them starts a collective
// that uses the link between them (otherwise the collective sees the
// message and fails with ErrMismatch). Send blocks until the transport has
// taken the message, which for large messages means until the peer
// receives it: two ranks sending to each other must use SendRecv.

import "context"

func (c *Communicator) checkPeer(op string, peer int) error {
	if peer < 0 || peer >= c.size || peer == c.rank {
		return errorf(ErrInvalid, "%s: peer %d (rank %d of %d)", op, peer, c.rank, c.size)
	}
	return nil
}

func p2pTag(seq uint32) uint32 { return makeTag(seq, AlgoPairwise, CollSendRecv, 0) }

// Send sends buf to rank peer, which must Recv a buffer of the same length.
func (c *Communicator) Send(ctx context.Context, buf []float32, peer int) error {
	if err := c.checkPeer("send", peer); err != nil {
		return err
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if err := c.arm(ctx, "send"); err != nil {
		return err
	}
	defer c.end()
	tag := p2pTag(c.p2pSend[peer])
	c.p2pSend[peer]++
	return c.sendTo(ctx, "send", tag, c.peers[peer], buf)
}

// Recv receives into buf the next message rank peer Sends to this rank; it
// must have exactly len(buf) elements (else ErrMismatch).
func (c *Communicator) Recv(ctx context.Context, buf []float32, peer int) error {
	if err := c.checkPeer("recv", peer); err != nil {
		return err
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if err := c.arm(ctx, "recv"); err != nil {
		return err
	}
	defer c.end()
	tag := p2pTag(c.p2pRecv[peer])
	c.p2pRecv[peer]++
	return c.recvFrom(ctx, "recv", tag, c.peers[peer], buf, nil, Sum, false)
}

// SendRecv sends send to rank `to` while it receives recv from rank
// `from`, like MPI_Sendrecv: safe for exchanges and shifts where every
// rank sends and receives at once. to and from may be the same rank; if
// both are this rank, send is copied into recv.
func (c *Communicator) SendRecv(ctx context.Context, send []float32, to int, recv []float32, from int) error {
	if to == c.rank && from == c.rank {
		if len(send) != len(recv) {
			return errorf(ErrInvalid, "sendrecv: self-exchange of %d into %d elements", len(send), len(recv))
		}
		copy(recv, send)
		return nil
	}
	if err := c.checkPeer("sendrecv", to); err != nil {
		return err
	}
	if err := c.checkPeer("sendrecv", from); err != nil {
		return err
	}
	if overlap(send, recv) || (len(recv) > 0 && same(send, recv)) {
		return errorf(ErrInvalid, "sendrecv: send and recv overlap")
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if err := c.arm(ctx, "sendrecv"); err != nil {
		return err
	}
	defer c.end()
	stag, rtag := p2pTag(c.p2pSend[to]), p2pTag(c.p2pRecv[from])
	c.p2pSend[to]++
	c.p2pRecv[from]++
	return c.exchange2(ctx, "sendrecv", stag, c.peers[to], send, rtag, c.peers[from], recv, nil, Sum, false)
}
