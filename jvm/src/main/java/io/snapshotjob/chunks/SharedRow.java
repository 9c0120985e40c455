package io.snapshotjob.chunks;

import java.util.Arrays;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.array.ByteArrayMethods;
import org.apache.spark.unsafe.bitset.BitSetMethods;
import org.apache.spark.unsafe.hash.Murmur3_x86_32;
import org.apache.spark.unsafe.types.CalendarInterval;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.util.KnownSizeEstimation;

/**
 * A restored row: Spark's {@code UnsafeRow} format in a slice of an array that the rows of its
 * batch share (BatchRows), one object per row, which tells Spark's size estimator its own size.
 *
 * <p>Why: a restore keeps every row it reads, and a local checkpoint stores them as objects.
 * With an {@code UnsafeRow} and an array per row, a 1 GiB restore allocated 16.8 million
 * objects, every one of them live, that the young collections then copied, and the memory
 * store's size sampling visited two objects per sampled row (docs/development/performance.md). Here a row
 * is one object over a slice of a shared array; but the estimator, left to itself, would count
 * a whole shared array for each row it samples and scale that up to the block, so each row
 * reports its own bytes ({@code KnownSizeEstimation}).
 *
 * <p>Spark reads such rows through their getters, as any {@code InternalRow}: a scan of the
 * checkpoint projects them into rows of its own, and the chunk writer reads their bytes through
 * {@link #unsafe}. The getters of the types a restored batch's rows hold (ArrowLayout: fixed
 * widths and strings or binaries) read the slice as {@code UnsafeRow} does; the others go
 * through an {@code UnsafeRow} over the same bytes. It extends {@code GenericInternalRow} so that
 * getters a later Spark version adds have an implementation ({@link #genericGet}, from the
 * row's types).
 */
public final class SharedRow extends GenericInternalRow implements KnownSizeEstimation {
  private static final long serialVersionUID = 1L;
  private static final Object[] NO_VALUES = new Object[0];

  /**
   * The bytes of this object, added to its slice's (with compressed references: a header of 12
   * bytes, three references, two ints and a long, aligned to 8).
   */
  public static final long SHELL_BYTES = 40;

  private final byte[] base;
  private final int offset;
  private final int size;
  private final DataType[] types;
  /** Bytes of rows left out of the state that still share arrays with rows kept (carry). */
  private long carried;

  /**
   * A row over {@code base[offset .. offset + size)}, laid out as an {@code UnsafeRow} of as
   * many fields as {@code types} has.
   */
  SharedRow(byte[] base, int offset, int size, DataType[] types) {
    super(NO_VALUES);
    this.base = base;
    this.offset = offset;
    this.size = size;
    this.types = types;
  }

  /** An {@code UnsafeRow} over the same bytes, for readers of its format. */
  public UnsafeRow unsafe() {
    UnsafeRow row = new UnsafeRow(types.length);
    row.pointTo(base, start(), size);
    return row;
  }

  /** The bytes this row takes in its array. */
  public int sizeInBytes() {
    return size;
  }

  @Override
  public long estimatedSize() {
    return SHELL_BYTES + size + carried;
  }

  /**
   * Counts, in this row's size, rows of shared arrays that the state leaves out (a chain's rows
   * a newer delta replaced, ChainRows): their bytes stay in memory as long as a row of their
   * array is kept, so a block's size must still count them.
   */
  void carry(long bytes) {
    carried += bytes;
  }

  private long start() {
    return Platform.BYTE_ARRAY_OFFSET + offset;
  }

  private long field(int ordinal) {
    return start() + UnsafeRow.calculateBitSetWidthInBytes(types.length) + 8L * ordinal;
  }

  @Override
  public Object genericGet(int ordinal) {
    return unsafe().get(ordinal, types[ordinal]);
  }

  @Override
  public int numFields() {
    return types.length;
  }

  @Override
  public boolean isNullAt(int ordinal) {
    return BitSetMethods.isSet(base, start(), ordinal);
  }

  @Override
  public Object get(int ordinal, DataType dataType) {
    return unsafe().get(ordinal, dataType);
  }

  @Override
  public boolean getBoolean(int ordinal) {
    return Platform.getBoolean(base, field(ordinal));
  }

  @Override
  public byte getByte(int ordinal) {
    return Platform.getByte(base, field(ordinal));
  }

  @Override
  public short getShort(int ordinal) {
    return Platform.getShort(base, field(ordinal));
  }

  @Override
  public int getInt(int ordinal) {
    return Platform.getInt(base, field(ordinal));
  }

  @Override
  public long getLong(int ordinal) {
    return Platform.getLong(base, field(ordinal));
  }

  @Override
  public float getFloat(int ordinal) {
    return Platform.getFloat(base, field(ordinal));
  }

  @Override
  public double getDouble(int ordinal) {
    return Platform.getDouble(base, field(ordinal));
  }

  @Override
  public UTF8String getUTF8String(int ordinal) {
    if (isNullAt(ordinal)) {
      return null;
    }
    long offsetAndSize = getLong(ordinal);
    return UTF8String.fromAddress(base, start() + (offsetAndSize >>> 32), (int) offsetAndSize);
  }

  @Override
  public byte[] getBinary(int ordinal) {
    if (isNullAt(ordinal)) {
      return null;
    }
    long offsetAndSize = getLong(ordinal);
    int length = (int) offsetAndSize;
    byte[] bytes = new byte[length];
    Platform.copyMemory(
        base, start() + (offsetAndSize >>> 32), bytes, Platform.BYTE_ARRAY_OFFSET, length);
    return bytes;
  }

  @Override
  public Decimal getDecimal(int ordinal, int precision, int scale) {
    return unsafe().getDecimal(ordinal, precision, scale);
  }

  @Override
  public CalendarInterval getInterval(int ordinal) {
    return unsafe().getInterval(ordinal);
  }

  @Override
  public InternalRow getStruct(int ordinal, int numFields) {
    return unsafe().getStruct(ordinal, numFields);
  }

  @Override
  public ArrayData getArray(int ordinal) {
    return unsafe().getArray(ordinal);
  }

  @Override
  public MapData getMap(int ordinal) {
    return unsafe().getMap(ordinal);
  }

  @Override
  public void setNullAt(int ordinal) {
    unsafe().setNullAt(ordinal);
  }

  @Override
  public void update(int ordinal, Object value) {
    unsafe().update(ordinal, value);
  }

  /** A row of its own: the copy's bytes are in an array of their own. */
  @Override
  public SharedRow copy() {
    return new SharedRow(Arrays.copyOfRange(base, offset, offset + size), 0, size, types);
  }

  /**
   * Serialised, a row is its own slice, not the array it shares (as {@code UnsafeRow} writes its
   * bytes): a stored block that goes to disk or to another executor's memory, or a row collected,
   * takes its rows' bytes and no more, and nothing is left to carry.
   */
  private Object writeReplace() {
    return offset == 0 && size == base.length && carried == 0 ? this : copy();
  }

  /** Equal to a row of the same bytes, as {@code UnsafeRow} is. */
  @Override
  public boolean equals(Object other) {
    if (!(other instanceof SharedRow)) {
      return false;
    }
    SharedRow row = (SharedRow) other;
    return size == row.size
        && ByteArrayMethods.arrayEquals(base, start(), row.base, row.start(), size);
  }

  /** {@code UnsafeRow}'s hash of the same bytes. */
  @Override
  public int hashCode() {
    return Murmur3_x86_32.hashUnsafeWords(base, start(), size, 42);
  }

  @Override
  public String toString() {
    return unsafe().toString();
  }
}
