package registry

import (
	"context"
	"fmt"
	"net/http"
)

// healthClient keeps no idle connections: a check every second should
// not hold a socket (or a goroutine) open in between.
var healthClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// HTTPHealthCheck returns a health check for WithHealthCheck that GETs url
// and passes on a 2xx answer within the check's deadline.
func HTTPHealthCheck(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := healthClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}
