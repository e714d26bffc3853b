package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/neuralis/neuralisfs/mounts"
)

// The mount(8) helper convention. `mount -t fuse.neuralisfs CONFIG DIR -o
// OPTS` (and the fstab line `CONFIG DIR fuse.neuralisfs OPTS 0 0`) runs
// /sbin/mount.fuse.neuralisfs when installed (packaging/), else fuse3's
// /sbin/mount.fuse3, which runs the program named after "fuse." found on
// PATH: either way `neuralisfs CONFIG DIR [-o OPTS]`, perhaps with mount's
// own -n, -v, -s, -f, -t TYPE and -N NS. mount(8) waits for the helper, so
// the helper starts the daemon in the background and exits 0 once every
// mount serves, or non-zero with the daemon's error.

// readyWord is what the daemon writes on the helper's pipe once it serves.
const readyWord = "READY\n"

// mount(8)'s exit status for a failed mount.
const exitMountFailed = 32

// isHelperCall reports whether args are `CONFIG DIR ...` rather than a
// subcommand: the first names a config file.
func isHelperCall(args []string) bool {
	return len(args) >= 2 && (strings.ContainsRune(args[0], '/') || strings.HasSuffix(args[0], ".toml"))
}

func mountHelper(args []string, stdout, stderr io.Writer) int {
	cfgPath, mp := args[0], args[1]
	var opts []string
	fake := false
	for i := 2; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o" || a == "-t" || a == "-N":
			if i+1 == len(args) {
				fmt.Fprintf(stderr, "neuralisfs: %s needs a value\n", a)
				return exitError
			}
			i++
			if a == "-o" {
				opts = append(opts, args[i])
			}
		case strings.HasPrefix(a, "-o"):
			opts = append(opts, a[2:])
		case len(a) > 1 && a[0] == '-' && strings.Trim(a[1:], "nvsf") == "":
			fake = fake || strings.Contains(a, "f") // -f: do everything but mount
		default:
			fmt.Fprintf(stderr, "neuralisfs: unexpected argument %q; as a mount helper it takes CONFIG MOUNTPOINT [-o OPTIONS]\n", a)
			return exitError
		}
	}
	o := strings.Join(opts, ",")
	// mount(8) clears the environment; the default state_dir and
	// XDG paths need HOME (mount.fuse3 sets it too).
	if os.Getenv("HOME") == "" {
		if u, err := user.Current(); err == nil {
			os.Setenv("HOME", u.HomeDir)
		}
	}
	cfg, err := mounts.Load(cfgPath)
	if err != nil {
		printErrors(stderr, err)
		return exitMountFailed
	}
	if err := cfg.ApplyMountOptions(o); err != nil {
		fmt.Fprintf(stderr, "neuralisfs: %s: %v\n", mp, err)
		return exitMountFailed
	}
	abs, err := filepath.Abs(mp)
	if err != nil {
		fmt.Fprintf(stderr, "neuralisfs: %v\n", err)
		return exitMountFailed
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		fmt.Fprintf(stderr, "neuralisfs: mountpoint %s is not a directory\n", abs)
		return exitMountFailed
	}
	if fake {
		return exitOK
	}
	if err := startBackground(cfg, o, abs); err != nil {
		fmt.Fprintf(stderr, "neuralisfs: %s: %v\n", abs, strings.TrimSpace(err.Error()))
		return exitMountFailed
	}
	return exitOK
}

// logName is the daemon's log under state_dir when it runs in the
// background.
const logName = "mount.log"

// startBackground starts `neuralisfs mount` in a session of its own, its
// output appended to <state_dir>/mount.log, and waits until it serves or
// fails.
func startBackground(cfg *mounts.Config, opts, mp string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.StateDirPath(), 0o711); err != nil {
		return fmt.Errorf("state_dir: %w", err)
	}
	logPath := filepath.Join(cfg.StateDirPath(), logName)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("daemon log: %w", err)
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	args := []string{"mount", "-c", cfg.File}
	if opts != "" {
		args = append(args, "-o", opts)
	}
	cmd := exec.Command(exe, append(args, mp)...)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{pw} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	for _, e := range os.Environ() {
		// The daemon mounted by mount(8) is no service of the manager
		// that may have started mount.
		if !strings.HasPrefix(e, "NOTIFY_SOCKET=") && !strings.HasPrefix(e, readyFDEnv+"=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, readyFDEnv+"=3")
	if err := cmd.Start(); err != nil {
		pw.Close()
		return err
	}
	pw.Close()
	msg, _ := io.ReadAll(pr)
	if string(msg) == readyWord {
		return cmd.Process.Release()
	}
	werr := cmd.Wait()
	if len(msg) == 0 {
		return fmt.Errorf("the daemon exited (%v) before it was ready; see %s", werr, logPath)
	}
	return fmt.Errorf("%s", msg)
}
