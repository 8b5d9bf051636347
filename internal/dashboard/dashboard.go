// Package dashboard is the web page that shows what Roster clients see.
// It lists services, instances and quarantine, and, from roster agent,
// picks and latencies. roster agent serves it live over server-sent
// events. middleware.Client's debug handler serves it with polled JSON.
//
// The page has no build step and loads nothing from elsewhere, since its
// files are embedded. It renders instance data with textContent only,
// because instance fields and metadata come from the registry and are
// untrusted.
package dashboard

import (
	"embed"
	"html/template"
	"net/http"
)

//go:embed static
var static embed.FS

var page = template.Must(template.ParseFS(static, "static/index.html"))

// Handler serves the page at any path it is mounted on, and its assets
// at ?asset=app.js and ?asset=style.css (so that it needs no path of
// its own). stateURL answers the state as JSON; eventsURL, if not empty,
// streams it as server-sent events, else the page polls stateURL every
// second. Both are relative to the page.
func Handler(title, stateURL, eventsURL string) http.Handler {
	return handler(title, stateURL, eventsURL, "")
}

func handler(title, stateURL, eventsURL, actionsURL string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("asset") {
		case "app.js":
			serveAsset(w, "static/app.js", "text/javascript; charset=utf-8")
		case "style.css":
			serveAsset(w, "static/style.css", "text/css; charset=utf-8")
		case "":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			setSecurityHeaders(w)
			_ = page.Execute(w, struct{ Title, State, Events, Actions string }{title, stateURL, eventsURL, actionsURL})
		default:
			http.NotFound(w, r)
		}
	})
}

func serveAsset(w http.ResponseWriter, name, contentType string) {
	b, err := static.ReadFile(name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	setSecurityHeaders(w)
	_, _ = w.Write(b)
}

// setSecurityHeaders forbids inline scripts and anything from elsewhere:
// even a rendering mistake could not run an instance's metadata.
func setSecurityHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
}

// Console serves the same page as Handler, as roster agent's console:
// the whole catalog with paging and search, instance details, each
// service's history, the registry's health and, if the state says
// actions are allowed, buttons that POST to actionsURL + action.
func Console(title, stateURL, eventsURL, actionsURL string) http.Handler {
	return handler(title, stateURL, eventsURL, actionsURL)
}
