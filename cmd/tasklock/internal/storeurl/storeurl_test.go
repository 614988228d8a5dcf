package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/mysqlstore"
	"github.com/tasklock/tasklock/pgstore"
	"github.com/tasklock/tasklock/redlock"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// secret is the password in test URLs; no error message may contain it.
const secret = "s3cr3t"

func TestParseRedis(t *testing.T) {
	tests := []struct {
		url  string
		want redisConfig // u is not compared
	}{
		{"redis://localhost:6379", redisConfig{addrs: []string{"localhost:6379"}}},
		{"redis://localhost", redisConfig{addrs: []string{"localhost:6379"}}},
		{"REDIS://h:1/", redisConfig{addrs: []string{"h:1"}}},
		{"redis://h:1/3", redisConfig{addrs: []string{"h:1"}, db: 3}},
		{"redis://u:" + secret + "@h:1/2", redisConfig{addrs: []string{"h:1"}, username: "u", password: secret, db: 2}},
		{"redis://:" + secret + "@h:1", redisConfig{addrs: []string{"h:1"}, password: secret}},
		{"redis://u:p%40ss%3Aw@h:1", redisConfig{addrs: []string{"h:1"}, username: "u", password: "p@ss:w"}},
		{"redis://u:p@s/s?w@h:1", redisConfig{addrs: []string{"h:1"}, username: "u", password: "p@s/s?w"}},
		{"redis://[::1]:7000", redisConfig{addrs: []string{"[::1]:7000"}}},
		{"redis://[::1]", redisConfig{addrs: []string{"[::1]:6379"}}},
		{"rediss://cache.example.com:6380/1", redisConfig{addrs: []string{"cache.example.com:6380"}, tls: true, db: 1}},
		{
			"redis://h:1?prefix=app:&wait_replicas=1&wait_timeout=50ms&dial_timeout=2s&read_timeout=4s&write_timeout=5s&pool_size=7",
			redisConfig{
				addrs: []string{"h:1"}, dialTimeout: 2 * time.Second, readTimeout: 4 * time.Second,
				writeTimeout: 5 * time.Second, poolSize: 7,
			},
		},
		{
			"redis+sentinel://u:" + secret + "@s1:1,s2:2,[::1]:3/mymaster?db=4&sentinel_password=sp",
			redisConfig{
				mode: redisSentinel, addrs: []string{"s1:1", "s2:2", "[::1]:3"}, master: "mymaster",
				username: "u", password: secret, db: 4, sentinelPassword: "sp",
			},
		},
		{"redis+sentinel://s1,s2/m", redisConfig{mode: redisSentinel, addrs: []string{"s1:26379", "s2:26379"}, master: "m"}},
		{"redis+cluster://n1:7000,n2:7001", redisConfig{mode: redisCluster, addrs: []string{"n1:7000", "n2:7001"}}},
		{"redis+cluster://:" + secret + "@n1:7000/", redisConfig{mode: redisCluster, addrs: []string{"n1:7000"}, password: secret}},
	}
	for _, tt := range tests {
		t.Run(redact.URL(tt.url), func(t *testing.T) {
			o, _, err := parse(tt.url)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			got, ok := o.(*redisConfig)
			if !ok {
				t.Fatalf("parse returned %T, want *redisConfig", o)
			}
			got.u = nil
			got.store = tt.want.store
			if !equalRedis(*got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", *got, tt.want)
			}
		})
	}

	o, _, err := parse("redis://h:1?prefix=app:&wait_replicas=1&wait_timeout=50ms")
	if err != nil {
		t.Fatal(err)
	}
	if s := o.(*redisConfig).store; s.Prefix != "app:" || s.WaitReplicas != 1 || s.WaitTimeout != 50*time.Millisecond {
		t.Errorf("store options %+v", s)
	}
}

func equalRedis(a, b redisConfig) bool {
	if strings.Join(a.addrs, ",") != strings.Join(b.addrs, ",") {
		return false
	}
	a.addrs, b.addrs = nil, nil
	return a.mode == b.mode && a.tls == b.tls && a.username == b.username && a.password == b.password &&
		a.db == b.db && a.master == b.master && a.sentinelUsername == b.sentinelUsername &&
		a.sentinelPassword == b.sentinelPassword && a.dialTimeout == b.dialTimeout &&
		a.readTimeout == b.readTimeout && a.writeTimeout == b.writeTimeout && a.poolSize == b.poolSize
}

func TestParseMem(t *testing.T) {
	o, _, err := parse("mem://")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := o.(memOpener); !ok {
		t.Fatalf("parse returned %T", o)
	}
}

