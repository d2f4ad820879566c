package tcp

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
)

func listen(t *testing.T, lc ListenConfig) *Listener {
	t.Helper()
	l, err := lc.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func token(t *testing.T) []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

type connectResult struct {
	comm *ascend.Communicator
	err  error
}

// connectAll runs Connect for every group concurrently.
func connectAll(ls []*Listener, gs []Group, opts Options) []connectResult {
	res := make([]connectResult, len(gs))
	var wg sync.WaitGroup
	for i := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i].comm, res[i].err = Connect(context.Background(), ls[i], gs[i], opts)
		}()
	}
	wg.Wait()
	return res
}

func closeAllComms(res []connectResult) {
	for _, r := range res {
		if r.comm != nil {
			r.comm.Close()
		}
	}
}

func groups(session string, ls []*Listener, tok []byte) []Group {
	addrs := make([]string, len(ls))
	for i, l := range ls {
		addrs[i] = l.Addr()
	}
	gs := make([]Group, len(ls))
	for i := range gs {
		gs[i] = Group{Session: session, Rank: i, Addrs: addrs, Token: tok}
	}
	return gs
}

var fast = Options{ConnectTimeout: 5 * time.Second, OpTimeout: 5 * time.Second}

func TestWrongTokenRefusedOnBothSides(t *testing.T) {
	ls := []*Listener{listen(t, ListenConfig{}), listen(t, ListenConfig{})}
	gs := groups("wrong-token", ls, token(t))
	gs[1].Token = token(t)
	start := time.Now()
	res := connectAll(ls, gs, fast)
	defer closeAllComms(res)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v: a wrong token must fail fast, not time out", d)
	}
	for r, x := range res {
		var he *HandshakeError
		if x.comm != nil || !errors.Is(x.err, ErrAuth) || !errors.As(x.err, &he) {
			t.Errorf("rank %d: got (%v, %v), want *HandshakeError wrapping ErrAuth and no communicator", r, x.comm, x.err)
			continue
		}
		if he.Peer != 1-r || he.Rank != r {
			t.Errorf("rank %d: HandshakeError names ranks %d/%d", r, he.Rank, he.Peer)
		}
		t.Logf("rank %d: %v", r, x.err)
	}
}

func TestWrongTokenThreeRanks(t *testing.T) {
	ls := []*Listener{listen(t, ListenConfig{}), listen(t, ListenConfig{}), listen(t, ListenConfig{})}
	gs := groups("wrong-token-3", ls, token(t))
	gs[2].Token = []byte("guess")
	res := connectAll(ls, gs, fast)
	defer closeAllComms(res)
	for r, x := range res {
		if x.err == nil {
			t.Errorf("rank %d: connected despite rank 2's wrong token", r)
		}
	}
	if !errors.Is(res[2].err, ErrAuth) {
		t.Errorf("rank 2: %v, want ErrAuth", res[2].err)
	}
}

