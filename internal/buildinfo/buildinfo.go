// Package buildinfo says which build of tasklock is running: the module
// version, the VCS revision and time the binary was built from, and the Go
// version, as runtime/debug.ReadBuildInfo records them. `tasklock version`
// prints it, the dashboard's /api/info carries it and serve's /metrics has
// it as tasklock_build_info.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info describes a build.
type Info struct {
	// Version is the main module's version: a tag (v1.2.3) for
	// `go install ...@v1.2.3`, a pseudo-version for a build in a checkout
	// (with +dirty when it had uncommitted changes), "(devel)" when the
	// go command recorded none.
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from; "" when
	// unknown (go install from the module proxy records none).
	Revision string `json:"revision,omitempty"`
	// Time is the commit's time, RFC 3339; "" when unknown.
	Time string `json:"time,omitempty"`
	// Modified reports uncommitted changes in the checkout built.
	Modified bool `json:"modified,omitempty"`
	// GoVersion is the Go toolchain that built the binary (go1.25.0).
	GoVersion string `json:"go_version"`
}

// Get returns this binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "(devel)", GoVersion: runtime.Version()}
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	if in.GoVersion == "" {
		in.GoVersion = runtime.Version()
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is the one-line form `tasklock --version` prints:
// "tasklock v1.2.3 (revision 0123abcd, 2025-01-02T03:04:05Z, go1.25.0)".
func (in Info) String() string {
	var parts []string
	if in.Revision != "" {
		rev := "revision " + in.Revision
		if in.Modified {
			rev += " (modified)"
		}
		parts = append(parts, rev)
	}
	if in.Time != "" {
		parts = append(parts, in.Time)
	}
	parts = append(parts, in.GoVersion)
	return fmt.Sprintf("tasklock %s (%s)", in.Version, strings.Join(parts, ", "))
}
