// LevelDB readrandom driver for the numa-preload application benchmarks
// (the CNA paper's LevelDB workload, db_bench readrandom): N threads call Get
// on uniformly random keys of a pre-filled database for a fixed time.
//
// usage: leveldb_readrandom DBDIR KEYS THREADS SECONDS
// Fills DBDIR with KEYS keys (16-byte keys, 100-byte values) if it does not
// hold them yet, then prints "ops_per_sec=<n> ops=<n>". Exits 1 if any Get
// fails or returns a wrong value.
#include <leveldb/cache.h>
#include <leveldb/db.h>
#include <leveldb/write_batch.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

static std::string key_of(long i) {
    char buf[32];
    snprintf(buf, sizeof buf, "%016ld", i);
    return std::string(buf, 16);
}

static std::string value_of(long i) {
    std::string v(100, 'v');
    std::string k = key_of(i);
    memcpy(&v[0], k.data(), 16);
    return v;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s DBDIR KEYS THREADS SECONDS\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    const long keys = atol(argv[2]);
    const int threads = atoi(argv[3]);
    const double seconds = atof(argv[4]);

    leveldb::Options opt;
    opt.create_if_missing = true;
    opt.block_cache = leveldb::NewLRUCache(64 << 20);
    leveldb::DB *db = nullptr;
    leveldb::Status s = leveldb::DB::Open(opt, dir, &db);
    if (!s.ok()) {
        fprintf(stderr, "open %s: %s\n", dir.c_str(), s.ToString().c_str());
        return 1;
    }
    std::string probe;
    if (!db->Get(leveldb::ReadOptions(), key_of(keys - 1), &probe).ok()) {
        for (long i = 0; i < keys;) {
            leveldb::WriteBatch b;
            for (int j = 0; j < 1000 && i < keys; j++, i++) b.Put(key_of(i), value_of(i));
            s = db->Write(leveldb::WriteOptions(), &b);
            if (!s.ok()) {
                fprintf(stderr, "fill: %s\n", s.ToString().c_str());
                return 1;
            }
        }
        db->CompactRange(nullptr, nullptr);
    }

    std::atomic<bool> go{false}, stop{false}, bad{false};
    std::atomic<long> total{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; t++) {
        ts.emplace_back([&, t] {
            std::mt19937_64 rng(0x9e3779b97f4a7c15ULL * (t + 1));
            std::string v;
            long n = 0;
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            while (!stop.load(std::memory_order_relaxed)) {
                long k = (long)(rng() % (unsigned long)keys);
                if (!db->Get(leveldb::ReadOptions(), key_of(k), &v).ok() || v != value_of(k)) {
                    bad = true;
                    break;
                }
                n++;
            }
            total += n;
        });
    }
    auto t0 = std::chrono::steady_clock::now();
    go.store(true, std::memory_order_release);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (auto &t : ts) t.join();
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    delete db;
    delete opt.block_cache;
    if (bad) {
        fprintf(stderr, "a Get failed or returned a wrong value\n");
        return 1;
    }
    printf("ops_per_sec=%.0f ops=%ld\n", total.load() / el, total.load());
    return 0;
}
