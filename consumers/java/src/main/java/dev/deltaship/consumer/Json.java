package dev.deltaship.consumer;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.DoubleNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import java.util.Map;

/**
 * JSON text to values, with the bounds every consumer of the repository shares
 * (vectors/README.md, "Bounds" and "JSON"): read left to right, the first problem decides:
 * nesting deeper than {@link #MAX_DEPTH} is {@code too_deep}, text that ends early
 * {@code truncated}, anything else that is not RFC 8259 JSON, or a number beyond a double,
 * {@code not_json}. An integer within 64 bits is exact, any other number a double.
 */
public final class Json {
    /** A larger value (or structured event) is skipped as {@code too_large}. */
    public static final int MAX_RECORD_BYTES = 16 << 20;
    /** JSON nested deeper is {@code too_deep}; a patch may not nest an object deeper. */
    public static final int MAX_DEPTH = 127;
    /** The most JSON values a patched object may hold. */
    public static final int MAX_VALUES = 2_000_000;

    /** Jackson without its own limits (the scanner has checked the text). */
    static final ObjectMapper MAPPER = new ObjectMapper(JsonFactory.builder()
            .streamReadConstraints(StreamReadConstraints.builder()
                    .maxStringLength(Integer.MAX_VALUE)
                    .maxNumberLength(Integer.MAX_VALUE)
                    .maxNestingDepth(Integer.MAX_VALUE)
                    .build())
            .build());

    private static final BigInteger MIN = BigInteger.ONE.shiftLeft(63).negate();
    private static final BigInteger MAX = BigInteger.ONE.shiftLeft(64).subtract(BigInteger.ONE);

    private final byte[] b;
    private int i;

    private Json(byte[] b) {
        this.b = b;
    }

    /** The JSON value of {@code b}, or why it is not JSON. */
    static JsonNode parse(byte[] b) throws BadRecordException {
        try {
            StandardCharsets.UTF_8.newDecoder().decode(ByteBuffer.wrap(b));
        } catch (CharacterCodingException e) {
            throw new BadRecordException("not_json", "the value is not UTF-8");
        }
        new Json(b).document();
        try {
            return normalized(MAPPER.readTree(b));
        } catch (IOException e) {
            throw new BadRecordException("not_json", e.getMessage());
        }
    }

    /** Integers beyond 64 bits become doubles. */
    private static JsonNode normalized(JsonNode v) {
        if (v.isBigInteger() && (v.bigIntegerValue().compareTo(MIN) < 0 || v.bigIntegerValue().compareTo(MAX) > 0)) {
            return DoubleNode.valueOf(v.bigIntegerValue().doubleValue());
        }
        if (v.isObject()) {
            for (Iterator<Map.Entry<String, JsonNode>> it = v.fields(); it.hasNext(); ) {
                Map.Entry<String, JsonNode> e = it.next();
                e.setValue(normalized(e.getValue()));
            }
        } else if (v.isArray()) {
            ArrayNode a = (ArrayNode) v;
            for (int n = 0; n < a.size(); n++) {
                a.set(n, normalized(a.get(n)));
            }
        }
        return v;
    }

    private BadRecordException fail(String reason, String what) {
        return new BadRecordException(reason, what + " at byte " + i);
    }

    private BadRecordException end() {
        return new BadRecordException("truncated", "the text ends early");
    }

    private void ws() {
        while (i < b.length && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r')) {
            i++;
        }
    }

    private static byte closer(byte open) {
        return open == '[' ? (byte) ']' : (byte) '}';
    }

    private void document() throws BadRecordException {
        byte[] stack = new byte[MAX_DEPTH];
        int depth = 0;
        ws();
        boolean value = true;
        while (true) {
            if (value) {
                if (i == b.length) {
                    throw end();
                }
                byte c = b[i];
                if (c == '[' || c == '{') {
                    if (depth >= MAX_DEPTH) {
                        throw fail("too_deep", "nested deeper than " + MAX_DEPTH + " levels");
                    }
                    stack[depth++] = c;
                    i++;
                    ws();
                    if (i < b.length && b[i] == closer(c)) {
                        depth--;
                        i++;
                        value = false;
                    } else if (c == '{') {
                        key();
                    }
                    continue;
                }
                scalar();
                value = false;
                continue;
            }
            ws();
            if (depth == 0) {
                if (i != b.length) {
                    throw fail("not_json", "text after the value");
                }
                return;
            }
            if (i == b.length) {
                throw end();
            }
            byte c = b[i];
            if (c == ',') {
                i++;
                ws();
                if (stack[depth - 1] == '{') {
                    key();
                }
                value = true;
            } else if (c == closer(stack[depth - 1])) {
                depth--;
                i++;
            } else {
                throw fail("not_json", "unexpected character");
            }
        }
    }

    private void key() throws BadRecordException {
        if (i == b.length) {
            throw end();
        }
        if (b[i] != '"') {
            throw fail("not_json", "a member without a string name");
        }
        string();
        ws();
        if (i == b.length) {
            throw end();
        }
        if (b[i] != ':') {
            throw fail("not_json", "a member without a colon");
        }
        i++;
        ws();
    }

