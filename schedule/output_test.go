package schedule

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// Up to max bytes are kept whole; past that the head and the tail, with
// the cut marker between them saying how many bytes were left out.
func TestOutputHeadAndTail(t *testing.T) {
	o := newOutput(16)
	fmt.Fprint(o, "hello ")
	fmt.Fprint(o, "wörld!")
	if got := o.String(); got != "hello wörld!" { // 13 bytes: all of it
		t.Fatalf("under max: %q", got)
	}
	fmt.Fprint(o, "fou")
	if got := o.String(); got != "hello wörld!fou" { // exactly 16
		t.Fatalf("at max: %q", got)
	}
	fmt.Fprint(o, strings.Repeat("x", 100)+"€end")
	// 16+100+6 = 122 bytes: the first 8 ("hello wö" ends in half an ö,
	// dropped) and the last 8 ("xx€end"'s 8 bytes).
	want := "hello w\n" + CutMarker(122-7-8) + "\nxx€end"
	if got := o.String(); got != want {
		t.Fatalf("past max:\n got  %q\n want %q", got, want)
	}
	// A write longer than the tail replaces it; the head stays.
	fmt.Fprint(o, strings.Repeat("y", 50)+"\nlast line\n")
	got := o.String()
	if !strings.HasPrefix(got, "hello w\n… ") || !strings.HasSuffix(got, "\n… 168 bytes cut …\nst line\n") {
		t.Fatalf("after a long write: %q", got)
	}
}

// A cut inside a rune at the head's end or the tail's start drops that
// rune: the output is valid UTF-8.
func TestOutputRuneCuts(t *testing.T) {
	for n := 0; n < 12; n++ {
		o := newOutput(10)
		fmt.Fprint(o, strings.Repeat("a", n)+strings.Repeat("€", 20)+strings.Repeat("b", n))
		got := o.String()
		if !utf8.ValidString(got) {
			t.Fatalf("n=%d: invalid UTF-8 %q", n, got)
		}
		head, tail, ok := strings.Cut(got, " bytes cut …\n")
		if !ok {
			t.Fatalf("n=%d: no marker in %q", n, got)
		}
		if len(tail) > 5 || len(tail) < 5-2 {
			t.Fatalf("n=%d: tail %q, want the last 5 bytes less a cut rune", n, tail)
		}
		var cut int
		if _, err := fmt.Sscanf(head[strings.LastIndex(head, "… ")+len("… "):], "%d", &cut); err != nil {
			t.Fatalf("n=%d: marker in %q: %v", n, got, err)
		}
		kept := len(head[:strings.LastIndex(head, "\n… ")]) + len(tail)
		if cut+kept != 2*n+60 {
			t.Fatalf("n=%d: %d bytes cut + %d kept, want the %d written (%q)", n, cut, kept, 2*n+60, got)
		}
	}
}

// Writes from several goroutines at once are kept whole.
func TestOutputConcurrentWrites(t *testing.T) {
	o := newOutput(8)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				fmt.Fprint(o, "abc")
			}
		}()
	}
	wg.Wait()
	want := "abca\n" + CutMarker(1200-8) + "\n" // then 4 bytes of "abc"s
	if got := o.String(); !strings.HasPrefix(got, want) || len(got) != len(want)+4 {
		t.Fatalf("got %q, want %q and 4 bytes", got, want)
	}
}

// 1 MiB written in lines keeps 64 KiB: the first 32 KiB and the last.
func TestOutputLarge(t *testing.T) {
	o := newOutput(64 << 10)
	var all strings.Builder
	for i := 0; all.Len() < 1<<20; i++ {
		line := fmt.Sprintf("line %010d\n", i)
		all.WriteString(line)
		fmt.Fprint(o, line)
	}
	w := all.String()
	got := o.String()
	want := w[:32<<10] + CutMarker(int64(len(w)-64<<10)) + "\n" + w[len(w)-32<<10:]
	if w[32<<10-1] != '\n' {
		t.Fatalf("the test wants the head to end a line")
	}
	if got != want {
		t.Fatalf("kept %d bytes, want %d: head %q… tail …%q", len(got), len(want), got[:40], got[len(got)-40:])
	}
}
