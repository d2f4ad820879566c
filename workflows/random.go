package workflows

import (
	"crypto/rand"
	"encoding/hex"
)

// randomHex is only ever called inside workflow.SideEffect.
func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}