func TestManyRanksOneListener(t *testing.T) {
	// A node hosting several ranks: all share one listener; dispatch is by
	// (session, rank).
	l := listen(t, ListenConfig{})
	const world = 5
	ls := make([]*Listener, world)
	for i := range ls {
		ls[i] = l
	}
	res := connectAll(ls, groups("one-listener", ls, token(t)), fast)
	defer closeAllComms(res)
	var wg sync.WaitGroup
	for r, x := range res {
		if x.err != nil {
			t.Fatalf("rank %d: %v", r, x.err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := []float32{float32(r), 1}
			if err := x.comm.AllReduce(context.Background(), buf, ascend.Sum); err != nil || buf[0] != 10 || buf[1] != world {
				t.Errorf("rank %d: %v %v", r, buf, err)
			}
		}()
	}
	wg.Wait()
}

func TestLateRankIsWaitedFor(t *testing.T) {
	// Rank 1 dials before rank 0 calls Connect: the listener holds the
	// connection until rank 0 claims it.
	ls := []*Listener{listen(t, ListenConfig{}), listen(t, ListenConfig{})}
	gs := groups("late", ls, token(t))
	res := make([]connectResult, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		res[1].comm, res[1].err = Connect(context.Background(), ls[1], gs[1], fast)
	}()
	go func() {
		defer wg.Done()
		time.Sleep(300 * time.Millisecond)
		res[0].comm, res[0].err = Connect(context.Background(), ls[0], gs[0], fast)
	}()
	wg.Wait()
	defer closeAllComms(res)
	for r, x := range res {
		if x.err != nil {
			t.Errorf("rank %d: %v", r, x.err)
		}
	}
}

func TestHeldConnectionDroppedAndRedialled(t *testing.T) {
	// With a short hold timeout the early dialer is told to retry and
	// redials; the group still forms.
	ls := []*Listener{listen(t, ListenConfig{HoldTimeout: 50 * time.Millisecond}), listen(t, ListenConfig{})}
	gs := groups("held", ls, token(t))
	res := make([]connectResult, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		res[1].comm, res[1].err = Connect(context.Background(), ls[1], gs[1], fast)
	}()
	go func() {
		defer wg.Done()
		time.Sleep(400 * time.Millisecond)
		res[0].comm, res[0].err = Connect(context.Background(), ls[0], gs[0], fast)
	}()
	wg.Wait()
	defer closeAllComms(res)
	for r, x := range res {
		if x.err != nil {
			t.Errorf("rank %d: %v", r, x.err)
		}
	}
}

func TestHeldConnectionDropped(t *testing.T) {
	l := listen(t, ListenConfig{HoldTimeout: 100 * time.Millisecond})
	nc, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	h := hello{world: 2, from: 1, to: 0, session: "nobody-waits"}
	if err := writeMsg(nc, msgHello, stOK, encodeHello(h)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	st, _, err := readMsg(nc, msgChallenge)
	if err != nil || st != stRetry {
		t.Fatalf("got status %d, %v; want retry", st, err)
	}
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Errorf("dropped after %v, before the hold timeout", d)
	}
	if _, err := nc.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after drop: %v, want EOF", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nheld != 0 || len(l.held) != 0 {
		t.Errorf("held bookkeeping leaked: %d %v", l.nheld, l.held)
	}
}

func TestGarbageAndVersionRejected(t *testing.T) {
	l := listen(t, ListenConfig{})
	for name, payload := range map[string][]byte{
		"garbage": []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"version": func() []byte {
			b := make([]byte, 0, 64)
			b = append(b, hdrLen, 0)
			b = append(b, magic...)
			b = append(b, 99, 0, msgHello, 0)
			return b
		}(),
	} {
		nc, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		nc.Write(payload)
		st, _, err := readMsg(nc, msgChallenge)
		nc.Close()
		want := byte(stProtocol)
		if name == "version" {
			want = stVersion
		}
		if err != nil || st != want {
			t.Errorf("%s: got status %d, %v; want %d", name, st, err, want)
		}
	}
}

func TestWorldSizeMismatch(t *testing.T) {
	ls := []*Listener{listen(t, ListenConfig{}), listen(t, ListenConfig{}), listen(t, ListenConfig{})}
	gs := groups("world", ls, token(t))
	gs[1].Addrs = gs[1].Addrs[:2] // rank 1 thinks the world has 2 ranks
	opts := fast
	opts.ConnectTimeout = 2 * time.Second
	res := connectAll(ls, gs, opts)
	defer closeAllComms(res)
	for r, x := range res {
		if x.err == nil {
			t.Errorf("rank %d connected", r)
		}
	}
	if !errors.Is(res[1].err, ErrGroupMismatch) {
		t.Errorf("rank 1: %v, want ErrGroupMismatch", res[1].err)
	}
}

