/*
 * Sluice compatibility vectors for Kafka Connect's JsonConverter.
 *
 * Serializes a fixed list of named (schema, value) cases with the real
 * org.apache.kafka.connect.json.JsonConverter under several configurations and prints one JSON
 * line per (case, configuration):
 *
 *   {"case": "<name>", "config": {...}, "bytes_b64": "<base64 of the converter's bytes>" | null}
 *
 * A case whose conversion Connect rejects prints "error" (the DataException message) instead of
 * bytes. tests/unit/converters/test_json_converter.py defines the same cases by name in Python and
 * asserts byte equality with the committed output; tests/compat/generate_vectors.py runs this
 * program (single-file launch, `java -cp <jars> JsonConverterVectors.java`).
 *
 * Values stay clear of the magnitudes where Java 17's Double.toString/Float.toString print more
 * digits than the shortest repr (integral values from 2^54 / 2^25 up): there JDK 17 and JDK 19+
 * disagree, and Sluice follows JDK 19+. See converters/json.py.
 */

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.connect.data.Date;
import org.apache.kafka.connect.data.Decimal;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.data.Time;
import org.apache.kafka.connect.data.Timestamp;
import org.apache.kafka.connect.errors.DataException;
import org.apache.kafka.connect.json.JsonConverter;

import java.io.PrintStream;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

public class JsonConverterVectors {

    /** Configuration variants, by the name the cases refer to. Insertion order is output order. */
    static final Map<String, Map<String, String>> CONFIGS = new LinkedHashMap<>();

    static {
        CONFIGS.put("schemas", conf("true", null, null));
        CONFIGS.put("plain", conf("false", null, null));
        CONFIGS.put("schemas_numeric", conf("true", "NUMERIC", null));
        CONFIGS.put("plain_numeric", conf("false", "NUMERIC", null));
        CONFIGS.put("schemas_noreplace", conf("true", null, "false"));
        CONFIGS.put("plain_noreplace", conf("false", null, "false"));
    }

    static final List<String> BOTH = List.of("schemas", "plain");
    static final List<String> DECIMAL = List.of("schemas", "plain", "schemas_numeric", "plain_numeric");
    static final List<String> DEFAULTS = List.of("schemas", "plain", "schemas_noreplace", "plain_noreplace");

    record Case(String name, Schema schema, Object value, List<String> configs) { }

    static final List<Case> CASES = new ArrayList<>();

    static Map<String, String> conf(String schemasEnable, String decimalFormat, String replaceNull) {
        Map<String, String> c = new LinkedHashMap<>();
        c.put("schemas.enable", schemasEnable);
        if (decimalFormat != null) c.put("decimal.format", decimalFormat);
        if (replaceNull != null) c.put("replace.null.with.default", replaceNull);
        return c;
    }

    static void add(String name, Schema schema, Object value) {
        CASES.add(new Case(name, schema, value, BOTH));
    }

    static void add(String name, Schema schema, Object value, List<String> configs) {
        CASES.add(new Case(name, schema, value, configs));
    }

