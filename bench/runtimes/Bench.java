// OpenJDK ForkJoin + ParallelGC: an allocation-heavy RecursiveTask tree on a ForkJoinPool of the
// JVM's default parallelism (availableProcessors), under -XX:+UseParallelGC (GC threads sized
// from the CPUs too). Single-file source launch (JDK 11+), see java_forkjoin.sh:
//   java -XX:+UseParallelGC -Xms256m -Xmx256m Bench.java
// Timed as the Python workloads (_timed.py): WARMUP s (JIT) uncounted, then DURATION s; prints
// pool threads, process threads, throughput (ops/s) and a checksum equal in every run and mode.
import java.io.File;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.concurrent.ForkJoinPool;
import java.util.concurrent.RecursiveTask;

public class Bench {
    static final int TASKS = Integer.parseInt(System.getenv().getOrDefault("TASKS", "1024"));
    static final int OBJECTS = Integer.parseInt(System.getenv().getOrDefault("OBJECTS", "4000"));

    // One leaf: thousands of short-lived arrays and boxed map entries; an order-free result.
    static long leaf(int seed) {
        long h = (seed + 1) * 0x9E3779B97F4A7C15L;
        ArrayList<long[]> list = new ArrayList<>();
        for (int i = 0; i < OBJECTS; i++) {
            h ^= h << 13;
            h ^= h >>> 7;
            h ^= h << 17;
            long[] a = new long[4 + (int) (h & 15)];
            a[0] = h;
            list.add(a);
        }
        HashMap<Long, Integer> m = new HashMap<>();
        for (long[] a : list) m.merge(a[0] & 1023, a.length, Integer::sum);
        long s = 0;
        for (var e : m.entrySet()) s += e.getKey() * e.getValue();
        return s;
    }

    static final class Sum extends RecursiveTask<Long> {
        final int lo, hi;
        Sum(int lo, int hi) { this.lo = lo; this.hi = hi; }
        @Override protected Long compute() {
            if (hi - lo <= 2) {
                long s = 0;
                for (int i = lo; i < hi; i++) s += leaf(i);
                return s;
            }
            int mid = (lo + hi) >>> 1;
            Sum left = new Sum(lo, mid);
            left.fork();
            long right = new Sum(mid, hi).compute();
            return right + left.join();
        }
    }

    static double env(String name, double dflt) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? dflt : Double.parseDouble(v);
    }

    public static void main(String[] args) {
        ForkJoinPool pool = new ForkJoinPool();
        long check = 0;
        long warmEnd = System.nanoTime() + (long) (env("WARMUP", 0.5) * 1e9);
        for (int n = 0; n < 2 || System.nanoTime() < warmEnd; n++) check = pool.invoke(new Sum(0, TASKS));
        long start = System.nanoTime();
        long stop = start + (long) (env("DURATION", 2) * 1e9);
        long ops = 0, now;
        while (true) {
            long c = pool.invoke(new Sum(0, TASKS));
            if (c != check) throw new IllegalStateException("checksum changed: " + c + " != " + check);
            ops++;
            now = System.nanoTime();
            if (now >= stop) break;
        }
        String[] tasks = new File("/proc/self/task").list();
        System.out.println("pool threads: " + pool.getParallelism());
        System.out.println("process threads: " + (tasks == null ? 0 : tasks.length));
        System.out.printf("throughput: %.3f ops/s%n", ops / ((now - start) / 1e9));
        System.out.println("checksum: " + Math.floorMod(check, 1_000_000_007L));
        pool.shutdown();
    }
}
