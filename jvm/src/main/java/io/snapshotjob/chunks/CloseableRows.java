package io.snapshotjob.chunks;

import java.io.IOException;
import java.util.Iterator;
import org.apache.spark.sql.catalyst.InternalRow;

/** Rows a task reads from the store, holding buffers until it closes them. */
interface CloseableRows extends Iterator<InternalRow>, AutoCloseable {
  @Override
  void close() throws IOException;
}
