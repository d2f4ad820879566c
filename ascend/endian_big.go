//go:build !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm)

package ascend

// nativeLE reports whether the host's float32 layout is the wire layout.
// Unknown architectures take the portable, converting path.
const nativeLE = false
