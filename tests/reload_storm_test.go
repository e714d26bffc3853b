package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stormHeld holds the agent's writes under data://held/.
const stormHeld = `
[[rule]]
uri = "data://held/**"
who = ["role:agent"]
review = ["write"]
`

// stormConfig is the config of the storm's reload number i: each round
// changes some of the policy (a folder hidden from the agent, its writes
// to another held), the index and the journal on or off, and a second
// view mounted or not.
func stormConfig(base, view2 string, i int) string {
	var b strings.Builder
	b.WriteString(base)
	if i%2 == 1 {
		b.WriteString(denyNotes)
	}
	if i%5 < 2 {
		b.WriteString(stormHeld)
	}
	if i%6 < 3 {
		b.WriteString(viewTOML("agent", view2))
	}
	fmt.Fprintf(&b, "\n[index]\nenabled = %v\n\n[journal]\nenabled = %v\n", i%3 != 2, i%4 != 3)
	return b.String()
}

// TestReloadStormUnderLoad: forty reloads in a row, each changing the
// policy, held writes, the index, the journal and the views, while root
// saves files through the main mount (an editor's write-to-temp and
// rename, read back at once), searches and reads history, and the agent
// works in its view. Every reload applies; no request the config in force
// allows fails; no saved file is lost or torn; searches and history
// either answer or say they are off; and after the last reload the agent
// reads nothing it hides, the index finds the last saves and the daemon
// stops cleanly. Reloads are what a service does under its users, and
// the index and the journal being opened and closed under their callers
// are the newest paths a reload takes.
func TestReloadStormUnderLoad(t *testing.T) {
	e, view, base := reloadEnv(t, "")
	view2 := filepath.Join(sharedTempDir(t), "agentview2")
	must(t, os.Mkdir(view2, 0o755))
	for _, d := range []string{"root", "agent", "held"} {
		must(t, os.Mkdir(e.b("data", d), 0o777))
		os.Chmod(e.b("data", d), 0o777)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}

	// Root saves files through the main mount as an editor does, and
	// reads each back at once.
	want := map[string]string{}
	saves := 0
	wg.Go(func() {
		for i := 0; !stopped(); i++ {
			name := fmt.Sprintf("r%02d.txt", i%16)
			text := strings.Repeat(fmt.Sprintf("save %d rootword%d\n", i, i), 1+i%40)
			tmp := e.m("data", "root", "."+name+".swp")
			if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
				fail("root's save %d of %s: %v", i, name, err)
				continue
			}
			if err := os.Rename(tmp, e.m("data", "root", name)); err != nil {
				fail("root's rename %d of %s: %v", i, name, err)
				continue
			}
			if got, err := os.ReadFile(e.m("data", "root", name)); err != nil || string(got) != text {
				fail("root read save %d of %s back as %d bytes (%v), want %d", i, name, len(got), err, len(text))
			}
			mu.Lock()
			want[name] = text
			saves++
			mu.Unlock()
		}
	})

	// Root searches and reads history: an answer, or "off".
	cli := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, binPath, append(args, "-c", e.cfg)...).CombinedOutput()
		if ctx.Err() != nil {
			return string(out), fmt.Errorf("no answer within a minute")
		}
		return string(out), err
	}
	wg.Go(func() {
		for !stopped() {
			if out, err := cli("search", "rootword1"); err != nil && !strings.Contains(out, "search is off") {
				fail("search during the storm: %v\n%s", err, out)
			}
			if out, err := cli("history", "data://root/r01.txt"); err != nil && !strings.Contains(out, "the journal is disabled") {
				fail("history during the storm: %v\n%s", err, out)
			}
		}
	})

	// The agent works in its view: reads, lists, saves (read back),
	// writes held or direct as the rules in force say, and tries the
	// folder that is hidden from it every other round.
	flag := filepath.Join(e.dir, "storm-stop")
	var agentOut bytes.Buffer
	agent := exec.Command("bash", "-c", `
V=$1; i=0
while [ ! -e "$2" ]; do
  i=$((i+1))
  cat "$V/data/public.txt" > /dev/null || echo "ERR cat public.txt at $i"
  ls -lR "$V/data/agent" > /dev/null || echo "ERR ls -lR at $i"
  printf 'agent %d\n' $i > "$V/data/agent/.a.swp" && mv "$V/data/agent/.a.swp" "$V/data/agent/a" || echo "ERR save at $i"
  [ "$(cat "$V/data/agent/a")" = "agent $i" ] || echo "ERR read back at $i: $(cat "$V/data/agent/a" 2>&1)"
  if ! out=$(echo "held $i" 2>&1 > "$V/data/held/h$((i % 8))"); then
    case $out in
    *"Stale file handle"*) echo "STALE write held/h$((i % 8)) at $i" ;;
    *) echo "ERR write held/h$((i % 8)) at $i: $out" ;;
    esac
  fi
  cat "$V/data/notes/n.txt" > /dev/null 2>&1
done
echo "rounds $i"`, "agent", view, flag)
	agent.Dir = "/"
	agent.Env = append(os.Environ(), "HOME=/tmp")
	agent.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	agent.Stdout, agent.Stderr = &agentOut, &agentOut
	must(t, agent.Start())
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Wait() }()

	const rounds = 40
	start := time.Now()
	for i := range rounds {
		e.rewrite(stormConfig(base, view2, i))
		if out, err := e.reloadCLI(0); err != nil {
			t.Errorf("reload %d: %v\n%s", i, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The last config: the notes hidden from the agent, nothing held, the
	// index and the journal on, one view.
	e.rewrite(base + denyNotes + "\n[index]\nenabled = true\n\n[journal]\nenabled = true\n")
	if out, err := e.reloadCLI(0); err != nil {
		t.Fatalf("the last reload: %v\n%s", err, out)
	}
	took := time.Since(start)

	close(stop)
	must(t, os.WriteFile(flag, nil, 0o644))
	wg.Wait()
	select {
	case err := <-agentDone:
		if err != nil {
			t.Errorf("the agent's loop: %v\n%s", err, agentOut.String())
		}
	case <-time.After(time.Minute):
		agent.Process.Kill()
		t.Fatalf("the agent's loop did not end within a minute of the storm:\n%s", agentOut.String())
	}
	for _, f := range failures {
		t.Error(f)
	}
	// An open of a held name can meet a reload that changes which file
	// the name is for the agent (its held copy, or the backing file)
	// between the kernel's lookup and the open, on its first try and on
	// the retry the kernel makes after ESTALE: the agent then gets
	// ESTALE (README, Held writes, Reload). Anything else is a failure,
	// and so are more than a few of those.
	stale, agentRounds := 0, 0
	for l := range strings.SplitSeq(agentOut.String(), "\n") {
		switch {
		case strings.HasPrefix(l, "ERR"):
			t.Errorf("the agent, during the storm: %s", l)
		case strings.HasPrefix(l, "STALE"):
			stale++
		case strings.HasPrefix(l, "rounds "):
			fmt.Sscanf(l, "rounds %d", &agentRounds)
		}
	}
	t.Logf("%d reloads in %v under %d saves by root; the agent's %d rounds, %d of its held writes answered ESTALE", rounds+1, took.Round(time.Millisecond), saves, agentRounds, stale)
	if stale > max(2, agentRounds/10) {
		t.Errorf("%d of the agent's %d held writes answered ESTALE:\n%s", stale, agentRounds, agentOut.String())
	}
	if saves < rounds {
		t.Errorf("root saved only %d files during %d reloads", saves, rounds)
	}

	// Nothing root saved is lost or torn, on the mount and on disk.
	for name, text := range want {
		for _, p := range []string{e.m("data", "root", name), e.b("data", "root", name)} {
			if got, err := os.ReadFile(p); err != nil || string(got) != text {
				t.Errorf("%s after the storm: %d bytes (%v), want root's last save of %d", p, len(got), err, len(text))
			}
		}
	}
	if left, _ := filepath.Glob(e.b("data", "root", ".*.swp")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	// The last config is in force: the agent reads no note, in its view
	// or the main mount, and the second view is gone.
	for _, p := range []string{filepath.Join(view, "data", "notes", "n.txt"), e.m("data", "notes", "n.txt")} {
		if out := agentSees(t, p); strings.Contains(out, "a note") {
			t.Errorf("after the storm the agent reads %s:\n%s", p, out)
		}
	}
	if mounted(view2) {
		t.Errorf("the second view %s is still mounted after the last reload dropped it", view2)
	}
	// The index is back and current: root's last save of a file is found.
	mu.Lock()
	last := want["r01.txt"]
	mu.Unlock()
	if last != "" {
		word := strings.Fields(last)[2]
		e.found(t, word, "data://root/r01.txt")
	}
	if st := e.status(t); strings.Contains(st, ": off") {
		t.Errorf("after the storm, with the index and the journal on, status says:\n%s", st)
	}
}
