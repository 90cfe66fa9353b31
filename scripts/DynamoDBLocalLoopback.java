// DynamoDB Local on 127.0.0.1 only.
//
// DynamoDBLocal.jar has no host option: its DynamoDBProxyServer builds a
// Jetty `new Server(port)`, which listens on every interface. This launcher
// creates the server exactly as the jar's own main does
// (ServerRunner.createServerFromCommandLineArgs, same command-line options),
// sets the host of its Jetty connectors to 127.0.0.1 before starting it, and
// skips the jar's telemetry set-up (scripts/dynamodb-local.sh also passes
// -disableTelemetry). Reflection only, so it compiles without the jar and
// works with DynamoDB Local 2.x (com.amazonaws...) and 3.x
// (software.amazon...). Compiled by `scripts/dynamodb-local.sh install`.

import java.lang.reflect.Field;
import java.lang.reflect.Method;

public final class DynamoDBLocalLoopback {
    private static final String[] PACKAGES = {
        "software.amazon.dynamodb.services.local", // 3.x
        "com.amazonaws.services.dynamodbv2.local", // 2.x
    };

    public static void main(String[] args) throws Exception {
        Class<?> runner = null;
        for (String pkg : PACKAGES) {
            try {
                runner = Class.forName(pkg + ".main.ServerRunner");
                break;
            } catch (ClassNotFoundException e) {
                // try the next layout
            }
        }
        if (runner == null) {
            throw new IllegalStateException("no DynamoDB Local ServerRunner on the class path");
        }
        Object proxy = runner.getMethod("createServerFromCommandLineArgs", String[].class)
                .invoke(null, (Object) args);
        Field field = proxy.getClass().getDeclaredField("server");
        field.setAccessible(true);
        Object jetty = field.get(proxy);
        Object[] connectors = (Object[]) jetty.getClass().getMethod("getConnectors").invoke(jetty);
        if (connectors.length == 0) {
            throw new IllegalStateException("DynamoDB Local's Jetty server has no connector");
        }
        for (Object connector : connectors) {
            Method setHost = connector.getClass().getMethod("setHost", String.class);
            setHost.invoke(connector, "127.0.0.1");
        }
        proxy.getClass().getMethod("start").invoke(proxy);
        proxy.getClass().getMethod("join").invoke(proxy);
    }
}
