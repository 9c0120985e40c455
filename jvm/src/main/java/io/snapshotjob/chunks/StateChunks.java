package io.snapshotjob.chunks;

import com.hazelcast.core.HazelcastInstance;
import com.hazelcast.map.IMap;
import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.api.java.function.Function2;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.storage.StorageLevel;
import org.apache.spark.util.TaskCompletionListener;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Writes a state's partitions as chunks, and reads them back, in the executors' JVMs, without a
 * Python worker (called from spark_runtime/jvm_chunks.py through py4j).
 *
 * <p>The chunks are those spark_runtime/chunk_io.py writes: Arrow IPC streams of the rows with
 * the schema Spark gives a mapInArrow task, under the keys
 * {@code <snapshot>/<operator>/<partition>/<seq>}, each described by its size, rows and xxh3-64
 * checksum, so either side reads what the other wrote. Rows go from Spark's internal rows to
 * Arrow in the JVM, which is what a snapshot's time went to when they crossed to Python.
 */
public final class StateChunks {
  private StateChunks() {}

  /**
   * Writes partitions of {@code state}, each in its own task; returns the chunks' descriptors.
   *
   * @param only the partitions to write, comma-separated; empty for every partition (the
   *     others' tasks end without reading their rows)
   * @return one {@code key\tnumBytes\tnumKeys\tchecksum\twriter} line per chunk
   */
  public static String[] write(
      Dataset<Row> state,
      String members,
      String clusterName,
      String mapName,
      long snapshotId,
      String operator,
      String timeZone,
      boolean largeVarTypes,
      int batchRows,
      long chunkBytes,
      int window,
      String only) {
    Set<Integer> partitions = new HashSet<>();
    for (String partition : only.split(",")) {
      if (!partition.isEmpty()) {
        partitions.add(Integer.valueOf(partition));
      }
    }
    RDD<InternalRow> stored = storedRows(state);
    PartitionWriter writer =
        new PartitionWriter(
            stored != null,
            partitions,
            state.schema(),
            members,
            clusterName,
            mapName,
            snapshotId,
            operator,
            timeZone,
            largeVarTypes,
            batchRows,
            chunkBytes,
            window);
    RDD<InternalRow> rows = stored != null ? stored : state.queryExecution().toRdd();
    List<String> lines = rows.toJavaRDD().mapPartitionsWithIndex(writer, true).collect();
    return lines.toArray(new String[0]);
  }

  /**
   * The rows {@code state}'s stored RDD holds if it is one (a local checkpoint, as a keyed
   * state is) or its leading columns; null if it is computed otherwise.
   *
   * <p>Scanning a stored RDD through the plan projects every row into a new one, as a scan of
   * any RDD does (a fifth of the writer's CPU time in a profile of a 512 MiB snapshot); the
   * rows of a checkpoint are such projections already, and the writer only reads them. An
   * aggregate's state is its checkpoint less a last column (the groups an epoch touched): the
   * writer reads the first columns by position, so it takes the checkpoint's rows as they are.
   * Stored rows are each their own object, so the writer may hold a batch of them
   * (BatchColumns).
   */
  private static RDD<InternalRow> storedRows(Dataset<Row> state) {
    LogicalPlan plan = state.queryExecution().analyzed();
    if (plan instanceof Project && keepsLeadingColumns((Project) plan)) {
      plan = ((Project) plan).child();
    }
    if (plan instanceof LogicalRDD) {
      return ((LogicalRDD) plan).rdd();
    }
    return null;
  }

  /** Whether {@code project} is its child's first columns, in their order, unchanged. */
  private static boolean keepsLeadingColumns(Project project) {
    List<NamedExpression> kept = CollectionConverters.asJava(project.projectList());
    List<Attribute> columns = CollectionConverters.asJava(project.child().output());
    if (kept.size() > columns.size()) {
      return false;
    }
    for (int i = 0; i < kept.size(); i++) {
      if (!(kept.get(i) instanceof Attribute)) {
        return false;
      }
      Attribute column = (Attribute) kept.get(i);
      if (!column.exprId().equals(columns.get(i).exprId())
          || !column.dataType().equals(columns.get(i).dataType())) {
        return false;
      }
    }
    return true;
  }

  /**
   * Whether this JVM's client of the store puts chunks serialised already (ChunkBuffer), not as
   * byte arrays for it to serialise.
   */
  public static boolean putsSerialisedChunks(String members, String clusterName) {
    return ChunkBuffer.prebuilt(StoreClients.client(members, clusterName));
  }

