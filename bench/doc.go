// Package bench compares the pick cost of roster's selector with the
// selectors of go-kratos/kratos v2 and go-kit's sd/lb, in one benchmark
// run on the same machine. It is a separate module so that the library's
// go.mod never depends on kratos or go-kit.
//
//	cd bench
//	go test -run '^$' -bench . -benchmem -count 6 -timeout 60m | tee /tmp/bench.txt
//	benchstat -col /impl /tmp/bench.txt
//
// Results and the reading of them: ../docs/bench/selector.md.
//
// The command ./registrycmp compares the registry side with go-zero's
// core/discov and go-kit's sd/etcdv3 and sd/consul on one etcd and one
// Consul agent (see its package documentation and ../docs/benchmarks.md).
package bench
