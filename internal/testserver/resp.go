package testserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// A tiny RESP2 client, so that readiness checks open one short connection per
// call and leave no pools or goroutines behind.

// respError is an error reply ("-ERR ...") from the server.
type respError string

func (e respError) Error() string { return string(e) }

// respTimeout bounds one respDo call.
const respTimeout = 2 * time.Second

// respDo sends one command to addr and returns the reply: string for simple
// and bulk strings, int64, nil for a null reply, []any for arrays, and a
// respError for an error reply.
func respDo(addr string, args ...string) (any, error) {
	conn, err := net.DialTimeout("tcp", addr, respTimeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(respTimeout)); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return nil, err
	}
	reply, err := respRead(bufio.NewReader(conn))
	if err != nil {
		return nil, err
	}
	if e, ok := reply.(respError); ok {
		return nil, e
	}
	return reply, nil
}

func respRead(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("testserver: empty RESP line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return respError(line[1:]), nil
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = respRead(r); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("testserver: unexpected RESP line %q", line)
}

// respString runs a command whose reply is a string.
func respString(addr string, args ...string) (string, error) {
	v, err := respDo(addr, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("testserver: %s: reply %T, want string", args[0], v)
	}
	return s, nil
}

// respInfo runs INFO section (or CLUSTER INFO when args say so) and parses the
// "key:value" lines.
func respInfo(addr string, args ...string) (map[string]string, error) {
	s, err := respString(addr, args...)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string)
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m, nil
}

// respMap runs a command whose reply is a flat array of field, value pairs
// (SENTINEL MASTER) and returns it as a map.
func respMap(addr string, args ...string) (map[string]string, error) {
	v, err := respDo(addr, args...)
	if err != nil {
		return nil, err
	}
	return pairs(v)
}

func pairs(v any) (map[string]string, error) {
	arr, ok := v.([]any)
	if !ok || len(arr)%2 != 0 {
		return nil, fmt.Errorf("testserver: reply %T is not a field/value array", v)
	}
	m := make(map[string]string, len(arr)/2)
	for i := 0; i < len(arr); i += 2 {
		k, _ := arr[i].(string)
		val, _ := arr[i+1].(string)
		m[k] = val
	}
	return m, nil
}

// permanent wraps an error that makes poll stop at once.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// poll calls cond every few milliseconds until it returns nil, returns a
// permanent error, or timeout passes; then it returns cond's last error.
func poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	interval := 5 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		var perm permanent
		if errors.As(err, &perm) {
			return perm.err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		time.Sleep(interval)
		if interval < 50*time.Millisecond {
			interval *= 2
		}
	}
}
