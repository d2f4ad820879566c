package tcp

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/cann-train/cann-train/ascend"
)

// ListenConfig tunes a Listener. The zero value uses the defaults.
type ListenConfig struct {
	// HoldTimeout is how long an inbound connection for a (session, rank)
	// nobody waits for yet is kept before it is dropped (the dialer is told
	// to retry). Default 30s.
	HoldTimeout time.Duration
	// HelloTimeout bounds reading the first handshake message of an
	// inbound connection. Default 10s.
	HelloTimeout time.Duration
	// MaxHeld bounds the connections held at once. Default 1024.
	MaxHeld int
}

const (
	defaultHoldTimeout  = 30 * time.Second
	defaultHelloTimeout = 10 * time.Second
	defaultMaxHeld      = 1024
)

// Listener is a node-level TCP listener shared by all sessions of a process.
type Listener struct {
	cfg  ListenConfig
	ln   *net.TCPListener
	done chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	waiters  map[key]*waiter
	held     map[key][]*inbound
	nheld    int
	inflight map[net.Conn]struct{} // connections still sending their hello
}

// key routes an inbound connection: the session and the rank it dialled.
type key struct {
	session string
	rank    int
}

type waiter struct{ ch chan *inbound }

// inbound is an accepted connection whose hello has been read.
type inbound struct {
	nc    *net.TCPConn
	hello hello
	timer *time.Timer
}

// Listen opens a Listener on addr (e.g. ":0", "10.0.0.3:7000") with the
// default ListenConfig.
func Listen(addr string) (*Listener, error) { return ListenConfig{}.Listen(addr) }

// Listen opens a Listener on addr.
func (lc ListenConfig) Listen(addr string) (*Listener, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenTCP("tcp", ta)
	if err != nil {
		return nil, err
	}
	return lc.Serve(ln), nil
}

// Serve makes a Listener of an already bound TCP listener, e.g. one a
// parent process passed down (net.FileListener); the Listener owns ln
// from now on.
func (lc ListenConfig) Serve(ln *net.TCPListener) *Listener {
	if lc.HoldTimeout <= 0 {
		lc.HoldTimeout = defaultHoldTimeout
	}
	if lc.HelloTimeout <= 0 {
		lc.HelloTimeout = defaultHelloTimeout
	}
	if lc.MaxHeld <= 0 {
		lc.MaxHeld = defaultMaxHeld
	}
	l := &Listener{
		cfg:      lc,
		ln:       ln,
		done:     make(chan struct{}),
		waiters:  make(map[key]*waiter),
		held:     make(map[key][]*inbound),
		inflight: make(map[net.Conn]struct{}),
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

// Addr is the address the Listener is bound to (host:port), e.g. to publish
// as this rank's entry of Group.Addrs. For a wildcard bind the host part is
// the unspecified address; publish a routable host with the port.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Close stops accepting, drops held and half-open connections, fails the
// Connects waiting on it with ErrListenerClosed, and waits for its
// goroutines. Established communicators are not affected.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	err := l.ln.Close()
	for k, ins := range l.held {
		for _, in := range ins {
			in.timer.Stop()
			in.nc.Close()
		}
		delete(l.held, k)
	}
	l.nheld = 0
	for nc := range l.inflight {
		nc.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
	return err
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		nc, err := l.ln.AcceptTCP()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient (e.g. out of file descriptors): back off.
			select {
			case <-time.After(backoff):
			case <-l.done:
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			nc.Close()
			return
		}
		l.inflight[nc] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go l.readHello(nc)
	}
}

// readHello reads the first message and dispatches the connection.
func (l *Listener) readHello(nc *net.TCPConn) {
	defer l.wg.Done()
	_ = nc.SetDeadline(time.Now().Add(l.cfg.HelloTimeout))
	st, body, err := readMsg(nc, msgHello)
	var h hello
	if err == nil && st != stOK {
		err = fmt.Errorf("%w: hello with status %d", ascend.ErrProtocol, st)
	}
	if err == nil {
		h, err = decodeHello(body)
	}
	l.mu.Lock()
	delete(l.inflight, nc)
	if err != nil || l.closed {
		l.mu.Unlock()
		if err != nil {
			_ = writeMsg(nc, msgChallenge, errStatus(err), nil)
		}
		nc.Close()
		return
	}
	_ = nc.SetDeadline(time.Time{})
	in := &inbound{nc: nc, hello: h}
	k := key{h.session, h.to}
	if w := l.waiters[k]; w != nil {
		select {
		case w.ch <- in:
			l.mu.Unlock()
			return
		default: // flooded: refuse
		}
	} else if l.nheld < l.cfg.MaxHeld {
		l.held[k] = append(l.held[k], in)
		l.nheld++
		in.timer = time.AfterFunc(l.cfg.HoldTimeout, func() { l.expire(k, in) })
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	reject(nc, stRetry)
}

// expire drops a held connection nobody claimed in time.
func (l *Listener) expire(k key, in *inbound) {
	l.mu.Lock()
	ins := l.held[k]
	found := false
	for i, x := range ins {
		if x == in {
			ins = append(ins[:i], ins[i+1:]...)
			found = true
			break
		}
	}
	if found {
		l.nheld--
		if len(ins) == 0 {
			delete(l.held, k)
		} else {
			l.held[k] = ins
		}
	}
	l.mu.Unlock()
	if found {
		reject(in.nc, stRetry)
	}
}

// reject answers the hello with a failure status and closes.
func reject(nc *net.TCPConn, st byte) {
	_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
	_ = writeMsg(nc, msgChallenge, st, nil)
	nc.Close()
}

// register makes Connect for k the receiver of its inbound connections,
// handing over those already held. capacity bounds the queue.
func (l *Listener) register(k key, capacity int) (*waiter, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrListenerClosed
	}
	if l.waiters[k] != nil {
		return nil, errDuplicateConnect
	}
	w := &waiter{ch: make(chan *inbound, capacity)}
	l.waiters[k] = w
	for _, in := range l.held[k] {
		in.timer.Stop()
		l.nheld--
		select {
		case w.ch <- in:
		default: // more than capacity claims: surely bogus
			in.nc.Close()
		}
	}
	delete(l.held, k)
	return w, nil
}

// unregister removes w and closes what it did not consume.
func (l *Listener) unregister(k key, w *waiter) {
	l.mu.Lock()
	if l.waiters[k] == w {
		delete(l.waiters, k)
	}
	l.mu.Unlock()
	for {
		select {
		case in := <-w.ch:
			in.nc.Close()
		default:
			return
		}
	}
}

var errDuplicateConnect = fmt.Errorf("%w: a Connect for this session and rank is already running on this listener", ErrGroupMismatch)
