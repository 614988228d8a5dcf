package zkstore

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"
)

// nodeData is what a lock node, a MinHold node or a kinds entry holds, as
// JSON, so that operators can read it with zkCli.
type nodeData struct {
	Owner string `json:"owner"`
	TTL   int64  `json:"ttl_ms"`          // lock nodes and entries: the lease length; MinHold nodes: KeepFor, from the node's mtime
	Fence uint64 `json:"fence,omitempty"` // MinHold nodes: the fence of the lock they keep; kinds entries: their grant's
}

func encodeData(owner string, ttl time.Duration, fence uint64) []byte {
	if plainJSON(owner) {
		// What json.Marshal writes, without its reflection: one Acquire
		// in every queue entry and grant encodes this.
		b := make([]byte, 0, len(owner)+64)
		b = append(append(append(b, `{"owner":"`...), owner...), `","ttl_ms":`...)
		b = strconv.AppendInt(b, ttl.Milliseconds(), 10)
		if fence != 0 {
			b = strconv.AppendUint(append(b, `,"fence":`...), fence, 10)
		}
		return append(b, '}')
	}
	b, err := json.Marshal(nodeData{Owner: owner, TTL: ttl.Milliseconds(), Fence: fence})
	if err != nil {
		panic("zkstore: encoding node data: " + err.Error()) // strings and numbers always encode
	}
	return b
}

// plainJSON reports whether s is written into a JSON string as it is by
// json.Marshal: printable ASCII, none of the characters it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// node is a child of a key node, as read by readNodes.
type node struct {
	name string
	keep bool  // a MinHold node; otherwise a lock node
	seq  int64 // lock nodes: the sequence number (negative once it overflowed)
	data nodeData
	stat *zk.Stat
	err  error
}

// decode parses the node's data; data that is not ours to read is left
// zero (no owner, no TTL).
func (n *node) decode(b []byte) {
	if n.err == nil && json.Unmarshal(b, &n.data) != nil {
		n.data = nodeData{}
	}
}

// ttl is the lease length the node holds (0 when unknown). For a lock node
// that is all the store can tell of its holder's remaining lease: its end
// is kept by the holder's Store (the reaper), or by its session.
func (n *node) ttl() time.Duration { return time.Duration(n.data.TTL) * time.Millisecond }

// expired reports whether a MinHold node's time ended by the server's
// clock: it was created longer than its TTL before now (the server's time
// in ms). A node without a readable TTL never expires by time. (Lock nodes
// do not expire by time: they live until deleted, or until their session
// ends.)
func (n *node) expired(now int64) bool {
	return n.data.TTL > 0 && n.stat.Mtime+n.data.TTL < now
}

// remaining is a MinHold node's time left at now, within [1ms, TTL]; 0
// when unknown.
func (n *node) remaining(now int64) time.Duration {
	if n.data.TTL <= 0 {
		return 0
	}
	return time.Duration(min(max(n.stat.Mtime+n.data.TTL-now, 1), n.data.TTL)) * time.Millisecond
}

