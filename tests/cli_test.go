package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// completeBash sources a bash completion script and completes words (the
// last one the word being typed), printing one candidate a line.
func completeBash(t *testing.T, source string, words ...string) []string {
	t.Helper()
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, fmt.Sprintf("%q", w))
	}
	script := fmt.Sprintf("%s\nCOMP_WORDS=(%s); COMP_CWORD=%d; _neuralisfs; printf '%%s\\n' \"${COMPREPLY[@]}\"", source, strings.Join(quoted, " "), len(words)-1)
	out, err := exec.Command("bash", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("bash completion of %q: %v\n%s", words, err, out)
	}
	return strings.Fields(string(out))
}

// TestCompletionBash loads the generated completion the way users do and
// completes commands, subcommands, flags and mount options with it.
func TestCompletionBash(t *testing.T) {
	out, err := exec.Command("bash", "-c", "source <("+binPath+" completion bash); complete -p neuralisfs").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "complete -F _neuralisfs neuralisfs" {
		t.Fatalf("complete -p neuralisfs after sourcing the completion: %v\n%s", err, out)
	}
	src := "source <(" + binPath + " completion bash)"
	for _, tt := range []struct {
		words []string
		want  []string
		not   []string
	}{
		{[]string{"neuralisfs", ""}, []string{"mount", "unmount", "umount", "config", "policy", "audit", "search", "status", "sources", "history", "revert", "doctor", "completion", "man"}, nil},
		{[]string{"neuralisfs", "po"}, []string{"policy"}, []string{"mount"}},
		{[]string{"neuralisfs", "policy", ""}, []string{"explain", "check"}, nil},
		{[]string{"neuralisfs", "policy", "explain", "--"}, []string{"--as"}, []string{"--json"}},
		{[]string{"neuralisfs", "sources", "--"}, []string{"--json"}, nil},
		{[]string{"neuralisfs", "mount", "-"}, []string{"-c", "-o", "--debug", "--cpuprofile"}, nil},
		{[]string{"neuralisfs", "mount", "-o", "allow_other,pass"}, []string{"allow_other,passthrough"}, nil},
		{[]string{"neuralisfs", "mount", "-o", "entry"}, []string{"entry_timeout="}, nil},
		{[]string{"neuralisfs", "completion", ""}, []string{"bash", "zsh", "fish"}, nil},
		{[]string{"neuralisfs", "search", "--"}, []string{"--source", "--path", "--ext", "--limit", "--json"}, nil},
	} {
		got := completeBash(t, src, tt.words...)
		for _, w := range tt.want {
			if !containsWord(got, w) {
				t.Errorf("completing %q: %q lacks %q", tt.words, got, w)
			}
		}
		for _, w := range tt.not {
			if containsWord(got, w) {
				t.Errorf("completing %q: %q offers %q", tt.words, got, w)
			}
		}
	}
	// -c completes file names.
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cfg-one.toml"), "", 0o644)
	if got := completeBash(t, src, "neuralisfs", "status", "-c", dir+"/cfg-"); !containsWord(got, dir+"/cfg-one.toml") {
		t.Errorf("completing -c %s/cfg-: %q", dir, got)
	}
}

func containsWord(list []string, w string) bool {
	for _, l := range list {
		if l == w {
			return true
		}
	}
	return false
}

