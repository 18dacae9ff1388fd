package embedlog;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Base64;

/**
 * A test and timing entry point: one JVM reads many specs from stdin, one per line,
 * {@code dir TAB topic TAB partition TAB start TAB end TAB mode [TAB dense]} (dense: the
 * topic's active segment has no gap, {@link PartitionScan#PartitionScan(Path, long, long,
 * boolean)}), and prints for each, as
 * JSON lines: with mode {@code records} one line per record
 * ({@code {"offset", "timestamp", "timestampType", "key", "value", "headers"}}, key/value
 * base64 or null, headers a list of [key, base64 value or null]) then {@code {"end": n}};
 * with {@code count} {@code {"count": n}}; with {@code start} {@code {"logStart": n}}; with
 * {@code time} (no output per record) {@code {"records": n, "nanos": t}}; a mode prefixed
 * {@code committed-} reads as {@code read_committed} ({@link TxnFilter}). Any failure of a
 * spec prints {@code {"error": "<exception class>", "message": "..."}} instead of its end
 * line, and the next spec follows.
 */
public final class Dump {
    private static final Base64.Encoder B64 = Base64.getEncoder();

    private Dump() {
    }

    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Writer out = new BufferedWriter(
            new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16);
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            try {
                run(line.split("\t", -1), out);
            } catch (IOException | RuntimeException e) {
                out.write("{\"error\": " + quote(e.getClass().getSimpleName())
                    + ", \"message\": " + quote(String.valueOf(e.getMessage())) + "}\n");
            }
            out.flush();
        }
        out.flush();
    }

    private static void run(String[] f, Writer out) throws IOException {
        if (f.length != 6 && f.length != 7) {
            throw new IllegalArgumentException("a spec has 6 or 7 tab-separated fields");
        }
        boolean dense = f.length == 7 && f[6].equals("dense");
        Path dir = PartitionScan.partitionDir(Paths.get(f[0]), f[1], Integer.parseInt(f[2]));
        long start = Long.parseLong(f[3]);
        long end = Long.parseLong(f[4]);
        String mode = f[5];
        try (PartitionScan scan = new PartitionScan(dir, start, end, dense)) {
            if (mode.startsWith("committed-")) {  // read_committed
                scan.readCommitted();
                mode = mode.substring("committed-".length());
            }
            switch (mode) {
                case "count" -> out.write("{\"count\": " + scan.countRecords() + "}\n");
                case "start" -> out.write("{\"logStart\": " + scan.logStartOffset() + "}\n");
                case "time" -> time(scan, out);
                case "records" -> records(scan, out);
                default -> throw new IllegalArgumentException("unknown mode " + mode);
            }
        }
    }

    private static void time(PartitionScan scan, Writer out) throws IOException {
        long[] n = new long[2];
        RecordSink sink = (o, ts, lat, buf, ko, kl, vo, vl, hc, ho) -> {
            n[0]++;
            n[1] += kl + vl;
        };
        long t0 = System.nanoTime();
        while (scan.nextBatch(sink)) {
            continue;
        }
        long t = System.nanoTime() - t0;
        out.write("{\"records\": " + n[0] + ", \"bytes\": " + n[1] + ", \"nanos\": " + t + "}\n");
    }

    private static void records(PartitionScan scan, Writer out) throws IOException {
        StringBuilder sb = new StringBuilder();
        long[] n = new long[1];
        RecordSink sink = (o, ts, lat, buf, ko, kl, vo, vl, hc, ho) -> {
            sb.append("{\"offset\": ").append(o).append(", \"timestamp\": ").append(ts)
                .append(", \"timestampType\": ").append(lat ? 1 : 0)
                .append(", \"key\": ").append(b64(buf, ko, kl))
                .append(", \"value\": ").append(b64(buf, vo, vl)).append(", \"headers\": [");
            if (hc > 0) {
                boolean[] first = {true};
                RecordColumns.headers(buf, ho, hc, (b, koff, klen, off, len) -> {
                    String k = new String(b, koff, klen, StandardCharsets.UTF_8);
                    sb.append(first[0] ? "" : ", ").append('[').append(quote(k)).append(", ")
                        .append(b64(b, off, len)).append(']');
                    first[0] = false;
                });
            }
            sb.append("]}\n");
            n[0]++;
        };
        while (scan.nextBatch(sink)) {
            out.write(sb.toString());
            sb.setLength(0);
        }
        out.write(sb.toString());
        out.write("{\"end\": " + n[0] + "}\n");
    }

    private static String b64(byte[] b, int off, int len) {
        if (len < 0) {
            return "null";
        }
        byte[] copy = java.util.Arrays.copyOfRange(b, off, off + len);
        return '"' + B64.encodeToString(copy) + '"';
    }

    static String quote(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20 || (c >= 0xD800 && c <= 0xDFFF)) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}
