package launch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The helper protocol (python/cann_train.py ↔ node worker) is three files
// per process, named by its environment:
//
//   - CANN_TRAIN_REPORT_FILE: the script appends one JSON object per line
//     (each line one write(2) on an O_APPEND descriptor, so a reader never
//     sees two records interleaved):
//     {"event":"report","step":120,"loss":0.31,"metrics":{"acc":0.9},"time":1712345678.5}
//     {"event":"saved","step":120,"time":…}  — checkpoint_dir() holds step 120, complete
//     {"event":"restored","step":100,"time":…}  — the script asked restored_step() (once,
//     when a checkpoint was restored): it is about to load that checkpoint
//     The node worker reads complete lines only; a line it cannot parse is
//     skipped (and counted), never fatal.
//   - CANN_TRAIN_ACK_FILE: the node worker replaces it (write to a
//     temporary file, rename) with the last step whose checkpoint it has
//     copied, as decimal text. saved(step) returns once it reads a value
//     ≥ step: the script may then overwrite the directory.
//   - CANN_TRAIN_REQUEST_FILE (one per node, shared by its processes): the
//     node worker replaces it the same way with the step the run asks a
//     checkpoint at (activities' RequestCheckpoint); should_checkpoint(step)
//     says yes at that step besides every checkpoint_every-th. No file: no
//     request.
//
// Files rather than a socket: nothing to connect, no ordering between the
// worker's and the script's start, a record survives a slow reader, and
// the report file doubles as the process's metrics log on the node.

// Event types of a report line.
const (
	EventReport = "report"
	EventSaved  = "saved"
	// EventRestored: the script read the restored step (restored_step(),
	// once, when it is not 0): it got past its start, on to loading the
	// checkpoint. Node workers before it skip the line (ReportReader.Bad).
	EventRestored = "restored"
)

// Event is one report line.
type Event struct {
	Event   string             `json:"event"`
	Step    int64              `json:"step"`
	Loss    *float64           `json:"loss,omitempty"`
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Time is seconds since the Unix epoch, as the script saw it.
	Time float64 `json:"time,omitempty"`
}

// ReportReader reads a report file as it grows.
type ReportReader struct {
	Path string
	off  int64
	part []byte
	// Bad counts lines that did not parse.
	Bad int
}

// Poll returns the events appended since the last call. A file that does
// not exist yet has no events.
func (r *ReportReader) Poll() ([]Event, error) {
	f, err := os.Open(r.Path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(r.off, io.SeekStart); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, 8<<20))
	if err != nil {
		return nil, err
	}
	r.off += int64(len(b))
	data := append(r.part, b...)
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		r.part = data
		return nil, nil
	}
	r.part = append([]byte(nil), data[end+1:]...)
	var out []Event
	for _, line := range bytes.Split(data[:end], []byte{'\n'}) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(line, &e); err != nil || (e.Event != EventReport && e.Event != EventSaved && e.Event != EventRestored) {
			r.Bad++
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// WriteAck records step as the last checkpoint copied: a temporary file
// renamed over path, so the script never reads half a number.
func WriteAck(path string, step int64) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ack-*")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(strconv.FormatInt(step, 10) + "\n"); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// ReadAck returns the step in an ack file (-1 when there is none).
func ReadAck(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return -1, nil
	}
	if err != nil {
		return -1, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1, fmt.Errorf("ack file %s: %w", path, err)
	}
	return n, nil
}
