// What Kafka's own Java client observes of a broker, scenario by scenario, as one JSON line
// each: {"scenario": NAME, "observed": {...}}. The differential suite (run.py) runs the same
// scenarios against Apache Kafka 4.4 and against Weir and compares the lines. A scenario
// normalises what must differ between two brokers (ids, ports, times of now) itself, and
// names informational fields with a leading "~" (error messages): shown, never compared.
//
// usage: java -cp "classes:lib/*" Probe --bootstrap HOST:PORT [--only PREFIX]...
//                                       [--tls DIR --ssl HOST:PORT]

import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.function.Supplier;
import java.util.stream.Collectors;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;

public class Probe {
    interface Scenario {
        Map<String, Object> run() throws Exception;
    }

    static String bootstrap;
    static Admin admin;
    // The tls/ scenarios: the broker's SSL listener, and the directory of the PEM files
    // run.py made for it (the broker's keystore among them).
    static String tlsDir;
    static String sslAddress;
    static final ObjectMapper JSON = new ObjectMapper().enable(SerializationFeature.ORDER_MAP_ENTRIES_BY_KEYS);
    // Bounded waits: a scenario that cannot see what it waits for reports that, never hangs.
    static final Duration WAIT = Duration.ofSeconds(30);

    public static void main(String[] args) throws Exception {
        List<String> only = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--bootstrap" -> bootstrap = args[++i];
                case "--only" -> only.add(args[++i]);
                case "--tls" -> tlsDir = args[++i];
                case "--ssl" -> sslAddress = args[++i];
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (bootstrap == null) throw new IllegalArgumentException("--bootstrap HOST:PORT is required");
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        admin = Admin.create(p);
        LinkedHashMap<String, Scenario> all = scenarios();
        for (Map.Entry<String, Scenario> e : all.entrySet()) {
            // seed/ and moved/ belong to the move from Kafka (run.py), tls/ to brokers with an
            // SSL listener: only run when named.
            boolean move = e.getKey().startsWith("seed/") || e.getKey().startsWith("moved/")
                || e.getKey().startsWith("tls/");
            if (only.isEmpty() ? move : only.stream().noneMatch(e.getKey()::startsWith)) continue;
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("scenario", e.getKey());
            long t0 = System.nanoTime();
            try {
                line.put("observed", e.getValue().run());
            } catch (Exception ex) {
                line.put("observed", Map.of("scenario failed", error(ex)));
            }
            line.put("~ms", (System.nanoTime() - t0) / 1_000_000);
            System.out.println(JSON.writeValueAsString(line));
            System.out.flush();
        }
        admin.close();
    }

