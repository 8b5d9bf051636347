package backend

import (
	"fmt"
	"strings"

	"github.com/roster-go/roster/internal/urls"
	"github.com/roster-go/roster/registry/driver"
)

// Invalid returns a *FieldError naming field, with a formatted reason.
// A URL in the reason is shown as Redact shows it: the usual reason is a
// registry URL typed where a service name or address belongs ("roster ls
// redis://:pw@h"), and the error must not print its password.
func Invalid(field, format string, args ...any) error {
	return &driver.FieldError{Field: scrubURLs(field), Reason: scrubURLs(fmt.Sprintf(format, args...))}
}

// scrubURLs replaces each word of s that may carry credentials — one
// holding "://", or a ':' before an '@' (user:password@host, and the
// typos of a URL) — with its Redact form. Words end at spaces and quotes.
func scrubURLs(s string) string {
	if !strings.Contains(s, "://") && !strings.Contains(s, "@") {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		i := strings.IndexAny(s, " \t\n\"'`")
		if i < 0 {
			i = len(s)
		}
		word := s[:i]
		if at := strings.LastIndexByte(word, '@'); strings.Contains(word, "://") || at > 0 && strings.Contains(word[:at], ":") {
			word = urls.Redact(word)
		}
		b.WriteString(word)
		if i < len(s) {
			b.WriteByte(s[i])
			i++
		}
		s = s[i:]
	}
	return b.String()
}

func invalid(field, format string, args ...any) error { return Invalid(field, format, args...) }

// Redacted returns err with each non-empty secret replaced by "xxxxx" in
// its text. errors.Is and errors.As still see the whole chain, so that a
// driver's ErrorKind can classify what it redacted.
func Redacted(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	if msg == err.Error() {
		return err
	}
	return Explain(msg, err)
}

// Explain returns an error whose text is msg and whose chain is err's:
// a clearer text than the cause's, with errors.Is and errors.As intact.
func Explain(msg string, err error) error { return explained{msg: msg, err: err} }

type explained struct {
	msg string
	err error
}

func (e explained) Error() string { return e.msg }
func (e explained) Unwrap() error { return e.err }
