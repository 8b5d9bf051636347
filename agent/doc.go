// Package agent serves the registry to every program of one host, in any
// language. It is the process behind `roster agent`. Call [New] with a
// registry, then serve the [Agent] on loopback or a Unix socket. An Agent is
// an [http.Handler]; serve it with [Agent.Server] on [Agent.Listener], whose
// timeouts and connection cap keep a misbehaving program from holding it.
//
//	a, err := agent.New(agent.Config{Registry: reg})
//	if err != nil {
//		return err
//	}
//	defer a.Close()
//	srv := a.Server()
//	go srv.Serve(a.Listener(ln)) // ln listens on 127.0.0.1 or a Unix socket
//
// A program picks an instance, calls it, and reports the outcome by token.
// The reports of all workers feed one selector and one quarantine, as in a
// Go middleware.Client. So short-lived workers, such as PHP-FPM's, share one
// list and one view of which instances fail.
//
//	GET    /v1/services               the registry's services
//	GET    /v1/services/{service}     its instances (?index=N&wait=30s long-polls)
//	POST   /v1/pick                   {"service", filters, "endpoint"} → {"token","instance","endpoint","stale"}
//	POST   /v1/report                 {"token","outcome","latency_ms"} → 204
//	POST   /v1/register               a local registration, held as a lease
//	GET    /v1/register               the local registrations
//	DELETE /v1/register/{id}
//	GET    /v1/console[/events]       the console's state: catalog, history, health
//	POST   /v1/actions/{action}       drain, weight, maint, restore, deregister
//	GET    /metrics                   Prometheus, through OpenTelemetry
//
// Routing filters (version, zone, tags, endpoint) are hard. A pick never returns an
// instance they reject, and fails with 503 when none is left. A token is
// reported once. Its pick counts in flight for at most
// selector.DefaultInflightBound, so a worker that died mid-call does not
// starve the instance. A token left unreported expires after
// Config.TokenTTL and counts as an aborted call.
//
// While the registry fails, picks go on from the last good list, flagged
// stale, for at most Config.MaxStaleness.
//
// The API has no authentication, so it serves the programs of its host
// only. It refuses a request whose Origin is not its own. Over TCP it also
// refuses a Host other than a loopback address or localhost, against DNS
// rebinding.
//
// The agent holds local registrations until [Agent.Close] deregisters
// them. [Agent.RunTemplates] renders text/template files after every
// change, as consul-template does. Actions answer 403 unless
// Config.AllowActions. The console is at /. See docs/agent.md for the
// API, docs/operations.md for the console.
package agent
