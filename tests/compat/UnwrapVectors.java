/*
 * Sluice compatibility vectors for Debezium's ExtractNewRecordState with Connect's converters.
 *
 * Runs the real io.debezium.transforms.ExtractNewRecordState (Debezium 3.6) over a fixed list of
 * PostgreSQL-shaped change events under several SMT configurations, then serializes what comes
 * out the way a Kafka Connect worker would: key and value with JsonConverter (schemas on), every
 * header with JsonConverter as the header converter (schemas on and off) and with
 * SimpleHeaderConverter. Prints one JSON line per (configuration, event):
 *
 *   {"config": "<name>", "event": "<name>", "dropped": false, "topic": "...",
 *    "key": "<base64>" | null, "value": "<base64>" | null,
 *    "headers": [["<name>", "<json schemas>", "<json plain>", "<simple>"], ...]}   (each base64 or null)
 *
 * tests/integration/test_unwrap_vectors.py defines the same events and configurations by name in
 * Python, runs Sluice's transform and converters, and compares the bytes. Launched as a single
 * file against the jars of Kafka Connect 4.3 and Debezium 3.6 (see that test).
 */

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.debezium.transforms.ExtractNewRecordState;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.header.ConnectHeaders;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.storage.HeaderConverter;
import org.apache.kafka.connect.storage.SimpleHeaderConverter;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

public class UnwrapVectors {

    static final Schema ROW = SchemaBuilder.struct().name("srv.public.users.Value").optional()
        .field("id", Schema.INT32_SCHEMA)
        .field("name", Schema.OPTIONAL_STRING_SCHEMA)
        .field("score", SchemaBuilder.int32().optional().defaultValue(7).build())
        .build();
    static final Schema KEY = SchemaBuilder.struct().name("srv.public.users.Key")
        .field("id", Schema.INT32_SCHEMA)
        .field("name", Schema.OPTIONAL_STRING_SCHEMA)
        .build();
    static final Schema SOURCE = SchemaBuilder.struct().name("io.debezium.connector.postgresql.Source")
        .field("version", Schema.STRING_SCHEMA)
        .field("connector", Schema.STRING_SCHEMA)
        .field("name", Schema.STRING_SCHEMA)
        .field("ts_ms", Schema.INT64_SCHEMA)
        .field("db", Schema.STRING_SCHEMA)
        .field("schema", Schema.STRING_SCHEMA)
        .field("table", Schema.STRING_SCHEMA)
        .field("lsn", Schema.OPTIONAL_INT64_SCHEMA)
        .build();
    static final Schema TRANSACTION = SchemaBuilder.struct().name("event.block").optional()
        .field("id", Schema.STRING_SCHEMA)
        .field("total_order", Schema.INT64_SCHEMA)
        .field("data_collection_order", Schema.INT64_SCHEMA)
        .build();
    static final Schema ENVELOPE = SchemaBuilder.struct().name("srv.public.users.Envelope").version(2)
        .field("before", ROW)
        .field("after", ROW)
        .field("source", SOURCE)
        .field("transaction", TRANSACTION)
        .field("op", Schema.STRING_SCHEMA)
        .field("ts_ms", Schema.OPTIONAL_INT64_SCHEMA)
        .build();
    static final Schema HEARTBEAT = SchemaBuilder.struct().name("io.debezium.connector.common.Heartbeat")
        .field("ts_ms", Schema.INT64_SCHEMA)
        .build();

    static Struct row(int id, String name, Integer score) {
        return new Struct(ROW).put("id", id).put("name", name).put("score", score);
    }

    static Struct envelope(String op, Struct before, Struct after, boolean inTransaction) {
        Struct source = new Struct(SOURCE).put("version", "3.6.1.Final").put("connector", "postgresql")
            .put("name", "srv").put("ts_ms", 1_700_000_000_000L).put("db", "app").put("schema", "public")
            .put("table", "users").put("lsn", 123456L);
        Struct value = new Struct(ENVELOPE).put("before", before).put("after", after).put("source", source)
            .put("op", op).put("ts_ms", 1_700_000_000_500L);
        if (inTransaction) {
            value.put("transaction", new Struct(TRANSACTION).put("id", "571:123456").put("total_order", 3L)
                .put("data_collection_order", 2L));
        }
        return value;
    }

    static SourceRecord record(Schema valueSchema, Object value, ConnectHeaders headers) {
        Struct key = new Struct(KEY).put("id", 1).put("name", "ann");
        return new SourceRecord(Map.of("server", "srv"), Map.of("lsn", 1L), "srv.public.users", null,
            KEY, key, valueSchema, value, 1_700_000_000_900L, headers);
    }

