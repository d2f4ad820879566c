package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/cann-train/cann-train/ascend/tcp"
	"github.com/cann-train/cann-train/internal/procattr"
)

// ChildSubcommand is the first argument Launch passes to its children.
const ChildSubcommand = "bench-rank"

// ChildArgs is what one child process of Launch needs to run its rank.
type ChildArgs struct {
	Rank    int
	Addrs   []string // every rank's listener address
	Session string
	Token   []byte
	// ListenFD is the file descriptor of this rank's listening socket,
	// inherited from the parent (0: listen on Addrs[Rank] instead).
	ListenFD int
	Options  Options
}

// Args renders a as the command-line arguments ParseChildArgs reads
// (without the subcommand): --rank, --addrs, --session, --token (hex),
// --listen-fd and --options (JSON).
func (a ChildArgs) Args() ([]string, error) {
	opts, err := json.Marshal(a.Options)
	if err != nil {
		return nil, err
	}
	return []string{
		"--rank", fmt.Sprint(a.Rank),
		"--addrs", strings.Join(a.Addrs, ","),
		"--session", a.Session,
		"--token", hex.EncodeToString(a.Token),
		"--listen-fd", fmt.Sprint(a.ListenFD),
		"--options", string(opts),
	}, nil
}

// ParseChildArgs parses the arguments Launch gives a child (after the
// subcommand; a leading "bench-rank" is skipped too). A CLI's hidden
// bench-rank subcommand should not parse flags itself (cobra:
// DisableFlagParsing) and hand its arguments here, then to RunChild.
func ParseChildArgs(args []string) (ChildArgs, error) {
	if len(args) > 0 && args[0] == ChildSubcommand {
		args = args[1:]
	}
	var a ChildArgs
	var addrs, token, opts string
	fs := flag.NewFlagSet(ChildSubcommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&a.Rank, "rank", -1, "")
	fs.StringVar(&addrs, "addrs", "", "")
	fs.StringVar(&a.Session, "session", "", "")
	fs.StringVar(&token, "token", "", "")
	fs.IntVar(&a.ListenFD, "listen-fd", 0, "")
	fs.StringVar(&opts, "options", "{}", "")
	if err := fs.Parse(args); err != nil {
		return a, fmt.Errorf("bench: child arguments: %w", err)
	}
	if fs.NArg() > 0 {
		return a, fmt.Errorf("bench: unexpected child arguments %q", fs.Args())
	}
	a.Addrs = strings.Split(addrs, ",")
	var err error
	if a.Token, err = hex.DecodeString(token); err != nil || len(a.Token) == 0 {
		return a, errors.New("bench: child needs a hex --token")
	}
	if a.Rank < 0 || a.Rank >= len(a.Addrs) || a.Session == "" {
		return a, fmt.Errorf("bench: child rank %d of %d addresses, session %q", a.Rank, len(a.Addrs), a.Session)
	}
	if err := json.Unmarshal([]byte(opts), &a.Options); err != nil {
		return a, fmt.Errorf("bench: child --options: %w", err)
	}
	return a, nil
}

// RunChild runs one rank of a Launch: it takes over (or opens) its
// listener, forms the group over TCP and runs RunRank, rank 0 writing the
// report to stdout.
func RunChild(ctx context.Context, a ChildArgs, stdout io.Writer) error {
	if n := rankProcs(a.Options.Procs, os.Getenv("GOMAXPROCS") != "", len(a.Addrs), runtime.NumCPU()); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	var l *tcp.Listener
	if a.ListenFD > 0 {
		f := os.NewFile(uintptr(a.ListenFD), "bench-listener")
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("bench: inherited listener: %w", err)
		}
		tl, ok := ln.(*net.TCPListener)
		if !ok {
			ln.Close()
			return fmt.Errorf("bench: inherited listener is %T, not TCP", ln)
		}
		l = tcp.ListenConfig{}.Serve(tl)
	} else {
		var err error
		if l, err = tcp.Listen(a.Addrs[a.Rank]); err != nil {
			return err
		}
	}
	defer l.Close()
	comm, err := tcp.Connect(ctx, l, tcp.Group{Session: a.Session, Rank: a.Rank, Addrs: a.Addrs, Token: a.Token},
		tcp.Options{ChunkBytes: a.Options.ChunkBytes, OpTimeout: 10 * time.Minute, SharedMemory: a.Options.SharedMemory, Spin: a.Options.Spin, SocketBuffer: int(a.Options.SocketBuffer)})
	if err != nil {
		return err
	}
	defer comm.Close()
	return RunRank(ctx, comm, a.Options, stdout)
}

