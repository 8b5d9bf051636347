package readfile_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/roster-go/roster/internal/readfile"
)

func ExampleAtMost() {
	path := filepath.Join(os.TempDir(), "readfile-example")
	os.WriteFile(path, []byte("s3cret\n"), 0o600)
	defer os.Remove(path)
	b, err := readfile.AtMost(path, 64)
	fmt.Printf("%q %v\n", b, err)
	_, err = readfile.AtMost(path, 4)
	fmt.Println(err)
	// Output:
	// "s3cret\n" <nil>
	// larger than 4 bytes
}
