package embedlog;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * What a read-only reader learns from a partition folder {@code <log dir>/<topic>-<partition>}
 * without reading records: its segments' base offsets (exact names {@code <20 digits>.log};
 * anything else is ignored), whether a compaction swap is in progress ({@code *.swap}
 * segment files), the log start offset (the first segment's base raised to the partition's
 * entry in the log dir's {@code log-start-offset-checkpoint}), and {@code .index} lookups.
 * Every file is opened read only, without following a symbolic link, and only when it is a
 * regular file; every size read from a file is bounded.
 */
final class PartitionFolder {
    static final Pattern LOG_NAME = Pattern.compile("[0-9]{20}\\.log");
    static final Pattern SWAP_NAME =
        Pattern.compile("[0-9]{20}\\.(log|index|timeindex|txnindex|snapshot)(\\.\\w+)?\\.swap");
    static final Pattern TOPIC = Pattern.compile("[a-zA-Z0-9._-]+");
    static final String SEGMENT_MANIFEST = "embedlog.segments";
    static final String MANIFEST_VERSION = "embedlog-segments 1";
    static final Pattern MANIFEST_LINE = Pattern.compile("([0-9]{1,19}) ([0-9]{1,19})");
    static final int MAX_TOPIC_LENGTH = 249;
    static final String LOG_START_CHECKPOINT = "log-start-offset-checkpoint";
    /** The largest checkpoint or index file read (bigger ones: no index / fall back). */
    static final long MAX_SIDE_FILE = 64L * 1024 * 1024;

    private PartitionFolder() {
    }

    /** {@code name} if it is a legal Kafka topic name (as naming.validate_topic), else throws. */
    static String validateTopic(String name) {
        if (name == null || name.isEmpty()) {
            throw new IllegalArgumentException("topic name is empty");
        }
        if (name.length() > MAX_TOPIC_LENGTH) {
            throw new IllegalArgumentException(
                "topic name is " + name.length() + " characters; the limit is 249");
        }
        if (name.equals(".") || name.equals("..")) {
            throw new IllegalArgumentException("topic name '" + name + "' is not allowed");
        }
        if (!TOPIC.matcher(name).matches()) {
            throw new IllegalArgumentException(
                "topic name '" + name + "' has characters outside [a-zA-Z0-9._-]");
        }
        return name;
    }

    /**
     * The sorted base offsets of the folder's segments (none if the folder does not exist).
     * FallbackException while a compaction swap is in progress.
     */
    static long[] segmentBases(Path dir) throws IOException {
        long[] bases = new long[16];
        int n = 0;
        if (Files.isSymbolicLink(dir)) {
            throw new FallbackException("partition folder is a symbolic link: " + dir);
        }
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir)) {
            for (Path entry : ds) {
                String name = entry.getFileName().toString();
                if (SWAP_NAME.matcher(name).matches()) {
                    throw new FallbackException("a compaction swap is in progress in " + dir
                        + " (" + name + ")");
                }
                if (LOG_NAME.matcher(name).matches()) {
                    long base = parseBase(name);
                    if (base >= 0) {
                        bases = n == bases.length ? Arrays.copyOf(bases, n * 2) : bases;
                        bases[n++] = base;
                    }
                }
            }
        } catch (NoSuchFileException e) {
            return new long[0];
        }
        long[] out = Arrays.copyOf(bases, n);
        Arrays.sort(out);
        return out;
    }

    /** The base offset of a 20-digit name, -1 when it exceeds a signed 64-bit offset. */
    static long parseBase(String name) {
        try {
            return Long.parseLong(name.substring(0, 20));
        } catch (NumberFormatException e) {
            return -1;
        }
    }

    static Path segmentPath(Path dir, long base, String suffix) {
        return dir.resolve(String.format("%020d%s", base, suffix));
    }

    /** A read-only channel on {@code path}, which must be a regular file (no link followed). */
    static FileChannel openRegular(Path path) throws IOException {
        BasicFileAttributes a =
            Files.readAttributes(path, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
        if (!a.isRegularFile()) {
            throw new FallbackException(path + " is not a regular file");
        }
        return FileChannel.open(path, StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS);
    }

    /**
     * The log dir's log start checkpoint (Kafka's text format: version 0, entry count, then
     * {@code topic partition offset} lines) as {@link #startKey} -> offset (a later line for the
     * same partition wins); empty when there is no file. FallbackException when the file does
     * not parse.
     */
    static Map<String, Long> persistedStarts(Path logDir) throws IOException {
        Path path = logDir.resolve(LOG_START_CHECKPOINT);
        byte[] bytes = sideFile(path);
        if (bytes == null) {
            return Map.of();
        }
        String[] lines = new String(bytes, StandardCharsets.UTF_8).split("\n", -1);
        try {
            if (lines.length < 2 || !lines[0].trim().equals("0")) {
                throw new FallbackException("unreadable checkpoint " + path);
            }
            int count = Integer.parseInt(lines[1].trim());
            if (count < 0 || count > lines.length - 2) {
                throw new FallbackException("unreadable checkpoint " + path);
            }
            Map<String, Long> found = new HashMap<>();
            for (int i = 2; i < 2 + count; i++) {
                String[] f = lines[i].trim().split(" ");
                if (f.length != 3) {
                    throw new FallbackException("unreadable checkpoint " + path);
                }
                found.put(startKey(f[0], Integer.parseInt(f[1])), Long.parseLong(f[2]));
            }
            return found;
        } catch (NumberFormatException e) {
            throw new FallbackException("unreadable checkpoint " + path, e);
        }
    }

    /**
     * The folder's sealed-segment manifest ({@code embedlog.segments}: the line
     * {@code embedlog-segments 1}, then {@code <base offset> <size in bytes>} per sealed segment,
     * as embedlog.manifest writes it) as base offset -> size; empty when there is none (a Kafka
     * folder). FallbackException for any other bytes: the Python reader gives its verdict.
     */
    static Map<Long, Long> sealedSizes(Path dir) throws IOException {
        Path path = dir.resolve(SEGMENT_MANIFEST);
        byte[] bytes = sideFile(path);
        if (bytes == null) {
            return Map.of();
        }
        String[] lines = new String(bytes, StandardCharsets.ISO_8859_1).split("\n", -1);
        if (lines.length < 2 || !lines[0].equals(MANIFEST_VERSION)
                || !lines[lines.length - 1].isEmpty()) {
            throw new FallbackException("unreadable segment manifest " + path);
        }
        Map<Long, Long> sizes = new HashMap<>();
        try {
            for (int i = 1; i < lines.length - 1; i++) {
                Matcher m = MANIFEST_LINE.matcher(lines[i]);
                if (!m.matches()) {
                    throw new FallbackException("unreadable segment manifest " + path);
                }
                sizes.put(Long.parseLong(m.group(1)), Long.parseLong(m.group(2)));
            }
        } catch (NumberFormatException e) {
            throw new FallbackException("unreadable segment manifest " + path, e);
        }
        return sizes;
    }

    /** A small file's bytes (a regular file of at most {@link #MAX_SIDE_FILE} bytes, else
     *  FallbackException), or null when there is none. */
    private static byte[] sideFile(Path path) throws IOException {
        try (FileChannel ch = openRegular(path)) {
            if (ch.size() > MAX_SIDE_FILE) {
                throw new FallbackException(path + " is larger than " + MAX_SIDE_FILE + " bytes");
            }
            return read(ch, 0, (int) ch.size());
        } catch (NoSuchFileException e) {
            return null;
        }
    }

    /** The key of a partition in {@link #persistedStarts}. */
    static String startKey(String topic, int partition) {
        return topic + "\0" + partition;
    }

    /** {@code len} bytes at {@code pos} (fewer at the end of the file). */
    static byte[] read(FileChannel ch, long pos, int len) throws IOException {
        ByteBuffer bb = ByteBuffer.allocate(len);
        while (bb.hasRemaining()) {
            if (ch.read(bb, pos + bb.position()) < 0) {
                break;
            }
        }
        return bb.position() == len ? bb.array() : Arrays.copyOf(bb.array(), bb.position());
    }

    /**
     * Floor lookup in the segment's {@code .index} (8-byte entries, big endian: int32 offset
     * relative to {@code base}, int32 file position): {@code {offset, position}} of the last
     * entry whose offset is at most {@code target}, among the leading entries whose offsets
     * and positions increase and whose positions lie inside the log ({@code logSize}); null
     * when there is no usable entry (no index, not a regular file, too large, none at or
     * below target): the caller walks from position 0.
     */
    static long[] indexFloor(Path dir, long base, long target, long logSize) {
        Path path = segmentPath(dir, base, ".index");
        byte[] b;
        try (FileChannel ch = openRegular(path)) {
            long size = Math.min(ch.size(), MAX_SIDE_FILE) & ~7L;
            b = read(ch, 0, (int) size);
        } catch (IOException e) {
            return null;
        }
        long bestOffset = -1;
        long bestPos = -1;
        long lastRel = -1;
        long lastPos = -1;
        for (int p = 0; p + 8 <= b.length; p += 8) {
            long rel = BatchFormat.i32(b, p);
            long pos = BatchFormat.i32(b, p + 4);
            if (rel <= lastRel || pos < lastPos || pos < 0 || pos >= logSize
                    || (lastRel >= 0 && pos == lastPos)) {
                break; // the end of the usable entries (a preallocated index is zero-filled)
            }
            if (base + rel > target) {
                break;
            }
            bestOffset = base + rel;
            bestPos = pos;
            lastRel = rel;
            lastPos = pos;
        }
        return bestPos < 0 ? null : new long[] {bestOffset, bestPos};
    }
}