// Launch runs the benchmark on opts.Ranks ranks, each a separate OS
// process: self(args...) must return a command that runs this program's
// bench-rank subcommand with args (the first of which is "bench-rank"),
// e.g. exec.Command(os.Args[0], args...). Launch binds every rank's
// listener on 127.0.0.1 itself and passes it down (no port races), with a
// fresh session and token; rank 0's standard output (the report) goes to
// opts.Stdout and every child's standard error to opts.Stderr, unless
// self set them. If a child fails or ctx ends, the others are killed; on
// Linux the kernel kills them if the launcher dies. Before starting any,
// Launch refuses options every rank would refuse, and a sweep whose
// buffers exceed the host's available memory (where /proc/meminfo says).
func Launch(ctx context.Context, opts Options, self func(args ...string) *exec.Cmd) error {
	if err := opts.checkRange(); err != nil {
		return err
	}
	opts = opts.Defaults()
	if err := opts.validate(); err != nil {
		return err
	}
	if err := opts.checkLaunch(); err != nil {
		return err
	}
	if avail, ok := memAvailable(); ok {
		if err := opts.checkMemory(avail); err != nil {
			return err
		}
	}
	n := opts.Ranks
	stdout, stderr := opts.Stdout, opts.Stderr
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	if _, ok := stderr.(*os.File); !ok {
		stderr = &lockedWriter{w: stderr} // every child's copier writes to it
	}
	opts.Stdout, opts.Stderr = nil, nil
	token := make([]byte, 32)
	id := make([]byte, 8)
	if _, err := rand.Read(token); err != nil {
		return err
	}
	if _, err := rand.Read(id); err != nil {
		return err
	}
	files := make([]*os.File, n)
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	addrs := make([]string, n)
	for i := range n {
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return err
		}
		addrs[i] = ln.Addr().String()
		files[i], err = ln.File() // a duplicate the child inherits
		ln.Close()
		if err != nil {
			return err
		}
	}
	session := "bench/" + hex.EncodeToString(id)
	cmds := make([]*exec.Cmd, n)
	for i := range n {
		args, err := ChildArgs{Rank: i, Addrs: addrs, Session: session, Token: token, ListenFD: 3, Options: opts}.Args()
		if err != nil {
			return err
		}
		cmd := self(append([]string{ChildSubcommand}, args...)...)
		procattr.DieWithParent(cmd)
		cmd.ExtraFiles = []*os.File{files[i]}
		if cmd.Stdout == nil {
			cmd.Stdout = stdout
			if i != 0 {
				cmd.Stdout = io.Discard
			}
		}
		if cmd.Stderr == nil {
			cmd.Stderr = stderr
		}
		cmds[i] = cmd
	}
	var mu sync.Mutex
	started := make([]*exec.Cmd, 0, n)
	killAll := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range started {
			_ = c.Process.Kill() // a process we started; errors if it already exited
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	failed := make(chan struct{})
	var failOnce sync.Once
	for i, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			killAll()
			wg.Wait()
			return fmt.Errorf("bench: start rank %d: %w", i, err)
		}
		mu.Lock()
		started = append(started, cmd)
		mu.Unlock()
		files[i].Close()
		files[i] = nil
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Wait(); err != nil {
				errs[i] = fmt.Errorf("bench: rank %d: %w", i, err)
				failOnce.Do(func() { close(failed) })
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-failed:
		// Give the others a moment to report their own view, then stop them.
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			killAll()
			<-done
		}
	case <-ctx.Done():
		killAll()
		<-done
		return ctx.Err()
	}
	return errors.Join(errs...)
}

// checkLaunch refuses what each rank would refuse on its own, once per
// rank, after they had started: a root that is not one of the ranks, a
// frame size the links do not take.
func (o Options) checkLaunch() error {
	switch {
	case o.Root >= o.Ranks:
		return fmt.Errorf("bench: -r %d: want a rank below the %d launched", o.Root, o.Ranks)
	case o.ChunkBytes != 0 && (o.ChunkBytes < 4 || o.ChunkBytes > tcp.MaxFrame):
		return fmt.Errorf("bench: --chunk %d: want 0 (the default) or 4 to %d bytes", o.ChunkBytes, tcp.MaxFrame)
	}
	return nil
}

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// rankProcs is the GOMAXPROCS a rank process sets (see Options.Procs); 0
// leaves the runtime's own.
func rankProcs(procs int, envSet bool, ranks, cpus int) int {
	switch {
	case procs > 0:
		return procs
	case procs < 0:
		return cpus
	case envSet || ranks < cpus:
		return 0 // spare cores: a rank's send and receive may run side by side
	}
	return 1
}
