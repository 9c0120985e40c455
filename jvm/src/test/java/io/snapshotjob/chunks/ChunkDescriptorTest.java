package io.snapshotjob.chunks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

class ChunkDescriptorTest {
  @Test
  void parsesTheLineThePythonDriverWrites() {
    ChunkDescriptor chunk = ChunkDescriptor.parse(Vectors.line());
    assertEquals("7/keyed-sum/3/0", chunk.key);
    assertEquals(Vectors.chunk().length, chunk.numBytes);
    assertEquals(3, chunk.numKeys);
    assertFalse(chunk.delta);
  }

  @Test
  void computesThePythonChecksumOfThePythonChunk() {
    // snapshot_protocol.chunks.checksum (xxhash's xxh3_64_hexdigest) of the same bytes.
    assertEquals(ChunkDescriptor.parse(Vectors.line()).checksum, ChunkDescriptor.checksum(Vectors.chunk()));
  }

  @Test
  void checksumsAreSixteenLowerCaseHexDigitsOfXxh3() {
    // xxh3-64 of "" and of "snapshotjob", as xxhash.xxh3_64_hexdigest prints them.
    assertEquals("2d06800538d394c2", ChunkDescriptor.checksum(new byte[0]));
    assertEquals(
        "dfcd4623acc5c83a",
        ChunkDescriptor.checksum("snapshotjob".getBytes(StandardCharsets.US_ASCII)));
    byte[] padded = "xxsnapshotjobyy".getBytes(StandardCharsets.US_ASCII);
    assertEquals("dfcd4623acc5c83a", ChunkDescriptor.checksum(padded, 2, 11));
  }

  @Test
  void verifyAcceptsThePythonChunk() {
    ChunkDescriptor.parse(Vectors.line()).verify("m", 7, Vectors.chunk());
  }

  @Test
  void verifyRejectsAChangedByteInTheWordsOfSnapshotCorrupted() {
    byte[] data = Vectors.chunk();
    data[data.length / 2] ^= 1;
    IllegalStateException error =
        assertThrows(
            IllegalStateException.class,
            () -> ChunkDescriptor.parse(Vectors.line()).verify("snap-map", 7, data));
    // The driver's coordinator recognises a corrupted snapshot by this text.
    assertTrue(
        error.getMessage().startsWith("Snapshot 7 in map 'snap-map' is corrupted: chunk"),
        error.getMessage());
    assertTrue(error.getMessage().contains("'7/keyed-sum/3/0' does not match its checksum"));
  }

  @Test
  void verifyRejectsATruncatedChunk() {
    byte[] data = Vectors.chunk();
    byte[] shorter = java.util.Arrays.copyOf(data, data.length - 1);
    assertThrows(
        IllegalStateException.class,
        () -> ChunkDescriptor.parse(Vectors.line()).verify("m", 7, shorter));
  }

  @Test
  void readsTheDeltaMarkAndWritesTheWriterAfterTheFourFields() {
    ChunkDescriptor delta = ChunkDescriptor.parse(Vectors.line() + "\tdelta");
    assertTrue(delta.delta);
    String line = delta.line("executor-1");
    assertEquals(Vectors.line() + "\texecutor-1", line);
    ChunkDescriptor back = ChunkDescriptor.parse(line);
    assertEquals(delta.checksum, back.checksum);
    assertFalse(back.delta);
  }
}
