package ascend

// Barrier by dissemination: in round k = 1, 2, 4, … < P rank r signals
// r+k and waits for r-k. Works for any P.
//
// Cost: ⌈log2 P⌉ rounds of one empty frame each way: ⌈log2 P⌉·α.

import "context"

// Barrier returns once every rank has entered it.
func (c *Communicator) Barrier(ctx context.Context) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	seq, err := c.begin(ctx, "barrier")
	if err != nil {
		return err
	}
	defer c.end()
	tag := makeTag(seq, AlgoAuto, CollBarrier, 0)
	p, r := c.size, c.rank
	for k := 1; k < p; k <<= 1 {
		to, from := c.peers[mod(r+k, p)], c.peers[mod(r-k, p)]
		if err := c.exchange(ctx, "barrier", tag, to, nil, from, nil, nil, Sum, false); err != nil {
			return err
		}
	}
	return nil
}