// TestCompletionZshFish checks the zsh and fish scripts parse, and that
// fish completes subcommands with them, where those shells are installed.
func TestCompletionZshFish(t *testing.T) {
	ran := false
	if _, err := exec.LookPath("zsh"); err == nil {
		ran = true
		script := filepath.Join(t.TempDir(), "_neuralisfs")
		out, err := exec.Command(binPath, "completion", "zsh").Output()
		must(t, err)
		writeFile(t, script, string(out), 0o644)
		if out, err := exec.Command("zsh", "-n", script).CombinedOutput(); err != nil {
			t.Errorf("zsh -n on the zsh completion: %v\n%s", err, out)
		}
		// Loaded by compinit from $fpath, as a #compdef file.
		check := fmt.Sprintf("fpath=(%s $fpath); autoload -Uz compinit; compinit -u -D; print -r -- ${_comps[neuralisfs]}", filepath.Dir(script))
		if out, err := exec.Command("zsh", "-f", "-c", check).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "_neuralisfs" {
			t.Errorf("zsh compinit does not register _neuralisfs for neuralisfs: %v\n%s", err, out)
		}
	}
	if _, err := exec.LookPath("fish"); err == nil {
		ran = true
		out, err := exec.Command("fish", "-c", binPath+" completion fish | source; complete -C'neuralisfs pol'; complete -C'neuralisfs policy '; complete -C'neuralisfs mount --'").CombinedOutput()
		if err != nil {
			t.Fatalf("fish: %v\n%s", err, out)
		}
		for _, w := range []string{"policy\t", "explain\t", "check\t", "--debug\t"} {
			if !strings.Contains(string(out), w) {
				t.Errorf("fish completions lack %q:\n%s", w, out)
			}
		}
	}
	if !ran {
		t.Skip("neither zsh nor fish is installed (apt-get install zsh fish)")
	}
}

// TestManPage: the generated page names every command, flag and mount
// option, and groff renders it without a warning.
func TestManPage(t *testing.T) {
	page, err := exec.Command(binPath, "man").Output()
	must(t, err)
	help, err := exec.Command(binPath, "help").Output()
	must(t, err)
	text := strings.NewReplacer(`\-`, "-", `\fB`, "", `\fI`, "", `\fR`, "").Replace(string(page))
	for _, w := range []string{"mount", "policy explain", "doctor", "completion", "--json", "--follow", "--as", "--cpuprofile", "-o", "allow_other", "entry_timeout", "nopassthrough", "_netdev", "fuse.neuralisfs", "READY=1", "EXIT STATUS"} {
		if !strings.Contains(text, w) {
			t.Errorf("the man page lacks %q", w)
		}
	}
	// Every command of the usage text is in the page.
	for _, line := range strings.Split(string(help), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") {
			if !strings.Contains(text, "neuralisfs "+f[0]+" ") && !strings.Contains(text, "neuralisfs "+f[0]+"\n") {
				t.Errorf("the man page lacks the command %q", f[0])
			}
		}
	}
	if _, err := exec.LookPath("groff"); err != nil {
		t.Skip("groff is not installed: the page was not rendered")
	}
	cmd := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = bytes.NewReader(page)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("groff -ww on the man page: %v\n%s", err, out)
	}
}

// TestMakeInstall installs into a DESTDIR and checks what lands where, with
// the binary's path written into the helper and the units, and loads the
// installed bash completion.
func TestMakeInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	dest := t.TempDir()
	cmd := exec.Command("make", "-s", "install", "DESTDIR="+dest, "PREFIX=/opt/nfs", "BIN="+binPath)
	cmd.Dir = repoFile(t, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	for file, want := range map[string]string{
		"opt/nfs/bin/neuralisfs":                                  "",
		"sbin/mount.fuse.neuralisfs":                              "exec /opt/nfs/bin/neuralisfs \"$@\"",
		"opt/nfs/lib/systemd/system/neuralisfs.service":           "ExecStart=/opt/nfs/bin/neuralisfs mount -c /etc/neuralisfs/config.toml",
		"opt/nfs/lib/systemd/system/neuralisfs@.service":          "ExecStart=/opt/nfs/bin/neuralisfs mount -c /etc/neuralisfs/%i.toml",
		"opt/nfs/share/man/man1/neuralisfs.1":                     ".TH NEURALISFS 1",
		"opt/nfs/share/bash-completion/completions/neuralisfs":    "complete -F _neuralisfs neuralisfs",
		"opt/nfs/share/zsh/site-functions/_neuralisfs":            "#compdef neuralisfs",
		"opt/nfs/share/fish/vendor_completions.d/neuralisfs.fish": "complete -c neuralisfs",
	} {
		data, err := os.ReadFile(filepath.Join(dest, file))
		if err != nil {
			t.Errorf("make install did not write %s: %v", file, err)
			continue
		}
		if !strings.Contains(string(data), want) {
			t.Errorf("%s lacks %q", file, want)
		}
		if strings.Contains(string(data), "@BINDIR@") {
			t.Errorf("%s still says @BINDIR@", file)
		}
	}
	if fi, err := os.Stat(filepath.Join(dest, "sbin/mount.fuse.neuralisfs")); err == nil && fi.Mode().Perm() != 0o755 {
		t.Errorf("the mount helper is mode %v; want 0755", fi.Mode().Perm())
	}
	src := "source " + filepath.Join(dest, "opt/nfs/share/bash-completion/completions/neuralisfs")
	if got := completeBash(t, src, "neuralisfs", "doc"); !containsWord(got, "doctor") {
		t.Errorf("the installed bash completion completes doc to %q", got)
	}
	cmd = exec.Command("make", "-s", "uninstall", "DESTDIR="+dest, "PREFIX=/opt/nfs")
	cmd.Dir = repoFile(t, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make uninstall: %v\n%s", err, out)
	}
	filepath.Walk(dest, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			t.Errorf("make uninstall left %s", p)
		}
		return nil
	})
}

