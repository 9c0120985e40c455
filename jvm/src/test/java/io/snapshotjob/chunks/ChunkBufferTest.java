package io.snapshotjob.chunks;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.hazelcast.core.HazelcastInstance;
import com.hazelcast.internal.serialization.Data;
import com.hazelcast.internal.serialization.InternalSerializationService;
import com.hazelcast.internal.serialization.impl.DefaultSerializationServiceBuilder;
import com.hazelcast.spi.impl.SerializationServiceSupport;
import java.io.IOException;
import java.lang.reflect.Proxy;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.util.Arrays;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.arrow.vector.util.ByteArrayReadableSeekableByteChannel;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.util.ArrowUtils;
import org.junit.jupiter.api.Test;

class ChunkBufferTest {
  /** A client whose only working part is Hazelcast's own serialisation service. */
  private static HazelcastInstance client(boolean withSerialization) {
    InternalSerializationService service = new DefaultSerializationServiceBuilder().build();
    Class<?>[] types =
        withSerialization
            ? new Class<?>[] {HazelcastInstance.class, SerializationServiceSupport.class}
            : new Class<?>[] {HazelcastInstance.class};
    return (HazelcastInstance)
        Proxy.newProxyInstance(
            ChunkBufferTest.class.getClassLoader(),
            types,
            (proxy, method, args) ->
                switch (method.getName()) {
                  case "getSerializationService" -> service;
                  case "hashCode" -> System.identityHashCode(proxy);
                  case "equals" -> proxy == args[0];
                  case "toString" -> "test client";
                  default -> throw new UnsupportedOperationException(method.getName());
                });
  }

  private static ChunkBuffer buffered(byte[] data, int capacity, int pieces) {
    ChunkBuffer buffer = new ChunkBuffer(capacity);
    int step = Math.max(1, data.length / pieces);
    for (int offset = 0; offset < data.length; offset += step) {
      buffer.write(ByteBuffer.wrap(data, offset, Math.min(step, data.length - offset)));
    }
    return buffer;
  }

  @Test
  void theValueIsTheBytesThePythonClientPuts() {
    // The members must hold the same bytes whichever side wrote a chunk: ChunkBuffer builds
    // Hazelcast's serialised byte[] itself, and it must be the Python client's byte for byte.
    ChunkBuffer buffer = buffered(Vectors.chunk(), 1024, 7);
    Object value = buffer.value(client(true));
    Data data = assertInstanceOf(Data.class, value);
    assertArrayEquals(Vectors.value(), data.toByteArray());
    assertEquals(ChunkBuffer.HEADER_BYTES + Vectors.chunk().length, data.totalSize());
  }

  @Test
  void aClientWithoutItsSerialisationGetsAPlainCopy() {
    ChunkBuffer buffer = buffered(Vectors.chunk(), 1024, 3);
    Object value = buffer.value(client(false));
    assertArrayEquals(Vectors.chunk(), (byte[]) value);
    assertTrue(!ChunkBuffer.prebuilt(client(false)));
    assertTrue(ChunkBuffer.prebuilt(client(true)));
  }

  @Test
  void growsAndResetsAndChecksumsWhatItHolds() {
    byte[] data = Vectors.chunk();
    ChunkBuffer buffer = buffered(data, 16, 100);
    assertEquals(data.length, buffer.size());
    assertEquals(ChunkDescriptor.parse(Vectors.line()).checksum, buffer.checksum());
    buffer.reset();
    assertEquals(0, buffer.size());
    byte[] half = Arrays.copyOf(data, data.length / 2);
    buffer.write(ByteBuffer.wrap(half));
    assertEquals(ChunkDescriptor.checksum(half), buffer.checksum());
    byte[] copy = (byte[]) buffer.value(client(false));
    assertArrayEquals(half, copy);
    assertNotSame(half, copy);
  }

  @Test
  void anArrowStreamWrittenIntoItReadsBackToTheSameRows() throws IOException {
    // The JVM writer's path: Arrow's stream writer straight into the buffer, no adapter.
    ChunkBuffer buffer = new ChunkBuffer(64);
    InternalRow[] expected;
    try (BufferAllocator allocator =
            ArrowUtils.rootAllocator().newChildAllocator("test", 0, Long.MAX_VALUE);
        ArrowStreamReader reader =
            new ArrowStreamReader(
                new ByteArrayReadableSeekableByteChannel(Vectors.chunk()), allocator)) {
      assertTrue(reader.loadNextBatch());
      VectorSchemaRoot root = reader.getVectorSchemaRoot();
      expected = BatchRows.of(root);
      try (ArrowStreamWriter writer = new ArrowStreamWriter(root, null, buffer)) {
        writer.start();
        writer.writeBatch();
        writer.end();
      }
      byte[] written = (byte[]) buffer.value(client(false));
      try (ArrowStreamReader again =
          new ArrowStreamReader(new ByteArrayReadableSeekableByteChannel(written), allocator)) {
        assertTrue(again.loadNextBatch());
        InternalRow[] actual = BatchRows.of(again.getVectorSchemaRoot());
        assertEquals(expected.length, actual.length);
        for (int r = 0; r < actual.length; r++) {
          assertEquals(expected[r], actual[r], "row " + r);
        }
      }
    }
    // Unused in the round trip, but proves Channels can wrap it as a stream's sink too.
    assertTrue(Channels.newOutputStream(buffer) != null);
  }
}
