package io.snapshotjob.chunks;

import java.util.Collection;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

/**
 * Which values of a state's first key column the deltas of a chain have: a bit per hash.
 *
 * <p>A chain's full version streams past its deltas' keys (ChainRows), and most of its rows
 * have a key no delta has. Projecting and hashing each row's whole key to find that out cost
 * a chain restore about as much again as reading the full version; reading one column and
 * testing a bit tells most rows apart. A set bit only says "maybe" (another value, or the same
 * first column with other key columns), and the row's whole key is then looked up; a clear
 * bit is certain, since equal keys have equal first columns.
 */
final class FirstKeyFilter {
  private static final int BITS_PER_KEY = 16;
  private final DataType type;
  private final long[] bits;
  private final long mask;

  private FirstKeyFilter(DataType type, int keys) {
    this.type = type;
    long size = Long.highestOneBit(Math.max(64L, (long) keys * BITS_PER_KEY - 1)) << 1;
    this.bits = new long[(int) (size / 64)];
    this.mask = size - 1;
  }

  /**
   * A filter of the first columns of {@code keys} (projections of the key columns), or null if
   * the first key column's type is not one it reads (then every row's whole key is looked up).
   */
  static FirstKeyFilter of(DataType firstKeyType, Collection<? extends InternalRow> keys) {
    if (!readable(firstKeyType)) {
      return null;
    }
    FirstKeyFilter filter = new FirstKeyFilter(firstKeyType, keys.size());
    for (InternalRow key : keys) {
      long bit = filter.bit(key);
      filter.bits[(int) (bit >>> 6)] |= 1L << bit;
    }
    return filter;
  }

  /** Whether the row's first column (the key's first) may be one of the deltas' keys'. */
  boolean mightContain(InternalRow row) {
    long bit = bit(row);
    return (bits[(int) (bit >>> 6)] & (1L << bit)) != 0;
  }

  private static boolean readable(DataType type) {
    return type instanceof LongType
        || type instanceof IntegerType
        || type instanceof ShortType
        || type instanceof ByteType
        || type instanceof BooleanType
        || type instanceof DateType
        || type instanceof TimestampType
        || type instanceof TimestampNTZType
        || type instanceof StringType;
  }

  private long bit(InternalRow row) {
    long value;
    if (row.isNullAt(0)) {
      value = 0x5bd1e995L;
    } else if (type instanceof LongType
        || type instanceof TimestampType
        || type instanceof TimestampNTZType) {
      value = row.getLong(0);
    } else if (type instanceof IntegerType || type instanceof DateType) {
      value = row.getInt(0);
    } else if (type instanceof ShortType) {
      value = row.getShort(0);
    } else if (type instanceof ByteType) {
      value = row.getByte(0);
    } else if (type instanceof BooleanType) {
      value = row.getBoolean(0) ? 1 : 0;
    } else {
      // A hash of the bytes: equal strings (as the key's projection compares them) are equal.
      value = row.getUTF8String(0).hashCode();
    }
    // Spread the value's bits over the index (Murmur3's 64-bit finaliser).
    value ^= value >>> 33;
    value *= 0xff51afd7ed558ccdL;
    value ^= value >>> 33;
    value *= 0xc4ceb9fe1a85ec53L;
    value ^= value >>> 33;
    return value & mask;
  }
}
