package etcd

import "strings"

// hosts returns the host:port of each endpoint (a URL, or host:port).
func hosts(endpoints []string) []string {
	out := make([]string, len(endpoints))
	for i, ep := range endpoints {
		_, host, ok := strings.Cut(ep, "://")
		out[i] = ep
		if ok {
			out[i] = host
		}
	}
	return out
}
