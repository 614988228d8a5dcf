package config

import (
	"reflect"
	"strings"
	"testing"
)

// output_max: a size, 64 KiB when not set, at most 512 KiB.
func TestParseOutputMax(t *testing.T) {
	const job = "jobs:\n  - name: j\n    schedule: \"@every 1m\"\n    command: [x]\n"
	for in, want := range map[string]int{
		"":                      DefaultOutputMax,
		"output_max: 0\n":       0,
		"output_max: 1000\n":    1000,
		"output_max: 64KiB\n":   64 << 10,
		"output_max: 128k\n":    128 << 10,
		"output_max: '1_000'\n": 1000,
		"output_max: 512KiB\n":  512 << 10,
		"output_max: ~\n":       DefaultOutputMax,
	} {
		f, err := Parse("c.yaml", []byte(in+job))
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if f.OutputMax != want {
			t.Errorf("%q: OutputMax %d, want %d", in, f.OutputMax, want)
		}
	}
	for in, want := range map[string]string{
		"output_max: 1MiB\n":  `c.yaml:1: output_max: "1MiB" is more than 524288 bytes (512KiB)`,
		"output_max: -1\n":    `c.yaml:1: output_max: "-1" is negative`,
		"output_max: lots\n":  `c.yaml:1: output_max: want a size of at most 512KiB such as 65536, 64KiB or 512KiB (bytes, KiB or MiB), got "lots"`,
		"output_max: [1]\n":   `c.yaml:1: output_max: want a size such as 64KiB, got a list`,
		"output_max: 12GiB\n": `c.yaml:1: output_max: want a size of at most 512KiB such as 65536, 64KiB or 512KiB (bytes, KiB or MiB), got "12GiB"`,
	} {
		_, err := Parse("c.yaml", []byte(in+job))
		if got := AsErrors(err); !reflect.DeepEqual(got, []string{want}) {
			t.Errorf("%q:\n got  %s\n want %s", in, strings.Join(got, "; "), want)
		}
	}
}