    private void scalar() throws BadRecordException {
        byte c = b[i];
        if (c == '"') {
            string();
            return;
        }
        if (c == '-' || c >= '0' && c <= '9') {
            number();
            return;
        }
        for (String lit : new String[] {"true", "false", "null"}) {
            int n = 0;
            while (n < lit.length() && i + n < b.length && b[i + n] == lit.charAt(n)) {
                n++;
            }
            if (n == lit.length()) {
                i += n;
                return;
            }
            if (i + n == b.length) {
                throw end();
            }
        }
        throw fail("not_json", "unexpected character");
    }

    private static boolean hex(byte c) {
        return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F';
    }

    /** The code unit of the \\u escape whose digits start at {@code at}, or -1. */
    private int escape(int at) {
        if (at + 4 > b.length) {
            return -1;
        }
        for (int n = at; n < at + 4; n++) {
            if (!hex(b[n])) {
                return -1;
            }
        }
        return Integer.parseInt(new String(b, at, 4, StandardCharsets.US_ASCII), 16);
    }

    private void string() throws BadRecordException {
        i++;
        while (true) {
            if (i >= b.length) {
                throw end();
            }
            byte c = b[i];
            if (c == '"') {
                i++;
                return;
            }
            if (c >= 0 && c < 0x20) {
                throw fail("not_json", "a control character in a string");
            }
            if (c != '\\') {
                i++;
                continue;
            }
            if (i + 1 >= b.length) {
                throw end();
            }
            switch (b[i + 1]) {
                case '"', '\\', '/', 'b', 'f', 'n', 'r', 't' -> {
                    i += 2;
                    continue;
                }
                case 'u' -> { }
                default -> throw fail("not_json", "a bad escape");
            }
            int r = escape(i + 2);
            if (r < 0) {
                boolean cut = true;
                for (int n = i + 2; n < b.length; n++) {
                    cut &= hex(b[n]);
                }
                if (cut && b.length - (i + 2) < 4) {
                    throw end();
                }
                throw fail("not_json", "a bad \\u escape");
            }
            if (r >= 0xDC00 && r <= 0xDFFF) {
                throw fail("not_json", "a lone surrogate escape");
            }
            if (r >= 0xD800 && r <= 0xDBFF) {
                int next = i + 6;
                int low = next + 1 < b.length && b[next] == '\\' && b[next + 1] == 'u' ? escape(next + 2) : -1;
                if (low < 0xDC00 || low > 0xDFFF) {
                    throw fail("not_json", "a lone surrogate escape");
                }
                i = next + 6;
                continue;
            }
            i += 6;
        }
    }

    private int digits() {
        int n = 0;
        while (i < b.length && b[i] >= '0' && b[i] <= '9') {
            i++;
            n++;
        }
        return n;
    }

    private void number() throws BadRecordException {
        int start = i;
        if (b[i] == '-') {
            i++;
        }
        if (i == b.length) {
            throw end();
        }
        if (b[i] == '0') {
            i++;
        } else if (b[i] >= '1' && b[i] <= '9') {
            digits();
        } else {
            throw fail("not_json", "a bad number");
        }
        if (i < b.length && b[i] == '.') {
            i++;
            if (digits() == 0) {
                throw i == b.length ? end() : fail("not_json", "a bad number");
            }
        }
        if (i < b.length && (b[i] == 'e' || b[i] == 'E')) {
            i++;
            if (i < b.length && (b[i] == '+' || b[i] == '-')) {
                i++;
            }
            if (digits() == 0) {
                throw i == b.length ? end() : fail("not_json", "a bad number");
            }
        }
        if (Double.isInfinite(Double.parseDouble(new String(b, start, i - start, StandardCharsets.US_ASCII)))) {
            i = start;
            throw fail("not_json", "a number beyond a 64-bit float");
        }
    }

    /** How many JSON values {@code v} holds (itself included) and its depth: {count, depth}. */
    static long[] measure(JsonNode v) {
        if (!v.isContainerNode()) {
            return new long[] {1, 0};
        }
        long count = 1, depth = 0;
        for (JsonNode x : v) {
            long[] m = measure(x);
            count += m[0];
            depth = Math.max(depth, m[1]);
        }
        return new long[] {count, depth + 1};
    }

    /** JSON equality: an integer never equals a float; member order does not count. */
    static boolean same(JsonNode a, JsonNode b) {
        if (a.isIntegralNumber() || b.isIntegralNumber()) {
            return a.isIntegralNumber() && b.isIntegralNumber() && a.bigIntegerValue().equals(b.bigIntegerValue());
        }
        if (a.isFloatingPointNumber() || b.isFloatingPointNumber()) {
            return a.isFloatingPointNumber() && b.isFloatingPointNumber() && a.doubleValue() == b.doubleValue();
        }
        if (a.isObject() && b.isObject()) {
            if (a.size() != b.size()) {
                return false;
            }
            for (Iterator<Map.Entry<String, JsonNode>> it = a.fields(); it.hasNext(); ) {
                Map.Entry<String, JsonNode> e = it.next();
                if (!b.has(e.getKey()) || !same(e.getValue(), b.get(e.getKey()))) {
                    return false;
                }
            }
            return true;
        }
        if (a.isArray() && b.isArray()) {
            if (a.size() != b.size()) {
                return false;
            }
            for (int n = 0; n < a.size(); n++) {
                if (!same(a.get(n), b.get(n))) {
                    return false;
                }
            }
            return true;
        }
        return a.equals(b);
    }

    static ObjectNode object() {
        return MAPPER.createObjectNode();
    }
}
