package rostergozero_test

import (
	"context"
	"log"

	"github.com/zeromicro/go-zero/zrpc"

	_ "github.com/roster-go/roster/backends/etcd"
	"github.com/roster-go/roster/contrib/rostergozero"
	"github.com/roster-go/roster/registry"
)

func Example() {
	ctx := context.Background()
	reg, err := registry.Open(ctx, "etcd://127.0.0.1:2379")
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	// The config can come from go-zero's YAML: Target: roster:///user-svc
	cli, err := zrpc.NewClient(zrpc.RpcClientConf{Target: "roster:///user-svc", NonBlock: true},
		rostergozero.ClientOptions(reg)...)
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Conn().Close()
	_ = cli.Conn() // pass it to the generated client: pb.NewUserClient(cli.Conn())
}
