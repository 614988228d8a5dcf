package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	in := fromBuildInfo(&debug.BuildInfo{
		GoVersion: "go1.25.0",
		Main:      debug.Module{Path: "github.com/tasklock/tasklock", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2025-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"},
		},
	})
	want := Info{Version: "v1.2.3", Revision: "0123abcd", Time: "2025-01-02T03:04:05Z", Modified: true, GoVersion: "go1.25.0"}
	if in != want {
		t.Errorf("fromBuildInfo = %+v, want %+v", in, want)
	}
	if s := in.String(); s != "tasklock v1.2.3 (revision 0123abcd (modified), 2025-01-02T03:04:05Z, go1.25.0)" {
		t.Errorf("String() = %q", s)
	}
	if in := fromBuildInfo(&debug.BuildInfo{}); in.Version != "(devel)" || in.GoVersion != runtime.Version() {
		t.Errorf("empty build info: %+v", in)
	}
}

func TestGet(t *testing.T) {
	if in := Get(); in.Version == "" || in.GoVersion != runtime.Version() {
		t.Errorf("Get() = %+v", in)
	}
}