func TestConnectTimeoutNamesMissingRanks(t *testing.T) {
	ls := []*Listener{listen(t, ListenConfig{}), listen(t, ListenConfig{}), listen(t, ListenConfig{})}
	gs := groups("missing", ls, token(t))
	opts := Options{ConnectTimeout: 300 * time.Millisecond}
	res := connectAll(ls[:2], gs[:2], opts) // rank 2 never comes
	defer closeAllComms(res)
	for r, x := range res {
		if !errors.Is(x.err, context.DeadlineExceeded) {
			t.Errorf("rank %d: %v, want DeadlineExceeded", r, x.err)
		}
		var pe *ascend.PeerError
		if !errors.As(x.err, &pe) || pe.Rank != 2 {
			t.Errorf("rank %d: %v, want a PeerError naming rank 2", r, x.err)
		}
	}
	t.Log(res[0].err)
}

// TestConnectRefusedGrace: one rank's address refuses connections (its
// process is gone). With RefusedGrace, the other rank names it soon after
// the grace, whether it dials it (rank 0 gone) or waits for it to dial
// (rank 1 gone: its address is probed); without, it waits until
// ConnectTimeout and then names it as missing.
func TestConnectRefusedGrace(t *testing.T) {
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := gone.Addr().String()
	gone.Close()
	for _, tc := range []struct {
		name    string
		deadRk  int
		opts    Options
		refused bool // the error says the address refused
	}{
		{"lower rank gone, grace", 0, Options{ConnectTimeout: 20 * time.Second, RefusedGrace: 200 * time.Millisecond}, true},
		{"higher rank gone, grace", 1, Options{ConnectTimeout: 20 * time.Second, RefusedGrace: 200 * time.Millisecond}, true},
		{"lower rank gone, no grace", 0, Options{ConnectTimeout: 500 * time.Millisecond}, false},
		{"higher rank gone, no grace", 1, Options{ConnectTimeout: 500 * time.Millisecond}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			took, err := connectToNobody(t, "refused-"+tc.name, tc.deadRk, dead, tc.opts)
			if got := errors.Is(err, syscall.ECONNREFUSED); got != tc.refused {
				t.Errorf("err = %v: refused %v, want %v", err, got, tc.refused)
			}
			if !tc.refused && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want DeadlineExceeded", err)
			}
			// (dead is a loopback address: a rank on another host may have registered it.)
			if tc.refused && !strings.Contains(err.Error(), "or it runs on another host, where it registered a loopback address") {
				t.Errorf("err = %v: want it to say a loopback address may be another host's node's", err)
			}
			if took > 10*time.Second {
				t.Errorf("took %v", took)
			}
			t.Log(err)
		})
	}
}

// connectToNobody connects the other rank of a 2-rank group whose rank
// other is at addr, where nobody will join, and checks that Connect fails
// with a PeerError naming other; it returns how long Connect took and
// that error.
func connectToNobody(t *testing.T, session string, other int, addr string, opts Options) (took time.Duration, err error) {
	t.Helper()
	l := listen(t, ListenConfig{})
	me := 1 - other
	addrs := make([]string, 2)
	addrs[me], addrs[other] = l.Addr(), addr
	g := Group{Session: session, Rank: me, Addrs: addrs, Token: token(t)}
	start := time.Now()
	comm, err := Connect(context.Background(), l, g, opts)
	took = time.Since(start)
	if comm != nil {
		comm.Close()
		t.Fatalf("connected to %s, where nobody listens for the group", addr)
	}
	var pe *ascend.PeerError
	if !errors.As(err, &pe) || pe.Rank != other || pe.Op != "connect" {
		t.Fatalf("err = %v, want a PeerError naming rank %d", err, other)
	}
	return took, err
}

