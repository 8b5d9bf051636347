package nats

import (
	"errors"
	"fmt"
	"strings"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/registry/driver"
)

// fail names the server and the operation once, adds the refusal that
// explains a failed call (the client reports a refused login or
// permission apart from the call, which then only times out), and
// redacts the secrets.
func (d *Driver) fail(op string, err error) error {
	if !errors.Is(err, driver.ErrNotFound) {
		if why := d.lastRefusal(); why != nil && !errors.Is(err, why) {
			err = fmt.Errorf("%w (%w)", err, why)
		}
	}
	return backend.Redacted(fmt.Errorf("%s: %s: %w", d.name, op, err), d.opts.Password, d.opts.Token)
}

// lastRefusal returns the server's refusal of this client, if any.
func (d *Driver) lastRefusal() error {
	if d.nc != nil {
		if err := d.nc.LastError(); isRefusal(err) {
			return err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Since(d.refused) > refusalHold {
		return nil
	}
	return d.refusal
}

// refusalHold is how long a refusal explains the calls that fail.
const refusalHold = 10 * time.Second

// ErrorKind is the table of what the client's errors mean. A refused
// credential or permission, a TLS mix-up and a bucket without per-key
// TTL are ErrInvalid: retrying cannot help. The rest is ErrUnavailable.
func (d *Driver) ErrorKind(err error) error {
	if _, tlsErr := backend.TLSCause(err); tlsErr || isRefusal(err) || errors.Is(err, errNoTTL) {
		return driver.ErrInvalid
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && api.Code == 400 {
		return driver.ErrInvalid // a request the server rejects (a bad TTL, a bad config)
	}
	return driver.ErrUnavailable
}

func isRefusal(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range []error{natsio.ErrAuthorization, natsio.ErrAuthExpired, natsio.ErrAuthRevoked,
		natsio.ErrAccountAuthExpired, natsio.ErrPermissionViolation, natsio.ErrSecureConnRequired, natsio.ErrSecureConnWanted} {
		if errors.Is(err, e) {
			return true
		}
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "authorization violation") || strings.Contains(msg, "permissions violation")
}

// noBucket reports an error of a bucket that does not exist (never made,
// or wiped).
func noBucket(err error) bool {
	return errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, natsio.ErrStreamNotFound) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// wrongRevision reports a write refused because the key changed.
func wrongRevision(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
