package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
)

// State is a complete, self-describing snapshot of a [Trainer]: the fields
// that fix the model and the data order, the step, the parameters and the
// Adam state. Restoring it into a fresh Trainer with the same configuration
// continues training bit-identically. State is the same on every rank, so a
// snapshot taken on any rank restores every rank.
//
// Nothing in a State is per rank: in data parallelism the parameters and
// the optimizer state are replicated, and the data cursor is the global
// step. A State made with Config.GlobalBatch set records GlobalBatch (and
// zero BatchPerRank and World), and restores into a Trainer with any World
// and Rank; see [Trainer.Restore].
type State struct {
	// Configuration fingerprint (everything but Rank) and dataset shape.
	// Exactly one of GlobalBatch and BatchPerRank*World is non-zero.
	Seed         uint64
	Hidden       []int
	LearningRate float64
	BatchPerRank int
	World        int
	GlobalBatch  int
	Dim          int
	Classes      int

	// Step is the next global step to train; AdamT the number of Adam
	// updates applied (equal to Step for states produced by this package).
	Step  int64
	AdamT int64

	// Params, M and V are the parameters and Adam's first and second
	// moment estimates, each NumParams long, in [Trainer.Params] layout.
	// With OneBitAdam past FreezeStep, V is the frozen variance and M the
	// last averaged momentum.
	Params []float32
	M      []float32
	V      []float32

	// Optimizer and FreezeStep are those of the Config (part of the
	// configuration fingerprint unless Optimizer is Adam).
	Optimizer  Optimizer
	FreezeStep int64
	// SqAvg and SqFrozen are, with OneBitAdam, per tensor of
	// [Trainer.Tensors], the beta2 moving average (not bias-corrected) of
	// the sum of squared gradients averaged over ranks, and its
	// bias-corrected value at FreezeStep (0 before): what scales the
	// frozen variance. Both are nil with Adam.
	SqAvg    []float64
	SqFrozen []float64

	// CommState is the caller's communication state, which the engine
	// carries and checksums but never reads: what a reducer needs to
	// continue bit-identically after a restore, such as the error-feedback
	// residuals of a compressing reducer. Unlike everything else here it is
	// per rank: CommState[r] is rank r's, for the World the state was made
	// on. Snapshot leaves it nil; a caller that keeps such state gathers
	// every rank's into it before saving, and after Restore hands each rank
	// its own (or, on another world size, resets it: error feedback then
	// loses only the residual it was still holding back).
	CommState [][]byte
}

// Snapshot returns a deep copy of everything needed to continue training.
func (t *Trainer) Snapshot() *State {
	s := t.configState()
	s.Hidden = slices.Clone(s.Hidden)
	s.Step, s.AdamT = t.step, t.adamT
	s.Params, s.M, s.V = slices.Clone(t.params), slices.Clone(t.m), slices.Clone(t.v)
	if len(t.sq) > 0 {
		s.SqAvg, s.SqFrozen = slices.Clone(t.sq), slices.Clone(t.sqFrozen)
	}
	return s
}

// extended reports whether s needs the version 3/4 encoding.
func (s *State) extended() bool { return s.Optimizer != Adam || len(s.CommState) > 0 }

// configState returns a State holding only the configuration fields of t
// (Hidden aliases the trainer's).
func (t *Trainer) configState() *State {
	s := &State{
		Seed:         t.cfg.Seed,
		Hidden:       t.cfg.Hidden,
		LearningRate: t.cfg.LearningRate,
		Dim:          t.sizes[0],
		Classes:      t.sizes[len(t.sizes)-1],
		Optimizer:    t.cfg.Optimizer,
		FreezeStep:   t.cfg.FreezeStep,
	}
	if t.cfg.GlobalBatch > 0 {
		s.GlobalBatch = t.cfg.GlobalBatch
	} else {
		s.BatchPerRank, s.World = t.cfg.BatchPerRank, t.cfg.World
	}
	return s
}

// GlobalBatchSize returns the number of examples per step across all ranks
// of the run s was made for: GlobalBatch, or BatchPerRank*World.
func (s *State) GlobalBatchSize() int {
	if s.GlobalBatch > 0 {
		return s.GlobalBatch
	}
	return s.BatchPerRank * s.World
}