// TestConnectProbeSparesLiveRank: with RefusedGrace, a higher rank that
// starts late (after the grace) is probed, found alive, and the group forms.
func TestConnectProbeSparesLiveRank(t *testing.T) {
	ls := []*Listener{listen(t, ListenConfig{}), listen(t, ListenConfig{})}
	gs := groups("late", ls, token(t))
	opts := Options{ConnectTimeout: 20 * time.Second, OpTimeout: 5 * time.Second, RefusedGrace: 100 * time.Millisecond}
	res := make([]connectResult, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 1 {
				time.Sleep(600 * time.Millisecond) // rank 1 starts late; its listener is up
			}
			res[i].comm, res[i].err = Connect(context.Background(), ls[i], gs[i], opts)
		}()
	}
	wg.Wait()
	defer closeAllComms(res)
	for r, x := range res {
		if x.err != nil {
			t.Errorf("rank %d: %v", r, x.err)
		}
	}
}

func TestConnectCancelAndListenerClose(t *testing.T) {
	l := listen(t, ListenConfig{})
	g := Group{Session: "alone", Rank: 0, Addrs: []string{l.Addr(), "127.0.0.1:1"}, Token: []byte("x")}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := Connect(ctx, l, g, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancel: %v", err)
	}
	time.AfterFunc(100*time.Millisecond, func() { l.Close() })
	if _, err := Connect(context.Background(), l, g, Options{}); !errors.Is(err, ErrListenerClosed) {
		t.Errorf("listener close: %v", err)
	}
	if _, err := Connect(context.Background(), l, g, Options{}); !errors.Is(err, ErrListenerClosed) {
		t.Errorf("closed listener: %v", err)
	}
}

func TestConnectInvalid(t *testing.T) {
	l := listen(t, ListenConfig{})
	ok := Group{Session: "s", Rank: 0, Addrs: []string{l.Addr()}, Token: []byte("t")}
	for i, g := range []Group{
		{Session: "", Rank: 0, Addrs: ok.Addrs, Token: ok.Token},
		{Session: "s", Rank: 1, Addrs: ok.Addrs, Token: ok.Token},
		{Session: "s", Rank: 0, Addrs: nil, Token: ok.Token},
		{Session: "s", Rank: 0, Addrs: ok.Addrs, Token: nil},
		{Session: "s", Rank: 1, Addrs: []string{"", ""}, Token: ok.Token},
	} {
		if _, err := Connect(context.Background(), l, g, fast); !errors.Is(err, ascend.ErrInvalid) {
			t.Errorf("case %d: %v", i, err)
		}
	}
	c, err := Connect(context.Background(), l, ok, fast)
	if err != nil || c.Size() != 1 || c.Rank() != 0 || c.Session() != "s" {
		t.Fatalf("world of one: %v %v", c, err)
	}
	if err := c.AllReduce(context.Background(), []float32{1}, ascend.Avg); err != nil {
		t.Error(err)
	}
	c.Close()
}

func TestDuplicateConnectOnListener(t *testing.T) {
	l := listen(t, ListenConfig{})
	g := Group{Session: "dup", Rank: 0, Addrs: []string{l.Addr(), l.Addr()}, Token: []byte("t")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Connect(ctx, l, g, fast)
	time.Sleep(50 * time.Millisecond)
	if _, err := Connect(context.Background(), l, g, fast); !errors.Is(err, ErrGroupMismatch) {
		t.Errorf("duplicate: %v", err)
	}
}

func TestSessionsDoNotMixOnOneListener(t *testing.T) {
	// Same ranks, different sessions and tokens, at the same time.
	ls := []*Listener{listen(t, ListenConfig{}), listen(t, ListenConfig{})}
	var wg sync.WaitGroup
	for s := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := connectAll(ls, groups(fmt.Sprintf("mix/%d", s), ls, token(t)), fast)
			defer closeAllComms(res)
			for r, x := range res {
				if x.err != nil {
					t.Errorf("session %d rank %d: %v", s, r, x.err)
					return
				}
			}
			var rw sync.WaitGroup
			for r, x := range res {
				rw.Add(1)
				go func() {
					defer rw.Done()
					buf := []float32{float32(s*10 + r)}
					if err := x.comm.AllReduce(context.Background(), buf, ascend.Sum); err != nil || buf[0] != float32(s*20+1) {
						t.Errorf("session %d rank %d: %v %v", s, r, buf, err)
					}
				}()
			}
			rw.Wait()
		}()
	}
	wg.Wait()
}

