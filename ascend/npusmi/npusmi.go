// Package npusmi reads Huawei Ascend NPU state from the text output of the
// npu-smi tool, so that a node can report its devices (NPU id, chip, model,
// health, power, temperature, HBM, PCIe bus id) without linking the driver
// libraries.
//
// Parsers, one per command:
//
//	npu-smi info                  ParseInfo     the device table (+ process table)
//	npu-smi info -m               ParseMapping  NPU/chip → chip logic id
//	npu-smi info -t topo          ParseTopo     link-type matrix (HCCS, PIX, SYS, …)
//	npu-smi info -t board -i N    ParseBoard    versions, PCIe ids, chip count
//	npu-smi info -t usages -i N   ParseUsage    HBM/DDR capacity and usage rates
//	npu-smi info -t power -i N    ParsePower    real-time power (also -t common)
//
// Column widths change between driver versions, so the table parsers work
// from the header names and the "|" cell boundaries, never from offsets.
// Every parser is strict: output it does not recognise (an error message
// from the driver, a truncated table) is a [*ParseError] wrapping
// [ErrFormat] that names the line. [Probe] runs npu-smi through an injected
// [Runner] and returns [ErrNotFound] on hosts without it.
package npusmi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strconv"
	"strings"
)

var (
	// ErrFormat reports output the parsers do not recognise.
	ErrFormat = errors.New("npusmi: unrecognised npu-smi output")
	// ErrNotFound reports that the npu-smi executable is not installed.
	ErrNotFound = errors.New("npusmi: npu-smi not found")
)

// ParseError locates unrecognised output. Line is 1-based (0 when the
// problem is the output as a whole); Text is that line, trimmed.
type ParseError struct {
	Line int
	Text string
	Msg  string
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return "npusmi: " + e.Msg
	}
	return fmt.Sprintf("npusmi: line %d: %s (line: %q)", e.Line, e.Msg, e.Text)
}

// Unwrap makes errors.Is(err, ErrFormat) hold.
func (e *ParseError) Unwrap() error { return ErrFormat }

func lineErr(n int, text, format string, args ...any) error {
	return &ParseError{Line: n, Text: strings.TrimSpace(text), Msg: fmt.Sprintf(format, args...)}
}

// Runner runs a command and returns its standard output; exec.CommandContext
// is the real one ([ExecRunner]), tests inject canned output.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// ExecRunner runs the command with os/exec. A non-zero exit carries the
// command's standard error in the message.
func ExecRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return out, fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return out, err
}

// Command is the executable name Probe runs.
const Command = "npu-smi"

// Probe runs `npu-smi info` through run (ExecRunner when nil) and parses the
// table. It returns an error wrapping ErrNotFound when the executable does
// not exist, and one wrapping ErrFormat when the output is not a device
// table.
func Probe(ctx context.Context, run Runner) (*Info, error) {
	out, err := runSMI(ctx, run, "info")
	if err != nil {
		return nil, err
	}
	info, err := ParseInfo(out)
	if err != nil {
		return nil, fmt.Errorf("npusmi: %s info: %w", Command, err)
	}
	return info, nil
}

// ProbeMapping runs `npu-smi info -m` through run and parses it.
func ProbeMapping(ctx context.Context, run Runner) ([]Mapping, error) {
	out, err := runSMI(ctx, run, "info", "-m")
	if err != nil {
		return nil, err
	}
	m, err := ParseMapping(out)
	if err != nil {
		return nil, fmt.Errorf("npusmi: %s info -m: %w", Command, err)
	}
	return m, nil
}

func runSMI(ctx context.Context, run Runner, args ...string) ([]byte, error) {
	if run == nil {
		run = ExecRunner
	}
	out, err := run(ctx, Command, args...)
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w on this host (%v)", ErrNotFound, err)
	default:
		return nil, fmt.Errorf("npusmi: %s %s: %w", Command, strings.Join(args, " "), err)
	}
}

// lines splits output into lines without their line terminators.
func lines(out []byte) []string {
	s := strings.ReplaceAll(string(out), "\r\n", "\n")
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// unknown reports the placeholders npu-smi prints for a value it cannot read.
func unknown(s string) bool { return s == "-" || s == "NA" || s == "N/A" }

func atoi(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0
}