func TestParsePostgres(t *testing.T) {
	tests := []struct {
		url      string
		store    pgstore.Options
		migrate  bool
		host     string
		port     uint16
		database string
		user     string
		password string
		runtime  map[string]string // some of ConnConfig.RuntimeParams
		maxConns int32             // 0: not checked
	}{
		{url: "postgres://app@db:5433/app", migrate: true, host: "db", port: 5433, database: "app", user: "app"},
		{url: "postgresql://db/app", migrate: true, host: "db", port: 5432, database: "app"},
		{url: "POSTGRES://u:" + secret + "@db/app", migrate: true, host: "db", port: 5432, database: "app", user: "u", password: secret},
		{url: "postgres://u:p@ss/w?rd@db/app", migrate: true, host: "db", port: 5432, database: "app", user: "u", password: "p@ss/w?rd"},
		{url: "postgres://u:p%40ss@db/my%20db", migrate: true, host: "db", port: 5432, database: "my db", user: "u", password: "p@ss"},
		{url: "postgres://[::1]:6000/app", migrate: true, host: "::1", port: 6000, database: "app"},
		{
			url:   "postgres://db/app?mode=connection&table=locks&schema=jobs&migrate=false",
			store: pgstore.Options{Mode: pgstore.ModeConnection, Table: "locks", Schema: "jobs"},
			host:  "db", port: 5432, database: "app",
		},
		{url: "postgres://db/app?mode=lease&migrate=1", store: pgstore.Options{Mode: pgstore.ModeLease}, migrate: true, host: "db", port: 5432, database: "app"},
		{
			// pgx's own parameters and run-time parameters pass through.
			url:     "postgres://db/app?sslmode=disable&application_name=nightly&pool_max_conns=3&password=" + secret + "&table=t",
			store:   pgstore.Options{Table: "t"},
			migrate: true, host: "db", port: 5432, database: "app", password: secret,
			runtime: map[string]string{"application_name": "nightly"}, maxConns: 3,
		},
	}
	for _, tt := range tests {
		t.Run(redact.URL(tt.url), func(t *testing.T) {
			o, _, err := parse(tt.url)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			c, ok := o.(*pgConfig)
			if !ok {
				t.Fatalf("parse returned %T, want *pgConfig", o)
			}
			if c.store != tt.store || c.migrate != tt.migrate {
				t.Errorf("store %+v migrate %v, want %+v %v", c.store, c.migrate, tt.store, tt.migrate)
			}
			cc := c.pool.ConnConfig
			if cc.Host != tt.host || cc.Port != tt.port || cc.Database != tt.database || cc.User != tt.user && tt.user != "" || cc.Password != tt.password {
				t.Errorf("pgx config host %q port %d database %q user %q password %q", cc.Host, cc.Port, cc.Database, cc.User, cc.Password)
			}
			for k, v := range tt.runtime {
				if cc.RuntimeParams[k] != v {
					t.Errorf("run-time parameter %s = %q, want %q", k, cc.RuntimeParams[k], v)
				}
			}
			for _, own := range []string{"mode", "table", "schema", "migrate"} {
				if _, ok := cc.RuntimeParams[own]; ok {
					t.Errorf("tasklock's parameter %s reached pgx", own)
				}
			}
			if tt.maxConns != 0 && c.pool.MaxConns != tt.maxConns {
				t.Errorf("MaxConns %d, want %d", c.pool.MaxConns, tt.maxConns)
			}
		})
	}
}

func TestParseMySQL(t *testing.T) {
	tests := []struct {
		url     string
		store   mysqlstore.Options
		migrate bool
		addr    string
		user    string
		passwd  string
		dbName  string
	}{
		{"mysql://app:" + secret + "@tcp(db:3307)/app", mysqlstore.Options{}, true, "db:3307", "app", secret, "app"},
		{"mysql://app:" + secret + "@db:3307/app", mysqlstore.Options{}, true, "db:3307", "app", secret, "app"},
		{"mysql://app@db/app", mysqlstore.Options{}, true, "db:3306", "app", "", "app"},
		{"mysql://app@tcp(db)/app", mysqlstore.Options{}, true, "db:3306", "app", "", "app"},
		{"mysql://root@tcp([::1]:3306)/app", mysqlstore.Options{}, true, "[::1]:3306", "root", "", "app"},
		{"MYSQL://u:p@ss)/(w@tcp(db:1)/app", mysqlstore.Options{}, true, "db:1", "u", "p@ss)/(w", "app"},
		{"mysql://u:p%40ss%3Aw@db:1/my%20db", mysqlstore.Options{}, true, "db:1", "u", "p@ss:w", "my db"},
		{
			"mysql://u@db/app?mode=connection&table=locks&migrate=false",
			mysqlstore.Options{Mode: mysqlstore.ModeConnection, Table: "locks"}, false, "db:3306", "u", "", "app",
		},
	}
	for _, tt := range tests {
		t.Run(redact.URL(tt.url), func(t *testing.T) {
			o, _, err := parse(tt.url)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			c, ok := o.(*mysqlConfig)
			if !ok {
				t.Fatalf("parse returned %T, want *mysqlConfig", o)
			}
			if c.store != tt.store || c.migrate != tt.migrate {
				t.Errorf("store %+v migrate %v, want %+v %v", c.store, c.migrate, tt.store, tt.migrate)
			}
			cfg := c.cfg
			if cfg.Addr != tt.addr || cfg.User != tt.user || cfg.Passwd != tt.passwd || cfg.DBName != tt.dbName || !cfg.ParseTime || cfg.Net != mysqlNet {
				t.Errorf("config addr %q user %q passwd %q db %q parseTime %v net %q", cfg.Addr, cfg.User, cfg.Passwd, cfg.DBName, cfg.ParseTime, cfg.Net)
			}
		})
	}

	// The driver's parameters pass through.
	o, _, err := parse("mysql://u@db/app?tls=skip-verify&timeout=2s&readTimeout=3s&charset=utf8mb4&parseTime=false&table=t")
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.(*mysqlConfig).cfg
	if cfg.TLS == nil || !cfg.TLS.InsecureSkipVerify || cfg.Timeout != 2*time.Second || cfg.ReadTimeout != 3*time.Second ||
		cfg.Params["charset"] != "utf8mb4" || !cfg.ParseTime {
		t.Errorf("driver parameters not applied: %+v", cfg)
	}
	// tls=true verifies the server's name.
	o, _, err = parse("mysql://u@db.example.com:3306/app?tls=true")
	if err != nil {
		t.Fatal(err)
	}
	if tls := o.(*mysqlConfig).cfg.TLS; tls == nil || tls.ServerName != "db.example.com" {
		t.Errorf("tls=true: %+v", tls)
	}
}