// TestConnectLinkLostBlamesOnlyTheGone: rank 1 finishes its handshake with
// rank 0 and hangs up before the link exchange. With RefusedGrace, rank 0
// names rank 1 when rank 1's address refuses connections (its process is
// gone); when rank 1's listener answers (it left alive, e.g. because a
// third rank failed) rank 0 names nobody and says ErrPeerLeft; when the
// address takes connections but never answers (a frozen process) it names
// nobody either. Without RefusedGrace it names nobody.
func TestConnectLinkLostBlamesOnlyTheGone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rank1  string // "gone", "alive" (a Listener), "silent" (accepts, never answers)
		grace  time.Duration
		blame  bool
		left   bool
		atMost time.Duration
	}{
		{"gone, grace", "gone", 200 * time.Millisecond, true, false, 2 * time.Second},
		{"alive, grace", "alive", 200 * time.Millisecond, false, true, 2 * time.Second},
		{"silent, grace", "silent", 200 * time.Millisecond, false, false, 2 * time.Second},
		{"gone, no grace", "gone", 0, false, false, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := listen(t, ListenConfig{})
			var addr1 string
			switch tc.rank1 {
			case "alive":
				addr1 = listen(t, ListenConfig{}).Addr()
			default:
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				addr1 = ln.Addr().String()
				if tc.rank1 == "gone" {
					ln.Close()
				}
			}
			addrs := []string{l.Addr(), addr1}
			tok := token(t)
			session := "lost-" + tc.name
			fake := make(chan error, 1)
			go func() { // rank 1: handshake, then hang up
				nc, err := net.Dial("tcp", addrs[0])
				if err != nil {
					fake <- err
					return
				}
				defer nc.Close()
				s := side{token: tok, session: session, world: 2, rank: 1, rand: rand.Reader}
				_, err = clientHandshake(nc, s, 0)
				fake <- err
			}()
			opts := Options{ConnectTimeout: 10 * time.Second, OpTimeout: 5 * time.Second, RefusedGrace: tc.grace}
			start := time.Now()
			comm, err := Connect(context.Background(), l, Group{Session: session, Rank: 0, Addrs: addrs, Token: tok}, opts)
			took := time.Since(start)
			if ferr := <-fake; ferr != nil {
				t.Fatalf("fake rank 1: %v", ferr)
			}
			if comm != nil {
				comm.Close()
				t.Fatal("formed a group with a rank that hung up")
			}
			var pe *ascend.PeerError
			if got := errors.As(err, &pe); got != tc.blame || (got && (pe.Rank != 1 || pe.Op != "connect")) {
				t.Fatalf("err = %v: blames a rank %v, want %v (rank 1)", err, got, tc.blame)
			}
			if got := errors.Is(err, ErrPeerLeft); got != tc.left {
				t.Errorf("err = %v: ErrPeerLeft %v, want %v", err, got, tc.left)
			}
			if took > tc.atMost {
				t.Errorf("took %v, want at most %v", took, tc.atMost)
			}
			t.Logf("%v: %v", took.Round(time.Millisecond), err)
		})
	}
}

