package io.snapshotjob.chunks;

import java.util.Arrays;
import java.util.List;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.array.ByteArrayMethods;
import org.apache.spark.unsafe.bitset.BitSetMethods;

/**
 * An Arrow record batch's rows in Spark's {@code UnsafeRow} format, in arrays that consecutive
 * rows share, each row a SharedRow.
 *
 * <p>A restore keeps every row it reads: a local checkpoint stores them as objects. A row read
 * through Spark's columnar view (a {@code UTF8String} per string) was projected by the scan into
 * a shared buffer and copied out of it by the checkpoint: the copy alone was about 30 % of the
 * restore's task samples in a profile of 1 GiB (docs/development/performance.md). Here the batch's row
 * sizes are summed column by column, the rows are laid out one after the other in arrays of at
 * most {@link #SHARED_BYTES} (a row larger than that in one of its own), and each column's
 * values are copied from Arrow's buffers into place, with the bytes a projection writes (each
 * fixed field's whole word, zeroed padding after variable-length values), so rows compare and
 * hash as Spark's own. A row is one object over its slice where an {@code UnsafeRow} and an
 * array per row were two (SharedRow says why, and why each row tells its size). A batch with a
 * column of another type (decimals, nested or interval types) takes the projection, a row of
 * its own each.
 */
final class BatchRows {
  /**
   * The most bytes of rows one array holds: under half of G1's smallest region (1 MiB), so
   * that an array is an ordinary young object, not a humongous one that would hold whole
   * regions with the rest of its last one empty.
   */
  static final int SHARED_BYTES = 256 * 1024;

  private BatchRows() {}

  /** The rows of {@code root}'s batch. */
  static InternalRow[] of(VectorSchemaRoot root) {
    if (root.getRowCount() == 0) {
      return new InternalRow[0];
    }
    List<FieldVector> vectors = root.getFieldVectors();
    ArrowLayout[] layouts = new ArrowLayout[vectors.size()];
    for (int c = 0; c < layouts.length; c++) {
      layouts[c] = ArrowLayout.of(vectors.get(c));
      if (layouts[c] == null) {
        return projected(vectors, root.getRowCount());
      }
    }
    return copied(vectors, layouts, root.getRowCount());
  }

  private static InternalRow[] copied(List<FieldVector> vectors, ArrowLayout[] layouts, int count) {
    int fields = layouts.length;
    int bitSetBytes = UnsafeRow.calculateBitSetWidthInBytes(fields);
    int fixedBytes = bitSetBytes + 8 * fields;
    // Per row, its size, then (once the rows are allocated) where its next value goes.
    int[] cursors = new int[count];
    Arrays.fill(cursors, fixedBytes);
    for (int c = 0; c < fields; c++) {
      if (layouts[c].variable()) {
        FieldVector vector = vectors.get(c);
        boolean large = layouts[c] == ArrowLayout.LARGE_VARIABLE;
        long offsets = vector.getOffsetBuffer().memoryAddress();
        long validity = validity(vector);
        for (int i = 0; i < count; i++) {
          if (!isNull(validity, i)) {
            int length = length(offsets, i, large);
            cursors[i] += ByteArrayMethods.roundNumberOfBytesToNearestWord(length);
          }
        }
      }
    }
    byte[][] bases = new byte[count][];
    long[] starts = new long[count];
    int[] sizes = cursors.clone();
    // Consecutive rows share an array of at most SHARED_BYTES (a larger row has its own).
    for (int first = 0; first < count; ) {
      int end = first + 1;
      long bytes = sizes[first];
      while (end < count && bytes + sizes[end] <= SHARED_BYTES) {
        bytes += sizes[end++];
      }
      byte[] shared = new byte[(int) bytes];
      long at = Platform.BYTE_ARRAY_OFFSET;
      for (int i = first; i < end; i++) {
        bases[i] = shared;
        starts[i] = at;
        at += sizes[i];
        cursors[i] = fixedBytes;
      }
      first = end;
    }
    for (int c = 0; c < fields; c++) {
      copy(vectors.get(c), layouts[c], c, bitSetBytes, bases, starts, cursors);
    }
    DataType[] types = new DataType[fields];
    for (int c = 0; c < fields; c++) {
      types[c] = new ArrowColumnVector(vectors.get(c)).dataType();
    }
    InternalRow[] rows = new InternalRow[count];
    for (int i = 0; i < count; i++) {
      rows[i] =
          new SharedRow(bases[i], (int) (starts[i] - Platform.BYTE_ARRAY_OFFSET), sizes[i], types);
    }
    return rows;
  }

