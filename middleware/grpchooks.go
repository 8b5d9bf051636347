package middleware

import (
	"time"

	"github.com/roster-go/roster/internal/mwhook"
)

// The hooks contrib/rostergrpc uses to apply the Client's quarantine and
// throttle to gRPC calls (see internal/mwhook).
func init() {
	mwhook.OutcomeIn = func(q any, service, id, zone, region string, class int, total int) bool {
		qq := q.(*Quarantine)
		qq.reportIn(service, id, zone, region, Class(class), total)
		return qq.isOut(service, id)
	}
	mwhook.WatchUsable = func(q any, f func(service, id string, usable bool)) {
		qq := q.(*Quarantine)
		prev := qq.onUsable
		qq.onUsable = func(service, id string, usable bool) {
			f(service, id, usable)
			if prev != nil {
				prev(service, id, usable)
			}
		}
	}
	mwhook.NewThrottle = func(cfg any) any { return newThrottle(cfg.(ThrottleConfig)) }
	mwhook.Throttle = func(t any, service string, now time.Time) error {
		th := t.(*throttle)
		s, at := th.service(service), now.UnixNano()
		if p := s.probability(at, th.cfg); p > 0 && s.reject(p) {
			s.failed(at) // a local rejection is a request not accepted
			return s.err
		}
		return nil
	}
	mwhook.Throttled = func(t any, service string, start time.Time, class int, deadline bool) {
		s, at := t.(*throttle).service(service), start.UnixNano()
		switch Class(class) {
		case Success, Business:
			s.w.add(at, false)
		case Retryable, Fatal:
			s.failed(at)
		default: // Abort: a service that hangs past the deadline, not a caller that gave up
			if deadline {
				s.failed(at)
			}
		}
	}
}