// TestProbe: a killed process's listener may still take a probe just after
// the process's links dropped, and drop it unanswered when it closes:
// probe counts that as a refusal (gone). A Listener answers the
// probe (alive); an address that takes connections and never answers (a
// frozen process) is neither, until ctx ends.
func TestProbe(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kind  string
		alive bool
		gone  bool
	}{
		{"closing", "closing", false, true}, // takes the first probe, then closes unanswered
		{"listener", "listener", true, false},
		{"silent", "silent", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var addr string
			if tc.kind == "listener" {
				addr = listen(t, ListenConfig{}).Addr()
			} else {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				addr = ln.Addr().String()
				if tc.kind == "closing" {
					// The dying process's listener: it has taken the first
					// probe and closes without answering it.
					go func() {
						if c, err := ln.Accept(); err == nil {
							ln.Close()
							c.Close()
						}
					}()
				} else {
					go func() {
						for {
							c, err := ln.Accept()
							if err != nil {
								return
							}
							defer c.Close()
						}
					}()
				}
			}
			wait := 5 * time.Second // ample: these end on their own
			if tc.kind == "silent" {
				wait = time.Second // ends only with ctx
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			alive, gone := probe(ctx, 3, addr, 150*time.Millisecond, 0, "probe: ")
			var pe *ascend.PeerError
			if alive != tc.alive || (gone != nil) != tc.gone || (gone != nil && (!errors.As(gone, &pe) || pe.Rank != 3)) {
				t.Fatalf("probe = %v, %v; want alive %v, gone %v", alive, gone, tc.alive, tc.gone)
			}
			t.Log(alive, gone)
		})
	}
}

// TestCheckLost: a lost link in the group's first barrier blames its rank
// unless that rank's listener answers; timeouts and mismatches always
// stand, and nothing is probed without a grace.
func TestCheckLost(t *testing.T) {
	live := listen(t, ListenConfig{}).Addr()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	addrs := []string{"", live, dead}
	lost := func(rank int) error { return &ascend.PeerError{Rank: rank, Op: "barrier", Err: io.EOF} }
	for _, tc := range []struct {
		name  string
		err   error
		grace time.Duration
		blame int // -1: names nobody
		left  bool
	}{
		{"lost, alive", lost(1), 100 * time.Millisecond, -1, true},
		{"lost, gone", lost(2), 100 * time.Millisecond, 2, false},
		{"timeout, alive", &ascend.PeerError{Rank: 1, Op: "barrier", Err: os.ErrDeadlineExceeded}, 100 * time.Millisecond, 1, false},
		{"mismatch, alive", &ascend.PeerError{Rank: 1, Op: "barrier", Err: ascend.ErrMismatch}, 100 * time.Millisecond, 1, false},
		{"lost, alive, no grace", lost(1), 0, 1, false},
		{"not a peer error", io.EOF, 100 * time.Millisecond, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkLost(context.Background(), tc.err, addrs, tc.grace)
			var pe *ascend.PeerError
			blamed := -1
			if errors.As(got, &pe) {
				blamed = pe.Rank
			}
			if blamed != tc.blame || errors.Is(got, ErrPeerLeft) != tc.left {
				t.Fatalf("checkLost(%v) = %v: blames %d, left %v; want %d, %v", tc.err, got, blamed, errors.Is(got, ErrPeerLeft), tc.blame, tc.left)
			}
		})
	}
}

func TestRankList(t *testing.T) {
	many := make([]int, 0, 473)
	for r := 527; len(many) < 473; r++ {
		many = append(many, r)
	}
	for _, tc := range []struct {
		ranks []int
		want  string
	}{
		{nil, "[]"},
		{[]int{3}, "[3]"},
		{[]int{1, 2, 3, 4, 5, 6, 7}, "[1 2 3 4 5 6 7]"},
		{[]int{1, 2, 3, 4, 5, 6, 7, 9}, "[1 2 3 4 5 … 9] (8 ranks)"},
		{many, "[527 528 529 530 531 … 999] (473 ranks)"},
	} {
		if got := rankList(tc.ranks); got != tc.want {
			t.Errorf("rankList(%d ranks) = %q, want %q", len(tc.ranks), got, tc.want)
		}
	}
}

// blackhole is a loopback address that takes no TCP connection and
// refuses none: a listening socket whose accept queue (backlog 0) is
// full, so the kernel drops every further SYN — as a partition, or a
// firewall that drops packets, leaves a dial hanging.
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr // full: this dial was dropped
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatalf("%s still takes connections", addr)
	return ""
}

