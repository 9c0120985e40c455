package io.snapshotjob.chunks;

import com.hazelcast.map.IMap;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.arrow.vector.util.ByteArrayReadableSeekableByteChannel;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.util.ArrowUtils;

/**
 * The rows of one state partition's chunks, read a window at a time and verified before use.
 *
 * <p>A task holds the window's chunks and one decoded record batch, not its partition. Each
 * chunk is checked against its size and checksum before it is decoded; a mismatch fails the
 * task with the text the driver's coordinator recognises as a corrupted snapshot.
 */
final class ChunkRows implements CloseableRows {
  private final IMap<String, byte[]> map;
  private final String mapName;
  private final long snapshotId;
  private final List<ChunkDescriptor> chunks;
  private final int window;
  private final BufferAllocator allocator;
  private final ArrayDeque<CompletableFuture<byte[]>> reads = new ArrayDeque<>();
  private int requested;
  private int taken;
  private ArrowStreamReader reader;
  private Iterator<InternalRow> rows = Collections.emptyIterator();

  ChunkRows(
      IMap<String, byte[]> map,
      String mapName,
      long snapshotId,
      List<ChunkDescriptor> chunks,
      int window) {
    this.map = map;
    this.mapName = mapName;
    this.snapshotId = snapshotId;
    this.chunks = chunks;
    this.window = window;
    this.allocator =
        ArrowUtils.rootAllocator().newChildAllocator("state-chunk-reader", 0, Long.MAX_VALUE);
  }

  @Override
  public boolean hasNext() {
    try {
      while (!rows.hasNext()) {
        if (reader != null && reader.loadNextBatch()) {
          rows = rowsOf(reader.getVectorSchemaRoot());
          continue;
        }
        closeReader();
        if (taken == chunks.size()) {
          return false;
        }
        // A channel over the array: the reader copies each buffer into Arrow's memory at once,
        // not through a stream adapter's 8 KiB array.
        reader =
            new ArrowStreamReader(new ByteArrayReadableSeekableByteChannel(nextChunk()), allocator);
      }
      return true;
    } catch (IOException error) {
      throw new UncheckedIOException(error);
    }
  }

  @Override
  public InternalRow next() {
    if (!hasNext()) {
      throw new NoSuchElementException();
    }
    return rows.next();
  }

  /** The batch's rows, copied: each row outlives the batch (a restore stores them all). */
  private static Iterator<InternalRow> rowsOf(VectorSchemaRoot root) {
    return Arrays.asList(BatchRows.of(root)).iterator();
  }

  private byte[] nextChunk() {
    while (requested < chunks.size() && requested - taken < window) {
      reads.add(map.getAsync(chunks.get(requested).key).toCompletableFuture());
      requested++;
    }
    ChunkDescriptor chunk = chunks.get(taken);
    byte[] data;
    try {
      data = reads.poll().get();
    } catch (InterruptedException error) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("Interrupted reading chunk " + chunk.key, error);
    } catch (ExecutionException error) {
      throw new IllegalStateException(
          "Could not read chunk " + chunk.key + " of map " + mapName, error.getCause());
    }
    taken++;
    if (data == null) {
      // As the Python side's store says it (snapshot_store/hazelcast.py, read_chunks).
      throw new IllegalStateException("Chunk '" + chunk.key + "' is missing from map " + mapName);
    }
    chunk.verify(mapName, snapshotId, data);
    return data;
  }

  private void closeReader() throws IOException {
    if (reader != null) {
      reader.close();
      reader = null;
    }
  }

  @Override
  public void close() throws IOException {
    closeReader();
    allocator.close();
  }
}
