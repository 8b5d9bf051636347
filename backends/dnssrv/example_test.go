package dnssrv_test

import (
	"context"
	"fmt"
	"log"

	"github.com/miekg/dns"

	_ "github.com/roster-go/roster/backends/dnssrv"
	"github.com/roster-go/roster/registry"
)

// Example reads a service's instances from SRV records. A tiny DNS server
// stands in for Consul's DNS interface (dns+srv://127.0.0.1:8600/{service}.service.consul)
// or a cluster's DNS.
func Example() {
	srv := &dns.Server{Addr: "127.0.0.1:0", Net: "tcp", Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg).SetReply(q)
		if q.Question[0].Name == "billing.service.example." {
			srv, _ := dns.NewRR("billing.service.example. 5 IN SRV 1 10 8080 node1.example.")
			a, _ := dns.NewRR("node1.example. 5 IN A 10.0.0.7")
			m.Answer, m.Extra = []dns.RR{srv}, []dns.RR{a}
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ListenAndServe() }()
	<-started
	defer srv.Shutdown()

	ctx := context.Background()
	r, err := registry.Open(ctx, "dns+srv://"+srv.Listener.Addr().String()+"/{service}.service.example")
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	snap, err := r.Lookup(ctx, "billing")
	if err != nil {
		log.Fatal(err)
	}
	for _, in := range snap.Instances {
		fmt.Println(in.Service, in.Address, "weight", in.Weight)
	}
	_, err = r.Register(ctx, registry.Instance{Service: "billing", Address: "10.0.0.8:8080"})
	fmt.Println(err != nil)
	// Output:
	// billing 10.0.0.7:8080 weight 10
	// true
}
