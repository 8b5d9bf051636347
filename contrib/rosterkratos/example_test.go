package rosterkratos_test

import (
	"context"
	"fmt"

	kregistry "github.com/go-kratos/kratos/v2/registry"

	_ "github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/contrib/rosterkratos"
	"github.com/roster-go/roster/registry"
)

func Example() {
	ctx := context.Background()
	reg, err := registry.Open(ctx, "mem://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reg.Close()
	r := rosterkratos.New(reg, rosterkratos.WithDrainDelay(0))

	// What kratos.App does with kratos.Registrar(r) when it starts.
	err = r.Register(ctx, &kregistry.ServiceInstance{
		ID: "user-1", Name: "user-svc", Version: "v1",
		Endpoints: []string{"grpc://10.0.0.1:9000", "http://10.0.0.1:8000"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// What discovery:///user-svc reads.
	got, _ := r.GetService(ctx, "user-svc")
	fmt.Println(got[0].ID, got[0].Endpoints)

	// The same instance as Roster's own clients see it.
	snap, _ := reg.Lookup(ctx, "user-svc")
	grpcEP, _ := snap.Instances[0].Endpoint("grpc")
	fmt.Println(snap.Instances[0].Address, grpcEP.Address)
	// Output:
	// user-1 [grpc://10.0.0.1:9000 http://10.0.0.1:8000]
	// 10.0.0.1:9000 10.0.0.1:9000
}
