// DynamoDB Local on 127.0.0.1 only.
//
// DynamoDBLocal.jar has no host option: its DynamoDBProxyServer builds a
// Jetty `new Server(port)`, which listens on every interface. This launcher
// creates the server exactly as the jar's own main does
// (ServerRunner.createServerFromCommandLineArgs, same command-line options),
// sets the host of its connectors to 127.0.0.1 before starting it, and
// skips the jar's telemetry set-up (scripts/dynamodb-local.sh also passes
// -disableTelemetry). Compiled by `scripts/dynamodb-local.sh install`.

import java.lang.reflect.Field;

import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import software.amazon.dynamodb.services.local.main.ServerRunner;
import software.amazon.dynamodb.services.local.server.DynamoDBProxyServer;

public final class DynamoDBLocalLoopback {
    public static void main(String[] args) throws Exception {
        DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
        Field field = DynamoDBProxyServer.class.getDeclaredField("server");
        field.setAccessible(true);
        Server jetty = (Server) field.get(proxy);
        for (Connector connector : jetty.getConnectors()) {
            ((ServerConnector) connector).setHost("127.0.0.1");
        }
        proxy.start();
        proxy.join();
    }
}