// describeBatch says how s sets its global batch, for error messages.
func (s *State) describeBatch() string {
	if s.GlobalBatch > 0 {
		return fmt.Sprintf("GlobalBatch %d", s.GlobalBatch)
	}
	return fmt.Sprintf("%d (BatchPerRank %d × World %d)", s.BatchPerRank*s.World, s.BatchPerRank, s.World)
}

// Restore replaces the trainer's step, parameters and optimizer state with
// s, after checking that s was made for the same model and data order; the
// error names every mismatching field. s is copied, not retained. On error
// the trainer is unchanged.
//
// Resharding: when the state or the trainer uses Config.GlobalBatch, only
// the global batch size must match (GlobalBatch, or BatchPerRank*World on
// the side that does not use it), and World and Rank may differ: the data
// order is a function of (Seed, step, global batch) and each rank recomputes
// its slice, so training continues on the new world with the same global
// batch. (A state made with BatchPerRank therefore continues on another
// world size in a trainer with GlobalBatch = its BatchPerRank*World.) When
// neither uses GlobalBatch, BatchPerRank and World must both match.
func (t *Trainer) Restore(s *State) error {
	if s == nil {
		return errors.New("engine: restore: state is nil")
	}
	var errs []error
	mismatch := func(field string, state, trainer any) {
		errs = append(errs, fmt.Errorf("%s: state has %v, trainer has %v", field, state, trainer))
	}
	if s.Seed != t.cfg.Seed {
		mismatch("Seed", s.Seed, t.cfg.Seed)
	}
	if !slices.Equal(s.Hidden, t.cfg.Hidden) {
		mismatch("Hidden", s.Hidden, t.cfg.Hidden)
	}
	if math.Float64bits(s.LearningRate) != math.Float64bits(t.cfg.LearningRate) {
		mismatch("LearningRate", s.LearningRate, t.cfg.LearningRate)
	}
	if s.GlobalBatch == 0 && t.cfg.GlobalBatch == 0 {
		if s.BatchPerRank != t.cfg.BatchPerRank {
			mismatch("BatchPerRank", s.BatchPerRank, t.cfg.BatchPerRank)
		}
		if s.World != t.cfg.World {
			mismatch("World", s.World, t.cfg.World)
		}
	} else if g := s.GlobalBatchSize(); s.GlobalBatch < 0 || g != t.cfg.GlobalBatchSize() {
		mismatch("global batch", s.describeBatch(), t.configState().describeBatch())
	} else if s.GlobalBatch > 0 && (s.BatchPerRank != 0 || s.World != 0) {
		errs = append(errs, fmt.Errorf("state has GlobalBatch=%d and BatchPerRank=%d, World=%d: want both 0", s.GlobalBatch, s.BatchPerRank, s.World))
	}
	if s.Optimizer != t.cfg.Optimizer {
		mismatch("Optimizer", s.Optimizer, t.cfg.Optimizer)
	}
	if s.FreezeStep != t.cfg.FreezeStep {
		mismatch("FreezeStep", s.FreezeStep, t.cfg.FreezeStep)
	}
	if len(s.SqAvg) != len(t.sq) || len(s.SqFrozen) != len(t.sq) {
		errs = append(errs, fmt.Errorf("len(SqAvg), len(SqFrozen): state has %d, %d, trainer has %d tensor statistics", len(s.SqAvg), len(s.SqFrozen), len(t.sq)))
	}
	if s.Dim != t.sizes[0] {
		mismatch("Dim", s.Dim, t.sizes[0])
	}
	if s.Classes != t.sizes[len(t.sizes)-1] {
		mismatch("Classes", s.Classes, t.sizes[len(t.sizes)-1])
	}
	for _, a := range []struct {
		name string
		n    int
	}{{"Params", len(s.Params)}, {"M", len(s.M)}, {"V", len(s.V)}} {
		if a.n != t.nParams {
			errs = append(errs, fmt.Errorf("len(%s): state has %d, trainer has %d parameters", a.name, a.n, t.nParams))
		}
	}
	if s.Step < 0 || s.AdamT < 0 {
		errs = append(errs, fmt.Errorf("config Step=%d, AdamT=%d: want >= 0", s.Step, s.AdamT))
	}
	if len(errs) > 0 {
		return fmt.Errorf("engine: restore: state does not fit this trainer: %w", errors.Join(errs...))
	}
	copy(t.params, s.Params)
	copy(t.m, s.M)
	copy(t.v, s.V)
	copy(t.sq, s.SqAvg)
	copy(t.sqFrozen, s.SqFrozen)
	t.floorValid = false
	t.step, t.adamT = s.Step, s.AdamT
	return nil
}

