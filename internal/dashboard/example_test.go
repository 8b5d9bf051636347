package dashboard_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/roster-go/roster/internal/dashboard"
)

// A program mounts the page beside the JSON state it shows; with no
// events URL the page polls the state every second. The page and its
// assets come from the one handler and allow no script from elsewhere.
func Example() {
	mux := http.NewServeMux()
	mux.Handle("/debug/roster", dashboard.Handler("my service", "roster/state", ""))
	mux.HandleFunc("/debug/roster/state", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"services":[]}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, path := range []string{"/debug/roster", "/debug/roster?asset=app.js", "/debug/roster?asset=other"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"))
	}
	// Output:
	// /debug/roster 200 text/html; charset=utf-8 default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'
	// /debug/roster?asset=app.js 200 text/javascript; charset=utf-8 default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'
	// /debug/roster?asset=other 404 text/plain; charset=utf-8
}
