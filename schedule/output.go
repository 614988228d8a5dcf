package schedule

import (
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// output keeps what a handler writes to Run.Output for its run record: all
// of it up to max bytes; past that its head (the first max/2 bytes) and its
// tail (the last max/2), joined by a line that says how many bytes were
// cut between them (see CutMarker). A process that prints its error at the
// start or its summary at the end keeps both.
type output struct {
	mu    sync.Mutex
	max   int
	head  []byte // the first max/2 bytes (all of it while total <= max)
	tail  []byte // the bytes after head, the last max-max/2 of them kept (with slack)
	total int64  // bytes written
}

func newOutput(max int) *output { return &output{max: max} }

// Write implements io.Writer; it never fails.
func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(p)
	o.total += int64(n)
	if h := o.max / 2; len(o.head) < h {
		k := min(h-len(o.head), len(p))
		o.head = append(o.head, p[:k]...)
		p = p[k:]
	}
	keep := o.max - o.max/2
	if len(p) >= keep {
		o.tail = append(o.tail[:0], p[len(p)-keep:]...)
		return n, nil
	}
	o.tail = append(o.tail, p...)
	if len(o.tail) > 2*keep {
		o.tail = append(o.tail[:0], o.tail[len(o.tail)-keep:]...)
	}
	return n, nil
}

// String returns what is kept, as valid UTF-8: everything when at most max
// bytes were written; else the head, a marker line and the tail, each
// part cut at rune boundaries (a rune split by a cut is dropped).
func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.total <= int64(o.max) {
		return strings.ToValidUTF8(string(o.head)+string(o.tail), "")
	}
	keep := o.max - o.max/2
	tail := o.tail[max(len(o.tail)-keep, 0):]
	head := o.head
	for i := len(head) - 1; i >= max(len(head)-utf8.UTFMax, 0); i-- {
		if utf8.RuneStart(head[i]) {
			if !utf8.FullRune(head[i:]) {
				head = head[:i] // a rune cut at the end of the head
			}
			break
		}
	}
	for i := 0; i < utf8.UTFMax-1 && len(tail) > 0 && !utf8.RuneStart(tail[0]); i++ {
		tail = tail[1:] // a rune cut at the start of the tail
	}
	cut := o.total - int64(len(head)) - int64(len(tail))
	var b strings.Builder
	b.Grow(len(head) + len(tail) + 40)
	b.Write(head)
	if len(head) > 0 && head[len(head)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteString(CutMarker(cut))
	b.WriteByte('\n')
	b.Write(tail)
	return strings.ToValidUTF8(b.String(), "")
}

// CutMarker is the line (without its newline) that a run record's Output
// has between its head and its tail when the handler wrote more than
// Config.OutputMax bytes: "… N bytes cut …".
func CutMarker(n int64) string {
	return "… " + strconv.FormatInt(n, 10) + " bytes cut …"
}