// ConfigFingerprint returns a hex SHA-256 over the fields that must match
// for a State to restore into a Trainer (everything in Config but Rank, plus
// the dataset shape, but not the bucket sizes). Equal fingerprints mean
// Restore will accept the state as far as configuration goes.
//
// With Config.GlobalBatch set the fingerprint covers GlobalBatch instead of
// BatchPerRank and World, so it is the same for every world size.
func (t *Trainer) ConfigFingerprint() string {
	return t.configState().configFingerprint()
}

// ConfigFingerprint is the fingerprint of the configuration s was made for;
// see [Trainer.ConfigFingerprint].
func (s *State) ConfigFingerprint() string { return s.configFingerprint() }

func (s *State) configFingerprint() string {
	// Version 1 (BatchPerRank and World) is unchanged, so fingerprints
	// recorded before GlobalBatch existed still compare equal.
	b := []byte("cann-train/engine config v1\x00")
	batch := []int{s.BatchPerRank, s.World}
	if s.GlobalBatch != 0 {
		b = []byte("cann-train/engine config v2\x00")
		batch = []int{s.GlobalBatch}
	}
	b = binary.LittleEndian.AppendUint64(b, s.Seed)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.LearningRate))
	for _, v := range append(batch, s.Dim, s.Classes, len(s.Hidden)) {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	for _, h := range s.Hidden {
		b = binary.LittleEndian.AppendUint64(b, uint64(h))
	}
	if s.Optimizer != Adam {
		// Appended only for other optimizers: Adam fingerprints are those
		// recorded before the optimizer was configurable.
		b = append(b, "\x00optimizer\x00"...)
		b = binary.LittleEndian.AppendUint64(b, uint64(s.Optimizer))
		b = binary.LittleEndian.AppendUint64(b, uint64(s.FreezeStep))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Binary encoding, versions 1 to 4 (all integers little-endian):
//
//	offset size
//	     0    4  magic "CTST"
//	     4    2  version (1: BatchPerRank mode, 2: GlobalBatch mode;
//	             3 and 4: the same with the extension below)
//	     6    2  reserved, 0
//	     8    8  Seed
//	    16    8  LearningRate (IEEE-754 bits)
//	    24    8  Step (int64)
//	    32    8  AdamT (int64)
//	    40    4  versions 1, 3: BatchPerRank; versions 2, 4: GlobalBatch (>= 1)
//	    44    4  versions 1, 3: World;        versions 2, 4: reserved, 0
//	    48    4  Dim
//	    52    4  Classes
//	    56    4  number of hidden layers H
//	    60    4  number of parameters P
//	    64  4*H  Hidden widths
//	     .  4*P  Params (float32 bits)
//	     .  4*P  M
//	     .  4*P  V
//	     .       versions 3 and 4 only, the extension:
//	          4  Optimizer
//	          4  number of tensor statistics T (0 with Adam)
//	          8  FreezeStep (int64)
//	        8*T  SqAvg (float64 bits)
//	        8*T  SqFrozen
//	          4  number of CommState entries R
//	             R times: 4 length L, L bytes, zero padding to a multiple of 4
//	     .    4  CRC-32C (Castagnoli) of every preceding byte
//
// A state with the Adam optimizer and no CommState is written as version 1
// or 2, byte for byte as before the extension existed (and a version 3 or
// 4 state without anything to extend is refused, so every accepted
// encoding is the one MarshalBinary writes); any other as version 3 or 4.
// All four are read. The header stays 64 bytes, a multiple of 4, as
// engine/checkpoint relies on, and so does every section after it.
const (
	stateMagic      = "CTST"
	stateVersion    = 1
	stateVersionGB  = 2
	stateVersionExt = 2 // added to the version when the extension follows
	stateHeaderLen  = 64
	stateCRCLen     = 4
	stateExtLen     = 20 // the extension's fixed part
)

// castagnoli returns the CRC-32C table (crc32 builds it once internally).
func castagnoli() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) }

