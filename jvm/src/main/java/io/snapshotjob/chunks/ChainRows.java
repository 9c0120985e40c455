package io.snapshotjob.chunks;

import java.io.IOException;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.NoSuchElementException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.types.DataType;

/**
 * The rows of a partition's chain: its full version with each delta applied in order, the
 * newest row of a key winning (docs/concepts/protocol.md, "Incremental snapshots").
 *
 * <p>The deltas are read first and kept by key (they are small: a chain is cut when its deltas
 * outgrow a bound of its full version); the full version then streams past, less the keys a
 * delta has, and the deltas' rows follow. So a task holds the deltas, not its partition. A
 * full row's whole key is looked up only if its first key column may be a delta's
 * (FirstKeyFilter): most are not.
 *
 * <p>The rows left out (a full row or an older delta row whose key a newer delta has) share
 * arrays with rows kept (BatchRows), which hold those arrays in memory: their bytes are carried
 * by the next row out (SharedRow), so that the stored block's size still counts them.
 */
final class ChainRows implements CloseableRows {
  private final ChunkRows full;
  private final UnsafeProjection key;
  private final Map<UnsafeRow, InternalRow> newest = new LinkedHashMap<>();
  private final FirstKeyFilter filter;
  private Iterator<InternalRow> tail;
  private InternalRow pending;
  /** Bytes of the rows left out since the last row out carried them. */
  private long dropped;

  ChainRows(ChunkRows full, ChunkRows deltas, DataType[] keyTypes) throws IOException {
    this.full = full;
    // The state's key columns come first, so the projection of its first columns is the key.
    this.key = UnsafeProjection.create(keyTypes);
    try (ChunkRows rows = deltas) {
      while (rows.hasNext()) {
        InternalRow row = rows.next();
        UnsafeRow rowKey = key.apply(row).copy();
        // Removed first, so a key keeps the position of its newest row. ChunkRows' rows are
        // copies already, kept as they are.
        dropped += sharedBytes(newest.remove(rowKey));
        newest.put(rowKey, row);
      }
    }
    this.filter = FirstKeyFilter.of(keyTypes[0], newest.keySet());
  }

  @Override
  public boolean hasNext() {
    while (pending == null && tail == null) {
      if (!full.hasNext()) {
        tail = newest.values().iterator();
        break;
      }
      InternalRow row = full.next();
      if ((filter != null && !filter.mightContain(row)) || !newest.containsKey(key.apply(row))) {
        pending = row;
      } else {
        dropped += sharedBytes(row);
      }
    }
    return pending != null || tail.hasNext();
  }

  @Override
  public InternalRow next() {
    if (!hasNext()) {
      throw new NoSuchElementException();
    }
    InternalRow row;
    if (pending != null) {
      row = pending;
      pending = null;
    } else {
      row = tail.next();
    }
    if (dropped > 0 && row instanceof SharedRow) {
      ((SharedRow) row).carry(dropped);
      dropped = 0;
    }
    return row;
  }

  private static long sharedBytes(InternalRow row) {
    return row instanceof SharedRow ? ((SharedRow) row).sizeInBytes() : 0;
  }

  @Override
  public void close() throws IOException {
    full.close();
  }
}