  /**
   * The rows of a snapshot's state chunks: partition {@code p} of the frame reads the chunks
   * in {@code partitions.get(p)}, so a snapshot of the current partition count comes back laid out
   * as Spark's hash partitioner lays out its keys.
   *
   * <p>A partition whose chunks include deltas is a chain: its rows are those of the full
   * version whose key no delta has, then each key's row of the newest delta (ChainRows).
   *
   * @param partitions per state partition, its chunks' descriptor lines joined by newlines, a
   *     chain's in order (its full version, then its deltas by snapshot)
   * @param schemaJson the state's Spark schema, as {@code StructType.json()}
   * @param keyColumns how many of the schema's first columns are the key
   * @param checkpointed read the rows now and return a local checkpoint of them, as {@code
   *     Dataset.localCheckpoint(eager = true)} would make of the lazy frame, without the copies
   *     its scan makes: a checkpoint of a frame runs its plan, whose scan projects each row and
   *     copies it again to store it, while the rows read here are each in their own array
   *     already (BatchRows) and are stored as they come. A failed read unpersists what it
   *     stored.
   * @param level with {@code checkpointed}, how to store the rows (persisted before the local
   *     checkpoint, which adds the disk), or null for the local checkpoint's own
   */
  public static Dataset<Row> read(
      SparkSession session,
      List<String> partitions,
      String members,
      String clusterName,
      String mapName,
      long snapshotId,
      String schemaJson,
      int window,
      int keyColumns,
      boolean checkpointed,
      StorageLevel level) {
    StructType schema = (StructType) DataType.fromJson(schemaJson);
    DataType[] keyTypes = new DataType[keyColumns];
    for (int i = 0; i < keyColumns; i++) {
      keyTypes[i] = schema.fields()[i].dataType();
    }
    RDD<InternalRow> rows =
        new JavaSparkContext(session.sparkContext())
            .parallelize(partitions, Math.max(1, partitions.size()))
            .mapPartitions(
                new PartitionReader(members, clusterName, mapName, snapshotId, window, keyTypes))
            .rdd();
    if (checkpointed) {
      if (level != null) {
        rows.persist(level);
      }
      rows.localCheckpoint();
      try {
        rows.count();
      } catch (Throwable error) {
        // A chunk failed its check or could not be read (Spark's SparkException, which Java
        // does not see declared): the rows stored so far go too.
        rows.unpersist(false);
        throw error;
      }
    }
    return session.internalCreateDataFrame(rows, schema, false);
  }

  static final class PartitionReader
      implements FlatMapFunction<Iterator<String>, InternalRow>, Serializable {
    private final String members;
    private final String clusterName;
    private final String mapName;
    private final long snapshotId;
    private final int window;
    private final DataType[] keyTypes;

    PartitionReader(
        String members,
        String clusterName,
        String mapName,
        long snapshotId,
        int window,
        DataType[] keyTypes) {
      this.members = members;
      this.clusterName = clusterName;
      this.mapName = mapName;
      this.snapshotId = snapshotId;
      this.window = window;
      this.keyTypes = keyTypes;
    }

    @Override
    public Iterator<InternalRow> call(Iterator<String> partition) throws IOException {
      List<ChunkDescriptor> chunks = new ArrayList<>();
      while (partition.hasNext()) {
        for (String line : partition.next().split("\n")) {
          if (!line.isEmpty()) {
            chunks.add(ChunkDescriptor.parse(line));
          }
        }
      }
      if (chunks.isEmpty()) {
        return Collections.emptyIterator();
      }
      IMap<String, byte[]> map = StoreClients.client(members, clusterName).getMap(mapName);
      List<ChunkDescriptor> full = new ArrayList<>();
      List<ChunkDescriptor> deltas = new ArrayList<>();
      for (ChunkDescriptor chunk : chunks) {
        (chunk.delta ? deltas : full).add(chunk);
      }
      CloseableRows rows =
          deltas.isEmpty()
              ? new ChunkRows(map, mapName, snapshotId, chunks, window)
              : new ChainRows(
                  new ChunkRows(map, mapName, snapshotId, full, window),
                  new ChunkRows(map, mapName, snapshotId, deltas, window),
                  keyTypes);
      TaskContext.get()
          .addTaskCompletionListener(
              (TaskCompletionListener) context -> {
                try {
                  rows.close();
                } catch (java.io.IOException error) {
                  throw new java.io.UncheckedIOException(error);
                }
              });
      return rows;
    }
  }

