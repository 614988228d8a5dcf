package main

import (
	"slices"
	"testing"
)

func TestStoreSecrets(t *testing.T) {
	for _, tt := range []struct {
		url  string
		want []string
	}{
		{"mem://", nil},
		{"redis://h:6379", nil},
		{"redis://app:p%40ss-w0rd@h:6379/0", []string{"p%40ss-w0rd"}},
		{"redis+sentinel://u:pw1234@h1:1,h2:2/m?sentinel_password=spw-5678&db=1", []string{"pw1234", "spw-5678"}},
		{"mysql://u:my:pw@tcp(h:3306)/db", []string{"my:pw"}},
		{"postgres://h/db?password=qpw-9", []string{"qpw-9"}},
	} {
		if got := storeSecrets(tt.url); !slices.Equal(got, tt.want) {
			t.Errorf("storeSecrets(%q) = %q, want %q", tt.url, got, tt.want)
		}
	}
}

func TestRedactor(t *testing.T) {
	redact := newRedactor(append(storeSecrets("redis://app:p%40ss-w0rd@h:6379"), "tok-123456", "ab")...)
	for in, want := range map[string]string{
		"token tok-123456 here":                          "token xxxxx here",
		"decoded p@ss-w0rd, encoded p%40ss-w0rd":         "decoded xxxxx, encoded xxxxx",
		"STORE=redis://app:p%40ss-w0rd@h:6379\n":         "STORE=redis://app:xxxxx@h:6379\n",
		"other https://u:unknown-pw@example.com/x":       "other https://u:xxxxx@example.com/x",
		"short secrets stay: ab, no URL: a:b@c, mailto:": "short secrets stay: ab, no URL: a:b@c, mailto:",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}
