import java.util.*;
import org.apache.curator.framework.*;
import org.apache.curator.retry.RetryOneTime;
import org.apache.curator.x.discovery.*;
import org.apache.curator.x.discovery.details.JsonInstanceSerializer;

public class CuratorPeer {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(args[1], new RetryOneTime(200));
        client.start();
        client.blockUntilConnected();
        JsonInstanceSerializer<Map> ser = new JsonInstanceSerializer<>(Map.class);
        ServiceDiscovery<Map> sd = ServiceDiscoveryBuilder.builder(Map.class).client(client).basePath(args[2]).serializer(ser).build();
        sd.start();
        if (args[0].equals("serialize")) {
            Map<String, Object> payload = new HashMap<>();
            payload.put("metadata", Collections.singletonMap("k", "v"));
            ServiceInstance<Map> si = ServiceInstance.<Map>builder().name(args[3]).id(args[4]).address(args[5]).port(Integer.parseInt(args[6])).payload(payload).build();
            System.out.println(new String(ser.serialize(si), "UTF-8"));
        } else if (args[0].equals("register")) {
            Map<String, Object> payload = new HashMap<>();
            payload.put("metadata", Collections.singletonMap("team", "java"));
            ServiceInstance<Map> si = ServiceInstance.<Map>builder().name(args[3]).id(args[4]).address(args[5]).port(Integer.parseInt(args[6])).payload(payload).build();
            sd.registerService(si);
            System.out.println("registered");
            System.out.flush();
            while (System.in.read() != -1) {}
            sd.unregisterService(si);
        } else if (args[0].equals("query")) {
            for (ServiceInstance<Map> si : sd.queryForInstances(args[3])) {
                System.out.println(si.getId() + " " + si.getAddress() + " " + si.getPort() + " " + si.getPayload());
            }
        }
        sd.close();
        client.close();
    }
}
