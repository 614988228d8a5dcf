package redact

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"
	"testing"
)

const secret = "s3cr3t"

func TestURL(t *testing.T) {
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
		// A '#' in a query password: what follows is the rest of it.
		{"redis+sentinel://:pw@s1:1/m?sentinel_password=abc#" + secret, "redis+sentinel://:xxxxx@s1:1/m?sentinel_password=xxxxx"},
		{"postgres://h/db?sslmode=disable&password=a#b#" + secret, "postgres://h/db?sslmode=disable&password=xxxxx"},
		{"etcd://h:1?token=" + secret + "&client_secret=" + secret, "etcd://h:1?token=xxxxx&client_secret=xxxxx"},
		{"redis://h:1?passphrase", "redis://h:1?passphrase"},
		{"redis://h:1?auth=" + secret + "&x=1", "redis://h:1?auth=xxxxx&x=1"},
		{"mysql://app:" + secret + "@tcp(db:3306)/app", "mysql://app:xxxxx@tcp(db:3306)/app"},
		{"mysql://app:" + secret + "@db:3306/app?tls=true", "mysql://app:xxxxx@db:3306/app?tls=true"},
		{"mysql://app:p@ss)/(w@tcp([::1]:3306)/app", "mysql://app:xxxxx@tcp([::1]:3306)/app"},
		{"app:" + secret + "@tcp(db:3306)/app?parseTime=true", "app:xxxxx@tcp(db:3306)/app?parseTime=true"},
		{"app:" + secret + "@tcp(db:3306)/app?x=a@b", "app:xxxxx@b"},
		{"postgres://u:" + secret + "@h1:1,h2:2/db?sslpassword=" + secret, "postgres://u:xxxxx@h1:1,h2:2/db?sslpassword=xxxxx"},
		{"postgresql://u@h/db?password=" + secret, "postgresql://u@h/db?password=xxxxx"},
		{"host=db user=app password=" + secret + " dbname=app", "host=db user=app password=xxxxx dbname=app"},
		{"host=db password='" + secret + " x\\' y' dbname=app", "host=db password=xxxxx dbname=app"},
		{"host=db PassWord = " + secret, "host=db PassWord = xxxxx"},
		{"host=db sslpassword='" + secret, "host=db sslpassword=xxxxx"},
		{"sqlite:///var/lib/locks.db?table=t", "sqlite:///var/lib/locks.db?table=t"},
		{"etcd://root:" + secret + "@e1:2379,e2:2379/app?session_ttl=30s", "etcd://root:xxxxx@e1:2379,e2:2379/app?session_ttl=30s"},
		{"etcds://u:p@ss/w@e1/app?tls_ca_file=/ca.pem&tls_key_file=/k.pem", "etcds://u:xxxxx@e1/app?tls_ca_file=/ca.pem&tls_key_file=/k.pem"},
		{"zk://z1:2181,z2:2181/app/locks?session_timeout=10s", "zk://z1:2181,z2:2181/app/locks?session_timeout=10s"},
		{"redlock://:" + secret + "@r1:6379,r2:6379,r3:6379/0?prefix=a", "redlock://:xxxxx@r1:6379,r2:6379,r3:6379/0?prefix=a"},
		{"redlock://u:" + secret + "@r1,r2,r3", "redlock://u:xxxxx@r1,r2,r3"},
		// Query secrets beyond passwords.
		{"redis://h:1?api_key=" + secret + "&apiKey=" + secret + "&X-Amz-Signature=" + secret + "&sig=" + secret, "redis://h:1?api_key=xxxxx&apiKey=xxxxx&X-Amz-Signature=xxxxx&sig=xxxxx"},
		{"redis://h:1?access_token=" + secret + "&key=" + secret + "&monkey=1", "redis://h:1?access_token=xxxxx&key=xxxxx&monkey=1"},
		// Every query value of an HTTP URL: its names say nothing.
		{"https://hooks.example/x?v=" + secret + "&q=" + secret, "https://hooks.example/x?v=xxxxx&q=xxxxx"},
		{"HTTP://u:" + secret + "@h/p?a=1#frag", "HTTP://u:xxxxx@h/p?a=xxxxx#frag"},
		{"https://h/p?flag", "https://h/p?flag"},
	}
	for _, tt := range tests {
		if got := URL(tt.in); got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestTextNeverGuesses: a short password is hidden where it stands as a
// password, and nowhere else — the old substring scrubbing turned
// "connection refused" into "cxxxxxnnectixxxxxn refused".
func TestTextNeverGuesses(t *testing.T) {
	tests := []struct {
		in      string
		secrets []string
		want    string
	}{
		{"dial redis://app:o@h:1: connection refused", []string{"o"}, "dial redis://app:xxxxx@h:1: connection refused"},
		{"connection refused", []string{"o"}, "connection refused"},
		{"auth failed for app:o@tcp(db:3306)/app", []string{"o"}, "auth failed for app:xxxxx@tcp(db:3306)/app"},
		{"password=o connection refused", []string{"o"}, "password=xxxxx connection refused"},
		{"x=o y=on", []string{"o"}, "x=xxxxx y=on"},
		{"connection refused", []string{"refused"}, "connection xxxxx"},
		{"unrefused refusedness", []string{"refused"}, "unrefused refusedness"},
		{"auth pw-" + secret + " failed, wrong-pw-" + secret, []string{"pw-" + secret}, "auth xxxxx failed, wrong-xxxxx"},
		{"auth p@" + secret + " failed, p%40" + secret, []string{"p@" + secret}, "auth xxxxx failed, xxxxx"},
		{`Get "https://api.example/hook?api_key=` + secret + `&x=1": dial tcp: connection refused`, nil,
			`Get "https://api.example/hook?api_key=xxxxx&x=xxxxx": dial tcp: connection refused`},
		{"cannot parse `host=db password=" + secret + " user=app`: bad", nil, "cannot parse `host=db password=xxxxx user=app`: bad"},
		{"storeurl: bad store URL redis://u:" + secret + "@h:1: x", nil, "storeurl: bad store URL redis://u:xxxxx@h:1: x"},
		{"no secrets here: line 3", nil, "no secrets here: line 3"},
		{"", []string{"", "x"}, ""},
	}
	for _, tt := range tests {
		if got := Text(tt.in, tt.secrets...); got != tt.want {
			t.Errorf("Text(%q, %q) = %q, want %q", tt.in, tt.secrets, got, tt.want)
		}
	}
}

func TestError(t *testing.T) {
	if Error(nil) != nil {
		t.Error("Error(nil) != nil")
	}
	inner := fmt.Errorf("open redis://u:%s@h: %w", secret, fs.ErrNotExist)
	err := Error(Error(inner, "other"), "p"+secret)
	if msg := err.Error(); strings.Contains(msg, secret) || msg != "open redis://u:xxxxx@h: file does not exist" {
		t.Errorf("Error() = %q", msg)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("the chain is lost")
	}
}

func TestQuote(t *testing.T) {
	if got := Quote("a\nb\x1b[31m"); got != `"a\nb\x1b[31m"` {
		t.Errorf("Quote = %s", got)
	}
	long := strings.Repeat("é", 300) // 600 bytes
	got := Quote(long)
	if len(got) > MaxQuoted+40 || !strings.HasSuffix(got, "... (600 bytes)") {
		t.Errorf("Quote(600 bytes) = %s (%d bytes)", got, len(got))
	}
	if Printable("web-1") != "web-1" || Printable("a\nb") != `"a\nb"` || Printable("\xff") != `"\xff"` || Printable("a\u0085b") != `"a\u0085b"` {
		t.Errorf("Printable: %s %s %s", Printable("a\nb"), Printable("\xff"), Printable("a\u0085b"))
	}
	if got := CheckName("a\x1bb"); got != `contains control character \x1b (U+001B)` {
		t.Errorf("CheckName = %q", got)
	}
}

func TestSecretName(t *testing.T) {
	for _, n := range []string{"password", "sentinel_password", "PWD", "token", "access_token", "api_key", "apiKey", "apikey", "key", "X-Amz-Signature", "X-Amz-Credential", "sig", "client_secret", "auth", "private_key"} {
		if !SecretName(n) {
			t.Errorf("SecretName(%q) = false", n)
		}
	}
	for _, n := range []string{"prefix", "db", "session_ttl", "session_timeout", "tls_key_file", "sslkey_path", "monkey", "keys", "dial_timeout", "sslmode", "table", ""} {
		if SecretName(n) {
			t.Errorf("SecretName(%q) = true", n)
		}
	}
}

// alphabet builds passwords of every length for the tests below: letters
// that occur in the messages' fixed text, digits, and characters that are
// special in URLs and DSNs.
const alphabet = "oecnt rfusdal0123:/?#[]@!$&'()*+,;=%-._~\\\"é"

// messages are templates of errors that carry a credential: %[1]s is the
// password as it appears in that syntax, and each says how to encode it.
var messages = []struct {
	name   string
	encode func(pw string) (string, bool) // false: the syntax cannot hold pw
}{
	{"redis URL in an error", func(pw string) (string, bool) {
		return "storeurl: store unreachable: redis://app:" + userinfo(pw) + "@127.0.0.1:6379/0: dial tcp 127.0.0.1:6379: connect: connection refused", true
	}},
	{"quoted URL", func(pw string) (string, bool) {
		return fmt.Sprintf("invalid value %q for flag -store: parse error", "postgres://u:"+userinfo(pw)+"@db/app?sslmode=disable"), true
	}},
	{"sentinel password parameter", func(pw string) (string, bool) {
		return "bad store URL redis+sentinel://s1:1/m?db=1&sentinel_password=" + url.QueryEscape(pw) + ": unknown query parameter \"x\"", true
	}},
	{"HTTP job URL", func(pw string) (string, bool) {
		return `Get "https://hooks.example/notify?api_key=` + url.QueryEscape(pw) + `&channel=ops": context deadline exceeded`, true
	}},
	{"HTTP job URL with userinfo", func(pw string) (string, bool) {
		return "POST https://bot:" + userinfo(pw) + "@hooks.example/notify?to=ops: HTTP 500 Internal Server Error", true
	}},
	{"mysql DSN", func(pw string) (string, bool) {
		if strings.ContainsAny(pw, " \t\n\"'(/") {
			return "", false
		}
		return "open app:" + pw + "@tcp(db:3306)/app?parseTime=true: connection refused", true
	}},
	{"libpq keyword string", func(pw string) (string, bool) {
		q := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw)
		return "cannot parse `host=db user=app password='" + q + "' dbname=app`: failed", true
	}},
	{"wrapped twice", func(pw string) (string, bool) {
		inner := fmt.Errorf("dial etcd://root:%s@e1:2379/app: %w", userinfo(pw), errors.New("connection refused"))
		return fmt.Errorf("storeurl: store unreachable: %w", inner).Error(), true
	}},
}

