package io.snapshotjob.chunks;

import com.hazelcast.client.HazelcastClient;
import com.hazelcast.client.config.ClientConfig;
import com.hazelcast.core.HazelcastInstance;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * One Hazelcast client per store address in each executor JVM, connected on first use.
 *
 * <p>Spark runs many tasks in one executor JVM: a client per task would pay the connection to
 * every member at every snapshot. The settings are those of the Python adapter
 * (snapshot_store/hazelcast.py): a write whose backups may not have been acknowledged fails
 * instead of reporting success, and one that takes longer than the invocation timeout fails.
 */
final class StoreClients {
  private static final Map<String, HazelcastInstance> CLIENTS = new HashMap<>();

  private StoreClients() {}

  static synchronized HazelcastInstance client(String members, String clusterName) {
    String key = clusterName + "/" + members;
    HazelcastInstance client = CLIENTS.get(key);
    if (client != null && client.getLifecycleService().isRunning()) {
      return client;
    }
    ClientConfig config = new ClientConfig();
    config.setClusterName(clusterName);
    List<String> addresses = Arrays.asList(members.split(","));
    config.getNetworkConfig().setAddresses(addresses);
    config.getNetworkConfig().getSocketOptions().setBufferSize(4 * 1024);
    config.getConnectionStrategyConfig().getConnectionRetryConfig().setClusterConnectTimeoutMillis(20_000);
    config.setProperty("hazelcast.client.fail.onindeterminateoperationstate", "true");
    config.setProperty("hazelcast.client.heartbeat.timeout", "15000");
    config.setProperty("hazelcast.client.invocation.timeout.seconds", "20");
    config.setProperty("hazelcast.logging.type", "none");
    config.getMetricsConfig().setEnabled(false);
    client = HazelcastClient.newHazelcastClient(config);
    CLIENTS.put(key, client);
    return client;
  }
}
