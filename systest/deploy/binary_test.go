package deploy

import (
	"debug/elf"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestStaticBinary: the CGO_ENABLED=0 build is a static executable — no
// ELF interpreter, no shared library — that runs.
func TestStaticBinary(t *testing.T) {
	f, err := elf.Open(tasklockBin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %v program header: it is dynamically linked", p.Type)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary imports shared libraries %q (%v)", libs, err)
	}
	out, err := exec.Command(tasklockBin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("tasklock version --json: %v", err)
	}
	var v struct {
		GoVersion string `json:"go_version"`
	}
	if err := json.Unmarshal(out, &v); err != nil || !strings.HasPrefix(v.GoVersion, "go") {
		t.Errorf("tasklock version --json: %s (%v)", out, err)
	}
}
