// Package composecheck validates the repository's docker-compose.yml
// without a Docker engine: its test loads the file with compose-go, the
// library Docker Compose itself uses, and checks the wiring between
// services (addresses, ports, checkpoint storage, node identities).
package composecheck
