package storeurl

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tasklock/tasklock/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
		{"redis://user@h:1", redisConfig{addrs: []string{"h:1"}, username: "user"}},
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
		t.Run(Redact(tt.url), func(t *testing.T) {
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
		{"redis+sentinel://s1:1,s2:2", "missing master name"},
		{"redis+sentinel://s1:1/a/b", "invalid master name"},
		{"redis+sentinel://s1:1/m?db=x", `db="x"`},
		{"redis+sentinel://s1:1/m?sentinel_password=" + secret + "&bogus=1", `unknown query parameter "bogus"`},
		{"redis+cluster://n1:1/0", "redis+cluster:// takes no path"},
		{"redis+cluster://n1:1?db=1", `unknown query parameter "db"`},
		{"redis://u:" + secret + "@h:1?bogus=" + secret, `unknown query parameter "bogus"`},
		{"redis://u:" + secret + "@h:1/" + secret, `invalid database number "xxxxx"`},
		{"redis://h:1?password=" + secret, `unknown query parameter "password"`},
	}
	for _, tt := range tests {
		t.Run(Redact(tt.url), func(t *testing.T) {
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

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"mem://", "mem://"},
		{"redis://h:1/0", "redis://h:1/0"},
		{"redis://user@h:1", "redis://user@h:1"},
		{"redis://u:" + secret + "@h:1/0", "redis://u:xxxxx@h:1/0"},
		{"redis://:" + secret + "@h:1", "redis://:xxxxx@h:1"},
		{"redis://u:p@ss@h:1", "redis://u:xxxxx@h:1"},
		{"redis://u:p/s?s#w@h:1", "redis://u:xxxxx@h:1"},
		{"redis://u:pw%40x@h:1?prefix=a", "redis://u:xxxxx@h:1?prefix=a"},
		{"redis:u:" + secret + "@h:1", "redis:xxxxx@h:1"},
		{"redis:/u:" + secret + "@h:1", "redis:xxxxx@h:1"},
		{"u:" + secret + "@h:1", "u:xxxxx@h:1"},
		{"u:" + secret + "@redis://h:1", "u:xxxxx@redis://h:1"},
		{
			"redis+sentinel://u:pw@s1:1,s2:2/m?sentinel_password=" + secret + "&db=1",
			"redis+sentinel://u:xxxxx@s1:1,s2:2/m?sentinel_password=xxxxx&db=1",
		},
		{"redis+sentinel://s1:1/m?Sentinel%5FPassword=" + secret, "redis+sentinel://s1:1/m?Sentinel%5FPassword=xxxxx"},
		{"postgres://h/db?password=" + secret + "&sslmode=disable#x", "postgres://h/db?password=xxxxx&sslmode=disable#x"},
		{"etcd://h:1?token=" + secret + "&client_secret=" + secret, "etcd://h:1?token=xxxxx&client_secret=xxxxx"},
		{"redis://h:1?passphrase", "redis://h:1?passphrase"},
		{"redis://h:1?auth=" + secret + "&x=1", "redis://h:1?auth=xxxxx&x=1"},
	}
	for _, tt := range tests {
		if got := Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
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
}

func TestSchemes(t *testing.T) {
	got := strings.Join(Schemes(), " ")
	if got != "mem redis redis+cluster redis+sentinel rediss" {
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
	f.Fuzz(func(t *testing.T, scheme, user, password, rest string) {
		// The marker keeps the password from matching fixed message text.
		password = "Pw9q" + password
		if strings.ContainsAny(user, ":@") || strings.Contains(password, "@") ||
			strings.Contains(scheme+"://"+user+":", password) || strings.Contains(rest, "@") || strings.Contains(rest, password) {
			t.Skip()
		}
		raw := scheme + "://" + user + ":" + password + "@" + rest
		if r := Redact(raw); strings.Contains(r, password) {
			t.Fatalf("Redact(%q) = %q", raw, r)
		}
		_, _, err := parse(raw)
		if err != nil && strings.Contains(err.Error(), password) {
			t.Fatalf("parse(%q): %v", raw, err)
		}
	})
}
