package redis

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/roster-go/roster/internal/backend"

	goredis "github.com/redis/go-redis/v9"
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

// aclCodes are the reply prefixes of refusals no retry can cure: missing
// ACL permissions, a wrong user or password, a key of ours holding
// another type (WRONGTYPE: foreign data at our key).
var aclCodes = []string{"NOPERM", "WRONGPASS", "NOAUTH", "WRONGTYPE"}

// refused reports whether err is a refusal of the server (ACL, password)
// or a TLS handshake failure that retrying cannot cure.
func refused(err error) bool {
	if _, ok := backend.TLSCause(err); ok {
		return true
	}
	msg := err.Error()
	for _, code := range aclCodes {
		if strings.HasPrefix(msg, code+" ") || strings.Contains(msg, ": "+code+" ") {
			return true
		}
	}
	return strings.Contains(msg, "The user executing the script can't")
}

// scriptRef finds "script: <sha>, on @user_script:<line>" in a script error.
var scriptRef = regexp.MustCompile(`script: ([0-9a-f]{40}), on @user_script:(\d+)`)

// callOn finds the command of a redis.call on a source line.
var callOn = regexp.MustCompile(`redis\.call\('(\w+)'`)

// explain returns err with what a reader needs to act: the TLS cause, or
// for an ACL refusal in a script the command refused, as Redis 7.0 names
// only the script's line ("NOPERM … 'xadd'" then, as Redis does outside
// scripts).
func explain(err error) error {
	if cause, ok := backend.TLSCause(err); ok {
		return errors.New(cause)
	}
	msg := err.Error()
	if !strings.Contains(msg, "The user executing the script can't run") {
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