func userinfo(pw string) string { return strings.TrimPrefix(url.UserPassword("", pw).String(), ":") }

// checkMessages checks every message for password pw: Text finds the
// credential by parsing alone (no secret named) and hides exactly it, and
// with the secret named, no occurrence of pw survives that was not already
// in the message's fixed text.
func checkMessages(t *testing.T, pw string) {
	t.Helper()
	for _, m := range messages {
		msg, ok := m.encode(pw)
		if !ok {
			continue
		}
		// The message with the credential replaced, by construction.
		exp := expected(m.encode, pw)
		if got := Text(msg); got != exp {
			t.Fatalf("%s, password %q:\nText(%q)\n   = %q\nwant %q", m.name, pw, msg, got, exp)
		}
		got := Text(msg, pw)
		if got != Text(exp, pw) {
			t.Fatalf("%s, password %q:\nText(%q, pw)\n   = %q\nwant %q", m.name, pw, msg, got, Text(exp, pw))
		}
		if !strings.Contains(exp, pw) && strings.Contains(got, pw) {
			t.Fatalf("%s: password %q appears in %q", m.name, pw, got)
		}
		if err := Error(errors.New(msg), pw); err.Error() != got {
			t.Fatalf("%s: Error() = %q, want %q", m.name, err.Error(), got)
		}
	}
}

