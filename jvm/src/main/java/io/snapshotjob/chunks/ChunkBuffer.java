package io.snapshotjob.chunks;

import com.hazelcast.core.HazelcastInstance;
import com.hazelcast.internal.serialization.Data;
import com.hazelcast.internal.serialization.SerializationService;
import com.hazelcast.internal.serialization.impl.HeapData;
import com.hazelcast.spi.impl.SerializationServiceSupport;
import java.nio.ByteBuffer;
import java.nio.channels.WritableByteChannel;
import java.util.Arrays;
import java.util.Map;
import java.util.WeakHashMap;
import org.slf4j.LoggerFactory;

/**
 * The buffer a task encodes its chunks into, and each chunk's bytes as the value a put sends.
 *
 * <p>Why not a byte array and the client's serialisation of it: that grows an output buffer
 * from 4 KiB by doubling for every value and copies the result out once more, so a 4 MiB chunk
 * cost about 20 MiB of allocations, all of them large enough to go straight into the old
 * generation (G1's humongous objects), and the garbage collector's pauses were a quarter of a
 * snapshot's time. Here the Arrow stream is written straight into one buffer per task (no
 * channel adapter in between), and each chunk is copied once, into an array that already holds
 * the client's serialised form of a byte array: its partition hash (0), type id and length, then
 * the bytes. The client sends a value that is already serialised as is. Whether that form is
 * the one this client would build is checked once per client, against its own serialisation of
 * a sample; if it is not (another Hazelcast version), the chunk is put as a plain array.
 */
final class ChunkBuffer implements WritableByteChannel {
  /** Hazelcast's type id of a {@code byte[]} (SerializationConstants.CONSTANT_TYPE_BYTE_ARRAY). */
  private static final int BYTE_ARRAY_TYPE = -12;

  /** Partition hash, type id, array length. */
  static final int HEADER_BYTES = 12;

  private static final Map<HazelcastInstance, Boolean> PREBUILT = new WeakHashMap<>();

  private byte[] buffer;
  private int size;

  ChunkBuffer(int capacity) {
    this.buffer = new byte[Math.max(1024, capacity)];
  }

  void reset() {
    size = 0;
  }

  int size() {
    return size;
  }

  @Override
  public int write(ByteBuffer source) {
    int n = source.remaining();
    if (size + n > buffer.length) {
      buffer = Arrays.copyOf(buffer, Math.max(size + n, buffer.length + buffer.length / 2));
    }
    source.get(buffer, size, n);
    size += n;
    return n;
  }

  @Override
  public boolean isOpen() {
    return true;
  }

  @Override
  public void close() {
    // The buffer outlives each chunk's stream: reset() starts the next one.
  }

  /** The xxh3-64 checksum of the buffered chunk, as ChunkDescriptor.checksum writes it. */
  String checksum() {
    return ChunkDescriptor.checksum(buffer, 0, size);
  }

  /**
   * The buffered chunk as the value to put: serialised already if {@code client} accepts that
   * (see the class comment), else a copy of its bytes.
   */
  Object value(HazelcastInstance client) {
    if (!prebuilt(client)) {
      return Arrays.copyOf(buffer, size);
    }
    byte[] payload = new byte[HEADER_BYTES + size];
    header(payload, size);
    System.arraycopy(buffer, 0, payload, HEADER_BYTES, size);
    return new HeapData(payload);
  }

  private static void header(byte[] payload, int length) {
    ByteBuffer.wrap(payload, 0, HEADER_BYTES).putInt(0).putInt(BYTE_ARRAY_TYPE).putInt(length);
  }

  /** Whether this client serialises a byte array exactly as {@link #value} does. */
  static synchronized boolean prebuilt(HazelcastInstance client) {
    return PREBUILT.computeIfAbsent(client, ChunkBuffer::checkPrebuilt);
  }

  private static boolean checkPrebuilt(HazelcastInstance client) {
    boolean prebuilt;
    try {
      prebuilt = client instanceof SerializationServiceSupport && sameForm(client);
    } catch (RuntimeException error) {
      // Internal classes of another Hazelcast version may not behave so; the plain arrays do.
      prebuilt = false;
    }
    if (!prebuilt) {
      LoggerFactory.getLogger(ChunkBuffer.class)
          .warn(
              "Chunks are put as byte arrays for the Hazelcast client to serialise: it does not"
                  + " serialise one as this writer does (another Hazelcast version?);"
                  + " snapshots stay correct but allocate more");
    }
    return prebuilt;
  }

  private static boolean sameForm(HazelcastInstance client) {
    SerializationService service = ((SerializationServiceSupport) client).getSerializationService();
    byte[] sample = {1, 2, 3, 4, 5, (byte) 0xff, 0, 42};
    byte[] payload = new byte[HEADER_BYTES + sample.length];
    header(payload, sample.length);
    System.arraycopy(sample, 0, payload, HEADER_BYTES, sample.length);
    Data ours = new HeapData(payload);
    Data theirs = service.toData(sample);
    return theirs != null
        && Arrays.equals(theirs.toByteArray(), ours.toByteArray())
        && Arrays.equals((byte[]) service.toObject(ours), sample)
        && service.toData(ours) == ours;
  }
}
