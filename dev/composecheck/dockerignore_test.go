package composecheck

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dockerIgnored reports whether the .dockerignore patterns leave path
// (slash-separated, relative to the build context) out of the context:
// a pattern matches it or one of the directories above it, as Docker's
// own matching does for patterns without ** or !.
func dockerIgnored(t *testing.T, patterns []string, path string) bool {
	t.Helper()
	parts := strings.Split(path, "/")
	for _, p := range patterns {
		for i := 1; i <= len(parts); i++ {
			ok, err := filepath.Match(p, strings.Join(parts[:i], "/"))
			if err != nil {
				t.Fatalf(".dockerignore pattern %q: %v", p, err)
			}
			if ok {
				return true
			}
		}
	}
	return false
}

// TestDockerIgnore: `docker build` (docker compose up --build) sends
// neither a local build's binary (hundreds of MB at the repository root,
// git-ignored) nor bin/, .git or .ci as its context, and still every file
// the Dockerfile's build needs: go.mod, go.sum and the module's sources
// with what they embed.
func TestDockerIgnore(t *testing.T) {
	f, err := os.Open("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var patterns []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") || strings.Contains(line, "**") {
			t.Fatalf(".dockerignore pattern %q: this test does not match ! or ** patterns", line)
		}
		patterns = append(patterns, strings.TrimSuffix(strings.TrimPrefix(line, "/"), "/"))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"cann-train", "bin/cann-train", ".git/HEAD", ".ci/run", "cann-train.test"} {
		if !dockerIgnored(t, patterns, p) {
			t.Errorf("%s goes into the Docker build context", p)
		}
	}
	need := []string{"go.mod", "go.sum"}
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && (rel == ".git" || rel == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(rel, ".go") || strings.HasPrefix(rel, "engine/strategy/presets/") ||
			rel == "python/cann_train.py") {
			need = append(need, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range need {
		if dockerIgnored(t, patterns, p) {
			t.Errorf(".dockerignore leaves %s, which the build needs, out of the context", p)
		}
	}
}
