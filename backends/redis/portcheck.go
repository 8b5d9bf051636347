package redis

import (
	"context"
	"errors"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/registry/driver"
)

// diagnosePort is wrap's second look at a failure below the protocol: a
// rediss:// URL on a plain port makes the handshake wait for an answer
// that never comes (Redis waits for a line), and a redis:// URL on a TLS
// port gets its connections closed — both look like an outage, retried
// forever. One probe of the first address (driver.CheckTLS or
// driver.CheckPlain) tells them apart and returns ErrInvalid naming the
// mix-up. Once a probe reaches the server and finds the protocols match,
// it is not repeated; while the server is down each failure costs one
// refused dial, and one probe runs at a time. A mix-up found is
// returned at once by every operation for mixupHold (enter), instead of
// after another dial timeout each; then the port is probed again, so a
// server reconfigured meanwhile is found.
func (d *conn) diagnosePort() error {
	if d.portChecked.Load() || len(d.copts.Addrs) == 0 || !d.diagnosing.TryLock() {
		return nil
	}
	defer d.diagnosing.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	addr := d.copts.Addrs[0]
	var reached bool
	var err error
	if cfg := d.copts.TLSConfig; cfg != nil {
		reached, err = driver.CheckTLS(ctx, addr, cfg, time.Second)
	} else {
		reached, err = driver.CheckPlain(ctx, addr, time.Second)
	}
	d.portChecked.Store(reached && err == nil)
	if err != nil {
		d.mixup.Store(&mixup{err: err, at: time.Now()})
	}
	return err
}

// answered is a client hook: a reply from the server, even a refusal,
// proves that client and port speak the same protocol, so no probe is
// needed when later commands fail (a partition, a restart).
type answered struct{ c *conn }

func (a answered) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (a answered) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		a.note(err)
		return err
	}
}

func (a answered) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		a.note(err)
		return err
	}
}

func (a answered) note(err error) {
	var reply goredis.Error
	if (err == nil || errors.As(err, &reply)) && !a.c.portChecked.Load() {
		a.c.portChecked.Store(true)
	}
}

// mixupHold is how long a port mix-up found fails operations at once.
const mixupHold = 5 * time.Second

type mixup struct {
	err error
	at  time.Time
}

// knownMixup returns the port mix-up found within mixupHold, if any.
func (d *conn) knownMixup() error {
	if m := d.mixup.Load(); m != nil && time.Since(m.at) < mixupHold {
		return m.err
	}
	return nil
}
