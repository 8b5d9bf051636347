// Package docscheck keeps docs/architecture.md true to the code: its
// tables of exported names, backend sizes (within 10%) and conformance files are
// generated here, and the test fails when the code moved on. Run
//
//	go test ./internal/docscheck -update
//
// to rewrite them.
package docscheck
