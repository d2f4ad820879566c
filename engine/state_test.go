package engine

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"
)

func testState(t testing.TB) *State {
	t.Helper()
	return testStateFor(t, Config{Seed: 77, Hidden: []int{4, 3}, LearningRate: 1e-2, BatchPerRank: 5, World: 2})
}

// testGlobalState is testState for a trainer in GlobalBatch mode.
func testGlobalState(t testing.TB) *State {
	t.Helper()
	return testStateFor(t, Config{Seed: 77, Hidden: []int{4, 3}, LearningRate: 1e-2, GlobalBatch: 11, World: 3, Rank: 1})
}

func testStateFor(t testing.TB, cfg Config) *State {
	t.Helper()
	ds := synthDataset(1, 60, 6, 3)
	tr, err := NewTrainer(cfg, ds)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if _, err := tr.Step(context.Background(), noReduce); err != nil {
			t.Fatal(err)
		}
	}
	return tr.Snapshot()
}

// reseal recomputes the trailing CRC so a test can reach the checks behind it.
func reseal(b []byte) []byte {
	if len(b) < stateCRCLen {
		return b
	}
	body := b[:len(b)-stateCRCLen]
	binary.LittleEndian.PutUint32(b[len(body):], crc32.Checksum(body, castagnoli()))
	return b
}

func TestStateRoundTrip(t *testing.T) {
	tests := []struct {
		name              string
		st                *State
		version           uint16
		field40, field44  uint32
		batch, world, glb int
	}{
		{"batch per rank", testState(t), 1, 5, 2, 5, 2, 0},
		{"global batch", testGlobalState(t), 2, 11, 0, 0, 0, 11},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.st
			if st.BatchPerRank != tc.batch || st.World != tc.world || st.GlobalBatch != tc.glb {
				t.Errorf("snapshot has BatchPerRank %d, World %d, GlobalBatch %d, want %d, %d, %d",
					st.BatchPerRank, st.World, st.GlobalBatch, tc.batch, tc.world, tc.glb)
			}
			b, err := st.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if want := stateHeaderLen + 4*2 + 12*len(st.Params) + stateCRCLen; len(b) != want {
				t.Errorf("encoded %d bytes, want %d", len(b), want)
			}
			le := binary.LittleEndian
			if v, f40, f44 := le.Uint16(b[4:]), le.Uint32(b[40:]), le.Uint32(b[44:]); v != tc.version || f40 != tc.field40 || f44 != tc.field44 {
				t.Errorf("header: version %d, offsets 40/44 hold %d/%d, want %d, %d/%d", v, f40, f44, tc.version, tc.field40, tc.field44)
			}
			var got State
			if err := got.UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&got, st) {
				t.Fatalf("round trip changed the state:\n got %+v\nwant %+v", got, *st)
			}
		})
	}
}

func TestStateUnmarshalErrors(t *testing.T) {
	good, err := testState(t).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "truncated: 0 bytes"},
		{"short header", good[:20], "truncated: 20 bytes"},
		{"garbage", []byte(strings.Repeat("garbage!", 20)), "not an engine state"},
		{"truncated body", good[:len(good)-9], "truncated"},
		{"trailing bytes", append(append([]byte(nil), good...), 1, 2, 3), "3 trailing bytes"},
		{"flipped param bit", edit(func(b []byte) []byte { b[100] ^= 0x10; return b }), "checksum mismatch"},
		{"flipped crc", edit(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), "checksum mismatch"},
		{"future version", edit(func(b []byte) []byte { b[4] = 9; return reseal(b) }), "unsupported format version 9"},
		{"huge param count", edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[60:], 1<<31); return b }), "at most"},
		{"too many layers", edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[56:], 1000); return b }), "1000 hidden layers"},
		{"param count mismatch", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[48:], 7) // Dim 6 -> 7 changes the model size.
			return reseal(b)
		}), "but the model"},
		{"zero world", edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[44:], 0); return reseal(b) }), "World=0"},
		{"negative step", edit(func(b []byte) []byte { b[31] = 0x80; return reseal(b) }), "Step="},
		{"reserved set", edit(func(b []byte) []byte { b[6] = 1; return reseal(b) }), "reserved"},
		{"version 2 without global batch", edit(func(b []byte) []byte {
			b[4] = 2
			binary.LittleEndian.PutUint32(b[40:], 0)
			return reseal(b)
		}), "GlobalBatch=0"},
		{"version 2 with a world", edit(func(b []byte) []byte { b[4] = 2; return reseal(b) }), "reserved field at offset 44"},
		{"version 2 huge global batch", edit(func(b []byte) []byte {
			b[4] = 2
			binary.LittleEndian.PutUint32(b[40:], MaxGlobalBatch+1)
			binary.LittleEndian.PutUint32(b[44:], 0)
			return reseal(b)
		}), "GlobalBatch=1073741825"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var st State
			st.Step = 12345
			err := st.UnmarshalBinary(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("UnmarshalBinary() = %v, want an error containing %q", err, tc.want)
			}
			if st.Step != 12345 {
				t.Error("failed UnmarshalBinary modified the state")
			}
		})
	}
}

func TestStateMarshalRejectsInconsistent(t *testing.T) {
	tests := []struct {
		name   string
		st     *State
		mutate func(*State)
		want   string
	}{
		{"short moments", testState(t), func(s *State) { s.M = s.M[:1] }, "len(M)=1"},
		{"global batch and world", testGlobalState(t), func(s *State) { s.World = 3 }, "want both 0"},
		{"both batch modes", testState(t), func(s *State) { s.GlobalBatch = 10 }, "want both 0"},
		{"negative global batch", testState(t), func(s *State) { s.GlobalBatch = -1 }, "GlobalBatch=-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.mutate(tc.st)
			if _, err := tc.st.MarshalBinary(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("MarshalBinary() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	var nilState *State
	if _, err := nilState.MarshalBinary(); err == nil {
		t.Fatal("MarshalBinary on nil succeeded")
	}
}

// FuzzStateUnmarshal feeds arbitrary bytes, and the same bytes with a valid
// CRC appended (to get past the checksum into the parser), to
// UnmarshalBinary: it must never panic, and whatever it accepts must
// re-encode to exactly the same bytes.
func FuzzStateUnmarshal(f *testing.F) {
	good, err := testState(f).MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	if g, err := testGlobalState(f).MarshalBinary(); err == nil {
		f.Add(g)
	} else {
		f.Fatal(err)
	}
	f.Add(good[:len(good)-stateCRCLen])
	f.Add(good[:stateHeaderLen])
	f.Add([]byte("CTST"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		sealed := append(append([]byte(nil), data...), 0, 0, 0, 0)
		reseal(sealed)
		for _, in := range [][]byte{data, sealed} {
			var st State
			if err := st.UnmarshalBinary(in); err != nil {
				if !strings.HasPrefix(err.Error(), "engine: unmarshal state: ") {
					t.Fatalf("error %q lacks the package prefix", err)
				}
				continue
			}
			out, err := st.MarshalBinary()
			if err != nil {
				t.Fatalf("accepted state does not re-marshal: %v", err)
			}
			if string(out) != string(in) {
				t.Fatal("accepted state re-marshals to different bytes")
			}
		}
	})
}
