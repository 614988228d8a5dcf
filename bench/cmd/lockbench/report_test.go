package main

import (
	"slices"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {1, 10}} {
		if got := percentile(ds, c.p); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
	if ds[0] != 5 {
		t.Error("percentile sorted its argument in place")
	}
}

func TestThousands(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999.4: "999", 1000: "1,000", 36120.6: "36,121", 1234567: "1,234,567"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestParseOnly(t *testing.T) {
	for _, c := range []struct {
		only   string
		runs   []string
		skips  []string
		stores []storeKind
	}{
		{"", []string{"P1", "P4", "P5-FEATURES", "P5-SHARD", "P1-SQL", "P4-SQL", "P5-SQL", "CURVES"}, nil, sqlKinds},
		{"P1,P2", []string{"P1", "P2"}, []string{"P3", "P1-SQL"}, sqlKinds},
		{"P1-1,extend", []string{"P1-1", "EXTEND"}, []string{"P1", "P2", "P3"}, sqlKinds},
		{"sql", sqlIDs, redisIDs, sqlKinds},
		{"redis", append([]string{"P5", "P5-FEATURES", "P5-SHARD"}, redisIDs...), sqlIDs, sqlKinds},
		{"p5", []string{"P5"}, []string{"P1", "P4", "P1-SQL", "P5-FEATURES", "P5-SHARD"}, sqlKinds},
		{"P5-features", []string{"P5-FEATURES"}, []string{"P5", "P5-SHARD", "P1"}, sqlKinds},
		{"p5-shard,P5", []string{"P5-SHARD", "P5"}, []string{"P5-FEATURES", "P4"}, sqlKinds},
		{"postgres", sqlIDs, redisIDs, []storeKind{kindPG}},
		{"p4-sql, MariaDB,sqlite", []string{"P4-SQL"}, []string{"P1-SQL", "P1"}, []storeKind{kindMySQL, kindSQLite}},
		{"P5-sql", []string{"P5-SQL"}, []string{"P5", "P1-SQL", "P4-SQL"}, sqlKinds},
		{"p5-sql,sqlite", []string{"P5-SQL"}, []string{"P5", "P1-SQL"}, []storeKind{kindSQLite}},
		{"sqlite", []string{"P1-SQL", "P5-SQL"}, []string{"P5"}, []storeKind{kindSQLite}},
		{"kinds", kindsIDs, []string{"P1", "P4", "P1-ETCD"}, sqlKinds},
		{"sem,failover-postgres", []string{idSemRedis, idSemEtcd, idFailoverPostgres}, []string{idFailoverRedis, idPermits, "P1-SQL"}, sqlKinds},
		{"P4-permits", []string{idPermits}, []string{"P4", idSemRedis}, sqlKinds},
		{"curves", []string{"CURVES"}, []string{"P1", "P4", "P1-SQL"}, sqlKinds},
		{"p1,Curves", []string{"P1", "CURVES"}, []string{"P4"}, sqlKinds},
	} {
		var cfg config
		if err := parseOnly(c.only, &cfg); err != nil {
			t.Fatalf("parseOnly(%q): %v", c.only, err)
		}
		for _, id := range c.runs {
			if !cfg.runs(id) {
				t.Errorf("parseOnly(%q): %s does not run", c.only, id)
			}
		}
		for _, id := range c.skips {
			if cfg.runs(id) {
				t.Errorf("parseOnly(%q): %s runs", c.only, id)
			}
		}
		for _, k := range sqlKinds {
			want := false
			for _, s := range c.stores {
				want = want || s == k
			}
			if cfg.runsStore(k) != want {
				t.Errorf("parseOnly(%q): runsStore(%s) = %v, want %v", c.only, k, !want, want)
			}
		}
	}
	var cfg config
	if err := parseOnly("P9", &cfg); err == nil {
		t.Error("parseOnly(P9) accepted an unknown measurement")
	}
}

func TestSQLIDsOn(t *testing.T) {
	for _, k := range sqlKinds {
		got := slices.Contains(sqlIDsOn(k), "P5-SQL")
		if want := slices.Contains(p5SQLKinds, k); got != want {
			t.Errorf("sqlIDsOn(%s) has P5-SQL: %v, want %v", k, got, want)
		}
		if !slices.Contains(sqlIDsOn(k), "P1-SQL") {
			t.Errorf("sqlIDsOn(%s) lacks P1-SQL", k)
		}
	}
}
