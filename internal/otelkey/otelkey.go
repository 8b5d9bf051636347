// Package otelkey names Roster's OpenTelemetry scope and attribute keys,
// shared by middleware and agent. docs/middleware.md lists them for users.
package otelkey

import "go.opentelemetry.io/otel/attribute"

// Scope is the instrumentation scope of Roster's spans and metrics.
const Scope = "github.com/roster-go/roster"

// Attribute keys used on spans and metrics.
const (
	Service    = attribute.Key("roster.service")
	InstanceID = attribute.Key("roster.instance.id")
	Address    = attribute.Key("server.address")
	Attempt    = attribute.Key("roster.attempt")
	Reason     = attribute.Key("roster.retry.reason")
	Stale      = attribute.Key("roster.stale")
	CacheHit   = attribute.Key("roster.cache.hit")
	Outcome    = attribute.Key("roster.outcome")
	Ejected    = attribute.Key("roster.ejected")
	Zone       = attribute.Key("roster.zone")
	Endpoint   = attribute.Key("roster.endpoint")

	RejectionReason = attribute.Key("roster.rejection.reason") // throttled
	EjectionReason  = attribute.Key("roster.ejection.reason")  // consecutive_failures, success_rate
)