func TestParseSQLite(t *testing.T) {
	tests := []struct {
		url     string
		path    string
		table   string
		migrate bool
	}{
		{"sqlite:///var/lib/app/locks.db", "/var/lib/app/locks.db", "", true},
		{"sqlite://./locks.db", "./locks.db", "", true},
		{"sqlite://locks.db", "locks.db", "", true},
		{"sqlite://data/locks.db?table=job_locks&migrate=false", "data/locks.db", "job_locks", false},
		{"sqlite:///tmp/a%20b%3Fc.db", "/tmp/a b?c.db", "", true},
		{"SQLITE:///x.db", "/x.db", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			o, _, err := parse(tt.url)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			c, ok := o.(*sqliteConfig)
			if !ok {
				t.Fatalf("parse returned %T, want *sqliteConfig", o)
			}
			if c.path != tt.path || c.store.Table != tt.table || c.migrate != tt.migrate {
				t.Errorf("path %q table %q migrate %v, want %q %q %v", c.path, c.store.Table, c.migrate, tt.path, tt.table, tt.migrate)
			}
		})
	}
}

func TestParseEtcd(t *testing.T) {
	tests := []struct {
		url        string
		endpoints  string
		user, pass string
		tls        bool
		prefix     string // the store's
		sessionTTL time.Duration
		dial       time.Duration
	}{
		{"etcd://127.0.0.1:2379", "http://127.0.0.1:2379", "", "", false, "/tasklock/", 0, 5 * time.Second},
		{"etcd://e1,e2:2380,[::1]", "http://e1:2379,http://e2:2380,http://[::1]:2379", "", "", false, "/tasklock/", 0, 5 * time.Second},
		{"ETCD://e1/", "http://e1:2379", "", "", false, "/tasklock/", 0, 5 * time.Second},
		{"etcd://e1/app", "http://e1:2379", "", "", false, "/app/", 0, 5 * time.Second},
		{"etcd://e1/app/locks/", "http://e1:2379", "", "", false, "/app/locks/", 0, 5 * time.Second},
		{"etcd://e1/a%20b", "http://e1:2379", "", "", false, "/a b/", 0, 5 * time.Second},
		{"etcd://root:" + secret + "@e1:1,e2:2/p?session_ttl=30s&dial_timeout=2s", "http://e1:1,http://e2:2", "root", secret, false, "/p/", 30 * time.Second, 2 * time.Second},
		{"etcd://u:p%40ss@e1?session_ttl=1m", "http://e1:2379", "u", "p@ss", false, "/tasklock/", time.Minute, 5 * time.Second},
		{"etcds://e1:2379,e2:2379", "https://e1:2379,https://e2:2379", "", "", true, "/tasklock/", 0, 5 * time.Second},
		{"etcds://e1?tls_ca_file=/ca.pem&tls_cert_file=/c.pem&tls_key_file=/k.pem", "https://e1:2379", "", "", true, "/tasklock/", 0, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(redact.URL(tt.url), func(t *testing.T) {
			o, _, err := parse(tt.url)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			c, ok := o.(*etcdConfig)
			if !ok {
				t.Fatalf("parse returned %T, want *etcdConfig", o)
			}
			if got := strings.Join(c.endpoints, ","); got != tt.endpoints {
				t.Errorf("endpoints %s, want %s", got, tt.endpoints)
			}
			if c.username != tt.user || c.password != tt.pass || c.tls != tt.tls || c.prefix() != tt.prefix ||
				c.store.SessionTTL != tt.sessionTTL || c.dialTimeout != tt.dial {
				t.Errorf("user %q password %q tls %v prefix %q session_ttl %v dial_timeout %v", c.username, c.password, c.tls, c.prefix(), c.store.SessionTTL, c.dialTimeout)
			}
		})
	}
	o, _, err := parse("etcds://e1?tls_ca_file=/ca.pem&tls_cert_file=/c.pem&tls_key_file=/k.pem")
	if err != nil {
		t.Fatal(err)
	}
	if c := o.(*etcdConfig); c.caFile != "/ca.pem" || c.certFile != "/c.pem" || c.keyFile != "/k.pem" {
		t.Errorf("TLS files %q %q %q", c.caFile, c.certFile, c.keyFile)
	}
}

func TestParseZK(t *testing.T) {
	tests := []struct {
		url     string
		servers string
		root    string
		session time.Duration
	}{
		{"zk://127.0.0.1:2181", "127.0.0.1:2181", "", 10 * time.Second},
		{"zk://z1,z2:2182,[::1]/", "z1:2181,z2:2182,[::1]:2181", "", 10 * time.Second},
		{"ZK://z1/app/locks?session_timeout=4s", "z1:2181", "/app/locks", 4 * time.Second},
		{"zk://z1/tasklock?session_timeout=1500ms", "z1:2181", "/tasklock", 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			o, _, err := parse(tt.url)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			c, ok := o.(*zkConfig)
			if !ok {
				t.Fatalf("parse returned %T, want *zkConfig", o)
			}
			if got := strings.Join(c.servers, ","); got != tt.servers || c.root != tt.root || c.session != tt.session {
				t.Errorf("servers %s root %q session %v, want %s %q %v", got, c.root, c.session, tt.servers, tt.root, tt.session)
			}
		})
	}
}

