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
 * after the coordinator has decided about the snapshot (docs/concepts/protocol.md, taking step 4). The
 * waits ignore interrupts for that reason: each put ends within the client's invocation timeout.
 */
final class PutWindow {
  private final IMap<String, Object> map;
  private final int window;
  private final ArrayDeque<CompletableFuture<Void>> inFlight = new ArrayDeque<>();

  @SuppressWarnings("unchecked")
  PutWindow(IMap<String, byte[]> map, int window) {
    // A value is a chunk's bytes or their serialised form (ChunkBuffer.value); the members
    // store both alike, and readers get a byte array either way.
    this.map = (IMap<String, Object>) (IMap<String, ?>) map;
    this.window = Math.max(1, window);
  }

  /**
   * Puts {@code data} under {@code key}, first waiting for room in the window.
   *
   * @param data a byte array, or one serialised already (ChunkBuffer.value)
   * @throws CompletionException if a put that had to end first failed
   */
  void put(String key, Object data) {
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
