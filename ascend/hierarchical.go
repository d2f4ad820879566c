package ascend

// Hierarchical two-level AllReduce (HCCL's and NCCL's answer to fast links
// inside a host and slow ones between hosts): reduce within each host to
// its leader (the host's lowest rank) over a pipelined binomial tree,
// ring-allreduce among the leaders, broadcast within each host.
//
// Cost for h hosts of at most m ranks, n bytes, with the intra-host α_i,
// β_i of CostModel (d = ⌈log2 m⌉, k chunks of c bytes):
//
//	2·(d+k-1)·(α_i + c·β_i) + (d+k-1)·c·γ        within the hosts
//	+ 2(h-1)·α + 2(h-1)/h·n·β + (h-1)/h·n·γ      among the leaders
//
// Only the leaders cross hosts, each moving 2(h-1)/h·n bytes instead of
// every rank doing so, which is the point when the inter-host links are
// the bottleneck. Automatic selection considers it only when the model
// knows the two levels (CostModel.Hosts, IntraAlpha, IntraBeta: the
// topology scan sets them); ASCEND_ALGO=hier forces it. Ranks learn
// their hosts when the group forms (Config.Hosts); with one host it is a
// tree allreduce.
//
// Every rank ends with the leader-broadcast bits of the same ring result,
// so all ranks agree exactly.

import "context"

type hierAlgorithm struct{}

func (hierAlgorithm) cost(coll Collective, p int, n float64, m params) (float64, bool) {
	if coll != CollAllReduce {
		return 0, false
	}
	if m.hosts < 2 || m.perHost < 2 || m.ai <= 0 {
		return 1e9, true // unknown topology: never the automatic choice
	}
	h := float64(m.hosts)
	d := float64(log2ceil(m.perHost))
	k, c := chunks(n, m.seg)
	steps := d + k - 1
	intra := 2*steps*(m.ai+c*m.bi) + steps*c*m.g
	f := (h - 1) / h
	inter := 2*(h-1)*m.a + 2*f*n*m.b + f*n*m.g
	return intra + inter, true
}

// HostIndex turns per-rank host names into host indices in order of first
// appearance (nil if ids is nil or any id is empty: unknown).
func HostIndex(ids []string) []int {
	if ids == nil {
		return nil
	}
	idx := make([]int, len(ids))
	seen := map[string]int{}
	for r, id := range ids {
		if id == "" {
			return nil
		}
		i, ok := seen[id]
		if !ok {
			i = len(seen)
			seen[id] = i
		}
		idx[r] = i
	}
	return idx
}

// hostGroups computes this rank's host group and the leaders (the lowest
// rank of each host) from hosts (nil: one host), and tells the cost model.
func (c *Communicator) hostGroups(hosts []int) {
	host := func(r int) int {
		if hosts == nil {
			return 0
		}
		return hosts[r]
	}
	c.local, c.leaders, c.leaderIdx = nil, nil, -1
	seen := map[int]bool{}
	perHost := map[int]int{}
	for r := range c.size {
		h := host(r)
		perHost[h]++
		if h == host(c.rank) {
			if r == c.rank {
				c.localIdx = len(c.local)
			}
			c.local = append(c.local, r)
		}
		if !seen[h] {
			seen[h] = true
			if r == c.rank {
				c.leaderIdx = len(c.leaders)
			}
			c.leaders = append(c.leaders, r)
		}
	}
	c.model.Hosts, c.model.PerHost = len(c.leaders), 0
	for _, n := range perHost {
		c.model.PerHost = max(c.model.PerHost, n)
	}
	c.chosen = [numColl]choice{}
}

// hierAllReduce: reduce to the host leader, ring among leaders, broadcast.
func (c *Communicator) hierAllReduce(ctx context.Context, tag uint32, src, work []float32, op Op) error {
	const name = "allreduce"
	inner := op
	if op == Avg {
		inner = Sum // divided once, at the end
	}
	m := len(c.local)
	parent, children := c.binomialOver(c.local, m, c.localIdx, 0, true)
	if err := c.reducePipelined(ctx, name, tag, src, work, parent, children, inner); err != nil {
		return err
	}
	if c.leaderIdx >= 0 {
		if h := len(c.leaders); h > 1 {
			offs := equalOffsets(c.voffs[:h+1], len(work))
			g := c.ringOver(c.leaders, c.leaderIdx)
			if err := c.ringReduceScatter(ctx, name, tag, g, work, work, offs, inner); err != nil {
				return err
			}
			if err := c.ringAllGather(ctx, name, tag, g, work, offs); err != nil {
				return err
			}
		}
		if op == Avg {
			divide(work, c.size)
		}
	}
	parent, children = c.binomialOver(c.local, m, c.localIdx, 0, false)
	return c.bcastPipelined(ctx, name, tag, work, parent, children, nil)
}
