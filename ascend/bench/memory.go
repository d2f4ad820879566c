package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
)

// bufferWords is the length of the send and receive buffers one of p ranks
// allocates for the sweep (float32 words; send even, see Run).
func (o Options) bufferWords(p int) (send, recv int) {
	es := o.elemBytes()
	for _, c := range o.Collectives {
		_, s, r, _ := collectives[c].shape(o.MaxBytes, p, es)
		send, recv = max(send, s*es/4), max(recv, r*es/4)
	}
	return send + send%2, recv
}

// rankBytes is what one rank's buffers take: send and receive, and with
// Touch the pattern and sink beside them.
func (o Options) rankBytes() float64 {
	s, r := o.bufferWords(o.Ranks)
	words := float64(s) + float64(r)
	if o.Touch {
		words += 2 * float64(max(s, r))
	}
	return 4 * words
}

// checkMemory refuses a sweep whose buffers, over all ranks, exceed the
// host's available memory (bytes): each rank would die in the runtime's
// out-of-memory crash, or the kernel's killer would pick one. The error
// names bench's own flags (-e, the ranks).
func (o Options) checkMemory(available uint64) error {
	return o.memoryFits(available, "bench: -e", "lower -e or the ranks")
}

// CheckHostMemory is checkMemory for a command that launches ranks
// through Launch with flags of its own: its message names the size as
// sizeFlag ("topo-scan: --bytes") and says what to lower (advice, e.g.
// "lower --bytes or --ranks"), where bench's would send the user to -e,
// a flag that command does not have. Set MaxBytes to what the ranks
// really transfer: Launch prices it too, and by default prices bench's
// 256 MiB sweep. Nil where /proc/meminfo cannot be read.
func (o Options) CheckHostMemory(sizeFlag, advice string) error {
	avail, ok := memAvailable()
	if !ok {
		return nil
	}
	return o.Defaults().memoryFits(avail, sizeFlag, advice)
}

func (o Options) memoryFits(available uint64, sizeFlag, advice string) error {
	per := o.rankBytes()
	if total := per * float64(o.Ranks); total > float64(available) {
		touch := ""
		if o.Touch {
			touch = ", pattern and sink (--touch 1)"
		}
		return fmt.Errorf("%s %s needs %s of buffers per rank (send, receive%s) × %d ranks = %s; this host has %s available (MemAvailable): %s",
			sizeFlag, FormatSize(o.MaxBytes), gib(per), touch, o.Ranks, gib(total), gib(float64(available)), advice)
	}
	return nil
}

// gib writes b bytes in GiB, or in MiB below 1 GiB (a probe's 8 MiB is
// not "0.0 GiB").
func gib(b float64) string {
	if b < 1<<30 {
		return strconv.FormatFloat(b/(1<<20), 'f', 1, 64) + " MiB"
	}
	return strconv.FormatFloat(b/(1<<30), 'f', 1, 64) + " GiB"
}

// memAvailable is the host's MemAvailable (bytes) from /proc/meminfo;
// false where that cannot be read (not Linux, or an old kernel).
func memAvailable() (uint64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	return parseMemAvailable(bytes.NewReader(b))
}

// parseMemAvailable reads the MemAvailable line of /proc/meminfo
// ("MemAvailable:   22334456 kB").
func parseMemAvailable(r io.Reader) (uint64, bool) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 3 && string(f[0]) == "MemAvailable:" && string(f[2]) == "kB" {
			kb, err := strconv.ParseUint(string(f[1]), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
