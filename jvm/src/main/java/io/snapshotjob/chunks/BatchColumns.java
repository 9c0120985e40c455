package io.snapshotjob.chunks;

import java.util.List;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.BaseVariableWidthVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.unsafe.Platform;

/**
 * Stored {@code UnsafeRow}s written into an Arrow record batch's vectors, a column at a time:
 * the inverse of BatchRows.
 *
 * <p>Spark's {@code ArrowWriter} writes a row at a time through a writer per field; for a string
 * it makes a {@code UTF8String} and a {@code ByteBuffer} over its bytes and sets the value with
 * the vector's checked, growing setter: half of a snapshot's task samples in a profile of 1 GiB
 * (docs/development/performance.md). Here a batch's rows are held (they are a checkpoint's stored rows, each
 * its own object), each vector is grown once to the batch's size, and each column's values are
 * copied from the rows' words into Arrow's buffers, with the same values, validity and offsets
 * as Spark's writer gives; a null's value slot is zeroed. Only a root whose vectors all have
 * a layout ArrowLayout copies (not its large offsets) is written here; others go through
 * Spark's writer.
 */
final class BatchColumns {
  private final VectorSchemaRoot root;
  private final List<FieldVector> vectors;
  private final ArrowLayout[] layouts;

  private BatchColumns(VectorSchemaRoot root, ArrowLayout[] layouts) {
    this.root = root;
    this.vectors = root.getFieldVectors();
    this.layouts = layouts;
  }

  /** A writer into {@code root}, or null if a column is of a type it does not write. */
  static BatchColumns of(VectorSchemaRoot root) {
    List<FieldVector> vectors = root.getFieldVectors();
    ArrowLayout[] layouts = new ArrowLayout[vectors.size()];
    for (int c = 0; c < layouts.length; c++) {
      layouts[c] = ArrowLayout.of(vectors.get(c));
      // Large offsets are not written here: Spark makes them only when told to.
      if (layouts[c] == null || layouts[c] == ArrowLayout.LARGE_VARIABLE) {
        return null;
      }
    }
    return new BatchColumns(root, layouts);
  }

  /**
   * Makes the root's batch the first {@code count} rows; returns the batch's buffer bytes, as
   * Spark's {@code ArrowWriter.sizeInBytes} counts them.
   */
  long write(UnsafeRow[] rows, int count) {
    long bytes = 0;
    int bitSetBytes = UnsafeRow.calculateBitSetWidthInBytes(layouts.length);
    for (int c = 0; c < layouts.length; c++) {
      FieldVector vector = vectors.get(c);
      if (layouts[c] == ArrowLayout.VARIABLE) {
        writeVariable((BaseVariableWidthVector) vector, rows, count, c);
      } else {
        writeFixed((BaseFixedWidthVector) vector, layouts[c], rows, count, c, bitSetBytes);
      }
      bytes += vector.getBufferSize();
    }
    root.setRowCount(count);
    return bytes;
  }

  private static void writeFixed(
      BaseFixedWidthVector vector,
      ArrowLayout layout,
      UnsafeRow[] rows,
      int count,
      int ordinal,
      int bitSetBytes) {
    while (vector.getValueCapacity() < count) {
      vector.reAlloc();
    }
    ArrowBuf validity = vector.getValidityBuffer();
    long validityAddress = validity.memoryAddress();
    validity.setZero(0, (count + 7) / 8);
    long data = vector.getDataBuffer().memoryAddress();
    long field = bitSetBytes + 8L * ordinal;
    if (layout == ArrowLayout.BIT) {
      vector.getDataBuffer().setZero(0, (count + 7) / 8);
    }
    int width = layout.width;
    for (int i = 0; i < count; i++) {
      UnsafeRow row = rows[i];
      boolean isNull = row.isNullAt(ordinal);
      if (!isNull) {
        setBit(validityAddress, i);
      }
      Object base = row.getBaseObject();
      long at = row.getBaseOffset() + field;
      switch (layout) {
        case BIT:
          if (!isNull && Platform.getBoolean(base, at)) {
            setBit(data, i);
          }
          break;
        case BYTE:
          Platform.putByte(null, data + i, isNull ? 0 : Platform.getByte(base, at));
          break;
        case SHORT:
          short value = isNull ? 0 : Platform.getShort(base, at);
          Platform.putShort(null, data + (long) width * i, value);
          break;
        case INT:
          Platform.putInt(null, data + (long) width * i, isNull ? 0 : Platform.getInt(base, at));
          break;
        default:
          Platform.putLong(null, data + (long) width * i, isNull ? 0 : Platform.getLong(base, at));
      }
    }
    vector.setValueCount(count);
  }

  private static void writeVariable(
      BaseVariableWidthVector vector, UnsafeRow[] rows, int count, int ordinal) {
    long total = 0;
    for (int i = 0; i < count; i++) {
      if (!rows[i].isNullAt(ordinal)) {
        total += (int) rows[i].getLong(ordinal);
      }
    }
    while (vector.getValueCapacity() < count) {
      vector.reallocValidityAndOffsetBuffers();
    }
    while (vector.getByteCapacity() < total) {
      vector.reallocDataBuffer();
    }
    ArrowBuf validity = vector.getValidityBuffer();
    long validityAddress = validity.memoryAddress();
    validity.setZero(0, (count + 7) / 8);
    long offsets = vector.getOffsetBuffer().memoryAddress();
    long data = vector.getDataBuffer().memoryAddress();
    int end = 0;
    Platform.putInt(null, offsets, 0);
    for (int i = 0; i < count; i++) {
      UnsafeRow row = rows[i];
      if (!row.isNullAt(ordinal)) {
        setBit(validityAddress, i);
        long offsetAndSize = row.getLong(ordinal);
        int size = (int) offsetAndSize;
        Platform.copyMemory(
            row.getBaseObject(),
            row.getBaseOffset() + (offsetAndSize >>> 32),
            null,
            data + end,
            size);
        end += size;
      }
      Platform.putInt(null, offsets + 4L * (i + 1), end);
    }
    // Every value is set: the vector must not fill the offsets of values it thinks unset.
    vector.setLastSet(count - 1);
    vector.setValueCount(count);
  }

  private static void setBit(long address, int i) {
    long at = address + (i >> 3);
    Platform.putByte(null, at, (byte) (Platform.getByte(null, at) | (1 << (i & 7))));
  }
}