    /** The events, by the names the Python test uses. */
    static Map<String, SourceRecord> events() {
        Map<String, SourceRecord> events = new LinkedHashMap<>();
        events.put("create", record(ENVELOPE, envelope("c", null, row(1, "ann", null), false), new ConnectHeaders()));
        ConnectHeaders traced = new ConnectHeaders();
        traced.addString("trace", "t-1");
        events.put("update", record(ENVELOPE, envelope("u", row(1, "ann", null), row(1, "bob", 3), true), traced));
        events.put("delete", record(ENVELOPE, envelope("d", row(1, "bob", null), null, true), new ConnectHeaders()));
        events.put("tombstone", record(null, null, new ConnectHeaders()));
        events.put("truncate", record(ENVELOPE, envelope("t", null, null, false), new ConnectHeaders()));
        events.put("heartbeat", record(HEARTBEAT, new Struct(HEARTBEAT).put("ts_ms", 5L), new ConnectHeaders()));
        ConnectHeaders drop = new ConnectHeaders();
        drop.add("drop_me", List.of("name", "id", "score"), SchemaBuilder.array(Schema.STRING_SCHEMA).build());
        events.put("update_drop_fields", record(ENVELOPE, envelope("u", null, row(2, "cy", 4), false), drop));
        return events;
    }

    /** The SMT configurations, by the names the Python test uses. */
    static Map<String, Map<String, String>> configs() {
        Map<String, Map<String, String>> configs = new LinkedHashMap<>();
        configs.put("default", Map.of());
        // Debezium's documentation ("Adding metadata"), plus the key of issue #37.
        configs.put("docs_metadata", Map.of("add.fields", "op,table,lsn,source.ts_ms", "add.headers", "db",
            "delete.tombstone.handling.mode", "rewrite", "operation.header", "true"));
        configs.put("drop", Map.of("delete.tombstone.handling.mode", "drop", "add.headers", "op"));
        configs.put("rewrite_with_tombstone", Map.of("delete.tombstone.handling.mode", "rewrite-with-tombstone",
            "add.headers", "op,source.ts_ms:EVENT_TS,transaction.id,ts_ms,lsn", "add.headers.prefix", "",
            "add.fields", "op:OP,ts_ms,transaction.total_order", "add.fields.prefix", "cdc_",
            "replace.null.with.default", "false"));
        configs.put("rewrite_defaults", Map.of("delete.tombstone.handling.mode", "rewrite"));
        configs.put("delete_to_tombstone", Map.of("delete.tombstone.handling.mode", "delete-to-tombstone",
            "add.headers", "op"));
        configs.put("route", Map.of("route.by.field", "name", "delete.tombstone.handling.mode", "rewrite"));
        // Keys Debezium 3.6 no longer reads: Connect accepts them, the SMT ignores them.
        configs.put("legacy", Map.of("delete.handling.mode", "rewrite", "drop.tombstones", "false",
            "operation.header", "true"));
        configs.put("drop_fields", Map.of("drop.fields.header.name", "drop_me", "drop.fields.from.key", "true"));
        configs.put("drop_fields_all", Map.of("drop.fields.header.name", "drop_me",
            "drop.fields.keep.schema.compatible", "false"));
        return configs;
    }

    static String b64(byte[] bytes) {
        return bytes == null ? null : Base64.getEncoder().encodeToString(bytes);
    }

    static HeaderConverter jsonHeaders(boolean schemas) {
        JsonConverter converter = new JsonConverter();
        converter.configure(Map.of("converter.type", "header", "schemas.enable", Boolean.toString(schemas)));
        return converter;
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        JsonConverter keys = new JsonConverter();
        keys.configure(Map.of("schemas.enable", "true"), true);
        JsonConverter values = new JsonConverter();
        values.configure(Map.of("schemas.enable", "true"), false);
        HeaderConverter withSchemas = jsonHeaders(true);
        HeaderConverter plain = jsonHeaders(false);
        SimpleHeaderConverter simple = new SimpleHeaderConverter();
        simple.configure(Map.of());
        for (Map.Entry<String, Map<String, String>> config : configs().entrySet()) {
            for (Map.Entry<String, SourceRecord> event : events().entrySet()) {
                ExtractNewRecordState<SourceRecord> smt = new ExtractNewRecordState<>();
                smt.configure(config.getValue());
                SourceRecord result = smt.apply(event.getValue());
                ObjectNode line = mapper.createObjectNode();
                line.put("config", config.getKey());
                line.put("event", event.getKey());
                line.put("dropped", result == null);
                if (result != null) {
                    String topic = result.topic();
                    line.put("topic", topic);
                    line.put("key", b64(keys.fromConnectData(topic, result.keySchema(), result.key())));
                    line.put("value", b64(values.fromConnectData(topic, result.valueSchema(), result.value())));
                    ArrayNode headers = line.putArray("headers");
                    for (Header h : result.headers()) {
                        ArrayNode one = headers.addArray();
                        one.add(h.key());
                        one.add(b64(withSchemas.fromConnectHeader(topic, h.key(), h.schema(), h.value())));
                        one.add(b64(plain.fromConnectHeader(topic, h.key(), h.schema(), h.value())));
                        one.add(b64(simple.fromConnectHeader(topic, h.key(), h.schema(), h.value())));
                    }
                }
                smt.close();
                out.println(mapper.writeValueAsString(line));
            }
        }
    }
}