// TestDoctor runs doctor on this host: one line per check, each OK, WARN or
// FAIL, WARN and FAIL with a fix; a broken config fails with its error.
func TestDoctor(t *testing.T) {
	dir := sharedTempDir(t)
	writeFile(t, filepath.Join(dir, "data", "a.txt"), "a\n", 0o644)
	good := filepath.Join(dir, "good.toml")
	writeFile(t, good, fmt.Sprintf("state_dir = %q\n[[source]]\nslug = \"data\"\nkind = \"local\"\npath = %q\n[[source]]\nslug = \"gone\"\nkind = \"local\"\npath = %q\n", filepath.Join(dir, "state"), filepath.Join(dir, "data"), filepath.Join(dir, "missing")), 0o644)
	cmd := exec.Command(binPath, "doctor", "-c", good)
	out, err := cmd.CombinedOutput()
	failed := strings.Contains(string(out), "\nFAIL") || strings.HasPrefix(string(out), "FAIL")
	if (err != nil) != failed {
		t.Errorf("doctor exited %v, but its lines say failed=%v:\n%s", err, failed, out)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || (f[0] != "OK" && f[0] != "WARN" && f[0] != "FAIL") {
			t.Errorf("doctor line %q does not start with OK, WARN or FAIL", line)
			continue
		}
		if f[0] != "OK" && !strings.Contains(line, "; fix: ") && !strings.HasPrefix(f[1], "source") {
			t.Errorf("doctor line %q has no fix", line)
		}
		names[f[1]] = true
	}
	for _, n := range []string{"/dev/fuse", "fusermount3", "user_allow_other", "passthrough", "inotify", "io_uring", "state_dir", "config", "policy", "source"} {
		if !names[n] {
			t.Errorf("doctor printed no %s line:\n%s", n, out)
		}
	}
	if !strings.Contains(string(out), "source gone") || !strings.Contains(string(out), "UNAVAILABLE") {
		t.Errorf("doctor does not report the missing source:\n%s", out)
	}

	bad := filepath.Join(dir, "bad.toml")
	writeFile(t, bad, "[[source]]\nslug = \"Bad Slug\"\nkind = \"nfs\"\n", 0o644)
	out, err = exec.Command(binPath, "doctor", "-c", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "FAIL config") || !strings.Contains(string(out), bad+":2") {
		t.Errorf("doctor on a broken config: %v\n%s\nwant exit 1 and a FAIL config line naming %s:2", err, out, bad)
	}
	out, _ = exec.Command(binPath, "doctor", "--json", "-c", bad).Output()
	var checks []map[string]string
	if err := json.Unmarshal(out, &checks); err != nil || len(checks) == 0 {
		t.Errorf("doctor --json: %v\n%s", err, out)
	}
}

