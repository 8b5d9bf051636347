package redis_test

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// monitor records what a redis-server executes (MONITOR), for tests that
// count commands across processes. It speaks RESP on a plain connection:
// go-redis's MonitorCmd polls in a loop.
type monitor struct {
	conn net.Conn
	done chan struct{}

	mu    sync.Mutex
	lines []monitorLine
	added chan struct{} // closed and replaced on every line
}

// monitorLine is one executed command.
type monitorLine struct {
	at     time.Time // server clock
	client string    // "127.0.0.1:54321", or "lua" for a script's own calls
	args   []string  // unquoted, command name lower-cased
}

func startMonitor(t testing.TB, addr string) *monitor {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if ok, err := rd.ReadString('\n'); err != nil || ok != "+OK\r\n" {
		t.Fatalf("MONITOR: %q, %v", ok, err)
	}
	m := &monitor{conn: conn, done: make(chan struct{}), added: make(chan struct{})}
	go m.read(rd)
	t.Cleanup(m.stop)
	return m
}

func (m *monitor) read(rd *bufio.Reader) {
	defer close(m.done)
	for {
		s, err := rd.ReadString('\n')
		if err != nil {
			return
		}
		l, ok := parseMonitorLine(s)
		if !ok {
			continue
		}
		m.mu.Lock()
		m.lines = append(m.lines, l)
		close(m.added)
		m.added = make(chan struct{})
		m.mu.Unlock()
	}
}

func (m *monitor) stop() {
	_ = m.conn.Close()
	<-m.done
}

// since returns the lines from index from on, and the index to use next.
func (m *monitor) since(from int) ([]monitorLine, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]monitorLine(nil), m.lines[from:]...), len(m.lines)
}

// waitLines waits until match holds for n lines from index from on, and
// returns them; it fails the test after d.
func (m *monitor) waitLines(t *testing.T, from, n int, d time.Duration, what string, match func(monitorLine) bool) []monitorLine {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		var got []monitorLine
		for _, l := range m.lines[from:] {
			if match(l) {
				got = append(got, l)
			}
		}
		added := m.added
		m.mu.Unlock()
		if len(got) >= n {
			return got[:n]
		}
		select {
		case <-added:
		case <-deadline.C:
			t.Fatalf("%s: %d of %d within %v", what, len(got), n, d)
		}
	}
}

// parseMonitorLine parses `+1700000000.123456 [0 127.0.0.1:5555] "evalsha" "ab…" …`.
func parseMonitorLine(s string) (monitorLine, bool) {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "+"), "\r\n")
	ts, rest, ok := strings.Cut(s, " [")
	if !ok {
		return monitorLine{}, false
	}
	who, rest, ok := strings.Cut(rest, "] ")
	if !ok {
		return monitorLine{}, false
	}
	sec, err := strconv.ParseFloat(ts, 64)
	if err != nil {
		return monitorLine{}, false
	}
	l := monitorLine{at: time.UnixMicro(int64(sec * 1e6))}
	if _, l.client, ok = strings.Cut(who, " "); !ok {
		return monitorLine{}, false
	}
	for rest != "" {
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			break // a binary argument Go does not unquote: the rest is not needed
		}
		a, _ := strconv.Unquote(q)
		l.args = append(l.args, a)
		rest = strings.TrimPrefix(rest[len(q):], " ")
	}
	if len(l.args) == 0 {
		return monitorLine{}, false
	}
	l.args[0] = strings.ToLower(l.args[0])
	return l, true
}

// isScript reports whether l runs the script with the given SHA.
func (l monitorLine) isScript(sha string) bool {
	return l.args[0] == "evalsha" && len(l.args) > 1 && l.args[1] == sha
}

// clientNames maps "host:port" of each connected client to its name
// (CLIENT SETNAME, set by go-redis from the client_name option).
func clientNames(ctx context.Context, t *testing.T, rdb *goredis.Client) map[string]string {
	t.Helper()
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		var addr, name string
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "addr":
				addr = v
			case "name":
				name = v
			}
		}
		names[addr] = name
	}
	return names
}
