package io.snapshotjob.chunks;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.arrow.vector.util.ByteArrayReadableSeekableByteChannel;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.junit.jupiter.api.Test;

/** The chunk a Python worker wrote, decoded as ChunkRows decodes it (BatchRows over Arrow). */
class PythonChunkTest {
  private static final ArrowLayout[] LAYOUTS = {
    ArrowLayout.BIT, ArrowLayout.BYTE, ArrowLayout.SHORT, ArrowLayout.INT, ArrowLayout.LONG,
    ArrowLayout.INT, ArrowLayout.LONG, ArrowLayout.INT, ArrowLayout.LONG, ArrowLayout.LONG,
    ArrowLayout.VARIABLE, ArrowLayout.VARIABLE, ArrowLayout.LARGE_VARIABLE,
  };

  /** Calls {@code check} with the chunk's one batch. */
  private static void withBatch(BatchCheck check) throws IOException {
    try (BufferAllocator allocator =
            ArrowUtils.rootAllocator().newChildAllocator("test", 0, Long.MAX_VALUE);
        ArrowStreamReader reader =
            new ArrowStreamReader(
                new ByteArrayReadableSeekableByteChannel(Vectors.chunk()), allocator)) {
      assertTrue(reader.loadNextBatch());
      check.accept(reader.getVectorSchemaRoot());
      assertTrue(!reader.loadNextBatch(), "one batch");
    }
  }

  private interface BatchCheck {
    void accept(VectorSchemaRoot root) throws IOException;
  }

  @Test
  void everyColumnIsOneTheJvmCopiesAsItIs() throws IOException {
    withBatch(
        root -> {
          List<FieldVector> vectors = root.getFieldVectors();
          assertEquals(LAYOUTS.length, vectors.size());
          for (int c = 0; c < LAYOUTS.length; c++) {
            assertEquals(LAYOUTS[c], ArrowLayout.of(vectors.get(c)), vectors.get(c).getName());
          }
        });
  }

  @Test
  void theCopiedRowsHoldThePythonValues() throws IOException {
    withBatch(
        root -> {
          InternalRow[] rows = BatchRows.of(root);
          assertEquals(3, rows.length);
          InternalRow first = rows[0];
          assertTrue(first.getBoolean(0));
          assertEquals(-128, first.getByte(1));
          assertEquals(-32768, first.getShort(2));
          assertEquals(Integer.MIN_VALUE, first.getInt(3));
          assertEquals(Long.MIN_VALUE, first.getLong(4));
          assertEquals(1.5f, first.getFloat(5));
          assertEquals(Math.PI, first.getDouble(6));
          assertEquals(0, first.getInt(7)); // 1970-01-01 in days
          assertEquals(1709209845123456L, first.getLong(8)); // 2024-02-29T12:30:45.123456Z
          assertEquals(946684799999999L, first.getLong(9)); // 1999-12-31T23:59:59.999999
          assertEquals("zürich ✓", first.getUTF8String(10).toString());
          assertArrayEquals(new byte[] {0, (byte) 0xff, 0x10}, first.getBinary(11));
          assertEquals("a".repeat(40), first.getUTF8String(12).toString());

          InternalRow second = rows[1];
          for (int c = 0; c < LAYOUTS.length; c++) {
            assertEquals(c != 4, second.isNullAt(c), "column " + c);
          }
          assertEquals(0L, second.getLong(4));

          InternalRow third = rows[2];
          assertEquals(Long.MAX_VALUE, third.getLong(4));
          assertEquals(19782, third.getInt(7)); // 2024-02-29 in days
          assertEquals("", third.getUTF8String(10).toString());
          assertEquals(0, third.getBinary(11).length);
          assertEquals("snapshot", third.getUTF8String(12).toString());
        });
  }

  @Test
  void theCopiedRowsEqualSparksOwnColumnarView() throws IOException {
    // BatchRows copies the Arrow buffers into UnsafeRow words itself; Spark's ArrowColumnVector
    // reads the same vectors through its own accessors. Every value must agree.
    withBatch(
        root -> {
          InternalRow[] rows = BatchRows.of(root);
          List<FieldVector> vectors = root.getFieldVectors();
          ColumnVector[] columns = new ColumnVector[vectors.size()];
          for (int c = 0; c < columns.length; c++) {
            columns[c] = new ArrowColumnVector(vectors.get(c));
          }
          ColumnarBatch batch = new ColumnarBatch(columns, root.getRowCount());
          for (int r = 0; r < rows.length; r++) {
            InternalRow spark = batch.getRow(r);
            for (int c = 0; c < columns.length; c++) {
              String where = vectors.get(c).getName() + " row " + r;
              assertEquals(spark.isNullAt(c), rows[r].isNullAt(c), where);
              if (spark.isNullAt(c)) {
                continue;
              }
              Object expected = spark.get(c, columns[c].dataType());
              Object actual = rows[r].get(c, columns[c].dataType());
              if (expected instanceof byte[] bytes) {
                assertArrayEquals(bytes, (byte[]) actual, where);
              } else {
                assertEquals(expected, actual, where);
              }
            }
          }
        });
  }
}