    static <K, V> Map<K, V> map(Object... kv) {
        Map<K, V> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            @SuppressWarnings("unchecked") K k = (K) kv[i];
            @SuppressWarnings("unchecked") V v = (V) kv[i + 1];
            m.put(k, v);
        }
        return m;
    }

    static List<Object> list(Object... items) {
        return new ArrayList<>(Arrays.asList(items));
    }

    static java.util.Date millis(long ms) {
        return new java.util.Date(ms);
    }

    static void defineCases() {
        // -- integers -------------------------------------------------------------------------
        add("int8_min", Schema.INT8_SCHEMA, (byte) -128);
        add("int8_max", Schema.INT8_SCHEMA, (byte) 127);
        add("int16_min", Schema.INT16_SCHEMA, (short) -32768);
        add("int16_max", Schema.INT16_SCHEMA, (short) 32767);
        add("int32_min", Schema.INT32_SCHEMA, Integer.MIN_VALUE);
        add("int32_max", Schema.INT32_SCHEMA, Integer.MAX_VALUE);
        add("int32_zero", Schema.INT32_SCHEMA, 0);
        add("int64_min", Schema.INT64_SCHEMA, Long.MIN_VALUE);
        add("int64_max", Schema.INT64_SCHEMA, Long.MAX_VALUE);

        // -- float32 (Float.toString) ----------------------------------------------------------
        add("float32_0_1", Schema.FLOAT32_SCHEMA, 0.1f);
        add("float32_1", Schema.FLOAT32_SCHEMA, 1.0f);
        add("float32_pi", Schema.FLOAT32_SCHEMA, 3.14159f);
        add("float32_1e_5", Schema.FLOAT32_SCHEMA, 1.0e-5f);
        add("float32_12345_678", Schema.FLOAT32_SCHEMA, 12345.678f);
        add("float32_1e7", Schema.FLOAT32_SCHEMA, 1.0e7f);
        add("float32_neg_1_5e_7", Schema.FLOAT32_SCHEMA, -1.5e-7f);
        add("float32_max", Schema.FLOAT32_SCHEMA, Float.MAX_VALUE);
        add("float32_min_subnormal", Schema.FLOAT32_SCHEMA, Float.MIN_VALUE);
        add("float32_neg_zero", Schema.FLOAT32_SCHEMA, -0.0f);
        add("float32_nan", Schema.FLOAT32_SCHEMA, Float.NaN);
        add("float32_neg_inf", Schema.FLOAT32_SCHEMA, Float.NEGATIVE_INFINITY);

        // -- float64 (Double.toString) ---------------------------------------------------------
        add("float64_0_1", Schema.FLOAT64_SCHEMA, 0.1);
        add("float64_1", Schema.FLOAT64_SCHEMA, 1.0);
        add("float64_zero", Schema.FLOAT64_SCHEMA, 0.0);
        add("float64_neg_zero", Schema.FLOAT64_SCHEMA, -0.0);
        add("float64_1e20", Schema.FLOAT64_SCHEMA, 1.0e20);
        add("float64_1_5e_7", Schema.FLOAT64_SCHEMA, 1.5e-7);
        add("float64_12345678_9", Schema.FLOAT64_SCHEMA, 12345678.9);
        add("float64_1e_3", Schema.FLOAT64_SCHEMA, 1.0e-3);
        add("float64_9_99e_4", Schema.FLOAT64_SCHEMA, 9.99e-4);
        add("float64_1e7", Schema.FLOAT64_SCHEMA, 1.0e7);
        add("float64_9999999", Schema.FLOAT64_SCHEMA, 9999999.0);
        add("float64_123456_789", Schema.FLOAT64_SCHEMA, -123456.789);
        add("float64_2_pow_53", Schema.FLOAT64_SCHEMA, 9007199254740992.0);
        add("float64_1_234e_300", Schema.FLOAT64_SCHEMA, 1.234e-300);
        add("float64_max", Schema.FLOAT64_SCHEMA, Double.MAX_VALUE);
        add("float64_min_subnormal", Schema.FLOAT64_SCHEMA, Double.MIN_VALUE);
        add("float64_min_normal", Schema.FLOAT64_SCHEMA, Double.MIN_NORMAL);
        add("float64_nan", Schema.FLOAT64_SCHEMA, Double.NaN);
        add("float64_inf", Schema.FLOAT64_SCHEMA, Double.POSITIVE_INFINITY);
        add("float64_neg_inf", Schema.FLOAT64_SCHEMA, Double.NEGATIVE_INFINITY);

        // -- boolean, string, bytes ------------------------------------------------------------
        add("boolean_true", Schema.BOOLEAN_SCHEMA, true);
        add("boolean_false", Schema.BOOLEAN_SCHEMA, false);
        add("string_ascii", Schema.STRING_SCHEMA, "hello world");
        add("string_empty", Schema.STRING_SCHEMA, "");
        add("string_unicode", Schema.STRING_SCHEMA, "h\u00e9llo w\u00f6rld \u2713 \u65e5\u672c\u8a9e \ud83d\ude00 \u2028\u2029");
        add("string_quotes_backslashes", Schema.STRING_SCHEMA, "say \"hi\" \\ C:\\path\\to </script> 'x'");
        StringBuilder controls = new StringBuilder();
        for (char c = 0; c < 0x20; c++) controls.append(c).append('|');
        controls.append('\u007f');
        add("string_control_chars", Schema.STRING_SCHEMA, controls.toString());
        add("string_escape_lookalike", Schema.STRING_SCHEMA, "literal \\u001b and \\\u001b and \\\\u001f");
        byte[] all = new byte[256];
        for (int i = 0; i < 256; i++) all[i] = (byte) i;
        add("bytes_all", Schema.BYTES_SCHEMA, all);
        add("bytes_empty", Schema.BYTES_SCHEMA, new byte[0]);

        // -- optional and null -----------------------------------------------------------------
        add("optional_int32_null", Schema.OPTIONAL_INT32_SCHEMA, null);
        add("optional_string_null", Schema.OPTIONAL_STRING_SCHEMA, null);
        add("optional_string_value", Schema.OPTIONAL_STRING_SCHEMA, "present");
        add("int32_required_null", Schema.INT32_SCHEMA, null);
        add("tombstone", null, null);

        // -- defaults --------------------------------------------------------------------------
        add("int32_default_null", SchemaBuilder.int32().optional().defaultValue(42).build(), null, DEFAULTS);
        add("string_default_null", SchemaBuilder.string().defaultValue("dflt").build(), null, DEFAULTS);
        add("int32_default_value", SchemaBuilder.int32().optional().defaultValue(42).build(), 7, DEFAULTS);
        add("array_default_null", SchemaBuilder.array(Schema.INT32_SCHEMA).optional().defaultValue(list(1, 2)).build(),
            null, DEFAULTS);
        Schema withDefaults = SchemaBuilder.struct().name("com.example.WithDefaults")
            .field("a", SchemaBuilder.int32().defaultValue(5).build())
            .field("b", SchemaBuilder.string().optional().defaultValue("x").build())
            .field("c", SchemaBuilder.float64().optional().defaultValue(2.5).build())
            .field("d", Decimal.builder(2).optional().defaultValue(new BigDecimal("1.50")).build())
            .build();
        add("struct_field_defaults", withDefaults,
            new Struct(withDefaults).put("b", null).put("c", 0.25), DEFAULTS);

        // -- logical types ---------------------------------------------------------------------
        add("decimal_positive", Decimal.schema(2), new BigDecimal("12.34"), DECIMAL);
        add("decimal_negative", Decimal.schema(2), new BigDecimal("-12.34"), DECIMAL);
        add("decimal_zero", Decimal.schema(2), new BigDecimal("0.00"), DECIMAL);
        add("decimal_255", Decimal.schema(2), new BigDecimal("2.55"), DECIMAL);
        add("decimal_minus_128", Decimal.schema(0), new BigDecimal("-128"), DECIMAL);
        add("decimal_scale0_big", Decimal.schema(0), new BigDecimal("12345678901234567890"), DECIMAL);
        add("decimal_tiny", Decimal.schema(7), new BigDecimal("0.0000001"), DECIMAL);
        add("decimal_40_digits", Decimal.schema(10),
            new BigDecimal("-123456789012345678901234567890.1234567890"), DECIMAL);
        add("decimal_optional_null", Decimal.builder(2).optional().build(), null, DECIMAL);
        add("date_leap_day", Date.SCHEMA, millis(19782L * 86_400_000L));
        add("date_before_epoch", Date.SCHEMA, millis(-86_400_000L));
        add("date_epoch", Date.SCHEMA, millis(0L));
        add("time_afternoon", Time.SCHEMA, millis(((13 * 60 + 45) * 60 + 30) * 1000L + 123));
        add("time_midnight", Time.SCHEMA, millis(0L));
        add("time_last_ms", Time.SCHEMA, millis(86_399_999L));
        add("timestamp_2024", Timestamp.SCHEMA, millis(1_714_979_289_123L));
        add("timestamp_before_epoch", Timestamp.SCHEMA, millis(-14_182_940_000L));
        add("timestamp_epoch", Timestamp.SCHEMA, millis(0L));

        // -- schema metadata -------------------------------------------------------------------
        Map<String, String> params = map("b.second", "2", "a.first", "one \"quoted\"");
        add("string_with_metadata", SchemaBuilder.string().name("com.example.Name").version(2)
            .doc("A name.\nWith \"quotes\" and a tab\t.").parameters(params).build(), "Ada");
        add("int64_with_metadata_optional", SchemaBuilder.int64().optional().name("com.example.Count").version(1)
            .doc("count").build(), 3L);

        // -- containers ------------------------------------------------------------------------
        add("array_int32", SchemaBuilder.array(Schema.INT32_SCHEMA).build(), list(1, 2, 3));
        add("array_empty", SchemaBuilder.array(Schema.STRING_SCHEMA).build(), list());
        add("array_optional_items", SchemaBuilder.array(Schema.OPTIONAL_INT64_SCHEMA).optional().build(),
            list(1L, null, 3L));
        add("array_float64", SchemaBuilder.array(Schema.FLOAT64_SCHEMA).build(), list(0.5, 1.0e21, -3.0e-9));
        add("map_string_keys", SchemaBuilder.map(Schema.STRING_SCHEMA, Schema.INT32_SCHEMA).build(),
            map("one", 1, "two", 2, "", 0));
        add("map_int_keys", SchemaBuilder.map(Schema.INT32_SCHEMA, Schema.STRING_SCHEMA).build(),
            map(1, "a", -2, "b"));
        add("map_optional_values", SchemaBuilder.map(Schema.STRING_SCHEMA, Schema.OPTIONAL_FLOAT32_SCHEMA).build(),
            map("x", 1.5f, "y", null));
        add("map_empty", SchemaBuilder.map(Schema.STRING_SCHEMA, Schema.STRING_SCHEMA).build(), map());

        Schema line = SchemaBuilder.struct().name("com.example.Line")
            .field("sku", Schema.STRING_SCHEMA)
            .field("qty", Schema.INT32_SCHEMA)
            .field("price", Decimal.schema(2))
            .build();
        Schema customer = SchemaBuilder.struct().name("com.example.Customer").optional()
            .field("name", Schema.STRING_SCHEMA)
            .field("email", Schema.OPTIONAL_STRING_SCHEMA)
            .build();
        Schema order = SchemaBuilder.struct().name("com.example.Order").version(3).doc("An order.")
            .parameters(map("owner", "sales"))
            .field("id", Schema.INT64_SCHEMA)
            .field("tags", SchemaBuilder.array(Schema.STRING_SCHEMA).build())
            .field("attrs", SchemaBuilder.map(Schema.STRING_SCHEMA, Schema.STRING_SCHEMA).build())
            .field("counts", SchemaBuilder.map(Schema.INT32_SCHEMA, Schema.INT64_SCHEMA).build())
            .field("lines", SchemaBuilder.array(line).build())
            .field("customer", customer)
            .field("amount", Schema.FLOAT64_SCHEMA)
            .field("ratio", Schema.OPTIONAL_FLOAT32_SCHEMA)
            .field("placed", Timestamp.SCHEMA)
            .field("due", Date.builder().optional().build())
            .field("raw", Schema.OPTIONAL_BYTES_SCHEMA)
            .field("paid", Schema.BOOLEAN_SCHEMA)
            .build();
        Struct orderValue = new Struct(order)
            .put("id", 9_000_000_001L)
            .put("tags", list("new", "priority"))
            .put("attrs", map("channel", "web", "note", "leave at door"))
            .put("counts", map(7, 70L, 8, 80L))
            .put("lines", list(
                new Struct(line).put("sku", "A-1").put("qty", 2).put("price", new BigDecimal("9.99")),
                new Struct(line).put("sku", "B-2").put("qty", 1).put("price", new BigDecimal("-0.50"))))
            .put("customer", new Struct(customer).put("name", "Ada").put("email", null))
            .put("amount", 19.48)
            .put("ratio", 0.25f)
            .put("placed", millis(1_714_979_289_123L))
            .put("due", millis(19_783L * 86_400_000L))
            .put("raw", new byte[] {1, 2, 3})
            .put("paid", true);
        add("struct_nested", order, orderValue, DECIMAL);
        add("struct_nested_customer_null", order, new Struct(order)
            .put("id", 1L).put("tags", list()).put("attrs", map()).put("counts", map())
            .put("lines", list()).put("customer", null).put("amount", 0.0)
            .put("placed", millis(0L)).put("paid", false), BOTH);
        add("array_of_structs", SchemaBuilder.array(line).build(), list(
            new Struct(line).put("sku", "X").put("qty", 0).put("price", new BigDecimal("0.01")),
            new Struct(line).put("sku", "Y").put("qty", -1).put("price", new BigDecimal("100.00"))), DECIMAL);
        add("struct_empty", SchemaBuilder.struct().build(), new Struct(SchemaBuilder.struct().build()));

        // -- schemaless (schema null) ----------------------------------------------------------
        add("schemaless_map", null, map("a", 1L, "b", "x", "c", list(1L, 2.5, true, null), "d", map("e", null)));
        add("schemaless_list", null, list(1L, "two", 3.0, null, false, 1.0e-7));
        add("schemaless_int", null, 42L);
        add("schemaless_negative_int", null, -9_000_000_000L);
        add("schemaless_double", null, 3.14);
        add("schemaless_double_large", null, 1.0e20);
        add("schemaless_string", null, "plain \"text\"");
        add("schemaless_bytes", null, new byte[] {1, 2, (byte) 0xff});
        add("schemaless_boolean", null, true);
        add("schemaless_int_keys", null, map(1L, "a", 2L, map("nested", list())));
        add("schemaless_nan", null, Double.NaN);
    }

    public static void main(String[] args) throws Exception {
        defineCases();
        ObjectMapper mapper = new ObjectMapper();
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        for (Case c : CASES) {
            for (String configName : c.configs()) {
                Map<String, String> config = CONFIGS.get(configName);
                JsonConverter converter = new JsonConverter();
                converter.configure(config, false);
                ObjectNode line = mapper.createObjectNode();
                line.put("case", c.name());
                ObjectNode configNode = line.putObject("config");
                config.forEach(configNode::put);
                try {
                    byte[] bytes = converter.fromConnectData("vectors", c.schema(), c.value());
                    if (bytes == null) {
                        line.putNull("bytes_b64");
                    } else {
                        line.put("bytes_b64", Base64.getEncoder().encodeToString(bytes));
                    }
                } catch (DataException e) {
                    line.putNull("bytes_b64");
                    line.put("error", e.getMessage());
                }
                out.println(mapper.writeValueAsString(line));
            }
        }
    }
}
