package io.snapshotjob.chunks;

import com.hazelcast.map.IMap;
import java.util.ArrayDeque;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * Single-key puts of one task's chunks, a window of them in flight.
 *
 * <p>Single-key, because only they fail on an indeterminate outcome (a backup not acknowledged);
 * and however the task ends, it returns only once no put of it is on its way, so none lands
 * after the coordinator has decided about the snapshot (docs/protocol.md, taking step 4). The
 * waits ignore interrupts for that reason: each put ends within the client's invocation timeout.
 */
final class PutWindow {
  private final IMap<String, byte[]> map;
  private final int window;
  private final ArrayDeque<CompletableFuture<Void>> inFlight = new ArrayDeque<>();

  PutWindow(IMap<String, byte[]> map, int window) {
    this.map = map;
    this.window = Math.max(1, window);
  }

  /**
   * Puts {@code data} under {@code key}, first waiting for room in the window.
   *
   * @throws CompletionException if a put that had to end first failed
   */
  void put(String key, byte[] data) {
    while (inFlight.size() >= window) {
      inFlight.poll().join();
    }
    inFlight.add(map.setAsync(key, data).toCompletableFuture());
  }

  /**
   * Waits for every put; throws the first failure, but only once all have ended.
   *
   * @throws CompletionException if a put failed
   */
  void finish() {
    RuntimeException first = null;
    while (!inFlight.isEmpty()) {
      try {
        inFlight.poll().join();
      } catch (RuntimeException failure) {
        if (first == null) {
          first = failure;
        }
      }
    }
    if (first != null) {
      throw first;
    }
  }

  /** Waits for every put after the task failed otherwise, whatever their outcome. */
  void abandon() {
    try {
      finish();
    } catch (RuntimeException ignored) {
      // The task fails anyway, with its own error.
    }
  }
}
