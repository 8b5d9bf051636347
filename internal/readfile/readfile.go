// Package readfile reads files whose size the reader does not control, up
// to a bound. Such a file may be a path in a URL option, or a file left on
// disk. /dev/zero or a mistaken log file must be an error, not a read that
// fills the memory.
package readfile

import (
	"fmt"
	"io"
	"os"
)

// AtMost reads the file at path if it holds at most max bytes; a longer
// one is an error saying so. A pipe works too (password_file=<(pass …)).
// Errors from opening or reading are *fs.PathError, as os.ReadFile's.
func AtMost(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	return b, nil
}