// MarshalBinary encodes s in the versioned, checksummed format above.
func (s *State) MarshalBinary() ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("engine: marshal state: %w", err)
	}
	p := len(s.Params)
	size := stateHeaderLen + 4*len(s.Hidden) + 12*p + stateCRCLen
	if s.extended() {
		size += stateExtLen + 16*len(s.SqAvg)
		for _, c := range s.CommState {
			size += 4 + pad4(len(c))
		}
	}
	b := make([]byte, stateHeaderLen, size)
	copy(b, stateMagic)
	le := binary.LittleEndian
	version, f40, f44 := stateVersion, s.BatchPerRank, s.World
	if s.GlobalBatch > 0 {
		version, f40, f44 = stateVersionGB, s.GlobalBatch, 0
	}
	if s.extended() {
		version += stateVersionExt
	}
	le.PutUint16(b[4:], uint16(version))
	le.PutUint64(b[8:], s.Seed)
	le.PutUint64(b[16:], math.Float64bits(s.LearningRate))
	le.PutUint64(b[24:], uint64(s.Step))
	le.PutUint64(b[32:], uint64(s.AdamT))
	le.PutUint32(b[40:], uint32(f40))
	le.PutUint32(b[44:], uint32(f44))
	le.PutUint32(b[48:], uint32(s.Dim))
	le.PutUint32(b[52:], uint32(s.Classes))
	le.PutUint32(b[56:], uint32(len(s.Hidden)))
	le.PutUint32(b[60:], uint32(p))
	for _, h := range s.Hidden {
		b = le.AppendUint32(b, uint32(h))
	}
	for _, arr := range [][]float32{s.Params, s.M, s.V} {
		for _, x := range arr {
			b = le.AppendUint32(b, math.Float32bits(x))
		}
	}
	if s.extended() {
		b = le.AppendUint32(b, uint32(s.Optimizer))
		b = le.AppendUint32(b, uint32(len(s.SqAvg)))
		b = le.AppendUint64(b, uint64(s.FreezeStep))
		for _, arr := range [][]float64{s.SqAvg, s.SqFrozen} {
			for _, x := range arr {
				b = le.AppendUint64(b, math.Float64bits(x))
			}
		}
		b = le.AppendUint32(b, uint32(len(s.CommState)))
		for _, c := range s.CommState {
			b = le.AppendUint32(b, uint32(len(c)))
			b = append(b, c...)
			b = append(b, make([]byte, pad4(len(c))-len(c))...)
		}
	}
	return le.AppendUint32(b, crc32.Checksum(b, castagnoli())), nil
}

// pad4 rounds n up to a multiple of 4.
func pad4(n int) int { return (n + 3) &^ 3 }

