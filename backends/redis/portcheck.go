package redis

import (
	"context"
	"errors"

	goredis "github.com/redis/go-redis/v9"
)

// answered is a client hook: a reply from the server, even a refusal,
// proves that client and port speak the same protocol (backend.PortCheck),
// so no probe is needed when later commands fail (a partition, a
// restart). rediss:// on a plain port makes the handshake wait for a line
// Redis never sends, and redis:// on a TLS port gets its connections
// closed: wrap probes the first address after a failure until then.
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
	if err == nil || errors.As(err, &reply) {
		a.c.ports.Sound()
	}
}
