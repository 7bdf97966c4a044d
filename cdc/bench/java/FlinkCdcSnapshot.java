// Flink CDC's side of the snapshot race (cdc/bench/flink_cdc.py compiles and runs it).
//
// Flink CDC's MySQL source (flink-connector-mysql-cdc, its incremental snapshot: chunks read
// by `parallelism` readers, a low and a high watermark from the binlog around each) in a local
// MiniCluster, startup mode `snapshot` (the table, then the job ends), each change event turned
// into Kafka Connect's JsonConverter key and value with schemas (the records a Debezium
// connector in Kafka Connect writes) and written by Flink's Kafka sink (at least once,
// acks=all, idempotent) to one topic.  Nothing else in the JVM; the class path is
// .jars/flink-cdc (java/flink-cdc/pom.xml).
//
// Arguments: one properties file:
//   host, port, user, password, database, table   the source table (database.table)
//   server.ids        a range "a-b" with at least `parallelism` ids
//   parallelism       the source's readers (and the sink's writers)
//   chunk.size        rows per chunk (scan.incremental.snapshot.chunk.size)
//   fetch.size        rows per fetch of a chunk's SELECT
//   bootstrap, topic  where the records go
//   producer.*        the Kafka producer's settings (the harness gives it ours)
//
// Prints one JSON line {"event":"result",...} when the job has finished.  The harness times
// the run from outside, by the records in the topic.

import java.io.FileInputStream;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.typeutils.ObjectArrayTypeInfo;
import org.apache.flink.cdc.connectors.mysql.source.MySqlSource;
import org.apache.flink.cdc.connectors.mysql.table.StartupOptions;
import org.apache.flink.cdc.debezium.DebeziumDeserializationSchema;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.source.SourceRecord;

public final class FlinkCdcSnapshot {

    /** A change event as Kafka Connect's JsonConverter writes it, key and value with schemas. */
    public static final class ConnectJson implements DebeziumDeserializationSchema<byte[][]> {
        private static final long serialVersionUID = 1L;
        private transient JsonConverter keys;
        private transient JsonConverter values;

        private static JsonConverter converter(boolean isKey) {
            JsonConverter c = new JsonConverter();
            Map<String, Object> conf = new HashMap<>();
            conf.put("schemas.enable", true);
            c.configure(conf, isKey);
            return c;
        }

        @Override
        public void deserialize(SourceRecord r, Collector<byte[][]> out) {
            if (keys == null) {
                keys = converter(true);
                values = converter(false);
            }
            byte[] k = keys.fromConnectData(r.topic(), r.keySchema(), r.key());
            byte[] v = values.fromConnectData(r.topic(), r.valueSchema(), r.value());
            out.collect(new byte[][] {k, v});
        }

        @Override
        public TypeInformation<byte[][]> getProducedType() {
            return ObjectArrayTypeInfo.getInfoFor(byte[][].class, PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO);
        }
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            p.load(in);
        }
        int parallelism = Integer.parseInt(p.getProperty("parallelism", "1"));
        String db = p.getProperty("database");
        String topic = p.getProperty("topic");
        MySqlSource<byte[][]> source = MySqlSource.<byte[][]>builder()
                .hostname(p.getProperty("host"))
                .port(Integer.parseInt(p.getProperty("port")))
                .username(p.getProperty("user"))
                .password(p.getProperty("password"))
                .databaseList(db)
                .tableList(db + "." + p.getProperty("table"))
                .serverId(p.getProperty("server.ids"))
                .splitSize(Integer.parseInt(p.getProperty("chunk.size", "8096")))
                .fetchSize(Integer.parseInt(p.getProperty("fetch.size", "1024")))
                .startupOptions(StartupOptions.snapshot())
                .deserializer(new ConnectJson())
                .build();

        Properties producer = new Properties();
        producer.setProperty("enable.idempotence", "true");
        producer.setProperty("acks", "all");
        for (String k : p.stringPropertyNames()) {
            if (k.startsWith("producer.")) {
                producer.setProperty(k.substring(9), p.getProperty(k));
            }
        }
        KafkaSink<byte[][]> sink = KafkaSink.<byte[][]>builder()
                .setBootstrapServers(p.getProperty("bootstrap"))
                .setKafkaProducerConfig(producer)
                .setDeliveryGuarantee(DeliveryGuarantee.AT_LEAST_ONCE)
                .setRecordSerializer((KafkaRecordSerializationSchema<byte[][]>) (kv, context, ts) ->
                        new ProducerRecord<>(topic, kv[0], kv[1]))
                .build();

        Configuration conf = new Configuration();
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "mysql-cdc").setParallelism(parallelism)
                .sinkTo(sink).setParallelism(parallelism);
        long t0 = System.nanoTime();
        env.execute("flink-cdc-snapshot");
        System.out.println("{\"event\":\"result\",\"job_s\":" + String.format("%.3f", (System.nanoTime() - t0) / 1e9)
                + ",\"parallelism\":" + parallelism + "}");
        System.out.flush();
        System.exit(0);
    }
}