  static final class PartitionWriter
      implements Function2<Integer, Iterator<InternalRow>, Iterator<String>>, Serializable {
    private final boolean rowsKept;
    private final Set<Integer> only;
    private final StructType schema;
    private final String members;
    private final String clusterName;
    private final String mapName;
    private final long snapshotId;
    private final String operator;
    private final String timeZone;
    private final boolean largeVarTypes;
    private final int batchRows;
    private final long chunkBytes;
    private final int window;

    /**
     * @param rowsKept the rows are a checkpoint's stored ones, each its own object: a batch of
     *     them may be held and written a column at a time (BatchColumns)
     */
    PartitionWriter(
        boolean rowsKept,
        Set<Integer> only,
        StructType schema,
        String members,
        String clusterName,
        String mapName,
        long snapshotId,
        String operator,
        String timeZone,
        boolean largeVarTypes,
        int batchRows,
        long chunkBytes,
        int window) {
      this.rowsKept = rowsKept;
      this.only = only;
      this.schema = schema;
      this.members = members;
      this.clusterName = clusterName;
      this.mapName = mapName;
      this.snapshotId = snapshotId;
      this.operator = operator;
      this.timeZone = timeZone;
      this.largeVarTypes = largeVarTypes;
      this.batchRows = batchRows;
      this.chunkBytes = chunkBytes;
      this.window = window;
    }

    @Override
    public Iterator<String> call(Integer partition, Iterator<InternalRow> rows) throws Exception {
      if (!only.isEmpty() && !only.contains(partition)) {
        return Collections.emptyIterator();
      }
      if (!rows.hasNext()) {
        return Collections.emptyIterator();
      }
      HazelcastInstance client = StoreClients.client(members, clusterName);
      IMap<String, byte[]> map = client.getMap(mapName);
      String writer = System.getenv().getOrDefault("SPARK_EXECUTOR_POD_NAME", hostName());
      List<String> lines = new ArrayList<>();
      PutWindow puts = new PutWindow(map, window);
      ArrowWriter arrow = ArrowWriter.create(schema, timeZone, true, largeVarTypes);
      // One buffer for every chunk of the task: a chunk's bytes are copied out of it once, into
      // the value put (ChunkBuffer), so only the puts in flight hold chunks.
      ChunkBuffer out = new ChunkBuffer((int) (chunkBytes + chunkBytes / 4));
      try (VectorSchemaRoot root = arrow.root()) {
        BatchColumns columns = rowsKept ? BatchColumns.of(root) : null;
        UnsafeRow[] batch = columns != null ? new UnsafeRow[batchRows] : null;
        int seq = 0;
        while (rows.hasNext()) {
          out.reset();
          long chunkRows = 0;
          long batchBytes = 0;
          try (ArrowStreamWriter stream = new ArrowStreamWriter(root, null, out)) {
            stream.start();
            // Batches of batchRows rows until the chunk holds chunkBytes, as
            // chunk_io.group_into_chunks groups the batches a mapInArrow task is given.
            while (rows.hasNext() && batchBytes < chunkBytes) {
              int n = 0;
              boolean held = columns != null;
              while (n < batchRows && rows.hasNext()) {
                InternalRow row = rows.next();
                // A restored state's rows are SharedRows (BatchRows), a computed one's UnsafeRows.
                UnsafeRow stored =
                    row instanceof SharedRow
                        ? ((SharedRow) row).unsafe()
                        : row instanceof UnsafeRow ? (UnsafeRow) row : null;
                if (held && stored != null) {
                  batch[n] = stored;
                } else {
                  if (held) {
                    // Not a row BatchColumns reads: this batch goes through Spark's writer.
                    held = false;
                    arrow.reset();
                    for (int i = 0; i < n; i++) {
                      arrow.write(batch[i]);
                    }
                  }
                  arrow.write(row);
                }
                n++;
              }
              if (held) {
                batchBytes += columns.write(batch, n);
                stream.writeBatch();
              } else {
                arrow.finish();
                stream.writeBatch();
                batchBytes += arrow.sizeInBytes();
                arrow.reset();
              }
              chunkRows += n;
            }
            stream.end();
          }
          String key = snapshotId + "/" + operator + "/" + partition + "/" + seq;
          ChunkDescriptor chunk =
              new ChunkDescriptor(key, out.size(), chunkRows, out.checksum(), false);
          lines.add(chunk.line(writer));
          puts.put(key, out.value(client));
          seq++;
        }
      } catch (Throwable error) {
        puts.abandon();
        throw error;
      }
      puts.finish();
      return lines.iterator();
    }

    private static String hostName() {
      try {
        return java.net.InetAddress.getLocalHost().getHostName();
      } catch (IOException error) {
        return "unknown";
      }
    }
  }
}
