package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/roster-go/roster/backends/etcd/etcdlocal"
)

// The program runs itself as a child for each thing whose CPU or death
// is measured: the etcd server, a process holding registrations alive, a
// process that is killed. A child speaks one line per event on stdout.

// runChild runs the child mode named by -child and exits.
func runChild(mode string, args []string) {
	var err error
	switch mode {
	case "etcd":
		err = childEtcd(args[0], args[1])
	case "hold", "crash":
		err = childHold(mode, args)
	default:
		err = fmt.Errorf("unknown child mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// childEtcd serves etcd on addr with its data in dir until killed.
func childEtcd(dir, addr string) error {
	srv, err := etcdlocal.Start(context.Background(), etcdlocal.Config{Dir: dir, Addr: addr})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return srv.Close()
}

// childHold registers n instances with one implementation. In hold mode
// it then measures its own CPU time (getrusage) over the hold period,
// prints it and exits; in crash mode it waits to be killed. With
// REGISTRYCMP_CPUPROFILE set, a hold writes a CPU profile of the hold
// period to that file.
func childHold(mode string, args []string) error {
	// args: impl backend etcdURL consulAddr service n hold
	name, back, etcdURL, consulAddr, service := args[0], args[1], args[2], args[3], args[4]
	n, _ := strconv.Atoi(args[5])
	hold, _ := time.ParseDuration(args[6])
	im := find(name, back, etcdURL, consulAddr)
	if im == nil {
		return fmt.Errorf("no implementation %s/%s", back, name)
	}
	ctx := context.Background()
	c, err := im.open(ctx)
	if err != nil {
		return err
	}
	hs := make([]handle, 0, n)
	for i := range n {
		h, err := c.register(ctx, service, fakeAddr(i))
		if err != nil {
			return fmt.Errorf("register %d: %w", i, err)
		}
		hs = append(hs, h)
	}
	fmt.Println("registered")
	if mode == "crash" {
		select {}
	}
	before := cpuSelf()
	if path := os.Getenv("REGISTRYCMP_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		time.Sleep(hold)
		pprof.StopCPUProfile()
	} else {
		time.Sleep(hold)
	}
	used := cpuSelf() - before
	fmt.Printf("cpu %d\n", used.Nanoseconds())
	for _, h := range hs {
		_ = h.deregister(ctx)
	}
	c.close()
	return nil
}

func find(name, back, etcdURL, consulAddr string) impl {
	var eps []string
	if etcdURL != "" {
		eps = []string{strings.TrimPrefix(etcdURL, "etcd://")}
	}
	for _, im := range implsFor(etcdURL, eps, consulAddr) {
		if im.name() == name && im.backend() == back {
			return im
		}
	}
	return nil
}

func cpuSelf() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// proc is a running child.
type proc struct {
	cmd   *exec.Cmd
	lines chan string
}

func startChild(mode string, args ...string) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{"-ttl", ttl.String(), "-child", mode, "--"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
		close(p.lines)
	}()
	return p, nil
}

// expect waits for a line starting with prefix and returns it.
func (p *proc) expect(prefix string, d time.Duration) (string, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				return "", fmt.Errorf("child exited before %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l, nil
			}
		case <-t.C:
			return "", fmt.Errorf("no %q within %v", prefix, d)
		}
	}
}

func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

func (p *proc) wait() error { return p.cmd.Wait() }

// cpu returns the CPU time (user + system) the live process has used so
// far, from /proc/<pid>/stat, in clock ticks of 10 ms.
func (p *proc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
