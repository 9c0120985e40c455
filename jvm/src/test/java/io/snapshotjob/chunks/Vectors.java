package io.snapshotjob.chunks;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/**
 * The byte-level vectors the Python side wrote (tests/unit/chunk_vectors.py), read from the
 * test class path: a chunk, its descriptor line and its value as the Python client puts it.
 * tests/unit/runtime/test_chunk_vectors.py checks that Python still writes exactly these.
 */
final class Vectors {
  private Vectors() {}

  /** An Arrow IPC stream of three rows, as spark_runtime.chunk_io.encode_batches writes it. */
  static byte[] chunk() {
    return read("python-chunk.arrow");
  }

  /** The chunk's descriptor line, as spark_runtime.jvm_chunks.chunk_line writes it. */
  static String line() {
    return new String(read("python-chunk.tsv"), StandardCharsets.UTF_8).strip();
  }

  /** The chunk serialised by the Hazelcast Python client (a byte array's Data). */
  static byte[] value() {
    return read("python-chunk.value");
  }

  private static byte[] read(String name) {
    try (InputStream in = Vectors.class.getResourceAsStream(name)) {
      if (in == null) {
        throw new IllegalStateException("no test resource " + name);
      }
      return in.readAllBytes();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
