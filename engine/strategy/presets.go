package strategy

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/cann-train/cann-train/internal/suggest"
)

//go:embed presets/models/*.yaml presets/clusters/*.yaml
var presetFS embed.FS

// Preset kinds.
const (
	KindModel   = "model"
	KindCluster = "cluster"
)

// Presets lists the embedded spec files by name ("moe_bert.yaml",
// "1024_ascend910b.yaml", …), sorted. Model and cluster names never clash.
func Presets() []string {
	var out []string
	for _, dir := range []string{"presets/models", "presets/clusters"} {
		entries, err := fs.ReadDir(presetFS, dir)
		if err != nil {
			continue // cannot happen: the directories are embedded
		}
		for _, e := range entries {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// presetPath finds a preset by name, with or without ".yaml".
func presetPath(name string) (file, kind string, err error) {
	base := path.Base(name)
	if !strings.HasSuffix(base, ".yaml") {
		base += ".yaml"
	}
	for _, k := range []struct{ dir, kind string }{{"presets/models", KindModel}, {"presets/clusters", KindCluster}} {
		p := k.dir + "/" + base
		if _, err := fs.Stat(presetFS, p); err == nil {
			return p, k.kind, nil
		}
	}
	known := Presets()
	for i, k := range known {
		known[i] = strings.TrimSuffix(k, ".yaml")
	}
	guess := ""
	if g := suggest.DidYouMean(suggest.Nearest(strings.TrimSuffix(base, ".yaml"), known)); g != "" {
		guess = "; " + g
	}
	return "", "", fmt.Errorf("unknown preset %q%s (known: %s)", name, guess, strings.Join(known, ", "))
}

// Preset returns the YAML of an embedded spec ("moe_bert" or
// "moe_bert.yaml").
func Preset(name string) ([]byte, error) {
	p, _, err := presetPath(name)
	if err != nil {
		return nil, err
	}
	b, err := presetFS.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read preset %s: %w", name, err)
	}
	return b, nil
}

// PresetKind says whether a preset is a model or a cluster spec.
func PresetKind(name string) (string, error) {
	_, kind, err := presetPath(name)
	return kind, err
}

// PresetModel parses an embedded model spec.
func PresetModel(name string) (Model, error) {
	if k, err := PresetKind(name); err != nil {
		return Model{}, err
	} else if k != KindModel {
		return Model{}, fmt.Errorf("preset %s is a %s spec, not a model", name, k)
	}
	b, err := Preset(name)
	if err != nil {
		return Model{}, err
	}
	return ParseModel(name, b)
}

// PresetCluster parses an embedded cluster spec.
func PresetCluster(name string) (Cluster, error) {
	if k, err := PresetKind(name); err != nil {
		return Cluster{}, err
	} else if k != KindCluster {
		return Cluster{}, fmt.Errorf("preset %s is a %s spec, not a cluster", name, k)
	}
	b, err := Preset(name)
	if err != nil {
		return Cluster{}, err
	}
	return ParseCluster(name, b)
}