func TestParseRedlock(t *testing.T) {
	tests := []struct {
		url        string
		addrs      string
		user, pass string
		db         int
		store      redlock.Options
		dial       time.Duration
	}{
		{url: "redlock://a:1,b:2,c:3", addrs: "a:1,b:2,c:3"},
		{url: "redlock://a,b,c", addrs: "a:6379,b:6379,c:6379"},
		{url: "REDLOCK://a:1,a:2,a:3,a:4,a:5/", addrs: "a:1,a:2,a:3,a:4,a:5"},
		{url: "redlock://:" + secret + "@a,b,c/2", addrs: "a:6379,b:6379,c:6379", pass: secret, db: 2},
		{url: "redlock://u:" + secret + "@a,b,[::1]:7", addrs: "a:6379,b:6379,[::1]:7", user: "u", pass: secret},
		{
			url:   "redlock://a,b,c?prefix=app:&node_timeout=20ms&dial_timeout=1s&read_timeout=2s&write_timeout=3s",
			addrs: "a:6379,b:6379,c:6379", store: redlock.Options{Prefix: "app:", NodeTimeout: 20 * time.Millisecond}, dial: time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(redact.URL(tt.url), func(t *testing.T) {
			o, _, err := parse(tt.url)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			c, ok := o.(*redlockConfig)
			if !ok {
				t.Fatalf("parse returned %T, want *redlockConfig", o)
			}
			if c.store != tt.store {
				t.Errorf("store options %+v, want %+v", c.store, tt.store)
			}
			var addrs []string
			for _, n := range c.nodes {
				addrs = append(addrs, n.addrs...)
				if n.mode != redisSingle || n.username != tt.user || n.password != tt.pass || n.db != tt.db || n.dialTimeout != tt.dial {
					t.Errorf("node %+v", *n)
				}
			}
			if got := strings.Join(addrs, ","); got != tt.addrs {
				t.Errorf("nodes %s, want %s", got, tt.addrs)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		url  string
		want string // in the message
	}{
		{"", "missing scheme"},
		{"localhost:6379", "missing scheme"},
		{"://h", "missing scheme"},
		{"foo://h:1", `unknown scheme "foo"`},
		{"http://u:" + secret + "@h", `unknown scheme "http"`},
		{"u:" + secret + "@redis://h:1", "missing scheme"},
		{"1redis://h:1", "missing scheme"},
		{"mem://x", "mem:// takes no host"},
		{"mem:///x", "mem:// takes no host"},
		{"mem://?a=1", `unknown query parameter "a" (mem:// accepts: none)`},
		{"redis://", "missing host"},
		{"redis://u:" + secret + "@", "missing host"},
		{"redis://?prefix=x", "missing host"},
		{"redis://h:1,h:2", "takes one host, got 2"},
		{"redis://h:1,", "empty host"},
		{"redis://h:1/x", `invalid database number "x"`},
		{"redis://h:1/-1", `invalid database number "-1"`},
		{"redis://h:1/0/1", `invalid database number "0/1"`},
		{"redis://h:0", `invalid port "0"`},
		{"redis://h:70000", `invalid port "70000"`},
		{"redis://h:abc", `invalid port "abc"`},
		{"redis://h:", `invalid port ""`},
		{"redis://:1", "missing host name"},
		// Malformed host names are bad URLs, found without a DNS lookup.
		{"postgres://%zz", `invalid host name "%zz"`},
		{"postgres://u:" + secret + "@bad%host/db", `invalid host name "bad%host"`},
		{"postgresql://h1,h%20/db", `invalid host name "h%20"`},
		{"postgres://h:70000/db", `invalid port "70000"`},
		{"etcd://a:1,b c:2", `invalid host name "b c"`},
		{"sqlite://x%00y.db", "the path contains a NUL byte"},
		{"redis://h:1?dial_timeout=9223372036854775807ns", "dial_timeout=2562047h47m16.854775807s is above the maximum 8760h0m0s"},
		{"redis://::1", "invalid host"},
		{"redis://h:1?foo=1", `unknown query parameter "foo"`},
		{"redis://h:1?db=1", `unknown query parameter "db" (redis:// accepts: dial_timeout, pool_size, prefix`},
		{"redis://h:1?prefix=a&prefix=b", `"prefix" is given 2 times`},
		{"redis://h:1?prefix=a{", "prefix=\"a{\" must not contain"},
		{"redis://h:1?dial_timeout=abc", "dial_timeout=\"abc\": want a positive duration"},
		{"redis://h:1?read_timeout=-1s", "read_timeout"},
		{"redis://h:1?wait_replicas=-1", "wait_replicas"},
		{"redis://h:1?pool_size=x", "pool_size"},
		{"redis://h:1?%zz", "malformed query"},
		{"redis://h:1#frag", "fragment"},
		{"redis://u:" + secret + "#x@h:1#frag", "fragment"},
		{"redis://%zz@h:1", "percent-encoding in the user name"},
		{"redis://u:%zz" + secret + "@h:1", "percent-encoding in the password"},
		// go-redis sent no AUTH for it; redis-cli reads it as a password.
		{"redis://" + secret + "@h:1", "bad store URL redis://xxxxx@h:1: a user name without a password"},
		{"redis+sentinel://" + secret + "@s1:1/m", "a user name without a password"},
		{"redlock://" + secret + "@a,b,c", "a user name without a password"},
		{"redis+sentinel://s1:1,s2:2", "missing master name"},
		{"redis+sentinel://s1:1/a/b", "invalid master name"},
		{"redis+sentinel://s1:1/m?db=x", `db="x"`},
		{"redis+sentinel://s1:1/m?sentinel_password=" + secret + "&bogus=1", `unknown query parameter "bogus"`},
		{"redis+cluster://n1:1/0", "redis+cluster:// takes no path"},
		{"redis+cluster://n1:1?db=1", `unknown query parameter "db"`},
		{"redis://u:" + secret + "@h:1?bogus=" + secret, `unknown query parameter "bogus"`},
		{"redis://u:" + secret + "@h:1/" + secret, `invalid database number "xxxxx"`},
		{"redis://h:1?password=" + secret, `unknown query parameter "password"`},
		{"postgres://h/db?mode=session", `mode="session": want lease or connection`},
		{"postgres://h/db?migrate=yes", `migrate="yes": want true or false`},
		{"postgres://h/db?table=", "query parameter table is empty"},
		{"postgres://h/db?table=a&table=b", `"table" is given 2 times`},
		{"postgres://u:" + secret + "@h/db?sslmode=bogus", "sslmode"},
		{"postgres://u:" + secret + "@h/db?connect_timeout=x", "connect_timeout"},
		{"postgres://u:" + secret + "@h/db?pool_max_conns=" + secret, "pool_max_conns"},
		{"postgresql://h:x/db", "invalid port"},
		{"mysql://u:" + secret + "@tcp(h:1)/db?bogus=1", `unknown query parameter "bogus" (mysql:// accepts: migrate, mode, table and go-sql-driver/mysql's`},
		{"mysql://u:" + secret + "@h:1/db?sql_mode=ANSI", `unknown query parameter "sql_mode"`},
		{"mysql://u:" + secret + "@h:1/db?schema=x", `unknown query parameter "schema"`},
		{"mysql://u:" + secret + "@h:1/db?tls=bogus", "bogus"},
		{"mysql://u:" + secret + "@h:1/db?timeout=x", "timeout"},
		{"mysql://u:" + secret + "@h:1/db?mode=x", `mode="x"`},
		{"mysql://u:" + secret + "@tcp(h:1)/", "missing database name"},
		{"mysql://u:" + secret + "@tcp(h:1)", "missing database name"},
		{"mysql://u:" + secret + "@h:1/a/b", `invalid database name "a/b"`},
		{"mysql://u:" + secret + "@h1:1,h2:2/db", "takes one host, got 2"},
		{"mysql://u:" + secret + "@unix(/run/mysqld.sock)/db", "unix sockets are not supported"},
		{"mysql://u:" + secret + "@tcp(h:1/db", "invalid address"},
		{"mysql://u:" + secret + "@/db", "missing host"},
		{"mysql://u:" + secret + "@tcp()/db", "missing host"},
		{"mysql://u:" + secret + "@tcp(h:0)/db", `invalid port "0"`},
		{"sqlite://", "missing file name"},
		{"sqlite:///var/lib/", "missing file name"},
		{"sqlite://:memory:", "use mem://"},
		{"sqlite://file:x.db", "use mem://"},
		{"sqlite://u:" + secret + "@/x.db", "sqlite:// takes no user or password"},
		{"sqlite:///x.db?mode=connection", `unknown query parameter "mode" (sqlite:// accepts: migrate, table)`},
		{"sqlite:///x.db?table=Locks", `table="Locks": want a lowercase SQL identifier`},
		{"sqlite:///x.db?table=sqlite_x", "reserved by SQLite"},
		{"sqlite:///x.db?migrate=nope", `migrate="nope"`},
		{"sqlite:///x%zz.db", "percent-encoding"},
		{"etcd://", "missing host"},
		{"etcd://e1:0", `invalid port "0"`},
		{"etcd://e1?session_ttl=1500ms", `session_ttl="1500ms": want whole seconds`},
		{"etcd://e1?session_ttl=0s", `session_ttl="0s"`},
		{"etcd://e1?session_ttl=x", `session_ttl="x"`},
		{"etcd://e1?dial_timeout=-1s", "dial_timeout"},
		{"etcd://e1?prefix=/x/", `unknown query parameter "prefix" (etcd:// accepts: dial_timeout, session_ttl)`},
		{"etcd://e1?tls_ca_file=/ca.pem", `unknown query parameter "tls_ca_file"`},
		{"etcd://e1/%ff", "not a valid key prefix: etcdstore: invalid Options.Prefix"},
		{"etcd://root@e1", "a user name and a password together"},
		{"etcd://:" + secret + "@e1", "a user name and a password together"},
		{"etcd://root:" + secret + "@e1?bogus=" + secret, `unknown query parameter "bogus"`},
		{"etcds://e1?tls_cert_file=/c.pem", "tls_cert_file and tls_key_file go together"},
		{"zk://", "missing host"},
		{"zk://u:" + secret + "@z1", "zk:// takes no user or password"},
		{"zk://u@z1", "zk:// takes no user or password"},
		{"zk://z1/zookeeper", "not a valid root node: zkstore: invalid Options.Root \"/zookeeper\""},
		{"zk://z1/app/", "must not end with"},
		{"zk://z1/a//b", "empty node name"},
		{"zk://z1?session_timeout=x", `session_timeout="x"`},
		{"zk://z1?session_timeout=0s", `session_timeout="0s"`},
		{"zk://z1?session_ttl=10s", `unknown query parameter "session_ttl" (zk:// accepts: session_timeout)`},
		{"redlock://a:1", "an odd number of independent Redis servers, at least 3; got 1"},
		{"redlock://a:1,b:2", "got 2"},
		{"redlock://a:1,b:2,c:3,d:4", "got 4"},
		{"redlock://:" + secret + "@a:1,b:2,a:1", "host a:1 is given twice"},
		{"redlock://a,b,c:6379,c", "got 4"},
		{"redlock://a,b,c:6379,c,d", "host c:6379 is given twice"},
		{"redlock://a,b,c/x", `invalid database number "x"`},
		{"redlock://a,b,c?prefix={x}", "must not contain"},
		{"redlock://a,b,c?node_timeout=-1ms", "node_timeout"},
		{"redlock://u:" + secret + "@a,b,c?wait_replicas=1", `unknown query parameter "wait_replicas" (redlock:// accepts: dial_timeout, node_timeout, prefix, read_timeout, write_timeout)`},
	}
	for _, tt := range tests {
		t.Run(redact.URL(tt.url), func(t *testing.T) {
			_, _, err := parse(tt.url)
			if err == nil {
				t.Fatal("parse succeeded")
			}
			if !errors.Is(err, ErrBadURL) {
				t.Errorf("error %v does not match ErrBadURL", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q does not contain %q", msg, tt.want)
			}
			if strings.Contains(msg, secret) {
				t.Errorf("error %q contains the password", msg)
			}
			// Open must fail the same way, without I/O.
			_, _, oerr := Open(context.Background(), tt.url)
			if oerr == nil || oerr.Error() != msg {
				t.Errorf("Open: %v, want %v", oerr, msg)
			}
		})
	}
}

// TestParseStoreOptionErrors: a URL part a store's New rejects keeps the
// store's *driver.OptionError in the chain.
func TestParseStoreOptionErrors(t *testing.T) {
	for _, tt := range []struct{ url, field string }{
		{"etcd://e1/%ff", "Options.Prefix"},
		{"zk://z1/zookeeper", "Options.Root"},
	} {
		_, _, err := parse(tt.url)
		var oe *driver.OptionError
		if !errors.Is(err, ErrBadURL) || !errors.As(err, &oe) || oe.Field != tt.field {
			t.Errorf("parse(%s) = %v, want ErrBadURL and a *driver.OptionError naming %s", tt.url, err, tt.field)
		}
	}
}

func TestScrub(t *testing.T) {
	_, u, err := parse("redis+sentinel://u:p%40" + secret + "@s1:1/m?sentinel_password=sp-" + secret)
	if err != nil {
		t.Fatal(err)
	}
	inner := errors.New("auth p@" + secret + " failed, p%40" + secret + ", sp-" + secret)
	err = u.scrub(inner)
	if strings.Contains(err.Error(), secret) {
		t.Errorf("scrubbed error %q still contains the password", err)
	}
	if !errors.Is(err, inner) {
		t.Error("scrubbed error lost its chain")
	}

	// The new schemes hide the URL's password the same way, also in the
	// errors of several nodes at once.
	for _, raw := range []string{
		"etcd://root:p%2F" + secret + "@e1,e2/app",
		"etcds://root:p%2F" + secret + "@e1",
		"redlock://u:p%2F" + secret + "@a,b,c",
	} {
		_, u, err := parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		inner := nodeErrors{
			errors.New("a: auth p/" + secret + " failed"),
			fmt.Errorf("b: %w", errors.New("url "+url.UserPassword("root", "p/"+secret).String())),
		}
		err = u.classify(inner)
		if msg := err.Error(); strings.Contains(msg, secret) || !strings.Contains(msg, redact.URL(raw)) {
			t.Errorf("%s: %q", redact.URL(raw), msg)
		}
		if !errors.Is(err, ErrUnreachable) || !errors.Is(err, inner[1]) {
			t.Errorf("%s: classified error lost its chain", redact.URL(raw))
		}
	}
}

// TestScrubShortPassword: a one-letter password is hidden where it is a
// password, and the rest of the message is left alone (substring
// replacement turned "connection refused" into
// "cxxxxxnnectixxxxxn refused").
func TestScrubShortPassword(t *testing.T) {
	raw := "redis://app:o@127.0.0.1:1/0"
	_, u, err := parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	err = u.classify(errors.New("dial tcp 127.0.0.1:1: connect: connection refused (auth app:o@127.0.0.1:1)"))
	want := "store unreachable: redis://app:xxxxx@127.0.0.1:1/0: dial tcp 127.0.0.1:1: connect: connection refused (auth app:xxxxx@127.0.0.1:1)"
	if err.Error() != want {
		t.Errorf("classify:\n got %q\nwant %q", err, want)
	}
}

// TestSQLiteMissingDirectory: a file in a directory that does not exist
// is a bad URL (no retry mends it), for Open and for migrate up.
func TestSQLiteMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing", "dir")
	raw := "sqlite://" + dir + "/x.db"
	_, _, err := Open(context.Background(), raw)
	if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), "directory \""+dir+"\" does not exist") {
		t.Errorf("Open(%s) = %v, want ErrBadURL naming the directory", raw, err)
	}
	m, err := OpenMigrator(context.Background(), raw)
	if err == nil {
		m.Close()
	}
	if !errors.Is(err, ErrBadURL) {
		t.Errorf("OpenMigrator(%s) = %v, want ErrBadURL", raw, err)
	}
}

// TestSQLiteDirectoryAsFile: a path naming a directory is a bad URL (no
// retry mends it), not an unreachable store, for every way of opening it.
func TestSQLiteDirectoryAsFile(t *testing.T) {
	dir := t.TempDir()
	raw := "sqlite://" + dir
	for name, open := range map[string]func(context.Context, string) (driver.Store, func() error, error){"Open": Open, "OpenExisting": OpenExisting} {
		_, _, err := open(context.Background(), raw)
		if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), "\""+dir+"\" is a directory") {
			t.Errorf("%s(%s) = %v, want ErrBadURL saying it is a directory", name, raw, err)
		}
	}
	m, err := OpenMigrator(context.Background(), raw)
	if err == nil {
		m.Close()
	}
	if !errors.Is(err, ErrBadURL) {
		t.Errorf("OpenMigrator(%s) = %v, want ErrBadURL", raw, err)
	}
}

