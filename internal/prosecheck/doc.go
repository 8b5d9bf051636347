// Package prosecheck holds a test that keeps package docs short.
//
// Run it with go test -v to print each package doc's line count,
// words per sentence and colons per 1,000 words.
package prosecheck
