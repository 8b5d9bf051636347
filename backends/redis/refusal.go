package redis

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/roster-go/roster/internal/backend"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/registry/driver"
)

// scriptSources maps each Lua script's SHA1 to its source, so that an ACL
// refusal inside a script, which Redis 7.0 reports by line number only,
// can name the command. Written during package initialisation only.
var scriptSources = map[string]string{}

// luaScript is goredis.NewScript that remembers the source.
func luaScript(src string) *goredis.Script {
	s := goredis.NewScript(src)
	scriptSources[s.Hash()] = src
	return s
}

// ErrorKind implements driver.Driver. A refusal no retry can cure is
// ErrInvalid: an ACL that lacks a command or key (NOPERM), a wrong user
// or password (WRONGPASS, NOAUTH), a key of ours holding foreign data of
// another type (WRONGTYPE), a TLS handshake that fails for good
// (backend.TLSCause). Other replies and network errors are
// ErrUnavailable.
func (d *Driver) ErrorKind(err error) error {
	if refused(err) {
		return driver.ErrInvalid
	}
	return driver.ErrUnavailable
}

// scriptRefusal is how Redis 7.0 words an ACL refusal inside a script.
const scriptRefusal = "The user executing the script can't"

// refused reports whether err is a refusal of the server (ACL, password,
// foreign data) or a TLS handshake failure that retrying cannot cure.
func refused(err error) bool {
	if _, ok := backend.TLSCause(err); ok {
		return true
	}
	if goredis.IsPermissionError(err) || goredis.IsAuthError(err) || goredis.HasErrorPrefix(err, "WRONGTYPE ") {
		return true
	}
	// Older servers quote a refusal inside a script in an ERR reply.
	var reply goredis.Error
	if !errors.As(err, &reply) {
		return false
	}
	msg := reply.Error()
	for _, code := range []string{"NOPERM", "WRONGPASS", "NOAUTH", "WRONGTYPE"} {
		if strings.Contains(msg, ": "+code+" ") {
			return true
		}
	}
	return strings.Contains(msg, scriptRefusal)
}

// scriptRef finds "script: <sha>, on @user_script:<line>" in a script error.
var scriptRef = regexp.MustCompile(`script: ([0-9a-f]{40}), on @user_script:(\d+)`)

// callOn finds the command of a redis.call on a source line.
var callOn = regexp.MustCompile(`redis\.call\('(\w+)'`)

// explain returns err with what a reader needs to act: the TLS cause, or
// for an ACL refusal in a script the command refused, as Redis 7.0 names
// only the script's line ("NOPERM … 'xadd'" then, as Redis does outside
// scripts). The chain is kept, for ErrorKind.
func explain(err error) error {
	if cause, ok := backend.TLSCause(err); ok {
		return backend.Explain(cause, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, scriptRefusal+" run") {
		return err
	}
	m := scriptRef.FindStringSubmatch(msg)
	if m == nil {
		return err
	}
	line, _ := strconv.Atoi(m[2])
	lines := strings.Split(scriptSources[m[1]], "\n")
	if line < 1 || line > len(lines) {
		return err
	}
	c := callOn.FindStringSubmatch(lines[line-1])
	if c == nil {
		return err
	}
	return fmt.Errorf("NOPERM the ACL user has no permission to run the '%s' command (grant +%[1]s): %w", strings.ToLower(c[1]), err)
}