// TestConnectReachWithin: a rank whose address takes no connection (a
// partition) is named within ReachWithin, whether this rank dials it
// (lower) or waits for it to dial (higher: its address is probed),
// although ConnectTimeout is long; without ReachWithin it is named only
// when ConnectTimeout passes. A rank whose listener answers is waited
// for past ReachWithin (TestConnectReachWithinWaitsForALateRank).
func TestConnectReachWithin(t *testing.T) {
	hole := blackhole(t)
	for _, tc := range []struct {
		name   string
		holeRk int
		opts   Options
		within time.Duration // the error comes about then
	}{
		{"lower rank unreachable", 0, Options{ConnectTimeout: 20 * time.Second, ReachWithin: 500 * time.Millisecond}, 500 * time.Millisecond},
		{"higher rank unreachable", 1, Options{ConnectTimeout: 20 * time.Second, ReachWithin: 500 * time.Millisecond}, 500 * time.Millisecond},
		{"higher rank, refused grace too", 1, Options{ConnectTimeout: 20 * time.Second, ReachWithin: 500 * time.Millisecond, RefusedGrace: 100 * time.Millisecond},
			500 * time.Millisecond},
		{"lower rank, no ReachWithin", 0, Options{ConnectTimeout: 1500 * time.Millisecond}, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			took, err := connectToNobody(t, "hole-"+tc.name, tc.holeRk, hole, tc.opts)
			if said := strings.Contains(err.Error(), "has taken no connection in 500ms (unreachable"); said != (tc.opts.ReachWithin > 0) {
				t.Errorf("err = %v: says unreachable %v, want %v", err, said, tc.opts.ReachWithin > 0)
			}
			if took < tc.within || took > tc.within+3*time.Second {
				t.Errorf("took %v, want about %v", took, tc.within)
			}
		})
	}
}

// TestConnectReachWithinWaitsForALateRank: ranks whose listeners answer
// but that join after ReachWithin — the lower one and the higher one in
// turn, as a peer restoring a checkpoint is late — are waited for until
// ConnectTimeout, and the group forms.
func TestConnectReachWithinWaitsForALateRank(t *testing.T) {
	for late := range 2 {
		t.Run(fmt.Sprintf("rank %d late", late), func(t *testing.T) {
			ls := []*Listener{listen(t, ListenConfig{}), listen(t, ListenConfig{})}
			gs := groups(fmt.Sprintf("reach-late-%d", late), ls, token(t))
			opts := Options{ConnectTimeout: 20 * time.Second, OpTimeout: 5 * time.Second, ReachWithin: 200 * time.Millisecond,
				RefusedGrace: 100 * time.Millisecond}
			res := make([]connectResult, 2)
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if i == late {
						time.Sleep(800 * time.Millisecond) // four times ReachWithin; its listener is up
					}
					res[i].comm, res[i].err = Connect(context.Background(), ls[i], gs[i], opts)
				}()
			}
			wg.Wait()
			defer closeAllComms(res)
			for r, x := range res {
				if x.err != nil {
					t.Errorf("rank %d: %v", r, x.err)
				}
			}
		})
	}
}

// TestConnectBlamesAForeignListener: at rank 0's address another program
// answers (an HTTP server, a proxy): the handshake reads garbage, and
// Connect fails with a PeerError naming rank 0 (its address is wrong:
// retrying the same group cannot help), at once, not after a timeout.
func TestConnectBlamesAForeignListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			c.Close()
		}
	}()
	took, err := connectToNobody(t, "foreign", 0, ln.Addr().String(), Options{ConnectTimeout: 20 * time.Second, OpTimeout: 5 * time.Second})
	if !strings.Contains(err.Error(), "does not answer as a cann-train node") || took > 5*time.Second {
		t.Errorf("after %v: %v", took, err)
	}
	t.Log(err)
}