// UnmarshalBinary decodes data produced by [State.MarshalBinary], replacing
// all of s. A truncated, corrupt or foreign buffer yields an error saying
// what is wrong; s is only modified on success.
func (s *State) UnmarshalBinary(data []byte) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("engine: unmarshal state: "+format, args...)
	}
	if len(data) < stateHeaderLen+stateCRCLen {
		return fail("truncated: %d bytes, a state is at least %d", len(data), stateHeaderLen+stateCRCLen)
	}
	if string(data[:4]) != stateMagic {
		return fail("not an engine state (magic %q, want %q)", data[:4], stateMagic)
	}
	le := binary.LittleEndian
	version := le.Uint16(data[4:])
	if version < stateVersion || version > stateVersionGB+stateVersionExt {
		return fail("unsupported format version %d (this build reads versions %d to %d)", version, stateVersion, stateVersionGB+stateVersionExt)
	}
	ext := version > stateVersionGB
	if ext {
		version -= stateVersionExt
	}
	nh, np := uint64(le.Uint32(data[56:])), uint64(le.Uint32(data[60:]))
	if nh > MaxHiddenLayers {
		return fail("header claims %d hidden layers, at most %d allowed", nh, MaxHiddenLayers)
	}
	if np > MaxParams {
		return fail("header claims %d parameters, at most %d allowed", np, MaxParams)
	}
	want := uint64(stateHeaderLen) + 4*nh + 12*np + stateCRCLen
	if ext {
		want += stateExtLen // at least
	}
	switch {
	case uint64(len(data)) < want:
		return fail("truncated: %d bytes, header (%d hidden layers, %d parameters) implies %d", len(data), nh, np, want)
	case uint64(len(data)) > want && !ext:
		return fail("%d trailing bytes after the %d the header implies", uint64(len(data))-want, want)
	}
	body := data[:len(data)-stateCRCLen]
	if got, stored := crc32.Checksum(body, castagnoli()), le.Uint32(data[len(body):]); got != stored {
		return fail("checksum mismatch (stored CRC-32C %08x, computed %08x): data is corrupt", stored, got)
	}
	if r := le.Uint16(data[6:]); r != 0 {
		return fail("reserved header field is %d, want 0", r)
	}
	n := State{
		Seed:         le.Uint64(data[8:]),
		LearningRate: math.Float64frombits(le.Uint64(data[16:])),
		Step:         int64(le.Uint64(data[24:])),
		AdamT:        int64(le.Uint64(data[32:])),
		Dim:          int(le.Uint32(data[48:])),
		Classes:      int(le.Uint32(data[52:])),
		Hidden:       make([]int, nh),
	}
	f40, f44 := int(le.Uint32(data[40:])), int(le.Uint32(data[44:]))
	if version == stateVersionGB {
		if f40 == 0 {
			return fail("version %d state has GlobalBatch=0", version)
		}
		if f44 != 0 {
			return fail("version %d state has %d in the reserved field at offset 44, want 0", version, f44)
		}
		n.GlobalBatch = f40
	} else {
		n.BatchPerRank, n.World = f40, f44
	}
	off := stateHeaderLen
	for i := range n.Hidden {
		n.Hidden[i] = int(le.Uint32(data[off:]))
		off += 4
	}
	if ext {
		// The extension follows the three arrays; parse it first so that
		// checkConfig sees the optimizer.
		x := body[off+int(12*np):]
		if err := n.parseExt(x); err != nil {
			return fail("%w", err)
		}
		if !n.extended() {
			return fail("version %d state extends nothing (Adam, no CommState): it is written as version %d", version+stateVersionExt, version)
		}
	}
	if err := n.checkConfig(); err != nil {
		return fail("%w", err)
	}
	params, err := countParams(n.sizes())
	if err != nil {
		return fail("%w", err)
	}
	if uint64(params) != np {
		return fail("header claims %d parameters, but the model %v has %d", np, n.sizes(), params)
	}
	for _, dst := range []*[]float32{&n.Params, &n.M, &n.V} {
		arr := make([]float32, np)
		for i := range arr {
			arr[i] = math.Float32frombits(le.Uint32(data[off:]))
			off += 4
		}
		*dst = arr
	}
	*s = n
	return nil
}