// expected is the message with its credential replaced by Mask: the
// template filled with a placeholder that no syntax alters.
func expected(encode func(string) (string, bool), pw string) string {
	const ph = "PLACEHOLDERq7"
	msg, _ := encode(ph)
	// Every value of an HTTP URL's query is hidden, not only the secret.
	msg = strings.ReplaceAll(msg, "&channel=ops", "&channel="+Mask)
	msg = strings.ReplaceAll(msg, "?to=ops", "?to="+Mask)
	// The libpq value is hidden with its quotes.
	msg = strings.ReplaceAll(msg, "'"+ph+"'", ph)
	return strings.ReplaceAll(msg, ph, Mask)
}

// TestEveryPasswordLength checks every message with passwords of every
// length from 1 to 64 built from alphabet, and with each of its
// characters alone.
func TestEveryPasswordLength(t *testing.T) {
	runes := []rune(alphabet)
	for n := 1; n <= 64; n++ {
		for start := 0; start < len(runes); start += 5 {
			pw := make([]rune, n)
			for i := range pw {
				pw[i] = runes[(start+i*7)%len(runes)]
			}
			if validPassword(string(pw)) {
				checkMessages(t, string(pw))
			}
		}
	}
	for _, c := range runes {
		if validPassword(string(c)) {
			checkMessages(t, string(c))
		}
	}
}

// FuzzRedact checks the messages with any password.
func FuzzRedact(f *testing.F) {
	for n := 1; n <= 12; n++ {
		f.Add(string([]rune(alphabet)[:n]))
		f.Add(strings.Repeat("o", n))
	}
	f.Add("p@ss/w?rd#")
	f.Add("xxxxx")
	f.Add("refused")
	f.Fuzz(func(t *testing.T, pw string) {
		if pw == "" || !validPassword(pw) {
			t.Skip()
		}
		checkMessages(t, pw)
	})
}

// validPassword: printable UTF-8 without white space other than ' ', and
// not made of the mask's letter (a password "xxxxx" cannot be told from
// the mask).
func validPassword(pw string) bool {
	if strings.Trim(pw, "x") == "" || strings.Contains(pw, "PLACEHOLDERq7") {
		return false
	}
	for _, r := range pw {
		if r == '\uFFFD' || (r != ' ' && (r < 0x21 || r == 0x7f)) {
			return false
		}
	}
	return true
}
