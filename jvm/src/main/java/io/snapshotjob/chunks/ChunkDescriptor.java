package io.snapshotjob.chunks;

import java.io.Serializable;
import java.util.Locale;
import net.openhft.hashing.LongHashFunction;

/**
 * One chunk as the validation record lists it: key, size, rows and xxh3-64 checksum.
 *
 * <p>The Python side's {@code snapshot_protocol.chunks.ChunkDescriptor}; on the wire between
 * the two a tab-separated line, {@code key, numBytes, numKeys, checksum}, then {@code delta}
 * for a chunk of a delta (a chain's restore reads it after its full version), and for a chunk
 * just written the writer's name after them.
 */
final class ChunkDescriptor implements Serializable {
  static final String DELTA_MARK = "delta";

  final String key;
  final long numBytes;
  final long numKeys;
  final String checksum;
  final boolean delta;

  ChunkDescriptor(String key, long numBytes, long numKeys, String checksum, boolean delta) {
    this.key = key;
    this.numBytes = numBytes;
    this.numKeys = numKeys;
    this.checksum = checksum;
    this.delta = delta;
  }

  static ChunkDescriptor parse(String line) {
    String[] fields = line.split("\t");
    boolean delta = fields.length > 4 && DELTA_MARK.equals(fields[4]);
    return new ChunkDescriptor(
        fields[0], Long.parseLong(fields[1]), Long.parseLong(fields[2]), fields[3], delta);
  }

  String line(String writer) {
    return key + "\t" + numBytes + "\t" + numKeys + "\t" + checksum + "\t" + writer;
  }

  /** The checksum of snapshot_protocol.chunks.checksum: xxh3's 64-bit hash, 16 hex digits. */
  static String checksum(byte[] data) {
    return checksum(data, 0, data.length);
  }

  /** The checksum of {@code length} bytes of {@code data} from {@code offset}. */
  static String checksum(byte[] data, int offset, int length) {
    return String.format(
        Locale.ROOT, "%016x", LongHashFunction.xx3().hashBytes(data, offset, length));
  }

  /**
   * Fails, in the words of the Python side's SnapshotCorrupted, if {@code data} is not this
   * chunk: the driver finds that text in the failed task's error and fails the restore.
   */
  void verify(String mapName, long snapshotId, byte[] data) {
    String actual = checksum(data);
    if (data.length == numBytes && actual.equals(checksum)) {
      return;
    }
    throw new IllegalStateException(
        "Snapshot "
            + snapshotId
            + " in map '"
            + mapName
            + "' is corrupted: chunk '"
            + key
            + "' does not match its checksum ("
            + data.length
            + " bytes read, "
            + numBytes
            + " written; xxh3-64 "
            + actual
            + ", expected "
            + checksum
            + "). Its data changed after it was written");
  }
}