// TestSQLiteOpenExisting: OpenExisting refuses a file that is not there,
// as a bad URL, and creates nothing, whatever migrate= says; once Open has
// made the file, OpenExisting opens it.
func TestSQLiteOpenExisting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	for _, raw := range []string{"sqlite://" + path, "sqlite://" + path + "?migrate=true"} {
		_, _, err := OpenExisting(context.Background(), raw)
		if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), "database file \""+path+"\" does not exist") {
			t.Errorf("OpenExisting(%s) = %v, want ErrBadURL naming the file", raw, err)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("OpenExisting(%s) left %s behind (stat: %v)", raw, path, err)
		}
	}
	for _, open := range []func(context.Context, string) (driver.Store, func() error, error){Open, OpenExisting} {
		store, closeFn, err := open(context.Background(), "sqlite://"+path)
		if err != nil {
			t.Fatal(err)
		}
		p := driver.AcquireParams{Key: "k", Token: "t", Owner: "o", TTL: time.Second}
		if _, err := store.Acquire(context.Background(), p); err != nil {
			t.Error(err)
		}
		if err := store.Release(context.Background(), driver.ReleaseParams{Key: "k", Token: "t"}); err != nil {
			t.Error(err)
		}
		closeFn()
	}
}

func TestSchemes(t *testing.T) {
	got := strings.Join(Schemes(), " ")
	if got != "etcd etcds mem mysql postgres postgresql redis redis+cluster redis+sentinel rediss redlock sqlite zk" {
		t.Errorf("Schemes() = %s", got)
	}
}

