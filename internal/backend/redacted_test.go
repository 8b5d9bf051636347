package backend_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/roster-go/roster/internal/backend"
)

func TestRedactedKeepsTheChain(t *testing.T) {
	err := backend.Redacted(fmt.Errorf("auth hunter2 failed: %w", io.ErrUnexpectedEOF), "hunter2", "")
	if strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "auth xxxxx failed") {
		t.Errorf("text %q, want the secret replaced", err)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Error("errors.Is no longer sees the cause")
	}
	plain := errors.New("no secret here")
	if backend.Redacted(plain, "hunter2") != plain || backend.Redacted(nil, "x") != nil {
		t.Error("an error without a secret, or nil, should come back unchanged")
	}
}
