module github.com/roster-go/roster/contrib/rostergokit

go 1.26.7

require (
	github.com/go-kit/kit v0.13.0
	github.com/go-kit/log v0.2.0
	github.com/roster-go/roster v0.0.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logfmt/logfmt v0.5.1 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
)

replace github.com/roster-go/roster => ../../
