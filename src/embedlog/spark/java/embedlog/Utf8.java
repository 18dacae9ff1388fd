package embedlog;

/**
 * Strict UTF-8 validation, as Python's {@code bytes.decode("utf-8")}: shortest forms only, no
 * surrogates (U+D800..U+DFFF), nothing above U+10FFFF (Unicode's well-formed byte sequences).
 */
final class Utf8 {
    private Utf8() {
    }

    static boolean valid(byte[] b, int off, int len) {
        int p = off;
        int end = off + len;
        while (p < end) {
            int c = b[p] & 0xFF;
            if (c < 0x80) {
                p++;
                continue;
            }
            int need;
            int lo = 0x80;
            int hi = 0xBF;
            if (c >= 0xC2 && c <= 0xDF) {
                need = 1;
            } else if (c >= 0xE0 && c <= 0xEF) {
                need = 2;
                lo = c == 0xE0 ? 0xA0 : 0x80;
                hi = c == 0xED ? 0x9F : 0xBF;
            } else if (c >= 0xF0 && c <= 0xF4) {
                need = 3;
                lo = c == 0xF0 ? 0x90 : 0x80;
                hi = c == 0xF4 ? 0x8F : 0xBF;
            } else {
                return false;
            }
            if (end - p <= need) {
                return false;
            }
            int c1 = b[p + 1] & 0xFF;
            if (c1 < lo || c1 > hi) {
                return false;
            }
            for (int k = 2; k <= need; k++) {
                int ck = b[p + k] & 0xFF;
                if (ck < 0x80 || ck > 0xBF) {
                    return false;
                }
            }
            p += need + 1;
        }
        return true;
    }
}