    static LinkedHashMap<String, Scenario> scenarios() {
        LinkedHashMap<String, Scenario> s = new LinkedHashMap<>();
        s.put("topics/create-and-describe", Probe::createAndDescribe);
        s.put("topics/describe-by-id", Probe::describeById);
        s.put("topics/describe-unknown-id", () -> outcome(() ->
            admin.describeTopics(TopicCollection.ofTopicIds(List.of(Uuid.randomUuid()))).allTopicIds().get()));
        s.put("topics/describe-unknown-name", () -> outcome(() ->
            admin.describeTopics(List.of("d-no-such-topic")).allTopicNames().get()));
        s.put("topics/create-invalid-name", () -> outcome(() ->
            admin.createTopics(List.of(new NewTopic("bad/name", 1, (short) 1))).all().get()));
        s.put("topics/create-too-long-name", () -> outcome(() ->
            admin.createTopics(List.of(new NewTopic("x".repeat(250), 1, (short) 1))).all().get()));
        s.put("topics/create-existing", Probe::createExisting);
        s.put("topics/create-bad-config", () -> outcome(() ->
            admin.createTopics(List.of(new NewTopic("d-bad-config", 1, (short) 1)
                .configs(Map.of("cleanup.policy", "bogus")))).all().get()));
        s.put("topics/create-unknown-config", () -> outcome(() ->
            admin.createTopics(List.of(new NewTopic("d-unknown-config", 1, (short) 1)
                .configs(Map.of("no.such.config", "1")))).all().get()));
        s.put("topics/create-zero-partitions", () -> outcome(() ->
            admin.createTopics(List.of(new NewTopic("d-zero", 0, (short) 1))).all().get()));
        s.put("topics/create-replication-too-high", () -> outcome(() ->
            admin.createTopics(List.of(new NewTopic("d-rf", 1, (short) 9))).all().get()));
        s.put("topics/delete-by-id", Probe::deleteById);
        s.put("topics/delete-unknown-id", () -> outcome(() ->
            admin.deleteTopics(TopicCollection.ofTopicIds(List.of(Uuid.randomUuid()))).all().get()));
        s.put("configs/broker-keys", Configs::brokerKeys);
        s.put("configs/broker-retention-synonyms", Configs::retentionSynonyms);
        s.put("configs/topic-keys", Configs::topicKeys);
        s.put("configs/broker-dynamic-alter", Configs::dynamicAlter);
        s.put("configs/broker-loggers", Configs::brokerLoggers);
        // Kafka 4 removed message.format.version (KIP-724): librdkafka 2.0's test 0092 sets it.
        s.put("configs/removed-topic-key", () -> {
            createTopic("d-removed-key", 1, Map.of());
            var r = new ConfigResource(ConfigResource.Type.TOPIC, "d-removed-key");
            Map<String, Object> m = new TreeMap<>();
            m.put("incremental", outcome(() -> admin.incrementalAlterConfigs(Map.of(r, List.of(
                new AlterConfigOp(new ConfigEntry("message.format.version", "0.10.0.0"), AlterConfigOp.OpType.SET))))
                .all().get()));
            m.put("create", outcome(() -> admin.createTopics(List.of(new NewTopic("d-removed-key-2", 1, (short) 1)
                .configs(Map.of("message.format.version", "0.10.0.0")))).all().get()));
            return m;
        });
        s.put("quotas/ip", Probe::ipQuotas);
        s.put("quotas/request-percentage", Probe::requestPercentage);
        s.put("configs/group-keys", Configs::groupKeys);
        s.put("configs/group-alter", Configs::groupAlter);
        // Its files (the .txnindex among them) are read by kafka-dump-log (dump-log/).
        s.put("transactions/read-committed", () -> {
            createTopic("d-txn", 1, Map.of());
            Move.writeTransactions("d-txn", "d-txn-id");
            return Move.records("d-txn", "read_committed");
        });
        s.put("offsets/max-timestamp-one-batch", () -> maxTimestamp("d-maxts-one", true, Map.of(), 10, Map.of()));
        s.put("offsets/max-timestamp-batches", () -> maxTimestamp("d-maxts-many", false, Map.of(), 10, Map.of()));
        s.put("offsets/max-timestamp-lz4-batch", () -> maxTimestamp("d-maxts-lz4", true,
            Map.of(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4"), 10, Map.of()));
        // Records of 3 KB, a batch each: the ties fall after the indexes' first entries.
        s.put("offsets/max-timestamp-indexed", () -> maxTimestamp("d-maxts-indexed", false, Map.of(), 3000, Map.of()));
        // Two segments (1 MiB is the smallest segment.bytes Kafka 4 takes): the largest
        // timestamp is in both, and the first segment's record is the answer.
        s.put("offsets/max-timestamp-segments", Probe::maxTimestampSegments);
        s.put("offsets/max-timestamp-log-append-time", () -> maxTimestampAppendTime());
        s.put("offsets/max-timestamp-empty", Probe::maxTimestampEmpty);
        s.put("offsets/earliest-latest-by-time", Probe::earliestLatest);
        s.put("groups/offsets-only", Probe::offsetsOnlyGroup);
        s.put("groups/empty-after-delete-offsets", Probe::emptyAfterDeleteOffsets);
        s.put("groups/consumer-protocol-epochs", Probe::consumerProtocolEpochs);
        s.put("groups/describe-unknown", Probe::describeUnknownGroup);
        // A move from Kafka: seed/ writes on the Kafka broker only; moved/ reads, from that
        // Kafka and then from Weir started on the data directory Kafka left (run.py --move).
        s.put("log-dirs/describe", Probe::describeLogDirs);
        s.put("log-dirs/replica", Probe::describeReplicaLogDirs);
        s.put("tls/keystore-reload", Tls::keystoreReload);
        s.put("seed/data", Move::seed);
        s.put("moved/topics", Move::topics);
        s.put("moved/records", () -> Move.records("m-plain", "read_uncommitted"));
        s.put("moved/compacted", () -> Move.records("m-compacted", "read_uncommitted"));
        s.put("moved/read-committed", () -> Move.records("m-txn", "read_committed"));
        s.put("moved/read-uncommitted", () -> Move.records("m-txn", "read_uncommitted"));
        s.put("moved/group-offsets", Move::groupOffsets);
        s.put("moved/acls", Move::acls);
        s.put("moved/scram-users", Move::scramUsers);
        s.put("moved/quotas", Move::quotas);
        return s;
    }

    /** DescribeConfigs as the Java Admin client (and kafka-configs --describe --all) sees it. */
    static class Configs {
        static ConfigResource broker() throws Exception {
            String id = admin.describeCluster().nodes().get().iterator().next().idString();
            return new ConfigResource(ConfigResource.Type.BROKER, id);
        }

        static Collection<ConfigEntry> describe(ConfigResource r) throws Exception {
            return admin.describeConfigs(List.of(r), new DescribeConfigsOptions().includeSynonyms(true)
                .includeDocumentation(true)).all().get().get(r).entries();
        }

        /** Every key with its type, whether it is read-only or sensitive, and whether it has
         *  documentation; values where they do not depend on the machine or the start. */
        static Map<String, Object> brokerKeys() throws Exception {
            Map<String, Object> m = new TreeMap<>();
            for (ConfigEntry e : describe(broker())) {
                m.put(e.name(), e.type() + (e.isReadOnly() ? " read-only" : "") + (e.isSensitive() ? " sensitive" : "")
                    + (e.documentation() == null || e.documentation().isEmpty() ? " undocumented" : ""));
            }
            return m;
        }

        static Map<String, Object> retentionSynonyms() throws Exception {
            Map<String, Object> m = new TreeMap<>();
            for (ConfigEntry e : describe(broker())) {
                if (!e.name().startsWith("log.retention.") && !e.name().startsWith("log.roll.")) continue;
                m.put(e.name(), e.value() + " " + e.source() + " " + e.synonyms().stream()
                    .map(x -> x.name() + "=" + x.value() + "/" + x.source()).collect(Collectors.toList()));
            }
            return m;
        }

        static final List<String[]> DYNAMIC_TRIES = List.of(
            new String[] {"log.cleaner.threads", "2"},
            new String[] {"log.cleaner.threads", "-1"},
            new String[] {"log.cleaner.io.buffer.size", "1048576"},
            new String[] {"num.io.threads", "9"},
            new String[] {"num.network.threads", "4"},
            new String[] {"max.connections", "1000"},
            new String[] {"max.connections.per.ip", "500"},
            new String[] {"log.retention.ms", "3600000"},
            new String[] {"log.retention.ms", "soon"},
            new String[] {"message.max.bytes", "2000000"},
            new String[] {"compression.gzip.level", "0"},
            new String[] {"log.cleanup.policy", "compact,keep"},
            new String[] {"sasl.kerberos.service.name", "kafka"},
            new String[] {"sasl.kerberos.min.time.before.relogin", "60000"},
            // A listener the broker does not have. For PLAINTEXT's own setting Kafka 4.4
            // answered ok in some runs and "Configs cannot be updated dynamically for
            // existing listener" in others, so that one cannot be compared.
            new String[] {"listener.name.external.sasl.kerberos.service.name", "kafka"},
            new String[] {"ssl.keystore.location", "/nonexistent.jks"},
            new String[] {"num.partitions", "3"},
            new String[] {"broker.id", "7"},
            new String[] {"weir.differential.unknown", "kept"});

        static Map<String, Object> dynamicAlter() throws Exception {
            Map<String, Object> m = new TreeMap<>();
            ConfigResource mine = broker();
            ConfigResource cluster = new ConfigResource(ConfigResource.Type.BROKER, "");
            for (ConfigResource r : List.of(mine, cluster)) {
                String where = r.name().isEmpty() ? "cluster" : "broker";
                for (String[] t : DYNAMIC_TRIES) {
                    var op = List.of(new AlterConfigOp(new ConfigEntry(t[0], t[1]), AlterConfigOp.OpType.SET));
                    m.put(where + " " + t[0] + "=" + t[1], outcome(() ->
                        admin.incrementalAlterConfigs(Map.of(r, op)).all().get()));
                }
            }
            // What stuck, as this broker describes it.
            Set<String> tried = new HashSet<>();
            for (String[] t : DYNAMIC_TRIES) tried.add(t[0]);
            long deadline = System.currentTimeMillis() + WAIT.toMillis();
            Map<String, Object> seen = new TreeMap<>();
            // Kafka applies a change once its metadata log reaches the broker: wait for it.
            while (System.currentTimeMillis() < deadline) {
                seen.clear();
                for (ConfigEntry e : describe(mine)) {
                    if (!tried.contains(e.name())) continue;
                    seen.put("described " + e.name(), (e.isSensitive() ? null : e.value()) + " " + e.source());
                }
                if (String.valueOf(seen.get("described log.cleaner.threads")).startsWith("2 ")) break;
                Thread.sleep(200);
            }
            m.putAll(seen);
            Map<String, Object> defaults = new TreeMap<>();
            for (ConfigEntry e : describe(cluster)) defaults.put(e.name(), e.value() + " " + e.source());
            m.put("cluster default", defaults);
            // Put everything back, so later scenarios see a broker as started.
            for (ConfigResource r : List.of(mine, cluster)) {
                List<AlterConfigOp> ops = new ArrayList<>();
                for (String k : tried) ops.add(new AlterConfigOp(new ConfigEntry(k, ""), AlterConfigOp.OpType.DELETE));
                for (AlterConfigOp op : ops) {
                    try {
                        admin.incrementalAlterConfigs(Map.of(r, List.of(op))).all().get();
                    } catch (ExecutionException ignored) {
                        // A key that could not be set cannot be deleted either.
                    }
                }
            }
            return m;
        }

        /** kafka-configs --entity-type broker-loggers: the loggers (names are each broker's
         *  own: Kafka's log4j classes, Weir's crates), their levels, and what is refused. */
        static Map<String, Object> brokerLoggers() throws Exception {
            Map<String, Object> m = new TreeMap<>();
            ConfigResource r = new ConfigResource(ConfigResource.Type.BROKER_LOGGER, broker().name());
            Map<String, ConfigEntry> before = new TreeMap<>();
            for (ConfigEntry e : describe(r)) before.put(e.name(), e);
            Set<String> sources = new TreeSet<>();
            for (ConfigEntry e : before.values()) sources.add(e.source() + (e.isReadOnly() ? " read-only" : ""));
            m.put("sources", sources);
            m.put("root listed", before.containsKey("root"));
            String rootLevel = before.get("root").value();
            String other = before.keySet().stream().filter(n -> !n.equals("root")).findFirst().orElseThrow();
            Map<String, List<AlterConfigOp>> tries = new LinkedHashMap<>();
            tries.put("set root DEBUG", List.of(op("root", "DEBUG", AlterConfigOp.OpType.SET)));
            tries.put("set a logger TRACE", List.of(op(other, "TRACE", AlterConfigOp.OpType.SET)));
            tries.put("set an unknown logger", List.of(op("no.such.logger", "DEBUG", AlterConfigOp.OpType.SET)));
            tries.put("set a bad level", List.of(op("root", "LOUD", AlterConfigOp.OpType.SET)));
            tries.put("set a lower-case level", List.of(op("root", "debug", AlterConfigOp.OpType.SET)));
            tries.put("delete root", List.of(op("root", null, AlterConfigOp.OpType.DELETE)));
            tries.put("append to root", List.of(op("root", "DEBUG", AlterConfigOp.OpType.APPEND)));
            for (var t : tries.entrySet()) {
                m.put(t.getKey(), outcome(() -> admin.incrementalAlterConfigs(Map.of(r, t.getValue())).all().get()));
            }
            Map<String, String> after = new TreeMap<>();
            for (ConfigEntry e : describe(r)) after.put(e.name(), e.value());
            m.put("root after", after.get("root"));
            m.put("logger after", after.get(other));
            m.put("delete a logger", outcome(() -> admin.incrementalAlterConfigs(Map.of(r,
                List.of(op(other, null, AlterConfigOp.OpType.DELETE)))).all().get()));
            for (ConfigEntry e : describe(r)) after.put(e.name(), e.value());
            m.put("logger after delete is root's", after.get(other).equals(after.get("root")));
            m.put("restore root", outcome(() -> admin.incrementalAlterConfigs(Map.of(r,
                List.of(op("root", rootLevel, AlterConfigOp.OpType.SET)))).all().get()));
            return m;
        }

        /** kafka-configs --entity-type groups --describe --all: a group's keys, for a group
         *  that has never existed (Kafka describes any group id). */
        static Map<String, Object> groupKeys() throws Exception {
            Map<String, Object> m = new TreeMap<>();
            for (ConfigEntry e : describe(new ConfigResource(ConfigResource.Type.GROUP, "d-group-keys"))) {
                m.put(e.name(), e.value() + " " + e.type() + " " + e.source() + (e.isReadOnly() ? " read-only" : "")
                    + (e.isSensitive() ? " sensitive" : "")
                    + (e.documentation() == null || e.documentation().isEmpty() ? " undocumented" : "")
                    + " " + e.synonyms().stream().map(x -> x.name() + "=" + x.value() + "/" + x.source())
                        .collect(Collectors.toList()));
            }
            return m;
        }

        static final List<String[]> GROUP_TRIES = List.of(
            new String[] {"consumer.session.timeout.ms", "50000"},
            new String[] {"consumer.session.timeout.ms", "5000"},
            new String[] {"consumer.session.timeout.ms", "70000"},
            new String[] {"consumer.session.timeout.ms", "soon"},
            new String[] {"consumer.heartbeat.interval.ms", "6000"},
            new String[] {"consumer.heartbeat.interval.ms", "1000"},
            new String[] {"consumer.heartbeat.interval.ms", "0"},
            new String[] {"consumer.assignment.interval.ms", "20000"},
            new String[] {"share.auto.offset.reset", "earliest"},
            new String[] {"share.auto.offset.reset", "by_duration:PT1H"},
            new String[] {"share.auto.offset.reset", "by_duration:soon"},
            new String[] {"share.auto.offset.reset", "bogus"},
            new String[] {"share.isolation.level", "read_committed"},
            new String[] {"share.isolation.level", "serializable"},
            new String[] {"share.record.lock.duration.ms", "40000"},
            new String[] {"share.record.lock.duration.ms", "5000"},
            new String[] {"share.delivery.count.limit", "11"},
            new String[] {"share.partition.max.record.locks", "3000"},
            new String[] {"share.renew.acknowledge.enable", "maybe"},
            new String[] {"streams.num.standby.replicas", "1"},
            new String[] {"streams.num.standby.replicas", "3"},
            new String[] {"streams.initial.rebalance.delay.ms", "-1"},
            new String[] {"streams.num.warmup.replicas", "1"},
            new String[] {"streams.assignor.name", "sticky"},
            new String[] {"streams.assignor.name", "no-such-assignor"},
            new String[] {"streams.rack.aware.assignment.tags", "zone,rack"},
            new String[] {"errors.deadletterqueue.topic.name", "__dlq"},
            new String[] {"errors.deadletterqueue.topic.name", "dlq"},
            new String[] {"group.consumer.session.timeout.ms", "50000"},
            new String[] {"weir.differential.unknown", "1"});

        /** kafka-configs --entity-type groups --alter: each key alone, what sticks, deletes,
         *  and a group with no name. */
        static Map<String, Object> groupAlter() throws Exception {
            Map<String, Object> m = new TreeMap<>();
            ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, "d-group-alter");
            for (String[] t : GROUP_TRIES) {
                m.put("set " + t[0] + "=" + t[1], outcome(() -> admin.incrementalAlterConfigs(Map.of(r,
                    List.of(op(t[0], t[1], AlterConfigOp.OpType.SET)))).all().get()));
            }
            m.put("set two at once, one bad", outcome(() -> admin.incrementalAlterConfigs(Map.of(r, List.of(
                op("consumer.heartbeat.interval.ms", "7000", AlterConfigOp.OpType.SET),
                op("consumer.session.timeout.ms", "1", AlterConfigOp.OpType.SET)))).all().get()));
            m.put("validate only", outcome(() -> admin.incrementalAlterConfigs(Map.of(r, List.of(
                op("consumer.heartbeat.interval.ms", "8000", AlterConfigOp.OpType.SET))),
                new org.apache.kafka.clients.admin.AlterConfigsOptions().validateOnly(true)).all().get()));
            m.put("append a list", outcome(() -> admin.incrementalAlterConfigs(Map.of(r, List.of(
                op("streams.rack.aware.assignment.tags", "region", AlterConfigOp.OpType.APPEND)))).all().get()));
            m.put("append to an int", outcome(() -> admin.incrementalAlterConfigs(Map.of(r, List.of(
                op("consumer.heartbeat.interval.ms", "1", AlterConfigOp.OpType.APPEND)))).all().get()));
            Map<String, String> after = new TreeMap<>();
            for (ConfigEntry e : describe(r)) {
                after.put(e.name(), e.value() + " " + e.source() + " " + e.synonyms().stream()
                    .map(x -> x.name() + "=" + x.value() + "/" + x.source()).collect(Collectors.toList()));
            }
            m.put("described after", after);
            m.put("delete a key", outcome(() -> admin.incrementalAlterConfigs(Map.of(r, List.of(
                op("consumer.session.timeout.ms", null, AlterConfigOp.OpType.DELETE)))).all().get()));
            m.put("delete an unknown key", outcome(() -> admin.incrementalAlterConfigs(Map.of(r, List.of(
                op("no.such.key", null, AlterConfigOp.OpType.DELETE)))).all().get()));
            for (ConfigEntry e : describe(r)) {
                if (e.name().equals("consumer.session.timeout.ms")) m.put("deleted key", e.value() + " " + e.source());
            }
            ConfigResource unnamed = new ConfigResource(ConfigResource.Type.GROUP, "");
            m.put("describe unnamed", outcome(() -> admin.describeConfigs(List.of(unnamed)).all().get().get(unnamed).entries().size()));
            m.put("alter unnamed", outcome(() -> admin.incrementalAlterConfigs(Map.of(unnamed, List.of(
                op("consumer.heartbeat.interval.ms", "6000", AlterConfigOp.OpType.SET)))).all().get()));
            return m;
        }

        static AlterConfigOp op(String name, String value, AlterConfigOp.OpType type) {
            return new AlterConfigOp(new ConfigEntry(name, value), type);
        }

        static Map<String, Object> topicKeys() throws Exception {
            createTopic("d-configs", 1, Map.of("retention.ms", "86400000"));
            Map<String, Object> m = new TreeMap<>();
            for (ConfigEntry e : describe(new ConfigResource(ConfigResource.Type.TOPIC, "d-configs"))) {
                m.put(e.name(), e.type() + " " + e.source() + (e.isReadOnly() ? " read-only" : "")
                    + (e.isSensitive() ? " sensitive" : "")
                    + (e.documentation() == null || e.documentation().isEmpty() ? " undocumented" : "")
                    + " " + e.synonyms().stream().map(x -> x.name() + "/" + x.source()).collect(Collectors.toList()));
            }
            return m;
        }
    }

    /** The scenarios of a move from Kafka to Weir. */
    static class Move {
        static final List<String> TOPICS = List.of("m-plain", "m-compacted", "m-txn");

        static Map<String, Object> seed() throws Exception {
            createTopic("m-plain", 3, Map.of());
            createTopic("m-compacted", 1, Map.of("cleanup.policy", "compact", "retention.ms", "123456789",
                "max.message.bytes", "200000"));
            createTopic("m-txn", 1, Map.of());
            try (KafkaProducer<String, String> p = producer(Map.of(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4",
                ProducerConfig.LINGER_MS_CONFIG, 5))) {
                for (int i = 0; i < 60; i++) {
                    var r = new ProducerRecord<>("m-plain", i % 3, 1_700_000_000_000L + i, "k" + i, "v" + i);
                    r.headers().add("h", ("x" + i).getBytes());
                    p.send(r);
                }
                for (int i = 0; i < 20; i++) {
                    p.send(new ProducerRecord<>("m-compacted", 0, 1_700_000_000_000L + i, "k" + (i % 10), "v" + i));
                }
                p.flush();
            }
            writeTransactions("m-txn", "m-txn-id");
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            for (int i = 0; i < 3; i++) offsets.put(new TopicPartition("m-plain", i), new OffsetAndMetadata(7 + i, "meta-" + i));
            admin.alterConsumerGroupOffsets("m-group", offsets).all().get();
            admin.createAcls(List.of(
                new org.apache.kafka.common.acl.AclBinding(
                    new org.apache.kafka.common.resource.ResourcePattern(org.apache.kafka.common.resource.ResourceType.TOPIC,
                        "m-plain", org.apache.kafka.common.resource.PatternType.LITERAL),
                    new org.apache.kafka.common.acl.AccessControlEntry("User:alice", "*",
                        org.apache.kafka.common.acl.AclOperation.READ, org.apache.kafka.common.acl.AclPermissionType.ALLOW)),
                new org.apache.kafka.common.acl.AclBinding(
                    new org.apache.kafka.common.resource.ResourcePattern(org.apache.kafka.common.resource.ResourceType.GROUP,
                        "m-", org.apache.kafka.common.resource.PatternType.PREFIXED),
                    new org.apache.kafka.common.acl.AccessControlEntry("User:bob", "*",
                        org.apache.kafka.common.acl.AclOperation.DESCRIBE, org.apache.kafka.common.acl.AclPermissionType.DENY))))
                .all().get();
            // One change per user and request, as Kafka requires.
            admin.alterUserScramCredentials(List.of(
                new UserScramCredentialUpsertion("alice", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "alice-secret"),
                new UserScramCredentialUpsertion("carol", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), "carol-secret")))
                .all().get();
            admin.alterUserScramCredentials(List.of(
                new UserScramCredentialUpsertion("alice", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), "alice-secret")))
                .all().get();
            admin.alterClientQuotas(List.of(
                new org.apache.kafka.common.quota.ClientQuotaAlteration(
                    new org.apache.kafka.common.quota.ClientQuotaEntity(Map.of("client-id", "loader")),
                    List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0))),
                new org.apache.kafka.common.quota.ClientQuotaAlteration(
                    new org.apache.kafka.common.quota.ClientQuotaEntity(Collections.singletonMap("user", null)),
                    List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration.Op("consumer_byte_rate", 2097152.0)))))
                .all().get();
            return Map.of("seeded", true);
        }

        static Map<String, Object> topics() throws Exception {
            Map<String, Object> m = new TreeMap<>();
            Map<String, TopicDescription> d = admin.describeTopics(TOPICS).allTopicNames().get();
            List<ConfigResource> resources = TOPICS.stream()
                .map(t -> new ConfigResource(ConfigResource.Type.TOPIC, t)).collect(Collectors.toList());
            Map<ConfigResource, Config> configs = admin.describeConfigs(resources).all().get();
            for (String t : TOPICS) {
                Map<String, Object> one = new LinkedHashMap<>();
                one.put("id", String.valueOf(d.get(t).topicId()));
                one.put("partitions", d.get(t).partitions().size());
                Map<String, String> set = new TreeMap<>();
                for (ConfigEntry e : configs.get(new ConfigResource(ConfigResource.Type.TOPIC, t)).entries()) {
                    if (e.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG) set.put(e.name(), e.value());
                }
                one.put("topic configs", set);
                m.put(t, one);
            }
            return m;
        }

        /** Every record of `topic` from the start, as a consumer of `isolation` reads it. */
        /** A committed transaction, an aborted one and a committed one on partition 0. */
        static void writeTransactions(String topic, String transactionalId) throws Exception {
            Map<String, Object> txCfg = Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
            try (KafkaProducer<String, String> p = producer(txCfg)) {
                p.initTransactions();
                p.beginTransaction();
                for (int i = 0; i < 5; i++) p.send(new ProducerRecord<>(topic, 0, 1_700_000_000_000L, "c", "committed-" + i));
                p.commitTransaction();
                p.beginTransaction();
                for (int i = 0; i < 5; i++) p.send(new ProducerRecord<>(topic, 0, 1_700_000_000_000L, "a", "aborted-" + i));
                p.flush();
                p.abortTransaction();
                p.beginTransaction();
                p.send(new ProducerRecord<>(topic, 0, 1_700_000_000_000L, "c", "committed-last"));
                p.commitTransaction();
            }
        }

        static Map<String, Object> records(String topic, String isolation) throws Exception {
            Map<String, Object> m = new LinkedHashMap<>();
            try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation))) {
                List<TopicPartition> parts = c.partitionsFor(topic).stream()
                    .map(p -> new TopicPartition(topic, p.partition())).sorted(Comparator.comparingInt(TopicPartition::partition))
                    .collect(Collectors.toList());
                c.assign(parts);
                c.seekToBeginning(parts);
                Map<TopicPartition, Long> ends = c.endOffsets(parts);
                Map<TopicPartition, Long> starts = c.beginningOffsets(parts);
                List<String> seen = new ArrayList<>();
                long deadline = System.nanoTime() + WAIT.toNanos();
                while (System.nanoTime() < deadline && parts.stream().anyMatch(tp -> c.position(tp) < ends.get(tp))) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                        StringBuilder h = new StringBuilder();
                        r.headers().forEach(x -> h.append(x.key()).append('=').append(new String(x.value())).append(';'));
                        seen.add(r.partition() + "@" + r.offset() + " " + r.timestamp() + " " + r.timestampType()
                            + " " + r.key() + "=" + r.value() + " [" + h + "]");
                    }
                }
                for (TopicPartition tp : parts) {
                    m.put("partition " + tp.partition(), List.of(starts.get(tp), ends.get(tp)));
                }
                m.put("count", seen.size());
                m.put("records", seen);
            }
            return m;
        }

        static Map<String, Object> groupOffsets() throws Exception {
            Map<String, Object> m = new TreeMap<>();
            admin.listConsumerGroupOffsets("m-group").partitionsToOffsetAndMetadata().get()
                .forEach((tp, o) -> m.put(tp.toString(), o.offset() + " " + o.metadata()));
            return m;
        }

        static Map<String, Object> acls() throws Exception {
            List<String> all = admin.describeAcls(org.apache.kafka.common.acl.AclBindingFilter.ANY).values().get()
                .stream().map(Object::toString).sorted().collect(Collectors.toList());
            return Map.of("acls", all);
        }

        static Map<String, Object> scramUsers() throws Exception {
            Map<String, Object> m = new TreeMap<>();
            admin.describeUserScramCredentials().all().get().forEach((user, d) -> m.put(user,
                d.credentialInfos().stream().map(Object::toString).sorted().collect(Collectors.toList())));
            return m;
        }

        static Map<String, Object> quotas() throws Exception {
            Map<String, Object> m = new TreeMap<>();
            admin.describeClientQuotas(org.apache.kafka.common.quota.ClientQuotaFilter.all()).entities().get()
                .forEach((e, q) -> m.put(e.toString(), new TreeMap<>(q)));
            return m;
        }
    }

    /** kafka-configs --entity-type ips: what AlterClientQuotas takes for an IP entity, and
     *  how DescribeClientQuotas filters it. */
    static Map<String, Object> ipQuotas() throws Exception {
        Map<String, Object> m = new TreeMap<>();
        var ip = new org.apache.kafka.common.quota.ClientQuotaEntity(Map.of("ip", "192.0.2.7"));
        var defaultIp = new org.apache.kafka.common.quota.ClientQuotaEntity(Collections.singletonMap("ip", null));
        var user = new org.apache.kafka.common.quota.ClientQuotaEntity(Map.of("user", "alice"));
        var both = new org.apache.kafka.common.quota.ClientQuotaEntity(Map.of("ip", "192.0.2.7", "user", "alice"));
        var bad = new org.apache.kafka.common.quota.ClientQuotaEntity(Map.of("ip", "not-an-ip"));
        Map<String, Object[]> tries = new LinkedHashMap<>();
        tries.put("ip rate 10", new Object[] {ip, "connection_creation_rate", 10.0});
        tries.put("default ip rate 100", new Object[] {defaultIp, "connection_creation_rate", 100.0});
        tries.put("ip rate 0", new Object[] {ip, "connection_creation_rate", 0.0});
        tries.put("ip rate 1.5", new Object[] {ip, "connection_creation_rate", 1.5});
        tries.put("ip rate -1", new Object[] {ip, "connection_creation_rate", -1.0});
        tries.put("ip byte rate", new Object[] {ip, "producer_byte_rate", 1000.0});
        tries.put("user connection rate", new Object[] {user, "connection_creation_rate", 10.0});
        tries.put("ip and user", new Object[] {both, "connection_creation_rate", 10.0});
        tries.put("not an ip", new Object[] {bad, "connection_creation_rate", 10.0});
        for (var t : tries.entrySet()) {
            Object[] a = t.getValue();
            var alt = new org.apache.kafka.common.quota.ClientQuotaAlteration(
                (org.apache.kafka.common.quota.ClientQuotaEntity) a[0],
                List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration.Op((String) a[1], (Double) a[2])));
            m.put(t.getKey(), outcome(() -> admin.alterClientQuotas(List.of(alt)).all().get()));
        }
        // Set again what the tries above left as 0 or refused, then describe.
        for (var e : List.of(ip, defaultIp)) {
            admin.alterClientQuotas(List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration(e,
                List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration.Op("connection_creation_rate",
                    e == ip ? 10.0 : 100.0))))).all().get();
        }
        Map<String, org.apache.kafka.common.quota.ClientQuotaFilter> filters = new LinkedHashMap<>();
        filters.put("any ip", org.apache.kafka.common.quota.ClientQuotaFilter.contains(
            List.of(org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofEntityType("ip"))));
        filters.put("this ip", org.apache.kafka.common.quota.ClientQuotaFilter.containsOnly(
            List.of(org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofEntity("ip", "192.0.2.7"))));
        filters.put("default ip", org.apache.kafka.common.quota.ClientQuotaFilter.contains(
            List.of(org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofDefaultEntity("ip"))));
        filters.put("ip and user", org.apache.kafka.common.quota.ClientQuotaFilter.contains(
            List.of(org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofEntityType("ip"),
                org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofEntityType("user"))));
        for (var f : filters.entrySet()) {
            try {
                Map<String, Object> got = new TreeMap<>();
                admin.describeClientQuotas(f.getValue()).entities().get()
                    .forEach((e, q) -> got.put(e.entries().toString(), new TreeMap<>(q)));
                m.put("describe " + f.getKey(), got);
            } catch (ExecutionException e) {
                m.put("describe " + f.getKey(), error(e));
            }
        }
        for (var e : List.of(ip, defaultIp)) {
            admin.alterClientQuotas(List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration(e,
                List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration.Op("connection_creation_rate", null)))))
                .all().get();
        }
        return m;
    }

    /** request_percentage (a share of one request handler thread's time): taken, refused and
     *  described as Kafka does, for each kind of entity. */
    static Map<String, Object> requestPercentage() throws Exception {
        Map<String, Object> m = new TreeMap<>();
        var user = new org.apache.kafka.common.quota.ClientQuotaEntity(Map.of("user", "rp-alice"));
        var client = new org.apache.kafka.common.quota.ClientQuotaEntity(Map.of("client-id", "rp-app"));
        var both = new org.apache.kafka.common.quota.ClientQuotaEntity(Map.of("user", "rp-alice", "client-id", "rp-app"));
        var defaultClient = new org.apache.kafka.common.quota.ClientQuotaEntity(Collections.singletonMap("client-id", null));
        var ip = new org.apache.kafka.common.quota.ClientQuotaEntity(Map.of("ip", "192.0.2.9"));
        Map<String, Object[]> tries = new LinkedHashMap<>();
        tries.put("user 50", new Object[] {user, 50.0});
        tries.put("client 200", new Object[] {client, 200.0});
        tries.put("user and client 12.5", new Object[] {both, 12.5});
        tries.put("default client 1000", new Object[] {defaultClient, 1000.0});
        tries.put("user 0", new Object[] {user, 0.0});
        tries.put("user -1", new Object[] {user, -1.0});
        tries.put("user 0.001", new Object[] {user, 0.001});
        tries.put("ip 50", new Object[] {ip, 50.0});
        for (var t : tries.entrySet()) {
            Object[] a = t.getValue();
            var alt = new org.apache.kafka.common.quota.ClientQuotaAlteration(
                (org.apache.kafka.common.quota.ClientQuotaEntity) a[0],
                List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration.Op("request_percentage", (Double) a[1])));
            m.put(t.getKey(), outcome(() -> admin.alterClientQuotas(List.of(alt)).all().get()));
        }
        Map<String, Object> got = new TreeMap<>();
        admin.describeClientQuotas(org.apache.kafka.common.quota.ClientQuotaFilter.all()).entities().get()
            .forEach((e, q) -> {
                if (q.containsKey("request_percentage")) got.put(e.entries().toString(), new TreeMap<>(q));
            });
        m.put("described", got);
        for (var e : List.of(user, client, both, defaultClient)) {
            admin.alterClientQuotas(List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration(e,
                List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration.Op("request_percentage", null)))))
                .all().get();
        }
        return m;
    }

    // --- helpers ---------------------------------------------------------------------------

    /** An exception as a client sees it: its class (compared) and message (not). */
    static Map<String, Object> error(Throwable ex) {
        Throwable cause = ex;
        while ((cause instanceof ExecutionException || cause instanceof java.util.concurrent.CompletionException)
            && cause.getCause() != null) {
            cause = cause.getCause();
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("error", cause.getClass().getSimpleName());
        m.put("~message", String.valueOf(cause.getMessage()));
        return m;
    }

    /** A listener's keystore replaced while the broker runs (kafka-configs --alter). */
    static class Tls {
        /** Which of run.py's certificates the SSL listener presents to a new connection. */
        static String presented() throws Exception {
            var seen = new java.security.cert.X509Certificate[1];
            var trustAll = new javax.net.ssl.X509TrustManager() {
                public void checkClientTrusted(java.security.cert.X509Certificate[] c, String a) {}
                public void checkServerTrusted(java.security.cert.X509Certificate[] c, String a) { seen[0] = c[0]; }
                public java.security.cert.X509Certificate[] getAcceptedIssuers() { return new java.security.cert.X509Certificate[0]; }
            };
            var ctx = javax.net.ssl.SSLContext.getInstance("TLS");
            ctx.init(null, new javax.net.ssl.TrustManager[] {trustAll}, null);
            String[] hp = sslAddress.split(":");
            try (var sock = (javax.net.ssl.SSLSocket) ctx.getSocketFactory().createSocket(hp[0], Integer.parseInt(hp[1]))) {
                sock.startHandshake();
            }
            var factory = java.security.cert.CertificateFactory.getInstance("X.509");
            for (String who : List.of("first", "renewed", "stranger", "bare")) {
                try (var in = new java.io.FileInputStream(tlsDir + "/" + who + ".crt")) {
                    if (factory.generateCertificate(in).equals(seen[0])) return who;
                }
            }
            return "unknown " + seen[0].getSubjectX500Principal();
        }

        /** Sets the keystore, then waits for the listener to present `expect` (Kafka applies a
         *  dynamic config a moment after it answers: when the broker replays its record). */
        static Map<String, Object> set(String file, String expect) throws Exception {
            var r = new ConfigResource(ConfigResource.Type.BROKER, "1");
            Map<String, Object> m = new LinkedHashMap<>(outcome(() -> admin.incrementalAlterConfigs(Map.of(r, List.of(
                new AlterConfigOp(new ConfigEntry("listener.name.ssl.ssl.keystore.location", tlsDir + "/" + file),
                    AlterConfigOp.OpType.SET)))).all().get()));
            // Weir answers a refused keystore in Kafka's words: compared, the directory left out.
            Object message = m.remove("~message");
            if (message != null) m.put("message", message.toString().replace(tlsDir, "DIR"));
            long deadline = System.nanoTime() + WAIT.toNanos();
            String now = presented();
            while (!now.equals(expect) && System.nanoTime() < deadline) {
                Thread.sleep(100);
                now = presented();
            }
            m.put("presented", now);
            return m;
        }

        static Map<String, Object> keystoreReload() throws Exception {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("at start", presented());
            m.put("a missing file", set("missing.pem", "first"));
            m.put("a file that is no keystore", set("not-a-keystore.pem", "first"));
            m.put("another subject", set("stranger.pem", "first"));
            m.put("its alternative name dropped", set("bare.pem", "first"));
            m.put("renewed", set("renewed.pem", "renewed"));
            // Renewed in place: the same path set again once the file changed.
            java.nio.file.Path live = java.nio.file.Path.of(tlsDir, "live.pem");
            java.nio.file.Files.copy(java.nio.file.Path.of(tlsDir, "first.pem"), live,
                java.nio.file.StandardCopyOption.REPLACE_EXISTING);
            m.put("a path", set("live.pem", "first"));
            java.nio.file.Files.copy(java.nio.file.Path.of(tlsDir, "renewed.pem"), live,
                java.nio.file.StandardCopyOption.REPLACE_EXISTING);
            m.put("the same path, its file rewritten", set("live.pem", "renewed"));
            m.put("the same path, its file as it was", set("live.pem", "renewed"));
            var r = new ConfigResource(ConfigResource.Type.BROKER, "1");
            for (ConfigEntry e : Configs.describe(r)) {
                if (e.name().startsWith("listener.name.ssl.")) {
                    m.put("described " + e.name(), String.valueOf(e.value()).replace(tlsDir, "DIR") + " " + e.source());
                }
            }
            return m;
        }
    }

    interface Call {
        Object call() throws Exception;
    }

    /** "ok", or the error the call ended in. */
    static Map<String, Object> outcome(Call c) {
        try {
            c.call();
            return Map.of("outcome", "ok");
        } catch (Exception ex) {
            return error(ex);
        }
    }

    static void createTopic(String name, int partitions, Map<String, String> configs) throws Exception {
        admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1).configs(configs))).all().get();
        waitForLeaders(name);
    }

    /** Metadata reaches every broker of a cluster shortly after the controller made it. */
    static void waitForLeaders(String name) throws Exception {
        waitFor("topic " + name + " is described", () -> {
            try {
                return admin.describeTopics(List.of(name)).allTopicNames().get().get(name)
                    .partitions().stream().allMatch(p -> p.leader() != null);
            } catch (Exception e) {
                return false;
            }
        });
    }

    static void waitFor(String what, Supplier<Boolean> cond) throws Exception {
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (!cond.get()) {
            if (System.nanoTime() > deadline) throw new IllegalStateException("waited " + WAIT + " until " + what);
            Thread.sleep(50);
        }
    }

    static Map<String, Object> topic(TopicDescription d) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("name", d.name());
        m.put("internal", d.isInternal());
        m.put("partitions", d.partitions().size());
        m.put("replicas", d.partitions().stream().map(p -> p.replicas().size()).collect(Collectors.toList()));
        m.put("has topic id", d.topicId() != null && !Uuid.ZERO_UUID.equals(d.topicId()));
        return m;
    }

    static KafkaProducer<String, String> producer(Map<String, Object> extra) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<String, String> consumer(Map<String, Object> extra) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    // --- topics ----------------------------------------------------------------------------

    static Map<String, Object> createAndDescribe() throws Exception {
        createTopic("d-described", 3, Map.of());
        TopicDescription d = admin.describeTopics(List.of("d-described")).allTopicNames().get().get("d-described");
        return topic(d);
    }

    static Map<String, Object> describeById() throws Exception {
        CreateTopicsResult r = admin.createTopics(List.of(new NewTopic("d-by-id", 2, (short) 1)));
        r.all().get();
        Uuid id = r.topicId("d-by-id").get();
        // Kafka's brokers learn a new topic from the controller a moment after CreateTopics
        // answers; before that its id is unknown to them.
        waitForLeaders("d-by-id");
        Map<String, Object> m = new LinkedHashMap<>();
        Map<Uuid, TopicDescription> byId = admin.describeTopics(TopicCollection.ofTopicIds(List.of(id))).allTopicIds().get();
        TopicDescription d = byId.get(id);
        m.put("described", d == null ? null : topic(d));
        m.put("same id", d != null && id.equals(d.topicId()));
        // The name's description carries the id that CreateTopics answered.
        TopicDescription byName = admin.describeTopics(List.of("d-by-id")).allTopicNames().get().get("d-by-id");
        m.put("same id by name", id.equals(byName.topicId()));
        return m;
    }

    static Map<String, Object> createExisting() throws Exception {
        createTopic("d-existing", 1, Map.of());
        return outcome(() -> admin.createTopics(List.of(new NewTopic("d-existing", 1, (short) 1))).all().get());
    }

    static Map<String, Object> deleteById() throws Exception {
        CreateTopicsResult r = admin.createTopics(List.of(new NewTopic("d-delete-by-id", 1, (short) 1)));
        r.all().get();
        Uuid id = r.topicId("d-delete-by-id").get();
        waitForLeaders("d-delete-by-id");
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("delete", outcome(() -> admin.deleteTopics(TopicCollection.ofTopicIds(List.of(id))).all().get()));
        waitFor("the deleted topic is gone", () -> {
            try {
                return !admin.listTopics().names().get().contains("d-delete-by-id");
            } catch (Exception e) {
                return false;
            }
        });
        m.put("describe after", outcome(() ->
            admin.describeTopics(TopicCollection.ofTopicIds(List.of(id))).allTopicIds().get()));
        return m;
    }

    // --- offsets ---------------------------------------------------------------------------

    /**
     * ListOffsets MAX_TIMESTAMP over records whose timestamps rise, fall and tie, in one batch
     * or in a batch each: the answer names the first record with the largest timestamp.
     */
    static Map<String, Object> maxTimestamp(String name, boolean oneBatch, Map<String, Object> producerConfig,
                                            int valueBytes, Map<String, String> topicConfig) throws Exception {
        createTopic(name, 1, topicConfig);
        long[] times = {1_000, 5_000, 3_000, 5_000, 2_000, 4_000, 5_000};
        Map<String, Object> cfg = new HashMap<>(producerConfig);
        cfg.put(ProducerConfig.LINGER_MS_CONFIG, oneBatch ? 1000 : 0);
        cfg.put(ProducerConfig.BATCH_SIZE_CONFIG, 1 << 20);
        String value = "v".repeat(valueBytes);
        try (KafkaProducer<String, String> p = producer(cfg)) {
            List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < times.length; i++) {
                var f = p.send(new ProducerRecord<>(name, 0, times[i], "k" + i, value));
                if (oneBatch) sent.add(f); else f.get();
            }
            p.flush();
            for (var f : sent) f.get();
        }
        return listMaxTimestamp(name);
    }

    static Map<String, Object> listMaxTimestamp(String name) throws Exception {
        TopicPartition tp = new TopicPartition(name, 0);
        Map<String, Object> m = new LinkedHashMap<>();
        var info = admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).all().get().get(tp);
        m.put("offset", info.offset());
        m.put("timestamp", info.timestamp());
        m.put("leader epoch present", info.leaderEpoch().isPresent());
        return m;
    }

    static Map<String, Object> maxTimestampSegments() throws Exception {
        String name = "d-maxts-segments";
        createTopic(name, 1, Map.of("segment.bytes", String.valueOf(1 << 20)));
        String value = "s".repeat(10_000);
        try (KafkaProducer<String, String> p = producer(Map.of(ProducerConfig.LINGER_MS_CONFIG, 0))) {
            // 250 records of 10 KB, a batch each: about 2.5 MB, so three segments; the
            // largest timestamp first at offset 40 (first segment), again at 200 (third).
            for (int i = 0; i < 250; i++) {
                long ts = (i == 40 || i == 200) ? 9_000 : 1_000 + i;
                p.send(new ProducerRecord<>(name, 0, ts, "k" + i, value)).get();
            }
        }
        Map<String, Object> m = listMaxTimestamp(name);
        m.put("partition size", admin.listOffsets(Map.of(new TopicPartition(name, 0), OffsetSpec.latest()))
            .all().get().get(new TopicPartition(name, 0)).offset());
        return m;
    }

    /** LogAppendTime: the broker's clock stamps each batch; one batch of 5 answers its first record. */
    static Map<String, Object> maxTimestampAppendTime() throws Exception {
        String name = "d-maxts-append-time";
        createTopic(name, 1, Map.of("message.timestamp.type", "LogAppendTime"));
        try (KafkaProducer<String, String> p = producer(Map.of(ProducerConfig.LINGER_MS_CONFIG, 1000))) {
            List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < 5; i++) sent.add(p.send(new ProducerRecord<>(name, 0, 1_000L + i, "k", "v")));
            p.flush();
            for (var f : sent) f.get();
        }
        Map<String, Object> m = listMaxTimestamp(name);
        long ts = (Long) m.remove("timestamp");
        m.put("timestamp is the append time", ts > 1_000_000_000_000L);
        return m;
    }

    static Map<String, Object> maxTimestampEmpty() throws Exception {
        String name = "d-maxts-empty";
        createTopic(name, 1, Map.of());
        return listMaxTimestamp(name);
    }

    static Map<String, Object> earliestLatest() throws Exception {
        String name = "d-by-time";
        createTopic(name, 1, Map.of());
        try (KafkaProducer<String, String> p = producer(Map.of())) {
            for (long t : new long[] {10_000, 20_000, 30_000}) {
                p.send(new ProducerRecord<>(name, 0, t, "k", "v")).get();
            }
        }
        TopicPartition tp = new TopicPartition(name, 0);
        Map<String, Object> m = new LinkedHashMap<>();
        Map<String, OffsetSpec> specs = new LinkedHashMap<>();
        specs.put("earliest", OffsetSpec.earliest());
        specs.put("latest", OffsetSpec.latest());
        specs.put("at 15000", OffsetSpec.forTimestamp(15_000));
        specs.put("at 20000", OffsetSpec.forTimestamp(20_000));
        specs.put("after the last", OffsetSpec.forTimestamp(40_000));
        for (var e : specs.entrySet()) {
            var info = admin.listOffsets(Map.of(tp, e.getValue())).all().get().get(tp);
            m.put(e.getKey(), List.of(info.offset(), info.timestamp()));
        }
        return m;
    }

    // --- log directories -------------------------------------------------------------------

    /** DescribeLogDirs of the broker, as kafka-log-dirs --describe reads it: one directory,
     *  the topic's replicas with their sizes (the same records make the same bytes). */
    static Map<String, Object> describeLogDirs() throws Exception {
        String name = "d-log-dirs";
        createTopic(name, 2, Map.of());
        try (KafkaProducer<String, String> p = producer(Map.of())) {
            for (int i = 0; i < 5; i++) {
                p.send(new ProducerRecord<>(name, i % 2, 1_000L + i, "k" + i, "value " + i)).get();
            }
        }
        int id = admin.describeCluster().nodes().get().iterator().next().id();
        var dirs = admin.describeLogDirs(List.of(id)).allDescriptions().get().get(id);
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("directories", dirs.size());
        for (var dir : dirs.values()) {
            m.put("error", dir.error() == null ? null : dir.error().getClass().getSimpleName());
            m.put("total bytes known", dir.totalBytes().isPresent() && dir.totalBytes().getAsLong() > 0);
            m.put("usable within total", dir.usableBytes().isPresent()
                && dir.usableBytes().getAsLong() <= dir.totalBytes().orElse(0));
            for (var e : new TreeMap<>(dir.replicaInfos().entrySet().stream()
                    .filter(r -> r.getKey().topic().equals(name))
                    .collect(Collectors.toMap(r -> r.getKey().toString(), Map.Entry::getValue))).entrySet()) {
                var r = e.getValue();
                m.put(e.getKey(), "size " + r.size() + " lag " + r.offsetLag() + (r.isFuture() ? " future" : ""));
            }
        }
        return m;
    }

    /** Where one replica lives (describeReplicaLogDirs asks DescribeLogDirs for it alone). */
    static Map<String, Object> describeReplicaLogDirs() throws Exception {
        String name = "d-replica-dir";
        createTopic(name, 1, Map.of());
        int id = admin.describeCluster().nodes().get().iterator().next().id();
        Map<String, Object> m = new LinkedHashMap<>();
        for (int p : new int[] {0, 7}) {
            var replica = new TopicPartitionReplica(name, p, id);
            var info = admin.describeReplicaLogDirs(List.of(replica)).all().get().get(replica);
            m.put("partition " + p, (info.getCurrentReplicaLogDir() == null ? "no directory" : "in a directory")
                + (info.getFutureReplicaLogDir() == null ? "" : ", moving") + ", lag " + info.getCurrentReplicaOffsetLag());
        }
        return m;
    }

    // --- groups ----------------------------------------------------------------------------

    static Map<String, Object> listing(String group) throws Exception {
        for (GroupListing g : admin.listGroups().all().get()) {
            if (g.groupId().equals(group)) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("type", g.type().map(Object::toString).orElse(null));
                m.put("protocol", g.protocol());
                m.put("state", g.groupState().map(Object::toString).orElse(null));
                return m;
            }
        }
        return null;
    }

    static Map<String, Object> describeGroup(String group) throws Exception {
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("state", String.valueOf(d.groupState()));
        m.put("type", String.valueOf(d.type()));
        m.put("assignor", d.partitionAssignor());
        m.put("members", d.members().size());
        m.put("group epoch", d.groupEpoch().orElse(null));
        m.put("target assignment epoch", d.targetAssignmentEpoch().orElse(null));
        m.put("member epochs", d.members().stream()
            .map(x -> x.memberEpoch().orElse(null)).sorted(Comparator.nullsFirst(Comparator.naturalOrder()))
            .collect(Collectors.toList()));
        return m;
    }

    static Map<String, Object> offsetsOnlyGroup() throws Exception {
        String name = "d-offsets-only";
        createTopic(name, 1, Map.of());
        String group = "d-offsets-only-group";
        TopicPartition tp = new TopicPartition(name, 0);
        admin.alterConsumerGroupOffsets(group, Map.of(tp, new OffsetAndMetadata(0))).all().get();
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("listed", listing(group));
        m.put("described", describeGroup(group));
        m.put("offsets", admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()
            .get(tp).offset());
        return m;
    }

    static Map<String, Object> emptyAfterDeleteOffsets() throws Exception {
        String name = "d-delete-offsets";
        createTopic(name, 1, Map.of());
        String group = "d-delete-offsets-group";
        TopicPartition tp = new TopicPartition(name, 0);
        try (KafkaProducer<String, String> p = producer(Map.of())) {
            p.send(new ProducerRecord<>(name, 0, "k", "v")).get();
        }
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group))) {
            c.subscribe(List.of(name));
            long deadline = System.nanoTime() + WAIT.toNanos();
            int seen = 0;
            while (seen == 0 && System.nanoTime() < deadline) seen += c.poll(Duration.ofMillis(200)).count();
            c.commitSync();
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("after the consumer left", listing(group));
        m.put("delete offsets", outcome(() -> admin.deleteConsumerGroupOffsets(group, Set.of(tp)).all().get()));
        m.put("listed", listing(group));
        m.put("described", describeGroup(group));
        m.put("offsets", admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().size());
        m.put("delete group", outcome(() -> admin.deleteConsumerGroups(List.of(group)).all().get()));
        m.put("listed after delete", listing(group));
        return m;
    }

    /**
     * A KIP-848 group's epochs through its history: one member, a second one, the first
     * leaving. Each step waits until the group is stable (every member at the target epoch).
     */
    static Map<String, Object> consumerProtocolEpochs() throws Exception {
        String name = "d-848";
        createTopic(name, 4, Map.of());
        String group = "d-848-group";
        Map<String, Object> cfg = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
            ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        Map<String, Object> m = new LinkedHashMap<>();
        KafkaConsumer<String, String> a = consumer(cfg);
        KafkaConsumer<String, String> b = null;
        try {
            a.subscribe(List.of(name));
            m.put("one member", stableGroup(group, List.of(a), 4));
            b = consumer(cfg);
            b.subscribe(List.of(name));
            m.put("two members", stableGroup(group, List.of(a, b), 4));
            a.close();
            a = null;
            m.put("first left", stableGroup(group, List.of(b), 4));
        } finally {
            if (a != null) a.close();
            if (b != null) b.close();
        }
        m.put("all left", describeGroup(group));
        return m;
    }

    /** Polls `members` until they own `partitions` between them and the group is stable. */
    static Map<String, Object> stableGroup(String group, List<KafkaConsumer<String, String>> members, int partitions)
        throws Exception {
        long deadline = System.nanoTime() + WAIT.toNanos();
        Map<String, Object> last = null;
        while (System.nanoTime() < deadline) {
            int owned = 0;
            for (var c : members) {
                c.poll(Duration.ofMillis(100));
                owned += c.assignment().size();
            }
            if (owned != partitions) continue;
            last = describeGroup(group);
            Object epoch = last.get("group epoch");
            boolean stable = "Stable".equals(last.get("state"))
                && Objects.equals(epoch, last.get("target assignment epoch"))
                && ((List<?>) last.get("member epochs")).stream().allMatch(e -> Objects.equals(e, epoch))
                && ((Integer) last.get("members")) == members.size();
            if (stable) return last;
        }
        throw new IllegalStateException("the group did not become stable in " + WAIT + ": " + last);
    }

    static Map<String, Object> describeUnknownGroup() {
        return outcome(() -> admin.describeConsumerGroups(List.of("d-never-seen")).all().get());
    }
}
