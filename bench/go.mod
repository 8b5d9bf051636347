module github.com/roster-go/roster/bench

go 1.26.7

require (
	github.com/go-kit/kit v0.13.0
	github.com/go-kratos/kratos/v2 v2.8.3
	github.com/roster-go/roster v0.0.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-kit/log v0.2.0 // indirect
	github.com/go-logfmt/logfmt v0.5.1 // indirect
	golang.org/x/sys v0.49.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/roster-go/roster => ../