func TestOpenMem(t *testing.T) {
	s, closeFn, err := Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if _, ok := s.(*memstore.Store); !ok {
		t.Errorf("Open(mem://) returned %T", s)
	}
	checkStore(t, s)
}

// FuzzPasswordNeverInMessages checks that neither Redact nor a parse error
// shows the password of scheme://user:PASSWORD@rest.
func FuzzPasswordNeverInMessages(f *testing.F) {
	f.Add("redis", "u", secret, "h:1/0")
	f.Add("redis+sentinel", "", "p/a?s#s", "h:1,h:2/m?db=x")
	f.Add("redis", "u", "p@ss", "h:1?bogus=p@ss")
	f.Add("mem", "u", "pass:word", "")
	f.Add("rediss", "u", "%zzpassword", "h:x")
	f.Add("mysql", "app", secret, "tcp(db:3306)/app")
	f.Add("mysql", "app", "p)w(d/x?y", "tcp([::1]:3306)/app?tls=bogus")
	f.Add("mysql", "app", "p w", "db:3306/app?bogus=1")
	f.Add("mysql", "", "pw", "tcp(db:x)/app")
	f.Add("postgres", "app", "p w/x", "h1:1,h2:2/db?sslmode=bogus")
	f.Add("postgresql", "app", "pa;ss", "h:x/db")
	f.Add("postgres", "app", "pw", "h/db?pool_max_conns=x&mode=y")
	f.Add("sqlite", "app", "pw", "/x.db")
	f.Add("x", "password=", "p w", "tcp(h)/db")
	f.Add("etcd", "root", secret, "e1:2379,e2:2379/app?session_ttl=x")
	f.Add("etcds", "root", "p/w?x", "e1/%zz")
	f.Add("zk", "u", secret, "z1,z2/app")
	f.Add("redlock", "", secret, "a,b,a?prefix={")
	f.Add("redlock", "u", "p w", "a,b")
	f.Fuzz(func(t *testing.T, scheme, user, password, rest string) {
		// The marker keeps the password from matching fixed message text.
		password = "Pw9q" + password
		if strings.ContainsAny(user, ":@") || strings.Contains(password, "@") ||
			strings.Contains(scheme+"://"+user+":", password) || strings.Contains(rest, "@") || strings.Contains(rest, password) {
			t.Skip()
		}
		raw := scheme + "://" + user + ":" + password + "@" + rest
		if r := redact.URL(raw); strings.Contains(r, password) {
			t.Fatalf("redact.URL(%q) = %q", raw, r)
		}
		// go-sql-driver's DSN has no scheme: user:password@tcp(host)/db.
		dsn := user + ":" + password + "@" + rest
		if r := redact.URL(dsn); strings.Contains(r, password) {
			t.Fatalf("redact.URL(%q) = %q", dsn, r)
		}
		_, _, err := parse(raw)
		if err != nil && strings.Contains(err.Error(), password) {
			t.Fatalf("parse(%q): %v", raw, err)
		}
	})
}

// TestTLSFilesBounded: a certificate or key file is read up to maxPEM
// bytes; past that it is a bad URL. They were read whole, so that
// tls_ca_file=/dev/zero took gigabytes a second and never answered.
func TestTLSFilesBounded(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.pem")
	if err := os.WriteFile(big, make([]byte, maxPEM+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{
		"rediss://127.0.0.1:1?tls_ca_file=" + big,
		"etcds://127.0.0.1:1?tls_ca_file=" + big,
		"etcds://127.0.0.1:1?tls_cert_file=" + big + "&tls_key_file=" + big,
		"postgres://u@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=" + big, // pgx's own parameters
		"postgres://u@127.0.0.1:1/db?sslmode=require&sslcert=" + big + "&sslkey=" + big,
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := Open(ctx, raw)
		cancel()
		if !errors.Is(err, ErrBadURL) || !strings.Contains(fmt.Sprint(err), "larger than") {
			t.Errorf("Open(%s): %v; want a bad URL, the file larger than %d bytes", raw, err, maxPEM)
		}
	}
}
