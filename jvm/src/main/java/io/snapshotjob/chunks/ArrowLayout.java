package io.snapshotjob.chunks;

import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.DateDayVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.Float8Vector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.LargeVarBinaryVector;
import org.apache.arrow.vector.LargeVarCharVector;
import org.apache.arrow.vector.SmallIntVector;
import org.apache.arrow.vector.TimeStampMicroTZVector;
import org.apache.arrow.vector.TimeStampMicroVector;
import org.apache.arrow.vector.TinyIntVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;

/**
 * How a column's values lie in Arrow's buffers and in an {@code UnsafeRow}'s word, for the
 * vectors whose values BatchRows and BatchColumns copy as they are.
 *
 * <p>These are the vectors Spark's Arrow conversion makes for booleans, integers, floating
 * point numbers, dates, microsecond timestamps, strings and binaries: each value is the same
 * bits on both sides (a fixed-width value in the first bytes of its word, a variable-length one
 * as bytes the word points to). Other vectors (decimals, nested and interval types, and any
 * subclass) are left to Spark's own conversions.
 */
enum ArrowLayout {
  /** One bit per value in Arrow; a byte (0 or 1) in the row's word. */
  BIT(0),
  BYTE(1),
  SHORT(2),
  /** Also dates (days) and floats (their bits). */
  INT(4),
  /** Also doubles (their bits) and timestamps (microseconds). */
  LONG(8),
  /** Strings and binaries with 32-bit offsets. */
  VARIABLE(0),
  /** Strings and binaries with 64-bit offsets. */
  LARGE_VARIABLE(0);

  /** A fixed-width value's bytes; 0 for the others. */
  final int width;

  ArrowLayout(int width) {
    this.width = width;
  }

  boolean variable() {
    return this == VARIABLE || this == LARGE_VARIABLE;
  }

  /** The layout of {@code vector}'s values, or null if they are not copied as they are. */
  static ArrowLayout of(FieldVector vector) {
    // Exact classes: a subclass (or a type Spark reads with a conversion) is not copied.
    Class<?> type = vector.getClass();
    if (type == BitVector.class) {
      return BIT;
    } else if (type == TinyIntVector.class) {
      return BYTE;
    } else if (type == SmallIntVector.class) {
      return SHORT;
    } else if (type == IntVector.class
        || type == DateDayVector.class
        || type == Float4Vector.class) {
      return INT;
    } else if (type == BigIntVector.class
        || type == Float8Vector.class
        || type == TimeStampMicroTZVector.class
        || type == TimeStampMicroVector.class) {
      return LONG;
    } else if (type == VarCharVector.class || type == VarBinaryVector.class) {
      return VARIABLE;
    } else if (type == LargeVarCharVector.class || type == LargeVarBinaryVector.class) {
      return LARGE_VARIABLE;
    }
    return null;
  }
}