// parseExt decodes the version 3/4 extension, which must fill x exactly,
// into s.
func (s *State) parseExt(x []byte) error {
	le := binary.LittleEndian
	if len(x) < stateExtLen {
		return fmt.Errorf("truncated extension: %d bytes, at least %d", len(x), stateExtLen)
	}
	o, nt := le.Uint32(x), uint64(le.Uint32(x[4:]))
	freeze := int64(le.Uint64(x[8:]))
	x = x[16:]
	switch {
	case o > 255:
		return fmt.Errorf("config Optimizer=%d, want %d (adam) or %d (onebit-adam)", o, Adam, OneBitAdam)
	case nt > 2*(MaxHiddenLayers+1) || uint64(len(x)) < 16*nt+4:
		return fmt.Errorf("extension claims %d tensor statistics in %d bytes", nt, len(x))
	}
	var sq [2][]float64
	for k := range sq {
		if nt > 0 {
			sq[k] = make([]float64, nt)
		}
		for i := range sq[k] {
			sq[k][i] = math.Float64frombits(le.Uint64(x))
			x = x[8:]
		}
	}
	r := uint64(le.Uint32(x))
	x = x[4:]
	if r > MaxWorld {
		return fmt.Errorf("extension claims %d CommState entries, at most %d allowed", r, MaxWorld)
	}
	var comm [][]byte
	for i := range r {
		if len(x) < 4 {
			return fmt.Errorf("truncated extension: CommState[%d] has no length", i)
		}
		l := uint64(le.Uint32(x))
		x = x[4:]
		if l > uint64(len(x)) || uint64(pad4(int(l))) > uint64(len(x)) {
			return fmt.Errorf("truncated extension: CommState[%d] of %d bytes, %d left", i, l, len(x))
		}
		for _, p := range x[l:pad4(int(l))] {
			if p != 0 {
				return fmt.Errorf("CommState[%d] padding is not zero", i)
			}
		}
		comm = append(comm, slices.Clone(x[:l:l]))
		x = x[pad4(int(l)):]
	}
	if len(x) != 0 {
		return fmt.Errorf("%d trailing bytes after the extension", len(x))
	}
	s.Optimizer, s.FreezeStep, s.SqAvg, s.SqFrozen, s.CommState = Optimizer(o), freeze, sq[0], sq[1], comm
	return nil
}

func (s *State) sizes() []int {
	return Config{Hidden: s.Hidden}.layerSizes(s.Dim, s.Classes)
}

// checkConfig validates the configuration fields of s.
func (s *State) checkConfig() error {
	cfg := Config{Seed: s.Seed, Hidden: s.Hidden, LearningRate: s.LearningRate, BatchPerRank: s.BatchPerRank, World: s.World,
		Optimizer: s.Optimizer, FreezeStep: s.FreezeStep}
	if s.GlobalBatch == 0 {
		if err := cfg.Validate(); err != nil {
			return err
		}
	} else {
		// Any World >= 1 up to GlobalBatch can restore it, so only the
		// global batch itself is checked.
		errs := cfg.modelErrs()
		if s.GlobalBatch < 1 || s.GlobalBatch > MaxGlobalBatch {
			errs = append(errs, fmt.Errorf("config GlobalBatch=%d, want 0 or 1..%d", s.GlobalBatch, MaxGlobalBatch))
		}
		if s.BatchPerRank != 0 || s.World != 0 {
			errs = append(errs, fmt.Errorf("config BatchPerRank=%d, World=%d with GlobalBatch=%d: want both 0 (a global batch state is world-independent)",
				s.BatchPerRank, s.World, s.GlobalBatch))
		}
		if len(errs) > 0 {
			return fmt.Errorf("engine: invalid config: %w", errors.Join(errs...))
		}
	}
	switch {
	case s.Dim < 1 || s.Dim > maxPixels:
		return fmt.Errorf("config Dim=%d, want 1..%d", s.Dim, maxPixels)
	case s.Classes < 2 || s.Classes > 256:
		return fmt.Errorf("config Classes=%d, want 2..256", s.Classes)
	case s.Step < 0 || s.AdamT < 0:
		return fmt.Errorf("config Step=%d, AdamT=%d: want >= 0", s.Step, s.AdamT)
	}
	want := 0
	if s.Optimizer == OneBitAdam {
		want = 2 * (len(s.Hidden) + 1)
	}
	if len(s.SqAvg) != want || len(s.SqFrozen) != want {
		return fmt.Errorf("optimizer %s with %d tensors, but len(SqAvg)=%d, len(SqFrozen)=%d", s.Optimizer, 2*(len(s.Hidden)+1), len(s.SqAvg), len(s.SqFrozen))
	}
	return nil
}

// check validates s fully before encoding.
func (s *State) check() error {
	if s == nil {
		return errors.New("state is nil")
	}
	if err := s.checkConfig(); err != nil {
		return err
	}
	n, err := countParams(s.sizes())
	if err != nil {
		return err
	}
	if len(s.Params) != n || len(s.M) != n || len(s.V) != n {
		return fmt.Errorf("model %v has %d parameters but len(Params)=%d, len(M)=%d, len(V)=%d",
			s.sizes(), n, len(s.Params), len(s.M), len(s.V))
	}
	return nil
}
