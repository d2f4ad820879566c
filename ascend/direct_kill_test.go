package ascend_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/shm"
	"github.com/cann-train/cann-train/ascend/tcp"
)

// The test binary doubles as a rank process for TestDirectRankKilled.
func TestMain(m *testing.M) {
	if os.Getenv("ASCEND_KILL_CHILD") == "1" {
		os.Exit(killChild())
	}
	os.Exit(m.Run())
}

// killChild is one rank: it forms the group over the listener inherited
// as fd 3, allreduces shared buffers until an error, says "ready" after
// the first and "error <rank> <message>" at the end.
func killChild() int {
	rank, _ := strconv.Atoi(os.Getenv("ASCEND_KILL_RANK"))
	addrs := strings.Split(os.Getenv("ASCEND_KILL_ADDRS"), ",")
	f := os.NewFile(3, "listener")
	ln, err := net.FileListener(f)
	if err != nil {
		fmt.Println("error -1", err)
		return 1
	}
	l := tcp.ListenConfig{}.Serve(ln.(*net.TCPListener))
	defer l.Close()
	ctx := context.Background()
	comm, err := tcp.Connect(ctx, l, tcp.Group{Session: "kill", Rank: rank, Addrs: addrs, Token: []byte("kill-test-token")},
		tcp.Options{SharedMemory: true, OpTimeout: time.Minute, SkipCalibration: true})
	if err != nil {
		fmt.Println("error -1", err)
		return 1
	}
	defer comm.Close()
	sb, err := comm.AllocShared(ctx, 1<<20)
	if err != nil {
		fmt.Println("error -1", err)
		return 1
	}
	for i := 0; ; i++ {
		if err := comm.AllReduce(ctx, sb.Floats(), ascend.Sum); err != nil {
			var pe *ascend.PeerError
			named := -1
			if errors.As(err, &pe) {
				named = pe.Rank
			}
			fmt.Println("error", named, err)
			return 0
		}
		if i == 0 {
			fmt.Println("ready")
		}
	}
}

// TestDirectRankKilled: two or three rank processes allreduce shared
// buffers (the direct algorithm: two ranks push, three go by blocks) in a
// loop; one is SIGKILLed mid-collective. The others must fail with a
// *PeerError naming it well within their one-minute op timeout: its
// link's liveness, not a timeout, tells them.
func TestDirectRankKilled(t *testing.T) {
	if !shm.Supported {
		t.Skip("no shared memory here")
	}
	for _, world := range []int{2, 3} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) { directRankKilled(t, world) })
	}
}

func directRankKilled(t *testing.T, world int) {
	const victim = 1
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	lns := make([]*net.TCPListener, world)
	addrs := make([]string, world)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln.(*net.TCPListener)
		addrs[i] = ln.Addr().String()
		defer ln.Close()
	}
	cmds := make([]*exec.Cmd, world)
	lines := make([]chan string, world)
	for r := range world {
		f, err := lns[r].File()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), "ASCEND_KILL_CHILD=1", fmt.Sprintf("ASCEND_KILL_RANK=%d", r), "ASCEND_KILL_ADDRS="+strings.Join(addrs, ","))
		cmd.ExtraFiles = []*os.File{f}
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		cmds[r] = cmd
		defer cmd.Process.Kill()
		lines[r] = make(chan string, 4)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines[r] <- sc.Text()
			}
			close(lines[r])
		}()
	}
	next := func(r int, within time.Duration) string {
		select {
		case l, ok := <-lines[r]:
			if !ok {
				return "(exited)"
			}
			return l
		case <-time.After(within):
			return "(nothing)"
		}
	}
	for r := range world {
		if l := next(r, time.Minute); l != "ready" {
			t.Fatalf("rank %d: %q, want ready", r, l)
		}
	}
	killed := time.Now()
	if err := cmds[victim].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for r := range world {
		if r == victim {
			continue
		}
		l := next(r, 20*time.Second)
		took := time.Since(killed)
		if !strings.HasPrefix(l, fmt.Sprintf("error %d ", victim)) {
			t.Errorf("rank %d after the kill: %q, want an error naming rank %d", r, l, victim)
		}
		t.Logf("rank %d, %v after the kill: %s", r, took.Round(time.Millisecond), l)
		if took > 10*time.Second {
			t.Errorf("rank %d noticed after %v", r, took)
		}
	}
}