  /**
   * Copies column {@code ordinal}'s values into the rows' word for it; a variable-length value
   * goes at the row's cursor (from the row's start), which moves past it.
   */
  private static void copy(
      FieldVector vector,
      ArrowLayout layout,
      int ordinal,
      int bitSetBytes,
      byte[][] bases,
      long[] starts,
      int[] cursors) {
    int count = bases.length;
    long word = bitSetBytes + 8L * ordinal;
    long validity = validity(vector);
    if (validity != 0) {
      for (int i = 0; i < count; i++) {
        if (isNull(validity, i)) {
          // The null's word stays zero, as UnsafeRow.setNullAt leaves it: the array is new.
          BitSetMethods.set(bases[i], starts[i], ordinal);
        }
      }
    }
    long data = vector.getDataBuffer().memoryAddress();
    switch (layout) {
      case BIT:
        for (int i = 0; i < count; i++) {
          if (!isNull(validity, i)) {
            boolean value = ((Platform.getByte(null, data + (i >> 3)) >> (i & 7)) & 1) != 0;
            Platform.putBoolean(bases[i], starts[i] + word, value);
          }
        }
        break;
      case BYTE:
        for (int i = 0; i < count; i++) {
          if (!isNull(validity, i)) {
            Platform.putByte(bases[i], starts[i] + word, Platform.getByte(null, data + i));
          }
        }
        break;
      case SHORT:
        for (int i = 0; i < count; i++) {
          if (!isNull(validity, i)) {
            Platform.putShort(bases[i], starts[i] + word, Platform.getShort(null, data + 2L * i));
          }
        }
        break;
      case INT:
        for (int i = 0; i < count; i++) {
          if (!isNull(validity, i)) {
            Platform.putInt(bases[i], starts[i] + word, Platform.getInt(null, data + 4L * i));
          }
        }
        break;
      case LONG:
        for (int i = 0; i < count; i++) {
          if (!isNull(validity, i)) {
            Platform.putLong(bases[i], starts[i] + word, Platform.getLong(null, data + 8L * i));
          }
        }
        break;
      default:
        boolean large = layout == ArrowLayout.LARGE_VARIABLE;
        long offsets = vector.getOffsetBuffer().memoryAddress();
        for (int i = 0; i < count; i++) {
          if (!isNull(validity, i)) {
            long start =
                large
                    ? Platform.getLong(null, offsets + 8L * i)
                    : Platform.getInt(null, offsets + 4L * i);
            int length = length(offsets, i, large);
            int at = cursors[i];
            Platform.copyMemory(null, data + start, bases[i], starts[i] + at, length);
            Platform.putLong(bases[i], starts[i] + word, ((long) at << 32) | length);
            cursors[i] = at + ByteArrayMethods.roundNumberOfBytesToNearestWord(length);
          }
        }
    }
  }

  /** The address of the vector's validity bits, or 0 if it has no nulls. */
  private static long validity(FieldVector vector) {
    return vector.getNullCount() == 0 ? 0 : vector.getValidityBuffer().memoryAddress();
  }

  private static boolean isNull(long validity, int i) {
    return validity != 0 && ((Platform.getByte(null, validity + (i >> 3)) >> (i & 7)) & 1) == 0;
  }

  private static int length(long offsets, int i, boolean large) {
    if (large) {
      long end = Platform.getLong(null, offsets + 8L * (i + 1));
      return Math.toIntExact(end - Platform.getLong(null, offsets + 8L * i));
    }
    return Platform.getInt(null, offsets + 4L * (i + 1)) - Platform.getInt(null, offsets + 4L * i);
  }

  /** Through Spark's columnar view and a projection, a copy of each row kept. */
  private static InternalRow[] projected(List<FieldVector> vectors, int count) {
    ColumnVector[] columns = new ColumnVector[vectors.size()];
    DataType[] types = new DataType[columns.length];
    for (int c = 0; c < columns.length; c++) {
      columns[c] = new ArrowColumnVector(vectors.get(c));
      types[c] = columns[c].dataType();
    }
    UnsafeProjection projection = UnsafeProjection.create(types);
    ColumnarBatch batch = new ColumnarBatch(columns, count);
    InternalRow[] rows = new InternalRow[count];
    for (int i = 0; i < count; i++) {
      rows[i] = projection.apply(batch.getRow(i)).copy();
    }
    return rows;
  }
}
