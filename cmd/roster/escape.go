package main

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Every string read from a registry (service names, IDs, addresses,
// versions, zones, tags, metadata) was written by whoever could register,
// or by anyone with write access to the backend, past Roster's
// validation. Human-readable output shows such strings through quote or
// escapeControls, so that a registrant cannot forge table rows with a
// newline, send terminal escapes, or hide text with bidirectional
// controls. JSON output needs none of this: the encoder escapes.

// printable reports whether every rune of s is printable (unicode.IsPrint:
// letters, marks, numbers, punctuation, symbols and the ASCII space; not
// control, format or invalid bytes) and none is in extra.
func printable(s, extra string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) || strings.ContainsRune(extra, r) {
			return false
		}
	}
	return true
}

// quote returns s unchanged when it is printable, else Go-quoted
// ("a\nb", "\x1b[2J"). A printable s that starts with a double quote is
// quoted too, so that it cannot pass for an escaped one.
func quote(s string) string {
	return quoteUnless(s, "")
}

// quoteUnless is quote that also quotes s when it holds a rune of
// separators: a metadata value with "," or "=" cannot pass for two pairs.
func quoteUnless(s, separators string) string {
	if printable(s, separators) && !strings.HasPrefix(s, `"`) {
		return s
	}
	return strconv.Quote(s)
}

// escapeControls escapes the unprintable runes of a line of text, such as
// an error message quoting a record, and keeps the rest as it is:
// "bad\nrow" becomes `bad\nrow`, ESC becomes `\x1b`.
func escapeControls(s string) string {
	if printable(s, "") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			q := strconv.Quote(s[i : i+size])
			b.WriteString(q[1 : len(q)-1])
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