// TestJSONListsAreNeverNull runs every listing command with --json on a
// daemon whose lists are all empty: each prints JSON, with [] and never
// null.
func TestJSONListsAreNeverNull(t *testing.T) {
	e := newEnv(t, "", src{slug: "empty"})
	must(t, os.WriteFile(e.b("empty", "only.bin"), []byte{0, 1, 2}, 0o644)) // skipped: binary
	for _, args := range [][]string{
		{"sources"},
		{"status"},
		{"search", "nothingmatchesthis"},
		{"history", "empty://nosuchfile"},
		{"policy", "check"},
		{"audit"},
		{"doctor"},
	} {
		cmd := exec.Command(binPath, append(append(args, "--json", "-c"), e.cfg)...)
		out, err := cmd.Output()
		if err != nil && args[0] != "doctor" {
			t.Errorf("%s --json: %v\n%s", args[0], err, out)
			continue
		}
		var v any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Errorf("%s --json printed no JSON: %v\n%s", args[0], err, out)
		}
		if bytes.Contains(out, []byte("null")) {
			t.Errorf("%s --json prints null:\n%s", args[0], out)
		}
	}
}

// config.toml.example is valid as shipped and with the alternatives its
// comments offer taken up as they say (held writes in place of "write
// nothing", the rules that keep what git runs from direct writes): the
// config validates, the rules lint clean, and they decide as the comments
// promise.
func TestConfigExampleAndItsAlternatives(t *testing.T) {
	raw, err := os.ReadFile("../config.toml.example")
	must(t, err)
	dir := t.TempDir()
	for _, d := range []string{"data", "notes"} {
		must(t, os.Mkdir(filepath.Join(dir, d), 0o755))
	}
	shipped := strings.NewReplacer("/srv/project/data", filepath.Join(dir, "data"), "/srv/project/notes", filepath.Join(dir, "notes")).Replace(string(raw))
	taken := strings.Replace(shipped, "allow = [\"read\"]\ndeny = [\"write\", \"exec\"]", "allow = [\"read\"]\ndeny = [\"exec\"]\nreview = [\"write\"]", 1)
	if taken == shipped {
		t.Fatal("the agents' rule the comment says to change is not in config.toml.example")
	}
	i := strings.Index(taken, "# [[rule]]")
	if i < 0 {
		t.Fatal("config.toml.example offers no commented rules")
	}
	var lines []string
	for _, l := range strings.Split(taken[i:], "\n") {
		lines = append(lines, strings.TrimPrefix(strings.TrimPrefix(l, "#"), " "))
	}
	taken = taken[:i] + strings.Join(lines, "\n")
	for name, text := range map[string]string{"shipped": shipped, "taken": taken} {
		cfg := filepath.Join(dir, name+".toml")
		must(t, os.WriteFile(cfg, []byte(text), 0o644))
		for _, cmd := range []string{"config validate", "policy check"} {
			if out, err := exec.Command("sh", "-c", binPath+" "+cmd+" -c "+cfg).CombinedOutput(); err != nil {
				t.Errorf("%s %s: %v\n%s", cmd, name, err, out)
			}
		}
	}
	explain := func(uri string) string {
		out, err := exec.Command(binPath, "policy", "explain", uri, "--as", "agent", "-c", filepath.Join(dir, "taken.toml")).CombinedOutput()
		if err != nil {
			t.Fatalf("policy explain %s: %v\n%s", uri, err, out)
		}
		return string(out)
	}
	for uri, want := range map[string]string{
		"data://x.txt":             "write  hold",
		"data://secrets/k":         "write  deny",
		"data://repo/.git/config":  "write  deny   rule",
		"data://repo/.git/hooks/a": "write  deny   rule",
		"data://sub/.git":          "write  deny   rule",
	} {
		if got := explain(uri); !strings.Contains(got, want) {
			t.Errorf("policy explain %s as agent with the alternatives: want %q in\n%s", uri, want, got)
		}
	}
}
