// Kafka Connect's own JsonConverter (schemas.enable=true, Debezium's default) reading records
// of ours: java ConnectJsonRead FILE... prints, per file, the record as Connect sees it, as a
// JSON line (structs as objects, Decimal as its plain string, bytes as base64, the Connect
// schema's name beside each struct as "@schema").  Run by tests/unit/contract/test_connect_json_java.py.
import java.math.BigDecimal;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.json.JsonConverter;

public class ConnectJsonRead {
    static Object tree(Object v) {
        if (v instanceof Struct) {
            Struct s = (Struct) v;
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("@schema", s.schema().name());
            for (Field f : s.schema().fields()) {
                out.put(f.name(), tree(s.get(f)));
            }
            return out;
        }
        if (v instanceof BigDecimal) return ((BigDecimal) v).toPlainString();
        if (v instanceof byte[]) return Base64.getEncoder().encodeToString((byte[]) v);
        if (v instanceof List) {
            List<Object> out = new ArrayList<>();
            for (Object x : (List<?>) v) out.add(tree(x));
            return out;
        }
        return v;
    }

    public static void main(String[] args) throws Exception {
        JsonConverter converter = new JsonConverter();
        converter.configure(Map.of("schemas.enable", "true"), false);
        ObjectMapper mapper = new ObjectMapper();
        for (String file : args) {
            SchemaAndValue sv = converter.toConnectData("topic", Files.readAllBytes(Path.of(file)));
            System.out.println(mapper.writeValueAsString(tree(sv.value())));
        }
    }
}
