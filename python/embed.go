// Package python ships the dependency-free Python helper (cann_train.py)
// inside the Go binaries: node workers write it next to each external
// job's world and put it on PYTHONPATH, so `import cann_train` works on
// every node without installing anything.
package python

import _ "embed"

// Helper is cann_train.py.
//
//go:embed cann_train.py
var Helper []byte

// HelperModule is the file name Helper is written under.
const HelperModule = "cann_train.py"