// lockSeq returns the sequence number of a lock node's name
// (<token>-lock-NNNNNNNNNN), and false for any other name. The server
// formats the parent's child version, an int32, with %010d: after 2^31
// changes of children under one key node it turns negative, and the order
// is lost (see ordered).
func lockSeq(name string) (int64, bool) {
	i := strings.LastIndex(name, lockInfix)
	if i < 0 {
		return 0, false
	}
	digits := name[i+len(lockInfix):]
	if len(digits) < 10 {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// ordered reports whether a lock node with sequence number a stands before
// one with b for certain. Once the counter overflowed (a negative number on
// either side) the order is unknown, and each is taken to stand before the
// other: safe, if slow, until the key node is recreated (see Release).
func ordered(a, b int64) bool { return a < b || a < 0 || b < 0 }

// blockersOf returns the children that stand before the lock node own
// (with sequence number seq): the lock nodes ordered before it, lowest
// first, and the MinHold nodes.
func blockersOf(kids []string, own string, seq int64) (preds, keeps []string) {
	type pred struct {
		name string
		seq  int64
	}
	var ps []pred
	for _, k := range kids {
		if k == own {
			continue
		}
		if s, ok := lockSeq(k); ok {
			if ordered(s, seq) {
				ps = append(ps, pred{k, s})
			}
		} else if strings.HasSuffix(k, keepSuffix) {
			keeps = append(keeps, k)
		}
	}
	slices.SortFunc(ps, func(a, b pred) int { return cmp.Compare(a.seq, b.seq) })
	for _, p := range ps {
		preds = append(preds, p.name)
	}
	return preds, keeps
}

// maxParallel bounds the requests one call has in flight at once when it
// reads or deletes several nodes (go-zookeeper pipelines them on the one
// connection).
const maxParallel = 16

// parallel runs fn(i) for i in [0, n), at most maxParallel at a time: the
// last on the calling goroutine, the others each on one of its own.
func parallel(n int, fn func(i int)) {
	switch n {
	case 0:
		return
	case 1:
		fn(0)
		return
	}
	sem := make(chan struct{}, maxParallel)
	var wg sync.WaitGroup
	for i := range n - 1 {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	sem <- struct{}{}
	fn(n - 1)
	<-sem
	wg.Wait()
}

// readNodes reads the children names of kp, pipelined.
func (s *Store) readNodes(kp string, names []string) []*node {
	out := make([]*node, len(names))
	parallel(len(names), func(i int) {
		n := &node{name: names[i]}
		n.seq, _ = lockSeq(names[i])
		n.keep = strings.HasSuffix(names[i], keepSuffix)
		var b []byte
		b, n.stat, n.err = s.conn.Get(kp + "/" + names[i])
		n.decode(b)
		out[i] = n
	})
	return out
}

// deleteNodes deletes the given children of kp if they are still the
// versions read, pipelined. Failures are ignored: a node that changed or
// went is re-read by the caller's next look.
func (s *Store) deleteNodes(kp string, nodes []*node) {
	if len(nodes) == 0 {
		return
	}
	parallel(len(nodes), func(i int) {
		_ = s.conn.Delete(kp+"/"+nodes[i].name, nodes[i].stat.Version)
	})
}

// nameRune reports whether r may stand unescaped in a node name: ZooKeeper
// refuses control characters, U+007F–U+009F, U+D800–U+F8FF and
// U+FFF0–U+FFFF, and '/' separates names; '%' starts an escape.
func nameRune(r rune) bool {
	switch {
	case r < 0x20, r == '/', r == '%',
		r >= 0x7f && r <= 0x9f,
		r >= 0xd800 && r <= 0xf8ff,
		r >= 0xfff0 && r <= 0xffff:
		return false
	}
	return true
}

// escapeName makes s a valid node name: every byte of a rune ZooKeeper
// refuses in a name, '/' and '%' becomes %XX, and "." and ".." have their
// dots escaped. Everything else, including most of Unicode, stays as is,
// so that the tree reads like the keys.
func escapeName(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	clean := true
	for _, r := range s {
		if !nameRune(r) {
			clean = false
			break
		}
	}
	if clean && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError && nameRune(r) {
			b.WriteString(s[i : i+w])
		} else {
			for j := i; j < i+w; j++ {
				fmt.Fprintf(&b, "%%%02X", s[j])
			}
		}
		i += w
	}
	return b.String()
}

// unescapeName reverses escapeName. It reports false for a name that
// escapeName cannot have made.
func unescapeName(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, s != "." && s != ".."
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b = append(b, byte(v))
		i += 2
	}
	return string(b), true
}

// checkRoot validates Options.Root.
func checkRoot(root string) error {
	switch {
	case !utf8.ValidString(root):
		return errors.New("not valid UTF-8")
	case !strings.HasPrefix(root, "/"):
		return errors.New("must start with \"/\"")
	case root == "/":
		return errors.New("must name a node below \"/\"")
	case strings.HasSuffix(root, "/"):
		return errors.New("must not end with \"/\"")
	case root == "/zookeeper" || strings.HasPrefix(root, "/zookeeper/"):
		return errors.New("/zookeeper is ZooKeeper's own")
	}
	for _, part := range strings.Split(root[1:], "/") {
		switch part {
		case "":
			return errors.New("empty node name")
		case ".", "..":
			return fmt.Errorf("node name %q", part)
		}
		for _, r := range part {
			if !nameRune(r) && r != '%' {
				return fmt.Errorf("contains %U, which ZooKeeper refuses in node names", r)
			}
		}
	}
	return nil
}

// isUnimplemented reports whether err is the server's Unimplemented error
// (code -6), which go-zookeeper v1.0.4 has no sentinel for: what a server
// without extendedTypesEnabled answers a TTL node's create with.
func isUnimplemented(err error) bool {
	return err != nil && strings.HasSuffix(err.Error(), "unknown error: -6")
}
